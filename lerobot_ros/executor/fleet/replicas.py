"""Which replica of a policy server fleet a robot opens its session on.

A fleet is an ordered list of server namespaces, one ``policy_server_node``
per GPU. Invariants:

* the robot only ever uses replicas serving the SAME model as the first one
  it validated (``ValidatedModel``: fingerprint, revision, ordered action
  names, cameras, chunk size); before anything is validated, the reference is
  the model most ready replicas matching the robot's contract serve (ties:
  list order). A replica serving another model is never a candidate, and is
  reported with the difference;
* a replica that did not answer, is not ready, is draining or is full is
  skipped, with the reason;
* candidates are ordered least loaded first (sessions over capacity, then
  waiting requests, then list order); replicas whose latest session with
  this robot never answered with a chunk (hung, refusing every request) and
  the replica being left are tried last, so a move goes elsewhere whenever
  another replica can take the robot.

Plain Python (no rclpy): the views come from GetStatus calls the handshake
makes; ``choose`` only decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lerobot_ros.executor.requests.answer_rules import ValidatedModel
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView

#: GetStatus says ready=false: the server answers, so its policy is loaded (a loading server has no
#: services yet); it is inactive or between transitions. The handshake asks it for a session to get
#: its own words.
NOT_READY = "server answers but does not serve (inactive, or being activated)"
#: GetStatus says draining: shutting down, or deactivated (an inactive server keeps the flag).
DRAINING = "server is draining (deactivated or shutting down)"
#: Discovery knows no replica: no heartbeat publisher of the fleet is on the graph.
NONE_FOUND = (
    "no policy server of the fleet found on the ROS graph (no <namespace>/status "
    "heartbeat publisher)"
)


@dataclass(frozen=True)
class Skipped:
    """A replica left out of a placement, and why; ``view`` when it answered."""

    namespace: str
    reason: str
    view: ServerView | None = None

    def __str__(self) -> str:
        return f"{self.namespace}: {self.reason}"


@dataclass(frozen=True)
class Placement:
    """The outcome of one placement: candidates to open a session on, in order, and the skipped
    ones."""

    candidates: tuple[tuple[str, ServerView], ...]
    skipped: tuple[Skipped, ...]
    reference: ValidatedModel | None  # the model every candidate serves

    def refusal(self) -> str:
        """Why no replica can take the robot (only meaningful without candidates)."""
        if not self.skipped:
            return NONE_FOUND
        if len(self.skipped) == 1:
            return self.skipped[
                0
            ].reason  # one server: its reason, as the single-server executor always said
        return "no usable replica: " + "; ".join(str(each) for each in self.skipped)


def load_key(view: ServerView, own_session: bool) -> tuple[float, int]:
    """Sessions over capacity, then waiting requests: lower is less loaded.

    ``own_session``: this robot holds a session there, which a re-open replaces.
    """
    sessions = max(0, view.active_sessions - (1 if own_session else 0))
    capacity = max(1, view.max_sessions)
    return sessions / capacity, view.pending_requests


def is_full(view: ServerView, own_session: bool) -> bool:
    sessions = view.active_sessions - (1 if own_session else 0)
    return view.max_sessions > 0 and sessions >= view.max_sessions


def choose(
    views: Sequence[tuple[str, ServerView | str]],
    robot: RobotDeclaration,
    reference: ValidatedModel | None,
    current: str = "",
    unanswered: frozenset[str] = frozenset(),
) -> Placement:
    """Rank the answered replicas for ``robot``; ``views`` in the configured order.

    ``reference`` is the model validated by the first handshake (None before
    it); ``current`` the replica the robot is leaving or re-opening on ("" at
    start-up): it holds this robot's session and goes last; ``unanswered``
    the replicas whose latest session never answered with a chunk, next to last.
    """
    if reference is None:
        reference = _most_served_model(views, robot)
    ranked: list[tuple[tuple, str, ServerView]] = []
    skipped: list[Skipped] = []
    for index, (namespace, view) in enumerate(views):
        if isinstance(view, str):
            skipped.append(Skipped(namespace, view))
            continue
        own = namespace == current
        if view.draining:
            reason = DRAINING
        elif not view.ready:
            reason = NOT_READY
        elif not (checked := robot.check_against(view.capabilities)).ok:
            reason = checked.message()
        elif reference is not None and (
            difference := reference.difference(ValidatedModel.of(view.capabilities))
        ):
            reason = difference
        elif is_full(view, own):
            reason = f"full ({view.active_sessions} of {view.max_sessions} sessions)"
        else:
            ranked.append(
                ((own, namespace in unanswered, *load_key(view, own), index), namespace, view)
            )
            continue
        skipped.append(Skipped(namespace, reason, view))
    ranked.sort(key=lambda entry: entry[0])
    return Placement(
        tuple((namespace, view) for _, namespace, view in ranked), tuple(skipped), reference
    )


def _most_served_model(
    views: Sequence[tuple[str, ServerView | str]], robot: RobotDeclaration
) -> ValidatedModel | None:
    """The model most of the ready replicas that match the robot serve; ties go to list order.

    A majority, not the first in the list: one replica that answers late (a
    loaded machine) must not let a misconfigured replica listed after it
    decide the model for the whole fleet.
    """
    served = [
        ValidatedModel.of(view.capabilities)
        for _, view in views
        if not isinstance(view, str)
        and view.ready
        and not view.draining
        and robot.check_against(view.capabilities).ok
    ]
    return max(served, key=lambda model: (served.count(model), -served.index(model)), default=None)


@dataclass
class PlannedMove:
    """A rebalancing move under way (``rebalancing.py``): planned, then due once the standby is on
    the target,
    then carried out by the worker (``left``: the old session's (replica, session id); () when
    abandoned)."""

    target: str
    reason: str
    due: bool = False
    left: tuple[str, ...] | None = None


class FleetRecord:
    """The executor's replicas and moves between them, for ~/status; not thread-safe (the core's
    lock guards it)."""

    def __init__(self, replicas: tuple[str, ...] = ()) -> None:
        self.replicas = replicas  # the configured ones, or those discovery knows now
        self.moves = 0
        self.last_move = ""  # "<from> -> <to>: <why the old session was left>"
        self.skipped: tuple[str, ...] = ()  # the latest placement's, each "namespace: why"
        # replicas whose latest session never merged a chunk
        self.unanswered: frozenset[str] = frozenset()
        self.merged_in_session = 0
        self._drain = ""  # a drain the current replica announced, not acted on yet
        self.move: PlannedMove | None = None  # a rebalancing move under way
        # no rebalancing move before (a cooldown after each session opening)
        self.rebalance_after = math.inf

    def session_left(self, replica: str) -> None:
        """A new session replaces the one on ``replica``: remember whether that one ever
        answered."""
        if self.merged_in_session:
            self.unanswered -= {replica}
        else:
            self.unanswered |= {replica}
        self.merged_in_session = 0

    def moved(self, source: str, target: str, why: str) -> None:
        self.moves += 1
        self.last_move = f"{source} -> {target}: {why}"

    def drain_announced(self, text: str) -> None:
        self._drain = text

    def take_drain(self) -> str:
        """The announced drain to act on (once), or ""."""
        drain, self._drain = self._drain, ""
        return drain
