"""Which checkpoint a policy name means: the one rule the demo, the evaluation, the launch files
and the fleet demo share.

Names: ``act`` and ``smolvla`` are the random-weight default policies
(``lerobot_ros.sim.default_policy``, built on first use and cached);
``trained_smolvla`` is the trained reach SmolVLA committed with the package
(``lerobot_ros/sim/policies``); ``trained`` is the trained reach ACT in the
local cache, which only ``python -m lerobot_ros.recording.regenerate
--install`` (or the demo's ``--policy trained``) puts there.

Invariant: a trained policy counts as present only when it is whole and
evaluated: its directory holds the checkpoint's contract file AND the
``evaluation.json`` of the run that accepted it, so a name never resolves
to a half-copied checkpoint or one whose quoted score does not exist.
Building or installing a policy is not decided here (see
``lerobot_ros.recording.trained_policy``); this module only says where a name
points and whether that is there.
"""

from __future__ import annotations

from pathlib import Path

from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.sim.default_policy import cache_dir, default_checkpoint

#: The cached trained ACT. Bump the suffix when the recipe (regenerate's defaults, train's options)
#: changes, so caches rebuild.
TRAINED_POLICY_NAME = "act_so101_reach_v1"
#: The committed trained SmolVLA (``regenerate --policy smolvla`` made it;
# docs/reference/benchmarks.md says how).
TRAINED_SMOLVLA_NAME = "smolvla_so101_reach_v1"
COMMITTED_POLICIES = Path(__file__).resolve().parent / "sim" / "policies"
#: The score a trained policy was accepted with, kept beside its checkpoint.
EVALUATION_FILE = "evaluation.json"

#: What each policy name is, in words (the demo says which one it serves).
POLICY_LABELS = {
    "trained": "trained reach ACT",
    "trained_smolvla": "trained reach SmolVLA",
    "act": "random-weight ACT",
    "smolvla": "random-weight SmolVLA",
}


def _whole(path: Path) -> Path | None:
    return (
        path if (path / CONTRACT_FILE).is_file() and (path / EVALUATION_FILE).is_file() else None
    )


def committed_trained_smolvla() -> Path | None:
    """The trained SmolVLA shipped with the package, or None where an install left it out."""
    return _whole(COMMITTED_POLICIES / TRAINED_SMOLVLA_NAME)


def trained_policy_path() -> Path:
    """Where the trained ACT lives in the cache, whether or not it is there."""
    return cache_dir() / "policies" / TRAINED_POLICY_NAME


def installed_trained_policy() -> Path | None:
    """The cached trained policy, or None when it was never built (or only partly)."""
    return _whole(trained_policy_path())


def auto_policy() -> str:
    """What the demo's ``--policy auto`` serves: the trained ACT when installed, else the committed
    trained SmolVLA, else (an install that left it out) the random ACT. Never a name that needs
    training first."""
    if installed_trained_policy() is not None:
        return "trained"
    return "trained_smolvla" if committed_trained_smolvla() else "act"


def checkpoint_or_default(checkpoint: str, policy: str) -> str:
    """``checkpoint``, or when empty the default ``policy``: act or smolvla (random weights, built
    once and cached) or trained_smolvla (the trained reach SmolVLA committed with the package)."""
    if checkpoint:
        return checkpoint
    if policy == "trained_smolvla":
        committed = committed_trained_smolvla()
        if committed is None:
            raise ValueError(
                "policy trained_smolvla: this install has no committed trained SmolVLA "
                "(lerobot_ros/sim/policies); choose act or smolvla, or name a checkpoint"
            )
        return str(committed)
    return str(default_checkpoint(policy))
