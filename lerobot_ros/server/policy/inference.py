"""Run one observation through the served LeRobot policy.

Invariants: each session has its own pre/post processor instances (relative
action steps and tokenizers cache state between pre- and postprocessing;
sharing them would mix robots); ``policy.reset()`` is only ever called in
exclusive mode, where one session owns the model; images reach the policy as
RGB float tensors in [0, 1] at the resolution the policy was trained at.
Which thread calls each method: ``policy_seam.ServedPolicy`` (this class is
its implementation); what is decided by policy type comes from the family
record (``policy_families.FAMILIES``).

A request is ``prepare``d with its own session's processors, several
prepared requests with equal ``batch_key``s share one ``infer`` (a forward
pass of their stacked inputs, each with its own noise and RTC inputs), and
each row is ``finish``ed with its own session's postprocessor; ``run`` is
the three for one request alone.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import time
from dataclasses import dataclass

import numpy as np
import torch

from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import ObservationFrame, RequestId
from lerobot_ros.server.policy import batched_rtc
from lerobot_ros.server.policy.batched_rtc import SamplePrefix, batched_rtc_kwargs
from lerobot_ros.server.policy.checkpoint import LoadedPolicy
from lerobot_ros.server.policy.policy_families import EXCLUSIVE, family_of
from lerobot_ros.server.policy.policy_seam import InferenceResult, SessionProcessors


@dataclass
class PreparedRequest:
    """One request after its session's preprocessing, before the forward pass it shares."""

    batch: dict  # the policy input, batch dimension 1
    processors: SessionProcessors
    rtc: SamplePrefix | None  # None: RTC not asked for or not served
    seed: int | None  # the request's noise seed (noise_seed set)
    noise: torch.Tensor | None  # flow-matching noise [1, chunk, max_action_dim] from ``seed``
    preprocess_s: float


def request_noise_seed(base_seed: int, request: RequestId) -> int:
    """The torch seed of one request's noise: a function of who asked for what, not of arrival
    order.

    So a session's chunks are reproducible whatever other robots do meanwhile,
    and an offline run (replay, a parity check) can draw the same noise.
    """
    key = f"{base_seed}:{request.client_id}:{request.episode}:{request.seq}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & ((1 << 63) - 1)


def _to_numpy(actions: torch.Tensor) -> np.ndarray:
    return (
        actions.detach()
        .to("cpu", torch.float32)
        .numpy()
        .reshape(actions.shape[-2], actions.shape[-1])
    )


