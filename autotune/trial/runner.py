"""Run a trial in a fresh subprocess with a timeout, and turn any way it ends into a TrialResult."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from autotune.files import write_atomic
from autotune.measure.memory import MIB, MemoryBudget, ProcessTree, TreeReading, pss_estimate
from autotune.trial.result import TUNER_PID_ENV, Failure, FailureKind, TrialRequest, TrialResult

# How often a running trial is checked against its timeout, memory budget and pruner.
_POLL_S = 0.25
# While a trial's cheap memory estimate is over the budget, a full read (PSS: milliseconds of the trial's page-table
# lock per process) confirms it, at most this often.
_FULL_READ_EVERY_S = 5.0

# Called with (timed steps so far, throughput so far); returns a reason to stop the trial, or None.
ProgressFn = Callable[[int, float], str | None]


def run_trial(
    request: TrialRequest,
    timeout_s: float,
    workdir: Path,
    name: str,
    budget: MemoryBudget | None = None,
    on_progress: ProgressFn | None = None,
) -> TrialResult:
    """Run ``request`` in a subprocess; its output goes to ``workdir/NAME.log``.

    The subprocess leads its own process group, so on timeout, interrupt, exit, its memory
    (process tree, PSS) crossing ``budget``, or ``on_progress`` giving a reason to stop
    (pruning), the whole group (its DataLoader workers included) is killed and nothing is left behind.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    request_path = write_atomic(workdir / f"{name}.request.json", json.dumps(request.to_dict(), indent=1))
    result_path = workdir / f"{name}.result.json"
    progress_path = workdir / f"{name}.progress.jsonl"
    for stale in (result_path, progress_path):
        stale.unlink(missing_ok=True)
    log_path = workdir / f"{name}.log"
    command = [sys.executable, "-m", "autotune.trial.worker", str(request_path), str(result_path), str(progress_path)]
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=_worker_env(request)
        )
        try:
            progress = _ProgressReader(progress_path, on_progress) if on_progress else None
            returncode, stopped = _watch(proc, timeout_s, budget, progress)
        finally:
            _kill_group(proc)
    wall_s = time.monotonic() - start
    if stopped is not None:
        return TrialResult(knobs=request.knobs, failure=stopped, wall_s=wall_s)
    if result_path.exists() and returncode == 0:
        result = TrialResult.from_dict(json.loads(result_path.read_text(encoding="utf-8")))
        return result.with_wall_time(wall_s)
    return TrialResult(knobs=request.knobs, failure=_exit_failure(returncode, log_path), wall_s=wall_s)


