"""The executor's parameters that change while it streams: the safety limits and the fallback.

Invariant: a ``ros2 param set`` of a runtime entry (``runtime=True`` in
``executor/settings.py``: joint limits, max step, non-finite rejection,
fallback) is checked with the same checks and cross-field rules as at
start-up (one limit per joint, lower not above upper) and reaches the
control loop whole through ``ExecutorCore.change_settings``; any other
entry is refused with "takes effect only at start-up" (node_support).
"""

from __future__ import annotations

from collections.abc import Callable

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.node_shell.node_support import parameter_table


def accept_runtime_parameters(node, core: ExecutorCore, configuring: Callable[[], bool]) -> None:
    """Apply accepted runtime changes of ``node``'s parameter table to ``core`` (call on every
    configure, once the core exists); while ``configuring()`` (unconfigured: no core) every entry
    is settable for the next configure."""
    parameter_table(node).on_change(core.change_settings, configuring)
