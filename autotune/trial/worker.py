"""The trial subprocess: ``python -m autotune.trial.worker REQUEST.json RESULT.json``.

It builds the pipeline, applies the knobs, measures training and writes a TrialResult.
An exception becomes a failed result; a crash or hang is diagnosed by the parent, from the Python stacks
faulthandler leaves in the trial's log. While the timed window runs, its throughput so far is appended to
PROGRESS.jsonl (if given) for the parent's pruner, and a first step's loss problem is appended there as it is found.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
import weakref
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import NoReturn

import psutil
import torch

from autotune.errors import ConfigError
from autotune.files import write_atomic
from autotune.knobs import changes_numerics, costly, redraws_random
from autotune.measure.profiler import Profiler, prepared_ahead
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.inspect import read_facts
from autotune.pipeline.setup import (
    ScaleReading,
    Trainer,
    WorkerKilledError,
    loss_problem,
    skipped_problem,
    skipped_steps,
)
from autotune.pipeline.streams import epoch_steps
from autotune.trial.exceptions import exception_text, is_out_of_memory, worker_bus_error
from autotune.trial.placement import pin_from_env
from autotune.trial.plain import run_plain
from autotune.trial.probe import run_probe
from autotune.trial.profiling import run_profile
from autotune.trial.reaper import TRIAL_TOKEN_ENV, kill_marked
from autotune.trial.result import (
    LAUNCHED_AT_ENV,
    TUNER_PID_ENV,
    Failure,
    FailureKind,
    LossCheck,
    TrialRequest,
    TrialResult,
)

# Every trial starts from the same initial weights, and the first step's loss is compared under this seed.
_SEED = 0
_PROGRESS_INTERVAL_S = 0.5
# Progress is reported from half the minimum window on (at least 1 s): earlier readings are too few and, with large
# batches and workers, still catching up.
_PROGRESS_AFTER_S = 1.0


def measure_training(request: TrialRequest, progress_path: Path | None = None) -> TrialResult:
    """Build, apply knobs, train and measure; raises whatever the pipeline raises.

    A loss that is not finite, a first-step loss too far from fp32 (``_first_step``), or a window whose fp16 loss
    scaler skipped most optimizer steps (``_skipped_steps``) does not stop the measurement: the result keeps it and
    is marked INCORRECT, so the study records the configuration as infeasible with its reason and its real speed.
    The first step's problem is also appended to ``progress_path`` at once (``_report_loss_problem``).
    """
    device = training_device(request.device)
    torch.manual_seed(_SEED)
    build_start = time.perf_counter()
    trainer = Trainer(build_pipeline(request.pipeline), request.knobs, device, request.effective_batch_size)
    build_s = time.perf_counter() - build_start
    compiling = costly(request.knobs)
    report = _progress_writer(progress_path, max(_PROGRESS_AFTER_S, request.plan.min_time_s / 2), compiling)
    problem, check, start = None, None, None
    loader = trainer.loader()
    batches = trainer.batches(loader)
    # Every batch is full (drop_last): its samples are the batch size, not a size read from its shape, which a
    # collate function may lay out in any way (a tuple of images, a list of sequences, a flattened pack).
    samples = request.knobs["batch_size"]
    try:
        # An epoch's start stalls the loop only where workers load its batches; without them it starts at once.
        epoch_length = epoch_steps(loader) if loader.num_workers else None
        plan = replace(request.plan, step_multiple=trainer.accumulation_steps, epoch_steps=epoch_length)
        with Profiler("trial", device, plan, request.memory_interval_s, compiling) as prof:
            for index, batch in enumerate(prof.wrap(batches, prepared_ahead(loader))):
                batch = trainer.to_device(batch)
                prof.transferred()
                if index == 0:  # warm-up steps, never timed
                    loss, check = _first_step(trainer, batch, request)
                    problem = loss_problem(check.first_loss, check.fp32_loss, request.loss_tolerance, check.fp32_spread)
                    if problem:
                        _report_loss_problem(progress_path, problem, check)
                else:
                    loss = trainer.train_step(batch)
                if prof.recorder.before_window:  # the last untimed step's reading is the window's start
                    start = trainer.scale_reading()
                prof.step(samples)
                report(prof)
                if prof.done:
                    break
            end = trainer.scale_reading()  # before the FLOP-counting step below, which steps the scaler too
            # A step of its own, eager, so after the window: run before it, such a step changed the speed of the
            # steps that followed (by the allocator's state: docs/measurement.md).
            prof.count_flops(partial(trainer.train_step, batch, eager=True), samples)
    finally:
        batches.close()
    check, scaler_problem = _skipped_steps(check, start, end, prof.recorder.trimmed_steps)
    problem = problem or loss_problem(loss.detach().item(), None, request.loss_tolerance) or scaler_problem
    failure = Failure(FailureKind.INCORRECT, problem) if problem else None
    return TrialResult(knobs=request.knobs, measurement=prof.result, failure=failure, build_s=build_s, loss_check=check)


def _first_step(trainer: Trainer, batch, request: TrialRequest) -> tuple[torch.Tensor, LossCheck]:
    """The first training step, and its loss beside the fp32 eager loss of the same weights, batch and random
    seed (computed where a knob changes the arithmetic, such as amp or compile: otherwise the step is fp32 eager
    itself; over several seeds where the loss draws random numbers and the step draws others, compiled:
    ``Trainer.reference_loss``)."""
    redrawn = redraws_random(request.knobs)
    reference = trainer.reference_loss(batch, _SEED, redrawn) if changes_numerics(request.knobs) else None
    torch.manual_seed(_SEED)
    loss = trainer.train_step(batch)
    if reference is None:
        return loss, LossCheck(loss.detach().item())
    return loss, LossCheck(loss.detach().item(), reference.loss, fp32_spread=reference.spread)


def _skipped_steps(
    check: LossCheck, start: ScaleReading | None, end: ScaleReading | None, left_out: int
) -> tuple[LossCheck, str | None]:
    """``check`` with the timed window's optimizer steps and how many of them fp16's loss scaler skipped, and the
    problem where it skipped most; ``check`` and None without a scaler. The window's first ``left_out`` steps, which
    it left out of its start once it had ended (``StepRecorder.trimmed_steps``), ran after the first read and are not
    its own.

    The scale is read at the window's edges only: on CUDA a read waits for the device, which an untimed step before
    the window may (a warm-up step does anyway, ``Profiler.step``) and a window step must not (``skipped_steps``
    counts from the two reads).
    """
    if start is None or end is None:
        return check, None
    steps, skipped = end.steps - start.steps - left_out, skipped_steps(start, end, left_out)
    return replace(check, optimizer_steps=steps, skipped_steps=skipped), skipped_problem(skipped, steps)


def training_device(name: str) -> torch.device:
    """``name`` as a torch.device, made the current CUDA device where it names one (cuda:N): CUDA events, streams
    and CUDA graphs use the current device, not the model's."""
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    return device


