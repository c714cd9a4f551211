"""The trial subprocess: ``python -m autotune.trial.worker REQUEST.json RESULT.json``.

It builds the pipeline, applies the knobs, measures training and writes a TrialResult.
An exception becomes a failed result; a crash or hang is diagnosed by the parent.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace
from functools import partial
from pathlib import Path

import psutil
import torch

from autotune.files import write_atomic
from autotune.measure.profiler import Profiler, batch_len
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.setup import Trainer, WorkerKilledError
from autotune.trial.result import Failure, FailureKind, TrialRequest, TrialResult

_MESSAGE_LIMIT = 500


def measure(request: TrialRequest) -> TrialResult:
    """Build, apply knobs, train and measure; raises whatever the pipeline raises."""
    device = torch.device(request.device)
    build_start = time.perf_counter()
    trainer = Trainer(build_pipeline(request.pipeline), request.knobs, device)
    build_s = time.perf_counter() - build_start
    compiling = request.knobs["compile"] != "off"
    batches = trainer.batches()
    try:
        with Profiler("trial", device, request.plan, request.memory_interval_s, compiling) as prof:
            for index, batch in enumerate(prof.wrap(batches)):
                batch = trainer.to_device(batch)
                prof.transferred()
                if index == 0:  # a warm-up step, never timed
                    prof.count_flops(partial(trainer.train_step, batch, eager=True), batch_len(batch))
                trainer.train_step(batch)
                prof.step(batch_len(batch))
                if prof.done:
                    break
    finally:
        batches.close()
    return TrialResult(knobs=request.knobs, measurement=prof.result, build_s=build_s)


def run_request(request: TrialRequest) -> TrialResult:
    """``measure``, with any exception turned into a failed result (traceback to stderr)."""
    try:
        return measure(request)
    except Exception as exc:
        traceback.print_exc()
        return TrialResult(knobs=request.knobs, failure=describe_exception(exc))


def describe_exception(exc: BaseException) -> Failure:
    """A typed, one-line reason for an exception; out-of-memory errors are recognised."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback" in str(exc):
        # Errors re-raised from DataLoader workers carry a traceback: keep the first and last lines.
        lines = [lines[0].rstrip("."), lines[-1]]
    if isinstance(exc, WorkerKilledError) and exc.signal_name == "SIGKILL":
        return Failure(FailureKind.OUT_OF_MEMORY, f"{exc}, most likely by the kernel's out-of-memory killer")
    if isinstance(exc, WorkerKilledError):
        return Failure(FailureKind.SIGNAL, str(exc))
    text = f"{type(exc).__name__}: {': '.join(lines)}"[:_MESSAGE_LIMIT]
    out_of_memory = isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(exc).lower()
    return Failure(FailureKind.OUT_OF_MEMORY if out_of_memory else FailureKind.EXCEPTION, text)


def _exit_with_parent() -> None:
    """Kill this trial's process group if the tuner that started it dies (e.g. ``kill -9``)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    run_start = time.time()
    faulthandler.enable()  # a crash (SIGSEGV, SIGABRT) leaves the Python stack in the trial log
    request_path, result_path = argv
    _exit_with_parent()
    request = TrialRequest.from_dict(json.loads(Path(request_path).read_text(encoding="utf-8")))
    result = replace(run_request(request), startup_s=run_start - psutil.Process().create_time())
    write_atomic(result_path, json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
