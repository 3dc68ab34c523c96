"""Replay a capture (``capture_dir``) through a policy offline and compare the actions.

    python -m lerobot_ros.server.replay CAPTURE_DIR --checkpoint CKPT [--device cpu]
        [--noise-seed N] [--default-task TEXT]

Every captured request is rebuilt into the Observation message the robot
sent (images exactly as they arrived) and run through the same request path
the server runs, with one session per captured session; the chunk is
compared with the captured one. Use it to reproduce a robot's behaviour
offline, to check a new checkpoint, dtype or device against recorded
traffic, or to debug a rejected request. Prints a JSON summary (last line);
exit code 0 when every request replays within ``--tolerance``. Flow-matching
and diffusion policies draw noise: they replay exactly when the server ran
with ``noise_seed`` and the same seed is given here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable

import numpy as np

from lerobot_ros.protocol.wire.data_plane import observation_from_record
from lerobot_ros.server.observability.capture import read_capture
from lerobot_ros.server.requests.request_path import RequestHandler
from lerobot_ros.server.requests.scheduler import Ready
from lerobot_ros.server.sessions.registry import Session, SessionRegistry


def replay(
    runner, records: Iterable[dict], tolerance: float = 0.0, default_task: str = ""
) -> dict:
    """Run ``records`` through ``runner``'s request path; summarize how the chunks compare."""
    sessions = SessionRegistry()
    handler = RequestHandler(
        runner,
        sessions,
        publish=lambda client, chunk: None,
        audit=lambda record: None,
        load=lambda: (0, 0, 0),
    )
    compared = differing = skipped = 0
    worst = 0.0
    for record in records:
        request, response = record["request"], record["response"]
        if response["outcome"] != "ok":
            skipped += 1  # a rejected request has nothing to compare
            continue
        session = sessions.get(request["client_id"])
        if session is None or session.session_id != request["session_id"]:
            # RTC guidance happens only for requests that carry a prefix, as on the server.
            session = Session(
                request["client_id"],
                request["task"] or default_task,
                fps=0.0,
                rtc_enabled=runner.rtc_active,
                opened_at=time.monotonic(),
                session_id=request["session_id"],
            )
            session.processors = runner.new_session_processors()
            sessions.open(session)
        outcome = handler.handle(
            Ready(request["client_id"], observation_from_record(request), time.monotonic(), 0)
        )
        compared += 1
        if outcome.outcome != "ok":
            differing += 1
            continue
        difference = float(np.max(np.abs(outcome.reply.actions_robot - response["actions_robot"])))
        worst = max(worst, difference)
        differing += int(difference > tolerance)
    return {
        "compared": compared,
        "skipped_not_ok": skipped,
        "max_abs_difference": worst,
        "differing": differing,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture_dir")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--tolerance", type=float, default=1e-5, help="largest action difference counted as equal"
    )
    parser.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="the server's noise_seed, to replay sampled chunks exactly",
    )
    parser.add_argument(
        "--default-task",
        default="",
        help="the server's default_task, for robots that sent no task",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="the server's torch_threads (default: the server's default): a forward summed over "
        "another thread count can differ in the last bit",
    )
    args = parser.parse_args(argv)
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner
    from lerobot_ros.server.policy.model_threads import use_torch_threads

    use_torch_threads(args.torch_threads)

    loaded = load_policy(args.checkpoint, device=args.device, dtype=args.dtype)
    runner = PolicyRunner(
        loaded,
        rtc_enabled=True,
        rtc_execution_horizon=loaded.capabilities.rtc_execution_horizon or 10,
        noise_seed=args.noise_seed,
    )
    summary = replay(runner, read_capture(args.capture_dir), args.tolerance, args.default_task)
    summary["within_tolerance"] = summary["compared"] > 0 and summary["differing"] == 0
    print(json.dumps(summary), flush=True)
    return 0 if summary["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