def _progress_writer(path: Path | None, after_s: float, compiling: bool):
    """A function that appends the window's progress to ``path``, every 0.5 s once the window is ``after_s`` old
    (with the compile time, so that a trial pruned before its end still reports it), where it holds steps the last
    point did not: a window of whole epochs is judged only at an epoch's end (``progress_to_judge``), and the tuner
    reports each point to Optuna by its steps, which takes a step once."""
    last, written = [0.0], [0]

    def report(prof: Profiler) -> None:
        # Called after every step, inside the timed window: all but this clock check runs at most every 0.5 s.
        now = time.monotonic()
        if path is None or now - last[0] < _PROGRESS_INTERVAL_S:
            return
        last[0] = now
        progress = prof.recorder.progress_to_judge(compiling)
        if progress is None or progress.elapsed_s < after_s or progress.steps == written[0]:
            return
        written[0] = progress.steps
        _append_line(
            path, {"steps": progress.steps, "throughput": progress.throughput, "compile_s": progress.compile_s}
        )

    return report


def _report_loss_problem(path: Path | None, problem: str, check: LossCheck) -> None:
    """Append the first step's loss problem and its evidence to the progress file ``path`` as soon as it is known:
    a trial the tuner prunes as slower ends before it writes its result, and must still be recorded as breaking the
    loss, not as slow (``runner._ProgressReader``)."""
    if path is not None:
        _append_line(path, {"loss_problem": problem, "loss_check": asdict(check)})


def _append_line(path: Path, point: dict) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(point) + "\n")


def probe(request: TrialRequest) -> TrialResult:
    """Run the differential probe of ``request.probe`` on the pipeline."""
    device, pipeline, build_s = _seeded_build(request)  # the build alone: the probing is accounted apart
    result = run_probe(pipeline, request.probe, device, request.effective_batch_size)
    return TrialResult(knobs=request.knobs, probe=result, build_s=build_s)


