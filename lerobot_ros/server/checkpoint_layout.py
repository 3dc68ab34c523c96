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
