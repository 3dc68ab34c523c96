"""Session registry: replacement and identity-checked removal (no ROS)."""

from lerobot_ros.server.sessions import Session, SessionRegistry


def session(client="arm", opened=0.0):
    return Session(client, task="", fps=30.0, rtc_enabled=False, opened_at=opened)


def test_reopening_replaces_without_counting_twice():
    registry = SessionRegistry()
    first, second = session(), session()
    assert registry.open(first) is None
    assert registry.open(second) is first
    assert registry.count() == 1
    assert registry.count(excluding_client="arm") == 0
    assert registry.get("arm") is second


def test_removal_of_an_old_session_never_removes_its_replacement():
    registry = SessionRegistry()
    old, new = session(), session()
    registry.open(old)
    registry.open(new)
    assert registry.remove("arm", old.session_id) is None
    assert registry.get("arm") is new
    assert registry.remove("arm", new.session_id) is new
    assert registry.get("arm") is None


def test_idle_sessions_are_found_by_last_observation():
    registry = SessionRegistry()
    quiet, busy = session("quiet", opened=0.0), session("busy", opened=0.0)
    registry.open(quiet)
    registry.open(busy)
    busy.last_seen = 9.0
    assert [s.client_id for s in registry.idle(now=10.0, idle_timeout_s=5.0)] == ["quiet"]