def plain(request: TrialRequest) -> TrialResult:
    """Time ``request.knobs`` with the plain loop, the harness's judge."""
    device, pipeline, build_s = _seeded_build(request)
    run = run_plain(pipeline, request.knobs, device, request.plan, request.effective_batch_size)
    return TrialResult(knobs=request.knobs, plain=run, build_s=build_s)


def _seeded_build(request: TrialRequest):
    """The device, the pipeline built under the trials' seed, and the seconds the build took."""
    device = training_device(request.device)
    torch.manual_seed(_SEED)
    started = time.perf_counter()
    pipeline = build_pipeline(request.pipeline)
    return device, pipeline, time.perf_counter() - started


def inspect(request: TrialRequest) -> TrialResult:
    """The facts of the machine's devices and of the pipeline on the device ``request.device`` resolves to
    (``read_facts``), which the tuner reads from here so that its own process runs no user code and no CUDA."""
    started = time.perf_counter()
    inspection = read_facts(request.pipeline, request.device)
    return TrialResult(knobs=request.knobs, inspection=inspection, build_s=time.perf_counter() - started)


def profile(request: TrialRequest) -> TrialResult:
    """Profile ``request.knobs`` as ``request.profile`` plans (``trial/profiling.py``): no timed window, nothing the
    tuner ranks."""
    device, pipeline, build_s = _seeded_build(request)
    found = run_profile(pipeline, request.knobs, device, request.profile, request.effective_batch_size)
    return TrialResult(knobs=request.knobs, profile=found, build_s=build_s)


def run_request(request: TrialRequest, progress_path: Path | None = None) -> TrialResult:
    """``measure`` (or ``probe``, ``plain``, ``inspect`` or ``profile``), with any exception turned into a failed
    result (traceback to stderr)."""
    try:
        if request.inspect:
            return inspect(request)
        if request.probe:
            return probe(request)
        if request.profile:
            return profile(request)
        return plain(request) if request.plain else measure_training(request, progress_path)
    except Exception as exc:
        traceback.print_exc()
        return TrialResult(knobs=request.knobs, failure=describe_exception(exc))


def describe_exception(exc: BaseException) -> Failure:
    """A typed, one-line reason for an exception; out of memory, of any allocator (``is_out_of_memory``), or a
    DataLoader worker killed as memory ran out (``_killed_worker``), is a verdict on the configuration, not a
    fault."""
    if isinstance(exc, WorkerKilledError):
        return _killed_worker(exc)
    kind = FailureKind.OUT_OF_MEMORY if is_out_of_memory(exc) else FailureKind.EXCEPTION
    return Failure(kind, exception_text(exc))


def _killed_worker(exc: WorkerKilledError) -> Failure:
    """Why a DataLoader worker was killed, by its signal: SIGKILL most likely by the kernel's out-of-memory killer,
    where more or larger batches ahead (batch size, workers, prefetch) need more memory: out of memory; SIGBUS as
    ``worker_bus_error`` says by this torch; another signal, a fault."""
    if exc.signal_name == "SIGKILL":
        return Failure(FailureKind.OUT_OF_MEMORY, f"{exc}, most likely by the kernel's out-of-memory killer")
    if exc.signal_name == "SIGBUS":
        bus_error = worker_bus_error()
        kind = FailureKind.OUT_OF_MEMORY if bus_error.out_of_memory else FailureKind.SIGNAL
        return Failure(kind, f"{exc}, {bus_error.cause}")
    return Failure(FailureKind.SIGNAL, str(exc))


def _exit_with_parent() -> None:
    """Kill this trial's process group, and the processes carrying its token (``reaper``), when the tuner that
    started it dies (e.g. ``kill -9``): the tuner, which would end them, is gone.

    The tuner's pid comes from the environment, not from this process's parent: a trial forked by the fork server
    is the server's child, and a fresh one may outlive its tuner while it still imports torch, when its parent is
    already the process that adopted it. The watch sleeps on a pidfd where Linux gives one (no wake-ups while the
    trial is measured), else checks every second.
    """
    tuner = int(os.environ.get(TUNER_PID_ENV, os.getppid()))
    token = os.environ.get(TRIAL_TOKEN_ENV)

    def end() -> None:
        if token:
            kill_marked(token)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    try:
        tuner_fd = os.pidfd_open(tuner)
    except ProcessLookupError:
        end()
    except (AttributeError, OSError):
        tuner_fd = None

    def watch() -> None:
        if tuner_fd is not None:
            select.select([tuner_fd], [], [])
        else:
            while psutil.pid_exists(tuner):
                time.sleep(1.0)
        end()

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def _launched_at() -> float:
    """When the tuner asked for this process (``LAUNCHED_AT_ENV``), else when the OS says it started (to the
    second only: Linux counts a process's start from a boot time it gives in whole seconds)."""
    launched = os.environ.get(LAUNCHED_AT_ENV)
    return float(launched) if launched else psutil.Process().create_time()


