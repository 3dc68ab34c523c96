"""What a servable checkpoint directory holds besides LeRobot's own files.

Invariant: the loader (``server/checkpoint.py``) and every checkpoint builder
(``sim/default_policy.py``) name these files from here, so a generated
checkpoint is always one the server can load. Plain constants: importable
without torch, by the demo before any server runs.
"""

#: Sidecar file naming the robot-facing contract (action and state names, fps).
CONTRACT_FILE = "lerobot_ros.json"
#: Folder with a VLM's config, processor and tokenizer, for checkpoints that
#: carry their own (the generated SmolVLA default policy does).
VLM_DIR = "vlm"
#: LeRobot's policy config in a pretrained_model directory.
CONFIG_FILE = "config.json"


def local_checkpoint_problem(checkpoint: str) -> str | None:
    """Why ``checkpoint`` names no loadable local directory, or None (a directory, or a Hub id to
    fetch).

    Plain path checks, so the server refuses a mistyped path before it spends
    seconds importing torch and LeRobot.
    """
    from pathlib import Path

    path = Path(checkpoint).expanduser()
    if path.is_dir():
        if not (path / CONFIG_FILE).is_file():
            return (
                f"cannot load LeRobot checkpoint {checkpoint!r}: it has no {CONFIG_FILE} "
                "(expected a LeRobot pretrained_model directory: config.json, model.safetensors, "
                "processors)"
            )
        return None
    if path.exists() or checkpoint.startswith((".", "/", "~")):
        return f"checkpoint {checkpoint!r} is not a directory"
    return None