class PolicyRunner:
    def __init__(
        self,
        loaded: LoadedPolicy,
        rtc_enabled: bool = False,
        rtc_execution_horizon: int = 10,
        noise_seed: int | None = None,
        inject_delay_s: float = 0.0,
    ) -> None:
        self.loaded = loaded
        self.noise_seed = noise_seed
        self.inject_delay_s = inject_delay_s
        self.capabilities = loaded.capabilities
        self.exclusive = loaded.capabilities.serving_mode == EXCLUSIVE
        self.rtc_active = rtc_enabled and loaded.capabilities.rtc_supported
        self.rtc_execution_horizon = rtc_execution_horizon
        self.family = family_of(loaded.capabilities.policy_type)
        # Several sessions' requests in one forward pass (request_path.RequestHandler.forward).
        self.batchable = not self.exclusive and self.family.batchable
        config = loaded.config
        self._noise_shape = (
            (config.chunk_size, config.max_action_dim) if self.family.noise_input else None
        )
        self._relative_step = self._normalizer_step = None
        # how ``compile_forward`` compiled the forward ("backend, mode"); empty: eager
        self.compiled = ""
        self._model_dtype = next(loaded.policy.parameters()).dtype
        # Where a float16/bfloat16 forward runs under autocast (see ``_autocast``); None: float32,
        # no autocast.
        reduced = self._model_dtype != torch.float32
        self._autocast_device = torch.device(loaded.capabilities.device).type if reduced else None
        if self.rtc_active:
            self._configure_rtc()

    def compile_forward(self, mode: str, backend: str) -> None:
        """Wrap the policy's ``predict_action_chunk`` in ``torch.compile``, as LeRobot's own
        rollout does.

        Nothing compiles here: each new input shape compiles on its first
        forward, which the warm-up runs (``warmup.warm_up``: batches of one
        and, for a batchable policy, of two, after which the batch dimension
        is dynamic). Raises ValueError for a backend this torch does not have.
        """
        import torch._dynamo

        known = torch._dynamo.list_backends(exclude_tags=())
        if backend not in known:
            raise ValueError(
                f"compile_backend {backend!r} is not a torch.compile backend of torch "
                f"{torch.__version__}; "
                f"known: {known}"
            )
        policy = self.loaded.policy
        policy.predict_action_chunk = torch.compile(
            policy.predict_action_chunk, backend=backend, mode=None if mode == "default" else mode
        )
        self.compiled = f"{backend}, mode {mode}"

    def _configure_rtc(self) -> None:
        from lerobot.policies.rtc import RTCConfig
        from lerobot.processor import NormalizerProcessorStep, RelativeActionsProcessorStep

        policy = self.loaded.policy
        policy.config.rtc_config = RTCConfig(
            enabled=True, execution_horizon=self.rtc_execution_horizon
        )
        if hasattr(policy, "init_rtc_processor"):
            policy.init_rtc_processor()
            # one delay and prefix per request in a shared forward pass
            batched_rtc.install(policy)
        steps = getattr(self.loaded.preprocessor, "steps", [])
        self._has_relative_step = any(
            isinstance(s, RelativeActionsProcessorStep) and s.enabled for s in steps
        )
        self._normalizer_type = NormalizerProcessorStep
        self._relative_type = RelativeActionsProcessorStep

    def new_session_processors(self) -> SessionProcessors:
        """Fresh processor instances for one session (copies of the loaded ones).

        One deepcopy of both pipelines: steps of the postprocessor may point at
        steps of the preprocessor (absolute actions read the state the relative
        step cached); copied apart, they would point at an orphan copy.
        """
        preprocessor, postprocessor = copy.deepcopy(
            (self.loaded.preprocessor, self.loaded.postprocessor)
        )
        return SessionProcessors(preprocessor, postprocessor)

    def reset_session(self, processors: SessionProcessors) -> None:
        """An episode boundary: forget what the session's processors cached."""
        for pipeline in (processors.preprocessor, processors.postprocessor):
            reset = getattr(pipeline, "reset", None)
            if reset is not None:
                reset()
        if self.exclusive:
            self.loaded.policy.reset()

    def _policy_input(self, frame: ObservationFrame, task: str) -> dict:
        observation: dict = {"task": task}
        if self.capabilities.state_dim:
            observation["observation.state"] = torch.from_numpy(
                np.array(frame.state, dtype=np.float32)
            )
        for camera in self.capabilities.cameras:
            rgb = frame.images[camera.name]
            if rgb.shape[:2] != (camera.height, camera.width):
                rgb = images.resize_rgb(rgb, camera.height, camera.width)
            # Channels first while still uint8 (a quarter of the bytes), then one float conversion
            # into a contiguous tensor, as LeRobot's own path feeds the policy: a float tensor
            # permuted from HxWx3 keeps channels-last strides, which made the normalizer 2.4x and
            # the ACT forward 7-30 % slower.
            channels_first = np.ascontiguousarray(rgb.transpose(2, 0, 1))
            observation[camera.name] = torch.from_numpy(channels_first).float().div_(255.0)
        return observation

    def _feed_observation_history(self, batch: dict) -> dict:
        # Diffusion's chunk call stacks n_obs_steps observations from queues
        # that only select_action fills; fill them here so history is real.
        from lerobot.policies.utils import populate_queues
        from lerobot.utils.constants import ACTION, OBS_IMAGES

        policy = self.loaded.policy
        # as select_action does
        batch = {key: value for key, value in batch.items() if key != ACTION}
        image_keys = list(self.loaded.config.image_features)
        if image_keys:
            batch[OBS_IMAGES] = torch.stack([batch[key] for key in image_keys], dim=-4)
        policy._queues = populate_queues(policy._queues, batch, exclude_keys=[ACTION])
        return batch

    def _rtc_sample(self, frame: ObservationFrame, processors: SessionProcessors) -> SamplePrefix:
        if frame.prefix_model is None or not len(frame.prefix_model):
            return SamplePrefix(None, frame.inference_delay_steps)
        prefix = torch.from_numpy(np.array(frame.prefix_model, dtype=np.float32))
        if self._has_relative_step:
            from lerobot.policies.rtc import reanchor_relative_rtc_prefix

            steps = processors.preprocessor.steps
            relative = next(s for s in steps if isinstance(s, self._relative_type) and s.enabled)
            normalizer = next((s for s in steps if isinstance(s, self._normalizer_type)), None)
            state = relative.get_cached_state()
            if state is not None:
                prefix = reanchor_relative_rtc_prefix(
                    prev_actions_absolute=torch.from_numpy(
                        np.array(frame.prefix_robot, dtype=np.float32)
                    ),
                    current_state=state,
                    relative_step=relative,
                    normalizer_step=normalizer,
                    policy_device=self.capabilities.device,
                )
        # Cut to the execution horizon. Unlike LeRobot's local RTC engine we do
        # not zero-pad a shorter prefix (it pads for torch.compile's fixed
        # shapes): zeros are the dataset mean in model space, and the guidance
        # would pull the steps past the real prefix towards it. Given the
        # real length, LeRobot's RTC processor shortens the horizon to match.
        return SamplePrefix(prefix[: self.rtc_execution_horizon], frame.inference_delay_steps)

    def _request_noise(self, seed: int | None) -> torch.Tensor | None:
        """Flow-matching noise for one request, as the policy itself draws it (standard normal,
        float32), from a generator of its own: an admission thread never touches the global RNG
        another thread may be drawing from."""
        if seed is None or self._noise_shape is None:
            return None
        device = torch.device(self.capabilities.device)
        generator = torch.Generator(device).manual_seed(seed)
        return torch.normal(
            0.0,
            1.0,
            size=(1, *self._noise_shape),
            dtype=torch.float32,
            device=device,
            generator=generator,
        )

    # no_grad, not inference_mode: RTC guidance differentiates through the
    # denoiser inside the call (torch.enable_grad), which inference tensors forbid.
    @torch.no_grad()
    def prepare(
        self, frame: ObservationFrame, processors: SessionProcessors, task: str, rtc: bool
    ) -> PreparedRequest:
        """The session's preprocessing of one request, ready to share a forward pass."""
        started = time.perf_counter()
        batch = processors.preprocessor(self._policy_input(frame, task))
        if (
            self.exclusive
            and self.family.observation_history
            and hasattr(self.loaded.policy, "_queues")
        ):
            batch = self._feed_observation_history(batch)
        rtc_sample = self._rtc_sample(frame, processors) if rtc and self.rtc_active else None
        seed = (
            None if self.noise_seed is None else request_noise_seed(self.noise_seed, frame.request)
        )
        return PreparedRequest(
            batch=batch,
            processors=processors,
            rtc=rtc_sample,
            seed=seed,
            noise=self._request_noise(seed),
            preprocess_s=time.perf_counter() - started,
        )

    def _autocast(self):
        """The forward of a float16/bfloat16 policy under torch.autocast in its dtype; float32 runs
        as it is.

        The weights and the inputs are in that dtype already (``load_policy``); autocast covers the
        tensors LeRobot's models create themselves in float32 (ACT's latent, flow-matching noise
        and time).
        """
        if self._autocast_device is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self._autocast_device, dtype=self._model_dtype)

    def batch_key(self, prepared: PreparedRequest) -> tuple:
        """Requests with equal keys can share one forward pass (module-level ``batch_key``)."""
        return batch_key(prepared)

    @torch.no_grad()
    def infer(self, prepared: list[PreparedRequest]) -> tuple[torch.Tensor, float]:
        """One ``predict_action_chunk`` for all of ``prepared`` (equal ``batch_key``s): actions [n,
        chunk, dim], seconds."""
        started = time.perf_counter()
        batch = _stack([request.batch for request in prepared])
        kwargs: dict = {}
        if any(request.rtc is not None for request in prepared):
            samples = [request.rtc or SamplePrefix(None, 0) for request in prepared]
            kwargs = batched_rtc_kwargs(
                samples, self.rtc_execution_horizon, self.capabilities.device, self._model_dtype
            )
        seed = None
        if all(request.noise is not None for request in prepared):
            kwargs["noise"] = torch.cat([request.noise for request in prepared])
        elif len(prepared) == 1:
            seed = prepared[
                0
            ].seed  # a family that draws its own randomness inside the forward (Diffusion)
        if self.inject_delay_s:
            time.sleep(self.inject_delay_s)  # counted as inference: it stands for a slower model
        with self._autocast(), _seeded(seed, self.capabilities.device):
            actions = self.loaded.policy.predict_action_chunk(batch, **kwargs)
        # On the host before the forward is done: a finish never queues behind the next forward on
        # the device.
        return actions.to("cpu"), time.perf_counter() - started

    @torch.no_grad()
    def finish(
        self, request: PreparedRequest, actions: torch.Tensor, inference_s: float
    ) -> InferenceResult:
        """The session's postprocessing of its row ``actions`` ([1, chunk, dim]) of a forward
        pass."""
        started = time.perf_counter()
        actions_model = _to_numpy(actions)
        actions_robot = _to_numpy(request.processors.postprocessor(actions))
        rtc_applied = request.rtc is not None and request.rtc.prefix is not None
        return InferenceResult(
            actions_model=actions_model,
            actions_robot=actions_robot,
            preprocess_s=request.preprocess_s,
            inference_s=inference_s,
            postprocess_s=time.perf_counter() - started,
            rtc_applied=rtc_applied,
            inference_delay_steps=int(request.rtc.inference_delay) if rtc_applied else 0,
        )

    def run(
        self, frame: ObservationFrame, processors: SessionProcessors, task: str, rtc: bool
    ) -> InferenceResult:
        """One request alone: prepare, a forward pass of one, finish."""
        request = self.prepare(frame, processors, task, rtc)
        actions, inference_s = self.infer([request])
        return self.finish(request, actions, inference_s)


