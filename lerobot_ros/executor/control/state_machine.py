"""The executor's fail-safe state machine: what the control loop may publish, and when.

Invariants:

* a stale action (source observation older than ``max_action_age_s``, or of
  unknown age) is never executed: the tick says to clear the queue instead;
* nothing is commanded before the first handshake, and once DEAD (a failed
  first handshake, or a different model) no server event brings the
  executor back: one final fallback, then silence; only the operator's
  ``revive`` (lifecycle activate) tries a handshake again;
* offline beyond ``max_offline_s`` is OFFLINE, a recoverable hold: the
  queue is dropped, "hold" is published every tick, re-handshakes go on at
  the backoff, and a session that opens does NOT restart motion: only an
  explicit ``resume_offline`` does (~/resume, a RunPolicy goal, lifecycle
  activate), unless ``auto_resume``; motion restarts from an empty queue,
  so the first request carries a fresh observation and no RTC prefix;
* the offline budget counts from the last merged chunk (or the first
  handshake): a server that accepts sessions but never answers with chunks
  ends in OFFLINE, however often a re-handshake is accepted;
* the reconnect backoff is reset only by a merged chunk: a server that
  grants sessions and then refuses or ignores every request is re-handshaken
  at a doubling interval, not at full rate; with several replicas
  (``move_at_once``) the first attempt after losing a working session is
  immediate, since another replica can take over now;
* time spent paused by the operator never spends the offline budget, the
  heartbeat timeout, the degraded timer or the reconnect backoff; a resume
  starts a whole offline budget (the queue went stale while paused).

Pure logic: every method takes the current monotonic time in seconds, so the
node calls it from its timers and tests drive it without sleeping.

    CONNECTING --handshake ok--> STREAMING <--chunk merged-- DEGRADED, STALLED
    STREAMING --no chunk for degraded_after_s, queue non-empty--> DEGRADED
    STREAMING, DEGRADED --queue empty or next action stale--> STALLED
    STREAMING, DEGRADED, STALLED --timeout streak, heartbeat lost, server restarted--> RECONNECTING
    RECONNECTING --handshake ok--> STREAMING
    RECONNECTING, STALLED --offline > max_offline_s--> OFFLINE (holding, re-handshaking)
    OFFLINE --handshake ok--> OFFLINE with a session --resume (or auto_resume)--> STREAMING
    CONNECTING --handshake failed--> DEAD;  any --model changed--> DEAD
    DEAD --revive (lifecycle activate)--> OFFLINE (one handshake: the model is checked again)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from lerobot_ros.executor.control.failsafe_config import FailSafeConfig
from lerobot_ros.protocol.status import ExecutorState


class TickAction(Enum):
    EXECUTE = "execute"  # pop the next queued action, apply the safety envelope, publish it
    FALLBACK = "fallback"  # publish the fallback action; do not pop the queue
    NOTHING = "nothing"  # publish nothing at all


#: What OFFLINE does and what ends it (in its reason, so ~/status and the log say it).
OFFLINE_WAY_BACK = (
    "holding position and reconnecting on its own; motion restarts on ~/resume, a new "
    "RunPolicy goal or lifecycle activate (auto_resume: as soon as a session opens)"
)

# States in which a session is open and chunks from it may be merged.
_SESSION_OPEN = (ExecutorState.STREAMING, ExecutorState.DEGRADED, ExecutorState.STALLED)


@dataclass(frozen=True)
class Transition:
    from_state: ExecutorState
    to_state: ExecutorState
    reason: str
    at_s: float  # the monotonic time passed to the call that made the transition


@dataclass(frozen=True)
class TickDecision:
    """What the control loop must do this period.

    The caller, in this order:
      1. if ``clear_queue``: clear the action queue (its next action is stale);
      2. EXECUTE: pop one action (if the pop finds nothing after all, publish
         the fallback instead); FALLBACK: publish
         ``fallback_action(fallback_mode or <configured mode>, ...)`` and do
         not pop; NOTHING: publish nothing;
      3. pass whatever it publishes through the safety envelope.
    """

    action: TickAction
    state: ExecutorState  # the state after this tick
    clear_queue: bool = False
    # Overrides the node's configured fallback mode when set ("hold" while paused).
    fallback_mode: str | None = None
    reason: str = ""
    transitions: tuple[Transition, ...] = ()


class FailSafe:
    """The state machine; not thread-safe (call it from one executor callback group)."""

    def __init__(self, config: FailSafeConfig, now: float, transition_log_size: int = 100) -> None:
        self.config = config
        self._state = ExecutorState.CONNECTING
        self._reason = "waiting for the first handshake"
        self._transitions: deque[Transition] = deque(maxlen=transition_log_size)
        self._transition_count = 0
        # All clocks below are in "active" time: monotonic time minus the time
        # spent paused, so pausing never spends a budget.
        self._paused_since: float | None = None
        self._paused_total_s = 0.0
        start = self._active(now)
        self._last_success = start  # last chunk merged, or the first handshake (offline budget)
        self._last_chunk = start  # last chunk merged (degraded timer)
        self._last_heartbeat = start
        self._timeout_streak = 0
        self._backoff_s = config.reconnect_backoff_initial_s
        self._next_attempt = start
        self._final_fallback_pending = False
        self._merged_since_handshake = False  # the latest session answered with at least one chunk
        self._offline_session = False  # OFFLINE with a session open again (waiting for a resume)
        self._offline_cause = ""  # why the executor went OFFLINE
        self.last_handshake_error = ""

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> ExecutorState:
        return self._state

    @property
    def reason(self) -> str:
        """Why the last transition happened."""
        return self._reason

    @property
    def paused(self) -> bool:
        return self._paused_since is not None

    @property
    def transitions(self) -> tuple[Transition, ...]:
        """The most recent transitions, oldest first (bounded)."""
        return tuple(self._transitions)

    @property
    def transition_count(self) -> int:
        """Transitions since start-up (the log keeps only the most recent)."""
        return self._transition_count

    @property
    def accepting_chunks(self) -> bool:
        """Whether a chunk of the current session may be merged now."""
        return self._state in _SESSION_OPEN

    @property
    def offline_session(self) -> bool:
        """OFFLINE with a session open again: a resume restarts motion at once."""
        return self._state is ExecutorState.OFFLINE and self._offline_session

    @property
    def timeout_streak(self) -> int:
        return self._timeout_streak

    @property
    def backoff_s(self) -> float:
        """The wait before the next re-handshake attempt (while RECONNECTING)."""
        return self._backoff_s

    def offline_s(self, now: float) -> float:
        """Active (unpaused) time since the last merged chunk (or the first accepted handshake)."""
        return self._active(now) - self._last_success

    def reconnect_due(self, now: float) -> bool:
        """True when RECONNECTING, not paused and the backoff wait is over.

        The caller makes one attempt at a time and reports it with
        ``on_handshake_ok`` or ``on_handshake_failed``.
        """
        searching = self._state is ExecutorState.RECONNECTING or (
            self._state is ExecutorState.OFFLINE and not self._offline_session
        )
        return searching and not self.paused and self._active(now) >= self._next_attempt

    # ----------------------------------------------------------------- events

    def on_handshake_ok(self, now: float) -> None:
        if self._state is ExecutorState.OFFLINE:
            self._offline_session = True
            self.last_handshake_error = ""
            self._backoff_s = self.config.reconnect_backoff_initial_s
            if self.config.auto_resume:
                self.resume_offline(now, "auto_resume")
            else:
                self._go(
                    ExecutorState.OFFLINE,
                    f"{self._offline_cause}; a session is open again: holding until "
                    "resumed (~/resume, a new RunPolicy goal or lifecycle activate)",
                    now,
                )
            return
        if self._state not in (ExecutorState.CONNECTING, ExecutorState.RECONNECTING):
            return  # a duplicate answer; the session is already open (or DEAD, which is terminal)
        t = self._active(now)
        if self._state is ExecutorState.CONNECTING:
            # later handshakes do not refill the offline budget: only chunks do
            self._last_success = t
        self._last_chunk = self._last_heartbeat = t
        self._timeout_streak = 0
        self._merged_since_handshake = False
        self.last_handshake_error = ""
        self._go(ExecutorState.STREAMING, "handshake accepted", now)

    def on_handshake_failed(self, now: float, reason: str) -> None:
        self.last_handshake_error = reason
        if self._state is ExecutorState.CONNECTING:
            # Fail fast before the robot ever moves.
            self._go(ExecutorState.DEAD, f"first handshake failed: {reason}", now)
            return
        if self._state is ExecutorState.OFFLINE and not self._offline_session:
            self._reason = f"{self._offline_cause}; {OFFLINE_WAY_BACK}; the last attempt: {reason}"
        elif self._state is not ExecutorState.RECONNECTING:
            return
        elif self._offline_exceeded(now):
            self._go_offline(f"{self._offline_text(now)}; last handshake error: {reason}", now)
            return
        self._backoff_s = min(2.0 * self._backoff_s, self.config.reconnect_backoff_max_s)
        self._next_attempt = self._active(now) + self._backoff_s

    def on_model_changed(self, now: float, reason: str) -> None:
        if self._state is not ExecutorState.DEAD:
            self._go(ExecutorState.DEAD, reason, now)

    def resume_offline(self, now: float, by: str) -> str | None:
        """Restart motion from OFFLINE (``by``: who asked); None when done, else why not.

        Needs a session open again; the queue is empty (dropped when OFFLINE
        began), so the first request carries a fresh observation and no RTC
        prefix. The offline budget, heartbeat and degraded timers start anew.
        """
        if self._state is not ExecutorState.OFFLINE:
            return f"the executor is {self._state.name}, not OFFLINE: nothing to resume"
        if not self._offline_session:
            return (
                "no session yet: "
                f"{self.last_handshake_error or 'no re-handshake has succeeded yet'}; "
                "still holding, and reconnecting on its own"
            )
        t = self._active(now)
        self._last_success = self._last_chunk = self._last_heartbeat = t
        self._timeout_streak = 0
        self._merged_since_handshake = False
        self._offline_session = False
        self._go(
            ExecutorState.STREAMING,
            f"resumed from OFFLINE by {by}: queue empty, a fresh observation next",
            now,
        )
        return None

    def session_closed(self) -> None:
        """The executor closed its session (deactivation): a resume from OFFLINE must open
        another."""
        self._offline_session = False

    def revive(self, now: float, by: str) -> None:
        """The operator asks for another try after DEAD (lifecycle activate): OFFLINE without a
        session, an attempt due now. A changed model is found again by that handshake and goes DEAD
        again."""
        if self._state is ExecutorState.DEAD:
            self._go_offline(f"{by} after DEAD ({self._reason})", now)
            self._next_attempt = self._active(now)

    def on_chunk_merged(self, now: float) -> None:
        if self._state not in _SESSION_OPEN:
            return  # CONNECTING/RECONNECTING: no session to merge into; DEAD: terminal
        t = self._active(now)
        self._last_success = self._last_chunk = t
        self._timeout_streak = 0
        self._merged_since_handshake = True
        self._backoff_s = self.config.reconnect_backoff_initial_s
        if self._state is not ExecutorState.STREAMING:
            self._go(ExecutorState.STREAMING, "chunk merged", now)

    def on_request_timeout(self, now: float, refusal: str = "") -> None:
        """A request got no chunk: it timed out, or the server refused it (``refusal``, its
        reason)."""
        if self._state not in _SESSION_OPEN:
            return
        self._timeout_streak += 1
        if self._timeout_streak >= self.config.timeout_streak_to_reconnect:
            self._start_reconnecting(
                now,
                (
                    f"{self._timeout_streak} failed requests in a row; the server refused the "
                    f"last: {refusal}"
                    if refusal
                    else f"{self._timeout_streak} request timeouts in a row"
                ),
            )

    def on_heartbeat(self, now: float) -> None:
        if self._state is not ExecutorState.DEAD:
            self._last_heartbeat = self._active(now)

    def reconnect(self, now: float, reason: str) -> None:
        """The session is gone (``reason``: a restart, a drain, a departure, a deactivate):
        reconnect, from any state with a session open."""
        if self.offline_session:  # the session opened while OFFLINE is gone: look for another
            self._offline_session = False
            self._next_attempt = self._active(now)
            self._reason = (
                f"{self._offline_cause}; {OFFLINE_WAY_BACK}; the session opened "
                f"meanwhile ended: {reason}"
            )
        if self._state in _SESSION_OPEN:
            self._start_reconnecting(now, reason)

    def pause(self, now: float) -> None:
        if self._paused_since is None:
            self._paused_since = now

    def resume(self, now: float) -> None:
        if self._paused_since is not None:
            self._paused_total_s += max(0.0, now - self._paused_since)
            self._paused_since = None
            # The queue went stale while paused and the session may be re-opened: the server
            # gets a whole budget to answer again. Only an operator's resume refills it, so
            # a server that never answers still ends in DEAD.
            self._last_success = max(self._last_success, self._active(now))

    # ------------------------------------------------------------------- tick

    def tick(self, now: float, queue_depth: int, next_action_age_s: float | None) -> TickDecision:
        """Decide this control period's action and apply time-driven transitions.

        ``queue_depth`` is the number of queued actions; ``next_action_age_s``
        the age of the next one's source observation (None when unknown or
        the queue is empty; unknown age with a non-empty queue counts as stale).
        """
        if queue_depth < 0:
            raise ValueError(f"queue_depth must be >= 0, got {queue_depth}")
        # Counted, not measured on the log: a full log stays the same length.
        before = self._transition_count

        def decide(action: TickAction, reason: str, **fields) -> TickDecision:
            made_count = self._transition_count - before
            made = tuple(self._transitions)[-made_count:] if made_count else ()
            return TickDecision(action, self._state, reason=reason, transitions=made, **fields)

        if self._state is ExecutorState.DEAD:
            if self._final_fallback_pending:
                self._final_fallback_pending = False
                return decide(
                    TickAction.FALLBACK,
                    f"final fallback before stopping: {self._reason}",
                    clear_queue=True,
                )
            return decide(TickAction.NOTHING, self._reason)
        if self._state is ExecutorState.CONNECTING:
            return decide(TickAction.NOTHING, "waiting for the first handshake")
        if self._state is ExecutorState.OFFLINE:
            # Nothing queued survives the hold: resuming starts from a fresh observation.
            return decide(
                TickAction.FALLBACK,
                self._reason,
                clear_queue=queue_depth > 0,
                fallback_mode="hold",
            )
        if self.paused:
            return decide(TickAction.FALLBACK, "paused by the operator", fallback_mode="hold")

        t = self._active(now)
        if self._state in (
            ExecutorState.RECONNECTING,
            ExecutorState.STALLED,
        ) and self._offline_exceeded(now):
            self._go_offline(self._offline_text(now), now)
            return decide(
                TickAction.FALLBACK, self._reason, clear_queue=True, fallback_mode="hold"
            )

        heartbeat_silent_s = t - self._last_heartbeat
        if self._state in _SESSION_OPEN and heartbeat_silent_s > self.config.heartbeat_timeout_s:
            self._start_reconnecting(
                now,
                f"server heartbeat silent for {heartbeat_silent_s:.3f} s "
                f"(> heartbeat_timeout_s {self.config.heartbeat_timeout_s})",
            )

        if queue_depth == 0:
            self._stall_if_open("queue empty", now)
            return decide(TickAction.FALLBACK, "queue empty")

        stale = self._staleness(next_action_age_s)
        if stale is not None:
            self._stall_if_open(stale, now)
            return decide(TickAction.FALLBACK, stale, clear_queue=True)

        # Fresh actions. RECONNECTING keeps draining them: they come from the
        # model validated at session open and are within the staleness bound.
        if self._state in _SESSION_OPEN:
            since_chunk_s = t - self._last_chunk
            if since_chunk_s > self.config.degraded_after_s:
                if self._state is not ExecutorState.DEGRADED:
                    self._go(
                        ExecutorState.DEGRADED,
                        f"no chunk merged for {since_chunk_s:.3f} s (> degraded_after_s "
                        f"{self.config.degraded_after_s}); {queue_depth} actions still queued",
                        now,
                    )
            elif self._state is not ExecutorState.STREAMING:
                self._go(ExecutorState.STREAMING, "fresh actions queued", now)
        return decide(TickAction.EXECUTE, "executing a queued action")

    # -------------------------------------------------------------- internals

    def _active(self, now: float) -> float:
        # While paused, the clock stands still at the moment the pause began.
        if self._paused_since is not None:
            now = self._paused_since
        return now - self._paused_total_s

    def _offline_exceeded(self, now: float) -> bool:
        return self.offline_s(now) > self.config.max_offline_s

    def _offline_text(self, now: float) -> str:
        return (
            f"offline for {self.offline_s(now):.3f} s (> max_offline_s "
            f"{self.config.max_offline_s}) "
            "without a merged chunk"
        )

    def _staleness(self, next_action_age_s: float | None) -> str | None:
        if next_action_age_s is None or math.isnan(next_action_age_s):
            return "next action's source observation age is unknown: treated as stale"
        if next_action_age_s > self.config.max_action_age_s:
            return (
                f"next action's source observation is {next_action_age_s:.3f} s old "
                f"(> max_action_age_s {self.config.max_action_age_s}): stale"
            )
        return None

    def _stall_if_open(self, reason: str, now: float) -> None:
        if self._state in (ExecutorState.STREAMING, ExecutorState.DEGRADED):
            self._go(ExecutorState.STALLED, reason, now)

    def _start_reconnecting(self, now: float, reason: str) -> None:
        self._timeout_streak = 0
        if self._merged_since_handshake:
            wait = 0.0 if self.config.move_at_once else self._backoff_s
        else:
            # The session never answered with a chunk: back off further than last time.
            wait = self._backoff_s
            self._backoff_s = min(2.0 * self._backoff_s, self.config.reconnect_backoff_max_s)
            reason += f"; backing off {wait:g} s (no chunk merged since the session opened)"
        self._next_attempt = self._active(now) + wait
        self._go(ExecutorState.RECONNECTING, reason, now)

    def _go_offline(self, cause: str, now: float) -> None:
        self._offline_cause = cause
        self._offline_session = False
        self._next_attempt = self._active(now) + self._backoff_s
        self._go(ExecutorState.OFFLINE, f"{cause}; {OFFLINE_WAY_BACK}", now)

    def _go(self, to_state: ExecutorState, reason: str, now: float) -> None:
        if to_state is ExecutorState.DEAD:
            # One final fallback publish, unless nothing was ever commanded.
            self._final_fallback_pending = self._state is not ExecutorState.CONNECTING
        self._transitions.append(Transition(self._state, to_state, reason, now))
        self._transition_count += 1
        self._state = to_state
        self._reason = reason
