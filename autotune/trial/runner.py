"""Run a trial in a process of its own with a timeout, and turn any way it ends into a TrialResult."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psutil

from autotune.files import write_atomic
from autotune.measure.core_speed import CoreGauge
from autotune.measure.hotspots import is_installed_package, is_own_code, shown_path
from autotune.measure.memory import FORK_SERVER_ENV, MIB, MemoryBudget, ProcessTree, TreeReading, pss_estimate
from autotune.measure.system import signal_name
from autotune.trial.launch import ForkServer, FreshLauncher, Launcher, TrialProcess
from autotune.trial.log_cap import LogCap
from autotune.trial.placement import CPUS_ENV
from autotune.trial.reaper import TRIAL_TOKEN_ENV, new_token
from autotune.trial.result import (
    LAUNCHED_AT_ENV,
    TUNER_PID_ENV,
    Failure,
    FailureKind,
    LossCheck,
    TrialRequest,
    TrialResult,
)

# Set, every trial this process runs is stopped as Ctrl-C stops the main thread's (its watcher raises
# KeyboardInterrupt): trials running in other threads (study.parallel) get no signal of their own.
INTERRUPT = threading.Event()
# How often a running trial is checked against its timeout, memory budget and pruner.
_POLL_S = 0.25
# While a trial's cheap memory estimate is over the budget, a full read (PSS: milliseconds of the trial's page-table
# lock per process) confirms it, at most this often.
_FULL_READ_EVERY_S = 5.0

# What starts a trial given no launcher (the tuner's runners are given one, as measure.fork_trials says), and what
# starts the plain loop that judges the harness: a fresh interpreter, as the user's own script is, so that the judge
# shares nothing with a forked trial. The test suite forks both.
DEFAULT_LAUNCHER: Callable[[], Launcher] = FreshLauncher
JUDGE_LAUNCHER: Callable[[], Launcher] = FreshLauncher

# What autotune sets in a trial's environment for that trial alone. Found in the tuner's own environment (autotune
# run inside a trial, or in a CI job started from one), it is another run's, and a trial must not inherit it: a fresh
# trial would take a fork server it was not forked from for the one lending it pages (its memory counting an unrelated
# process's), or pin itself to cores its slot does not name.
_TRIAL_ONLY_ENV = (TUNER_PID_ENV, LAUNCHED_AT_ENV, TRIAL_TOKEN_ENV, FORK_SERVER_ENV, CPUS_ENV)

# Called with (timed steps so far, throughput so far); returns a reason to stop the trial, or None.
ProgressFn = Callable[[int, float], str | None]


def run_trial(
    request: TrialRequest,
    timeout_s: float,
    workdir: Path,
    name: str,
    budget: MemoryBudget | None = None,
    on_progress: ProgressFn | None = None,
    launcher: Launcher | None = None,
    gauge: CoreGauge | None = None,
) -> TrialResult:
    """Run ``request`` in its own process, started by ``launcher`` (by default a fresh interpreter; or forked from
    this process's fork server, ``shared_fork_server``); its output goes to ``workdir/NAME.log``. The request file
    the trial reads is private and deleted once the trial ended (``_write_private``). ``gauge`` reads the cores just
    before the process starts and just after it ended (``TrialResult.core_speed``).

    The process leads its own process group, so on timeout, interrupt, exit, its memory
    (process tree, PSS) crossing ``budget``, or ``on_progress`` giving a reason to stop
    (pruning), the whole group (its DataLoader workers included) is killed, and every process it detached from the
    group (``reaper``): nothing is left behind; at its timeout it is first asked where it hung (``_where_it_hung``). A
    result the trial wrote is its result however it then exited, unless the tuner stopped it; a trial stopped after
    its first step found the loss wrong keeps that evidence (``_ProgressReader``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    before = gauge.before() if gauge else None
    request_path = _write_private(workdir / _REQUESTS, name, json.dumps(request.to_dict(), indent=1))
    result_path = workdir / f"{name}.result.json"
    progress_path = workdir / f"{name}.progress.jsonl"
    for stale in (result_path, progress_path):
        stale.unlink(missing_ok=True)
    log_path = workdir / f"{name}.log"
    # The trial writes its progress, inside the window, only where the tuner reads it (pruning).
    argv = [str(request_path), str(result_path), *([str(progress_path)] if on_progress else [])]
    start = time.monotonic()
    try:
        proc = (launcher or DEFAULT_LAUNCHER()).start(argv, log_path, _worker_env(request))
        log = LogCap(log_path)
        try:
            progress = _ProgressReader(progress_path, on_progress) if on_progress else None
            stopped = _watch(proc, timeout_s, budget, progress, log)
            if stopped is not None and stopped.kind is FailureKind.TIMEOUT:
                stopped = _where_it_hung(proc, log_path, stopped)
        finally:
            with signals_held():
                returncode = proc.kill()
                log.check()
    finally:
        _remove_private(request_path)
    wall_s = time.monotonic() - start
    speed = gauge.after(before) if gauge else None
    if stopped is not None:
        check = progress.first_loss if progress else None
        return TrialResult(knobs=request.knobs, failure=stopped, wall_s=wall_s, core_speed=speed, loss_check=check)
    if result_path.exists():  # this run's (a stale one was deleted above), and whole (written by a rename)
        if returncode != 0:
            _note(
                log_path,
                f"the trial's process ended after it wrote its result ({_ending(returncode)}); the result is kept",
            )
        result = TrialResult.from_dict(json.loads(result_path.read_text(encoding="utf-8")))
        seen = replace(result, wall_s=wall_s, core_speed=speed)
        write_atomic(result_path, json.dumps(seen.to_dict()))  # the file in trials/ says what the tuner saw
        return seen
    if returncode is not None and -returncode in _JOB_STOP_SIGNALS:
        _await_own_stop()
    failure = _exit_failure(returncode, log_path)
    return TrialResult(knobs=request.knobs, failure=failure, wall_s=wall_s, core_speed=speed)


# Signals that stop a whole job at once (Slurm at its time limit, systemd's stop of a control group, a closed
# terminal): a trial one killed was most likely stopped with its tuner, whose own stop may come a moment after.
_JOB_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_OWN_STOP_GRACE_S = 1.0


def _await_own_stop() -> None:
    """Wait up to ``_OWN_STOP_GRACE_S`` for this tuner's own stop after a trial died of a job's stop signal: in the
    main thread the stop's handler raises while it waits, in a slot's the stop sets INTERRUPT (KeyboardInterrupt
    here). Either way the trial is then interrupted, measured again by a later run, not a fault of its
    configuration; with no stop in that time, it is the fault it looks."""
    if INTERRUPT.wait(_OWN_STOP_GRACE_S):
        raise KeyboardInterrupt


@contextlib.contextmanager
def signals_held():
    """Hold back one signal Python handles (Ctrl-C, the CLI's stop signals) until the block ends, then deliver it: a
    second Ctrl-C raised while a trial's processes are killed and reaped would leave the processes it detached
    running, and one raised while the reports are written would leave none. A second signal while one is held is
    delivered at once: a kill that never returns (a process stuck in the kernel) must not make the tuner deaf. Python
    runs handlers in the main thread only, so that is where they are held (a signal's mask would not do: the kernel
    gives the signal to another thread, whose handler still interrupts this one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in signal.valid_signals()}
    handlers = {signum: handler for signum, handler in handlers.items() if callable(handler)}
    caught: list[int] = []

    def restore() -> None:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    def hold(signum: int, frame) -> None:
        caught.append(signum)
        if len(caught) > 1:
            restore()
            signal.raise_signal(signum)

    for signum in handlers:
        signal.signal(signum, hold)
    try:
        yield
    finally:
        restore()
        if len(caught) == 1:
            signal.raise_signal(caught[0])


# The folder of a trial folder holding the requests of the trials running: only this user can open it.
_REQUESTS = ".requests"
_REQUEST_SUFFIX = ".request.json"


def _write_private(folder: Path, name: str, text: str) -> Path:
    """``text`` in a new file in ``folder``, both only this user can read: a request holds the pipeline's config,
    whose arguments may hold a credential (a dataset URL's password). Its name holds this process's pid: the
    requests of a tuner that died without deleting them (``kill -9``) are deleted here (``_remove_orphans``)."""
    while True:
        folder.mkdir(mode=0o700, exist_ok=True)
        try:
            folder.chmod(0o700)  # one left by an older run, or made under another umask
            _remove_orphans(folder)
            prefix = f"{name}.{os.getpid()}."
            fd, path = tempfile.mkstemp(prefix=prefix, suffix=_REQUEST_SUFFIX, dir=folder)  # mode 0600
        except FileNotFoundError:  # another trial's end removed the folder, then empty, in between: made again
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        return Path(path)


def _remove_orphans(folder: Path) -> None:
    """Delete the requests in ``folder`` whose tuner (the pid in their name) no longer runs."""
    for path in folder.glob(f"*{_REQUEST_SUFFIX}"):
        parts = path.name.removesuffix(_REQUEST_SUFFIX).rsplit(".", 2)
        if len(parts) == 3 and parts[1].isdigit() and not psutil.pid_exists(int(parts[1])):
            path.unlink(missing_ok=True)


def _remove_private(path: Path) -> None:
    """Delete a request, and its folder once no other request is in it."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:  # another trial's request is still there
        pass


def shared_fork_server() -> ForkServer:
    """This process's fork server, started with the first trial that uses it."""
    global _FORK_SERVER
    if _FORK_SERVER is None:
        _FORK_SERVER = ForkServer()
    return _FORK_SERVER


_FORK_SERVER: ForkServer | None = None


def end_shared_fork_server() -> None:
    """End this process's fork server, if it runs (a trial that uses it later starts it again): a server left idle
    maps the libraries a running trial maps, and so takes a share of its memory."""
    if _FORK_SERVER is not None:
        _FORK_SERVER.close()


def run_repeated(
    request: TrialRequest,
    repeats: int,
    timeout_s: float | Callable[[], float],
    workdir: Path,
    name: str,
    budget: MemoryBudget | None = None,
    on_progress: ProgressFn | None = None,
    launcher: Launcher | None = None,
    on_run: Callable[[TrialResult], None] | None = None,
    gauge: CoreGauge | None = None,
) -> TrialResult:
    """Run ``request`` in ``repeats`` processes of its own, one after another, and keep the median run; each is
    given ``timeout_s``, or where it is a function, what it says as the process starts (a tuning run's study.budget_s
    caps each by what is left then: ``TrialRunner._repeated``); ``on_run`` is told each run's own result as it ends
    (its own wall time: the tuner accounts for each process); ``gauge`` reads the cores around each (``run_trial``).

    Run-to-run variation between processes is larger than within one, so the median of a few
    processes is what makes a figure repeatable: each run after the first draws a process layout of its own
    (``Launcher.new_draw``). The kept run's ``repeat_throughputs`` lists all of them; ``wall_s`` is their total.
    The first failure ends the repeats and is the result.
    """
    runs: list[TrialResult] = []
    launcher = launcher or DEFAULT_LAUNCHER()
    for index in range(repeats):
        run_name = name if repeats == 1 else f"{name}.{index + 1}"
        if index > 0:
            launcher.new_draw()
        # Only the first run can be pruned: a pruner compares one run's progress with the best results.
        pruned_by = on_progress if index == 0 else None
        given_s = timeout_s() if callable(timeout_s) else timeout_s
        run = run_trial(request, given_s, workdir, run_name, budget, pruned_by, launcher, gauge)
        if on_run is not None:
            on_run(run)
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
    """Reads the progress lines a trial appends and asks ``on_progress`` whether to stop it; keeps the first step's
    loss problem where the trial reported one (``first_loss``: its evidence; ``loss_problem``: what is wrong)."""

    def __init__(self, path: Path, on_progress: ProgressFn) -> None:
        self.path, self.on_progress, self.offset = path, on_progress, 0
        self.first_loss: LossCheck | None = None
        self.loss_problem: str | None = None

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
            if "loss_problem" in point:
                self.first_loss, self.loss_problem = LossCheck(**point["loss_check"]), point["loss_problem"]
                continue
            reason = self.on_progress(point["steps"], point["throughput"])
            if reason and point.get("compile_s"):
                reason += f"; its compile took {point['compile_s']:.1f} s"
            if reason:
                return self._stopped(reason, point["throughput"])
        return None

    def _stopped(self, reason: str, throughput: float) -> Failure:
        """A trial stopped as slower: PRUNED, unless its first step broke the loss: then INCORRECT, as the trial's own
        result would have said (the configuration breaks the loss, whatever its speed), with why it was stopped."""
        if self.loss_problem is None:
            return Failure(FailureKind.PRUNED, reason, throughput)
        return Failure(FailureKind.INCORRECT, f"{self.loss_problem}; {reason}", throughput)


def _watch(
    proc: TrialProcess,
    timeout_s: float,
    budget: MemoryBudget | None,
    progress: _ProgressReader | None = None,
    log: LogCap | None = None,
) -> Failure | None:
    """Wait for ``proc``; stop waiting at the timeout, when its tree's memory crosses the budget, or
    when the pruner says so. Meanwhile keep its log under its cap.

    Returns None when it exited by itself, else why it must be stopped.
    """
    deadline = time.monotonic() + timeout_s
    watch = _BudgetWatch(proc.pid, budget, proc.lender) if budget is not None else None
    while True:
        if INTERRUPT.is_set():
            raise KeyboardInterrupt
        if proc.exited_within(max(0.0, min(_POLL_S, deadline - time.monotonic()))):
            return None
        if time.monotonic() >= deadline:
            return Failure(FailureKind.TIMEOUT, f"timeout after {timeout_s:g} s")
        over = watch.over() if watch else None
        if over:
            return over
        pruned = progress.check() if progress else None
        if pruned:
            return pruned
        if log is not None:
            log.check()


# At its timeout a trial is asked where it is (SIGUSR1: its faulthandler writes every thread's Python stack to its log,
# ``worker._leave_stacks_in_log``) and given this long to write it, checked this often, before its group is killed: a
# stopped process, or one still importing (where SIGUSR1 ends it), writes none.
_STACKS_S = 1.0
_STACKS_POLL_S = 0.05
# faulthandler's dump: a block per thread, the newest thread first (the main thread last), its frames innermost first.
_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", re.M)
_FRAME = re.compile(r'^  File "(?P<path>.*)", line (?P<line>\d+) in (?P<function>.*)$', re.M)


def _where_it_hung(proc: TrialProcess, log_path: Path, timeout: Failure) -> Failure:
    """``timeout`` with where the trial was as it ran out of time (``_hung_frame``), read from the stacks it writes to
    its log when sent SIGUSR1: ``timeout after 20 s, in pkg/model.py:42 forward``; ``timeout`` itself where none came
    within ``_STACKS_S`` or the platform has no SIGUSR1. Only the trial's own process is asked: its DataLoader
    workers, forked from it, would write their stacks to the same log."""
    ask = getattr(signal, "SIGUSR1", None)
    if ask is None or proc.exited_within(0):  # an ended trial's pid may be another process's
        return timeout
    start = _log_size(log_path)
    try:
        os.kill(proc.pid, ask)
    except (ProcessLookupError, PermissionError):
        return timeout
    where = _hung_frame(_stacks_written(log_path, start))
    return replace(timeout, message=f"{timeout.message}, in {where}") if where else timeout


def _log_size(log_path: Path) -> int:
    try:
        return os.stat(log_path).st_size
    except FileNotFoundError:
        return 0


def _stacks_written(log_path: Path, start: int) -> str:
    """What the trial wrote to its log from byte ``start`` on, once a stack dump is there and the log stopped growing
    (faulthandler writes it at once, from its signal handler), or after ``_STACKS_S``."""
    deadline, written = time.monotonic() + _STACKS_S, ""
    while time.monotonic() < deadline:
        time.sleep(_STACKS_POLL_S)
        last, written = written, _read_from(log_path, start)
        if written == last and _THREAD_HEADER.search(written):
            break
    return written


def _read_from(log_path: Path, start: int) -> str:
    try:
        with open(log_path, "rb") as log:
            log.seek(start)
            return log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _hung_frame(stacks: str) -> str | None:
    """Where faulthandler's dump ``stacks`` shows the main thread (listed last): its innermost frame in the user's code
    (``hotspots.is_own_code``), else in an installed package's (torch's DataLoader waiting on its workers says more
    than the standard library's select it waits in), else its innermost frame, as ``path:line function``; None where
    no frame shows."""
    blocks = _THREAD_HEADER.split(stacks)
    frames = [found.groupdict() for found in _FRAME.finditer(blocks[-1])] if len(blocks) > 1 else []
    if not frames:
        return None
    packaged = (each for each in frames if is_installed_package(each["path"]))
    frame = next((each for each in frames if is_own_code(each["path"])), next(packaged, frames[0]))
    return f"{shown_path(frame['path'])}:{frame['line']} {frame['function']}"


class _BudgetWatch:
    """A trial's host process tree against ``budget`` (its MiB and the key that set it), without slowing the trial.

    Only the host tree can be read from outside a running trial (a GPU's memory is judged on the trial's result:
    ``StudySettings.watched_budget``). Every poll reads the tree cheaply (RSS); RSS counts pages shared with forked
    workers in each of them, so where it is over the budget a full read (PSS, shared pages counted once) decides, and
    its shared excess corrects the cheap reads after it. Full reads run at most every ``_FULL_READ_EVERY_S``.
    """

    def __init__(self, pid: int, budget: MemoryBudget, lender: int | None = None) -> None:
        self.tree = ProcessTree(pid, time.monotonic, lender)
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
        # Rounded up: a reading a fraction over the budget must not print as the budget itself.
        message = f"used {math.ceil(used / MIB)} MiB, over {self.key}={self.budget_mb:g}; stopped"
        return Failure(FailureKind.OUT_OF_MEMORY, message)


def _exit_failure(returncode: int | None, log_path: Path) -> Failure:
    """Why a trial that ended by itself left no result: its exit code or signal, and its log's telling line."""
    last_line = _last_line(log_path)
    detail = f" ({last_line})" if last_line else ""
    if returncode == -signal.SIGKILL:  # autotune's own kills are reported before; this one came from outside
        return Failure(
            FailureKind.OUT_OF_MEMORY,
            f"killed by SIGKILL, not by autotune: most likely the kernel's OOM killer{detail}",
        )
    if returncode is not None and returncode < 0:
        return Failure(FailureKind.SIGNAL, f"{_ending(returncode)}{detail}")
    without = "" if returncode is None else " without a result"
    return Failure(FailureKind.NO_RESULT, f"{_ending(returncode)}{without}{detail}")


def _ending(returncode: int | None) -> str:
    """How a trial's process ended, by its exit code as ``Popen.returncode`` (None: unknown)."""
    if returncode is None:
        return "its fork server ended before it, without its exit code"
    if returncode < 0:
        return f"killed by {signal_name(-returncode)}"
    return f"exited with code {returncode}"


def _note(log_path: Path, text: str) -> None:
    """A line of autotune's at the end of a trial's log, where its reader looks for how the trial ended."""
    with contextlib.suppress(OSError):
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n[autotune: {text}]\n")


def _last_line(log_path: Path) -> str:
    """The line of a crashed trial's log that best says what happened: faulthandler's, else the last."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    fatal = [line for line in lines if line.startswith("Fatal Python error")]
    return (fatal or lines or [""])[-1].strip()[:300]


def _worker_env(request: TrialRequest) -> dict[str, str]:
    """The tuner's environment less what another run set for its trial alone (``_TRIAL_ONLY_ENV``), with the current
    directory importable as it is for the tuner, the tuner's pid (the trial exits if the tuner dies), the time it is
    launched (its start-up time is read from it), a token of its own (what it starts ends with it), its placement (its
    GPU or cores) and torch.compile's caches where the request says."""
    env = {name: value for name, value in os.environ.items() if name not in _TRIAL_ONLY_ENV}
    paths = [os.getcwd(), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env[TUNER_PID_ENV] = str(os.getpid())
    env[LAUNCHED_AT_ENV] = repr(time.time())
    env[TRIAL_TOKEN_ENV] = new_token()
    env.update(request.placement)
    if request.compile_cache_dir:
        cache = Path(request.compile_cache_dir).resolve()
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TRITON_CACHE_DIR"] = str(cache / "triton")
    return env