@contextlib.contextmanager
def _seeded(seed: int | None, device: str):
    """The global RNG seeded with ``seed`` for one forward (only the forward thread draws from it),
    restored after."""
    if seed is None:
        yield
        return
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def batch_key(request: PreparedRequest) -> tuple:
    """Requests with equal keys can be stacked into one forward pass (same tensor shapes and
    dtypes:
    e.g. SmolVLA's task tokens have the task's length). An input that is neither a tensor nor a
    list
    is one value for the whole pass (``_stack`` keeps it once), so it must be equal too: a request
    never runs with another's."""
    return tuple(
        (key, tuple(value.shape), value.dtype)
        if isinstance(value, torch.Tensor)
        else (key, repr(value))
        for key, value in sorted(request.batch.items())
        if not isinstance(value, list)
    )


def _stack(batches: list[dict]) -> dict:
    """Preprocessed inputs of several requests as one batch: tensors along dim 0, lists joined."""
    if len(batches) == 1:
        return batches[0]
    stacked = dict(batches[0])
    for key, value in batches[0].items():
        if isinstance(value, torch.Tensor):
            stacked[key] = torch.cat([batch[key] for batch in batches])
        elif isinstance(value, list):
            stacked[key] = [item for batch in batches for item in batch[key]]
    return stacked