def run_repeated(
    request: TrialRequest,
    repeats: int,
    timeout_s: float,
    workdir: Path,
    name: str,
    budget: MemoryBudget | None = None,
    on_progress: ProgressFn | None = None,
) -> TrialResult:
    """Run ``request`` in ``repeats`` fresh subprocesses, one after another, and keep the median run.

    Run-to-run variation between processes is larger than within one, so the median of a few
    processes is what makes a figure repeatable. The kept run's ``repeat_throughputs`` lists all of
    them; ``wall_s`` is their total. The first failure ends the repeats and is the result.
    """
    runs: list[TrialResult] = []
    for index in range(repeats):
        run_name = name if repeats == 1 else f"{name}.{index + 1}"
        # Only the first run can be pruned: a pruner compares one run's progress with the best results.
        run = run_trial(request, timeout_s, workdir, run_name, budget, on_progress if index == 0 else None)
        runs.append(run)
        if not run.ok:
            break
    total_s = sum(run.wall_s for run in runs)
    if not runs[-1].ok:
        return runs[-1].with_wall_time(total_s)
    by_throughput = sorted(runs, key=lambda run: run.timing.throughput)
    median = by_throughput[(len(runs) - 1) // 2]
    return replace(median, wall_s=total_s, repeat_throughputs=[run.timing.throughput for run in runs])


class _ProgressReader:
    """Reads the progress lines a trial appends and asks ``on_progress`` whether to stop it."""

    def __init__(self, path: Path, on_progress: ProgressFn) -> None:
        self.path, self.on_progress, self.offset = path, on_progress, 0

    def check(self) -> Failure | None:
        try:
            with open(self.path, encoding="utf-8") as lines:
                lines.seek(self.offset)
                new = lines.read()
        except FileNotFoundError:
            return None
        complete = new[: new.rfind("\n") + 1]  # a line still being written is read next time
        self.offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            point = json.loads(line)
            reason = self.on_progress(point["steps"], point["throughput"])
            if reason and point.get("compile_s"):
                reason += f"; its compile took {point['compile_s']:.1f} s"
            if reason:
                return Failure(FailureKind.PRUNED, reason)
        return None


def _watch(
    proc: subprocess.Popen,
    timeout_s: float,
    budget: MemoryBudget | None,
    progress: _ProgressReader | None = None,
) -> tuple[int | None, Failure | None]:
    """Wait for ``proc``; stop waiting at the timeout, when its tree's memory crosses the budget, or
    when the pruner says so.

    Returns (exit code, None) when it exited by itself, else (None, why it must be stopped).
    """
    deadline = time.monotonic() + timeout_s
    watch = _BudgetWatch(proc.pid, budget) if budget is not None else None
    with _ExitWaiter(proc) as exited:
        while True:
            if exited.within(max(0.0, min(_POLL_S, deadline - time.monotonic()))):
                return proc.wait(), None
            if time.monotonic() >= deadline:
                return None, Failure(FailureKind.TIMEOUT, f"timeout after {timeout_s:g} s")
            over = watch.over() if watch else None
            if over:
                return None, over
            pruned = progress.check() if progress else None
            if pruned:
                return None, pruned


class _ExitWaiter:
    """Waits up to a given time for a process to exit, asleep meanwhile: on a pidfd where Linux gives one, else
    in one sleep. (``Popen.wait(timeout)`` polls every few milliseconds, and on a machine whose cores the trial's
    threads fill, each wake-up of the tuner takes time from the trial it measures.)"""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        try:
            self.fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux 5.3+, or the process is already gone
            self.fd = None

    def __enter__(self) -> _ExitWaiter:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def within(self, seconds: float) -> bool:
        """Whether the process has exited, waiting up to ``seconds`` for it."""
        if self.fd is not None:
            select.select([self.fd], [], [], seconds)
        elif self.proc.poll() is None:
            time.sleep(seconds)
        return self.proc.poll() is not None


class _BudgetWatch:
    """A trial's host process tree against ``budget`` (its MB and the key that set it), without slowing the trial.

    Only the host tree can be read from outside a running trial (a GPU's memory is judged on the trial's result:
    ``StudySettings.watched_budget``). Every poll reads the tree cheaply (RSS); RSS counts pages shared with forked
    workers in each of them, so where it is over the budget a full read (PSS, shared pages counted once) decides, and
    its shared excess corrects the cheap reads after it. Full reads run at most every ``_FULL_READ_EVERY_S``.
    """

    def __init__(self, pid: int, budget: MemoryBudget) -> None:
        self.tree = ProcessTree(pid, time.monotonic)
        self.budget_mb = budget.mb
        self.key = budget.key
        self.full: list[TreeReading] = []

    def over(self) -> Failure | None:
        """The out-of-memory failure when the tree uses more than the budget; None while it does not."""
        used = pss_estimate(self.tree.read_cheap(), self.full, self.tree.root)
        if used / MIB > self.budget_mb and self.tree.metric == "pss":
            if not self.full or time.monotonic() - self.full[-1].time >= _FULL_READ_EVERY_S:
                self.full = [self.tree.read_full()]
                used = pss_estimate(self.full[0], self.full, self.tree.root)
        if used / MIB <= self.budget_mb:
            return None
        message = f"used {used / MIB:.0f} MB, over {self.key}={self.budget_mb:g}; stopped"
        return Failure(FailureKind.OUT_OF_MEMORY, message)


def _exit_failure(returncode: int, log_path: Path) -> Failure:
    last_line = _last_line(log_path)
    detail = f" ({last_line})" if last_line else ""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        if name == "SIGKILL":  # autotune's own kills are reported above; this one came from outside
            return Failure(
                FailureKind.OUT_OF_MEMORY,
                f"killed by SIGKILL, not by autotune: most likely the kernel's OOM killer{detail}",
            )
        return Failure(FailureKind.SIGNAL, f"killed by {name}{detail}")
    return Failure(FailureKind.NO_RESULT, f"exited with code {returncode} without a result{detail}")


def _last_line(log_path: Path) -> str:
    """The line of a crashed trial's log that best says what happened: faulthandler's, else the last."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    fatal = [line for line in lines if line.startswith("Fatal Python error")]
    return (fatal or lines or [""])[-1].strip()[:300]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _worker_env(request: TrialRequest) -> dict[str, str]:
    """The tuner's environment, with the current directory importable as it is for the tuner, the tuner's pid
    (the trial exits if the tuner dies), and torch.compile's caches where the request says."""
    env = dict(os.environ)
    paths = [os.getcwd(), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env[TUNER_PID_ENV] = str(os.getpid())
    if request.compile_cache_dir:
        cache = Path(request.compile_cache_dir).resolve()
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TRITON_CACHE_DIR"] = str(cache / "triton")
    return env
