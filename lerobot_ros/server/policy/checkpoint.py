"""Load a LeRobot checkpoint with LeRobot's own factories and describe it.

The description (ServerCapabilities) is what robots are validated against, so
it is derived from the checkpoint itself: features and chunk size from the
policy config, action names from the checkpoint's ``lerobot_ros.json`` (LeRobot
configs do not record them) unless the operator passes them explicitly.

A checkpoint may carry its VLM's config, processor and tokenizer in a ``vlm``
folder (the generated SmolVLA default policy does): config.json and the
tokenizer step record an absolute path, so on load both are pointed at the
folder inside the checkpoint, wherever it now lives.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.policies.factory import get_policy_class, make_pre_post_processors

from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE, VLM_DIR, local_checkpoint_problem
from lerobot_ros.protocol.contract import CameraSpec, ServerCapabilities
from lerobot_ros.server.policy.policy_families import DTYPES, classify, resolve_serving

log = logging.getLogger(__name__)

_RTC_KWARGS = ("inference_delay", "prev_chunk_left_over")
#: LeRobot's registry name of the preprocessor step that loads a tokenizer by name.
_TOKENIZER_STEP = "tokenizer_processor"
_DTYPES = {name: getattr(torch, name) for name in DTYPES}


class CheckpointError(RuntimeError):
    """The checkpoint cannot be loaded or does not describe a servable policy."""


@dataclass
class LoadedPolicy:
    policy: Any
    preprocessor: Any
    postprocessor: Any
    config: PreTrainedConfig
    capabilities: ServerCapabilities
    serving_reason: str = ""


def resolve_device(device: str) -> str:
    if device in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise CheckpointError(
                f"device {device!r} requested but CUDA is not available here "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); use device "
                "'cpu' or 'auto'"
            )
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise CheckpointError(
                f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s) "
                "exist"
            )
    return device


def fingerprint(checkpoint_dir: Path, revision: str = "") -> str:
    """Identity of a checkpoint without reading gigabytes of weights.

    Hashes config.json, the safetensors header (every tensor's name, dtype,
    shape and offsets), the weights file size and 1 MiB samples at its start,
    middle and end. Two checkpoints that differ in architecture or were saved
    from different training runs differ here.
    """
    digest = hashlib.sha256(revision.encode())
    config = checkpoint_dir / "config.json"
    digest.update(config.read_bytes())
    for weights in sorted(checkpoint_dir.glob("*.safetensors")):
        size = weights.stat().st_size
        digest.update(weights.name.encode() + size.to_bytes(8, "little"))
        with weights.open("rb") as stream:
            header_length = int.from_bytes(stream.read(8), "little")
            digest.update(stream.read(min(header_length, 64 << 20)))
            for offset in (0, size // 2, max(size - (1 << 20), 0)):
                stream.seek(offset)
                digest.update(stream.read(1 << 20))
    return digest.hexdigest()[:16]


def _read_contract_file(checkpoint_dir: Path) -> dict:
    path = checkpoint_dir / CONTRACT_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error


def _local_checkpoint_dir(checkpoint: str, revision: str) -> Path:
    problem = local_checkpoint_problem(checkpoint)
    if problem:
        raise CheckpointError(problem)
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(checkpoint, revision=revision or None))
    except Exception as error:  # noqa: BLE001 - the hub raises many types; all mean "cannot load"
        raise CheckpointError(
            f"checkpoint {checkpoint!r} is neither a local directory nor downloadable from the "
            "Hub "
            f"(revision {revision or 'main'!r}): {error}"
        ) from error


def supports_rtc(policy: Any) -> bool:
    """Whether the policy does real-time chunking, as LeRobot's own RTC engine decides it.

    LeRobot policies declare it with ``supports_rtc()``; their
    ``predict_action_chunk`` takes the RTC arguments as ``**kwargs``, so a
    signature without explicit names must still accept them.
    """
    signature = inspect.signature(policy.predict_action_chunk)
    declared = getattr(policy, "supports_rtc", None)
    if not callable(declared):  # not a LeRobot policy: the names must be explicit
        return all(name in signature.parameters for name in _RTC_KWARGS)
    if not declared():
        return False
    try:
        signature.bind(object(), **{name: None for name in _RTC_KWARGS})
    except TypeError:
        return False
    return True


def _vlm_overrides(checkpoint_dir: Path, config: PreTrainedConfig) -> dict:
    """Point a checkpoint that carries its VLM folder at that folder (see the module doc).

    Sets ``config.vlm_model_name``; returns the preprocessor overrides for the
    tokenizer step (empty when the checkpoint has no such folder or step).
    """
    vlm = checkpoint_dir / VLM_DIR
    if not (vlm / "config.json").is_file() or not hasattr(config, "vlm_model_name"):
        return {}
    config.vlm_model_name = str(vlm.resolve())
    try:
        saved = json.loads((checkpoint_dir / "policy_preprocessor.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    uses_tokenizer = any(
        step.get("registry_name") == _TOKENIZER_STEP and "tokenizer_name" in step.get("config", {})
        for step in saved.get("steps", [])
    )
    return {_TOKENIZER_STEP: {"tokenizer_name": config.vlm_model_name}} if uses_tokenizer else {}


def chunk_length(config: PreTrainedConfig) -> int:
    """How many actions one predict_action_chunk call returns."""
    if config.type == "diffusion":
        return int(config.n_action_steps)  # the horizon minus the observation history
    return int(getattr(config, "chunk_size", None) or getattr(config, "horizon", 1))


def load_policy(
    checkpoint: str,
    revision: str = "",
    device: str = "auto",
    dtype: str = "float32",
    action_names: list[str] | None = None,
    trained_fps: float = 0.0,
    serving_mode: str = "auto",
    rtc_enabled: bool = True,
    rtc_execution_horizon: int = 10,
    pinned_task: str = "",
) -> LoadedPolicy:
    """Load policy + processors, cast, move, and describe what is served.

    Everything that can be checked from config.json and the contract file is
    checked before the weights are read, so a wrong checkpoint fails fast.
    """
    if dtype not in _DTYPES:
        raise CheckpointError(f"dtype {dtype!r} is not one of {sorted(_DTYPES)}")
    device = resolve_device(device)
    checkpoint_dir = _local_checkpoint_dir(checkpoint, revision)
    try:
        config = PreTrainedConfig.from_pretrained(checkpoint_dir)
    except (OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"cannot load LeRobot checkpoint {checkpoint!r}: {error}") from error
    config.device = device
    serving = resolve_serving(
        classify(config.type, getattr(config, "n_obs_steps", 1)), serving_mode
    )
    contract = _read_contract_file(checkpoint_dir)
    action_dim = config.action_feature.shape[0]
    names = tuple(action_names or contract.get("action_names") or ())
    if not names:
        raise CheckpointError(
            f"checkpoint {checkpoint!r} does not name its {action_dim} actions: pass the ordered "
            f"action_names parameter or add {CONTRACT_FILE} with an 'action_names' list"
        )
    if len(names) != action_dim:
        raise CheckpointError(
            f"{len(names)} action names given ({list(names)}) but the policy outputs {action_dim} "
            "actions"
        )

    try:
        # The policy runs in ``dtype``: its inputs must reach it in that dtype too (LeRobot's
        # device step casts floating tensors), or a float16/bfloat16 model meets float32 inputs at
        # its first matmul.
        overrides = {
            "device_processor": {"device": device, "float_dtype": dtype},
            **_vlm_overrides(checkpoint_dir, config),
        }
        policy = get_policy_class(config.type).from_pretrained(checkpoint_dir, config=config)
        preprocessor, postprocessor = make_pre_post_processors(
            config,
            pretrained_path=str(checkpoint_dir),
            preprocessor_overrides=overrides,
        )
    except (OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"cannot load LeRobot checkpoint {checkpoint!r}: {error}") from error
    policy.to(device=device, dtype=_DTYPES[dtype]).eval()
    log.info("serving %s as %s: %s", config.type, serving.mode, serving.reason)

    rtc_supported = supports_rtc(policy)
    state = config.robot_state_feature
    cameras = tuple(
        CameraSpec(name, int(feature.shape[-2]), int(feature.shape[-1]))
        for name, feature in config.image_features.items()
    )
    capabilities = ServerCapabilities(
        model_id=checkpoint,
        model_revision=revision,
        model_fingerprint=fingerprint(checkpoint_dir, revision),
        policy_type=config.type,
        serving_mode=serving.mode,
        device=device,
        dtype=dtype,
        action_names=names,
        state_names=tuple(contract.get("state_names") or ()),
        state_dim=int(state.shape[0]) if state is not None else 0,
        cameras=cameras,
        chunk_size=chunk_length(config),
        trained_fps=float(trained_fps or contract.get("fps") or 0.0),
        rtc_supported=rtc_supported,
        rtc_enabled=rtc_enabled and rtc_supported,
        rtc_execution_horizon=rtc_execution_horizon if rtc_enabled and rtc_supported else 0,
        pinned_task=pinned_task,
    )
    return LoadedPolicy(policy, preprocessor, postprocessor, config, capabilities, serving.reason)
