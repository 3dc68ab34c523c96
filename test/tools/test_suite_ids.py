"""No test of the suite disappears unrecorded: every id of test/tools/suite_test_ids.txt (the
suite as of issue 41) is collected in this run, or its line says where it went."""

from __future__ import annotations

import sys

import pytest

from support.paths import REPO

LIST = REPO / "test" / "tools" / "suite_test_ids.txt"


def listed_ids() -> tuple[set[str], dict[str, str]]:
    """(ids that must still run, moved ids -> where they went)."""
    kept, moved = set(), {}
    for line in LIST.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        old, arrow, where = line.partition(" -> ")
        if arrow:
            moved[old.strip()] = where.strip()
        else:
            kept.add(line.strip())
    return kept, moved


def test_every_listed_test_still_runs_or_its_move_is_recorded(request):
    session = request.session
    if (
        session.config.args != ["test"]
        or session.config.option.keyword
        or (session.config.option.markexpr)
    ):
        pytest.skip(
            "needs the whole suite collected (a run of scripts/run_tests.sh with no -k/-m)"
        )
    collected = {item.nodeid for item in session.items}
    kept, moved = listed_ids()
    missing = sorted(kept - collected)
    assert not missing, (
        f"{len(missing)} listed tests are no longer collected and no move is recorded in "
        f"{LIST.relative_to(REPO)} (write 'old id -> where it went'): {missing[:10]}"
    )
    assert all(moved.values()), "a moved test's line says where it went"


def test_a_missing_id_is_found_by_the_same_reading(tmp_path, monkeypatch):
    listing = tmp_path / "ids.txt"
    listing.write_text("# header\ntest/a.py::kept\ntest/b.py::gone -> bench/b.py smoke\n")
    monkeypatch.setattr(sys.modules[__name__], "LIST", listing)
    kept, moved = listed_ids()
    assert kept == {"test/a.py::kept"} and moved == {"test/b.py::gone": "bench/b.py smoke"}