def main(argv: list[str]) -> int:
    run_start = time.time()
    _leave_stacks_in_log()
    refused = _pinned()
    request_path, result_path, *progress = argv
    _exit_with_parent()
    request = TrialRequest.from_dict(json.loads(Path(request_path).read_text(encoding="utf-8")))
    if refused is not None:
        result = TrialResult(knobs=request.knobs, failure=refused)
    else:
        result = run_request(request, Path(progress[0]) if progress else None)
    result = replace(result, startup_s=run_start - _launched_at())
    write_atomic(result_path, json.dumps(result.to_dict()))
    return 0


def _leave_stacks_in_log() -> None:
    """Have faulthandler write Python stacks to the trial's log (stderr): the crashing thread's on a crash (SIGSEGV,
    SIGABRT), and every thread's on SIGUSR1, which the tuner sends a trial at its timeout to learn where it hung
    (``runner._where_it_hung``). SIGUSR1's is registered here, in the trial's own process however it started (forked
    by the fork server or fresh), and only where the platform has the signal; ``chain=False``: the signal's default
    action would end the process before the tuner's kill."""
    faulthandler.enable()
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


def _pinned() -> Failure | None:
    """Pin this process to its cores (``pin_from_env``), before anything else runs; where any of them is not usable
    now, the trial's failure, a PLACEMENT one (the run's, not the configuration's: the tuner stops at it), naming
    study.cpu_sets and the cores (its ConfigError's words)."""
    try:
        pin_from_env()
    except ConfigError as refused:
        return Failure(FailureKind.PLACEMENT, exception_text(refused))
    return None


# How long a trial's exit handlers may take once its result is written: one may wait for ever (a thread that never
# ends, a handler of the user's), and the tuner would then wait for the trial's timeout and lose its result.
EXIT_HANDLERS_S = 2.0


def exit_now(code: int) -> None:
    """End this trial's process once its result is written, as the interpreter ends one but for its teardown of
    modules and objects (torch's, ~0.6 s), which measures nothing: its threads are waited for and its exit handlers
    run (the user's code may clean up there: temporary directories, process pools), for EXIT_HANDLERS_S at most, but
    for torch's own teardown among them (``_skip_torch_teardown``); its output is flushed, Python's and C's. The
    tuner kills the trial's process group after it exits, its DataLoader workers included."""
    _flush()
    watchdog = threading.Timer(EXIT_HANDLERS_S, _end, args=(code,))
    watchdog.daemon = True
    watchdog.start()
    threading._shutdown()  # what the interpreter runs first at exit (no public name): threads, concurrent.futures
    _skip_torch_teardown()
    atexit._run_exitfuncs()  # then this (no public name either)
    _end(code)


def _skip_torch_teardown() -> None:
    """Leave out at exit the finalizers that unregister each ``torch.library.Library`` (~170 of them, ~50 ms of a
    trial's end): a process that ends needs no operator unregistered. Every other finalizer still runs at exit."""
    unregister = getattr(sys.modules.get("torch.library"), "_del_library", None)
    if unregister is None:
        return
    for finalizer in list(weakref.finalize._registry):  # the live finalizers (no public name)
        entry = finalizer.peek()
        if entry is not None and entry[1] is unregister:
            finalizer.atexit = False


def _end(code: int) -> None:
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    ctypes.CDLL(None).fflush(None)  # C's stdio buffers: what an extension printed


def run(argv: list[str]) -> NoReturn:
    """The trial process: ``main``, then ``exit_now`` with its exit code however it ended (a SystemExit from the
    user's code, an error of its own, its traceback in the log): the interpreter's own exit would wait on the user's
    threads and exit handlers without a limit, and the tuner for the trial's timeout."""
    code = 1
    try:
        code = main(argv)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:
        traceback.print_exc()
    finally:
        exit_now(code)


def _exit_code(code: object) -> int:
    """A SystemExit's code as the interpreter reads it: None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    run(sys.argv[1:])
