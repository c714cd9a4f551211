"""Trials in real subprocesses: a measurement, an exception, a crash and a hang, each reported."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from autotune.measure.core_speed import CoreGauge, CoreSpeed
from autotune.measure.memory import FORK_SERVER_ENV, MemoryBudget, fork_server_of
from autotune.trial import runner
from autotune.trial.launch import FreshLauncher, _FreshProcess, open_log
from autotune.trial.placement import CPUS_ENV
from autotune.trial.result import TUNER_PID_ENV, FailureKind, TrialRequest, TrialResult
from autotune.trial.runner import _ProgressReader, _worker_env, _write_private, run_repeated, run_trial
from tests.conftest import fake_measurement, processes_mentioning, trial_request


def request(model="TinyCNN", dataset="TinyImages", **knobs) -> TrialRequest:
    """``model`` and ``dataset``: classes of tests/fixtures/tiny.py, or ``module.Class`` of another module there."""
    return trial_request(*(name if "." in name else f"tiny.{name}" for name in (model, dataset)), **knobs)


def test_a_good_trial_reports_a_measurement(tmp_path):
    result = run_trial(request(num_workers=1), 120, tmp_path, "good")
    assert result.ok, result.failure
    timing, memory = result.timing, result.measurement.memory
    assert timing.steps >= 3 and timing.samples == 16 * timing.steps
    assert timing.throughput == pytest.approx(timing.samples / timing.window_s)
    assert 0 <= timing.data_stall_fraction <= 1
    assert memory.peak_mb > 50 and memory.metric in ("pss", "rss")
    assert memory.cuda_peak_allocated_mb is None
    assert result.measurement.compute.flops_per_sample > 0
    assert result.measurement.environment["torch"].startswith("2.")
    assert result.measurement.system.gpu_note == "NVML not read: the pipeline runs on cpu"
    assert result.wall_s > timing.window_s
    assert TrialResult.from_dict(result.to_dict()) == result
    stored = json.loads((tmp_path / "good.result.json").read_text())
    assert TrialResult.from_dict(stored) == result, "the file in trials/ holds the wall time the tuner saw"


@pytest.mark.parametrize("model", ["TinyCNN", "AbortOnChannelsLast"], ids=["measured", "crashed"])
def test_a_gauge_reads_the_cores_before_the_trials_process_starts_and_after_it_ended(tmp_path, model):
    seen = []
    before = set(psutil.Process().children(recursive=True))  # a fork server of earlier tests, say

    def read(cores):
        trials = set(psutil.Process().children(recursive=True)) - before  # the fresh trial's process, until reaped
        seen.append((bool(trials), (tmp_path / "gauged.result.json").exists()))
        return [7.0 if len(seen) <= 3 else 9.8]

    gauge = CoreGauge((0,), read)
    gauge.after(gauge.before())  # an earlier run, read at two moments: the usual speed is known from this run on
    gauged = request(model, channels_last=True)
    result = run_trial(gauged, 120, tmp_path, "gauged", launcher=FreshLauncher(), gauge=gauge)
    assert seen[2:] == [(False, False), (False, model == "TinyCNN")], "no process of the trial's there"
    assert result.core_speed == CoreSpeed([0], [7.0], [9.8], [7.0], 4) and result.ok == (model == "TinyCNN")
    assert result.disturbed == result.ok, "a slow reading disturbs a run with figures, not a failed one"


def test_an_exception_in_the_dataset_is_a_failure_with_its_message(tmp_path):
    result = run_trial(request(dataset="WorkerHatingImages", num_workers=1), 120, tmp_path, "raises")
    assert result.failure.kind is FailureKind.EXCEPTION
    assert "this dataset refuses to load in a worker" in result.failure.message
    assert "Traceback" in (tmp_path / "raises.log").read_text(), "the full traceback is kept in the trial log"


def test_a_process_crash_is_reported_with_its_signal(tmp_path):
    result = run_trial(request(model="AbortOnChannelsLast", channels_last=True), 120, tmp_path, "aborts")
    assert result.failure.kind is FailureKind.SIGNAL
    assert "SIGABRT" in result.failure.message


@pytest.mark.slow
def test_a_hang_is_killed_at_the_timeout_with_its_workers(tmp_path):
    result = run_trial(request(dataset="HangingImages", num_workers=2), 8, tmp_path, "hangs")
    assert result.failure.kind is FailureKind.TIMEOUT
    # Its main thread waits for the workers' batches, in no frame of the user's code: its innermost frame is named.
    assert result.failure.message.startswith("timeout after 8 s, in ")
    # Killed at the timeout, not at the end of the hang (an hour): the wall time also holds the fork server's start
    # where this is a worker's first trial, seconds, tens of them on a loaded host.
    assert 8 <= result.wall_s < 60
    assert processes_mentioning(str(tmp_path / "hangs.log")) == [], "no orphaned worker survives"


def test_an_unimportable_target_fails_the_trial_not_the_runner(tmp_path):
    req = request()
    broken = {**req.pipeline.components, "model": {"_target_": "tests.fixtures.tiny.NoSuchModel"}}
    req = TrialRequest(type(req.pipeline)(req.pipeline.name, broken), req.knobs, "cpu", req.plan, 0.1)
    result = run_trial(req, 120, tmp_path, "broken")
    assert result.failure.kind is FailureKind.EXCEPTION
    assert result.failure.message.startswith("pipeline.model: building tests.fixtures.tiny.NoSuchModel failed")


@pytest.mark.slow
def test_repeats_keep_the_median_run(tmp_path):
    result = run_repeated(request(), 3, 120, tmp_path, "repeated")
    assert result.ok and len(result.repeat_throughputs) == 3
    assert result.timing.throughput == sorted(result.repeat_throughputs)[1]
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"repeated.{i}.log" for i in (1, 2, 3)]
    assert result.wall_s > 3 * result.timing.window_s


def test_a_failing_repeat_ends_the_repeats(tmp_path):
    result = run_repeated(request(model="AbortOnChannelsLast", channels_last=True), 3, 120, tmp_path, "crash")
    assert result.failure.kind is FailureKind.SIGNAL
    assert [p.name for p in tmp_path.glob("*.log")] == ["crash.1.log"]


def test_a_trial_over_the_memory_budget_is_stopped_as_out_of_memory(tmp_path):
    long_window = replace(request().plan, min_time_s=30.0, max_time_s=60.0)
    hog = replace(request(model="faults.MemoryHogCNN"), plan=long_window)
    result = run_trial(hog, 120, tmp_path, "hog", MemoryBudget("study.memory_budget_mb", 600))
    assert result.failure.kind is FailureKind.OUT_OF_MEMORY
    assert "over study.memory_budget_mb=600; stopped" in result.failure.message
    used = float(result.failure.message.split()[1])
    assert 600 < used < 1000, "stopped soon after crossing the budget"
    assert processes_mentioning(str(tmp_path / "hog.log")) == []


def test_a_sigkill_from_outside_is_reported_as_out_of_memory(tmp_path):
    result = run_trial(request(model="faults.SelfKillingCNN"), 120, tmp_path, "killed")
    assert result.failure.kind is FailureKind.OUT_OF_MEMORY
    assert result.failure.message.startswith("killed by SIGKILL, not by autotune: most likely the kernel's OOM killer")


def test_a_loss_that_is_not_finite_is_infeasible_and_keeps_its_measurement(tmp_path):
    result = run_trial(request(model="faults.NanCNN"), 120, tmp_path, "nan")
    assert result.failure.kind is FailureKind.INCORRECT and "not a finite number" in result.failure.message
    assert result.measurement is not None and result.timing.throughput > 0
    assert result.loss_check.fp32_loss is None, "an fp32 eager step is its own reference"


def test_bf16_autocast_passes_the_first_step_loss_check(tmp_path):
    result = run_trial(request(amp="bf16"), 120, tmp_path, "bf16")
    assert result.ok, result.failure
    check = result.loss_check
    assert check.fp32_loss is not None and abs(check.first_loss - check.fp32_loss) <= 0.1 * abs(check.fp32_loss)
    assert check.fp32_spread is None, "TinyCNN's loss draws no random numbers: one fp32 step is its reference"
    assert TrialResult.from_dict(result.to_dict()).loss_check == check, "the evidence is kept in the study"


@pytest.mark.slow
def test_a_compiled_step_of_a_loss_that_draws_random_numbers_is_held_to_their_range(tmp_path):
    # The compiled step draws other numbers than the eager one of the same seed: 18 % apart here, within the range.
    result = run_trial(request(model="NoisyCNN", compile="default"), 300, tmp_path, "noisy")
    assert result.ok, result.failure
    check = result.loss_check
    assert check.fp32_spread > 0.1 * check.fp32_loss
    assert abs(check.first_loss - check.fp32_loss) <= 0.05 * check.fp32_loss + check.fp32_spread
    assert TrialResult.from_dict(result.to_dict()).loss_check == check


@pytest.mark.parametrize("model", ["TinyCNN", "NoisyCNN"])
def test_an_impossible_loss_tolerance_makes_amp_infeasible(tmp_path, model):
    # NoisyCNN's loss draws random numbers; eager bf16 draws the same as fp32 of its seed: no spread is allowed it.
    strict = replace(request(model=model, amp="bf16"), loss_tolerance=1e-12)
    result = run_trial(strict, 120, tmp_path, "strict")
    assert result.failure.kind is FailureKind.INCORRECT
    assert "differs from the fp32 eager loss" in result.failure.message
    assert "loss_tolerance=1e-12" in result.failure.message
    assert result.loss_check.fp32_spread is None and "random numbers" not in result.failure.message


@pytest.mark.slow
def test_progress_is_reported_and_a_pruner_stops_the_trial(tmp_path, server):
    # progress is reported from half the minimum window on: from 4 s of this 8 s window
    slow = replace(request(model="faults.SlowCNN"), plan=replace(request().plan, min_time_s=8, max_time_s=12))
    seen = []

    def prune_on_second_report(steps, throughput):
        seen.append((steps, throughput))
        return "clearly slower" if len(seen) >= 2 else None

    result = run_trial(slow, 120, tmp_path, "pruned", on_progress=prune_on_second_report, launcher=server)
    assert result.failure.kind is FailureKind.PRUNED and result.failure.message == "clearly slower"
    assert len(seen) == 2 and seen[1][0] > seen[0][0] > 0 and all(t > 0 for _, t in seen)
    steps, throughput = seen[1]
    assert steps * slow.knobs["batch_size"] / throughput < 8, "stopped at a reading before its 8 s window ended"
    assert not processes_mentioning(str(tmp_path / "pruned.log"))


@pytest.mark.slow
def test_a_trial_whose_progress_nobody_reads_writes_none_in_its_window(tmp_path, server):
    # Progress is written from 1 s of a window on, every 0.5 s: this 3 s window would write some.
    timed = replace(request(model="faults.SlowCNN"), plan=replace(request().plan, min_time_s=3, max_time_s=6))
    result = run_trial(timed, 120, tmp_path, "unread", launcher=server)
    assert result.ok and result.timing.window_s >= 3, result.failure
    assert not (tmp_path / "unread.progress.jsonl").exists()


def test_a_pruned_compile_trial_reports_its_compile_time(tmp_path):
    points = [{"steps": 5, "throughput": 10.0, "compile_s": 12.34}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(point) + "\n" for point in points))
    failure = _ProgressReader(tmp_path / "p.jsonl", lambda steps, throughput: "clearly slower").check()
    assert failure.kind is FailureKind.PRUNED and failure.message == "clearly slower; its compile took 12.3 s"
    assert failure.reading == 10.0, "the running reading it was stopped at, for the pictures"


def test_a_trial_inherits_none_of_the_variables_another_run_set_for_its_own_trial(monkeypatch):
    # autotune run inside a trial, or in a CI job started from one: the tuner's environment holds that trial's.
    monkeypatch.setenv(FORK_SERVER_ENV, str(os.getppid()))  # a process that lends this trial nothing
    monkeypatch.setenv(CPUS_ENV, "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    fresh = _worker_env(request())
    assert fork_server_of(fresh) is None, "a fresh trial counts no unrelated process's pages as lent to it"
    assert CPUS_ENV not in fresh and fresh["OMP_NUM_THREADS"] == "3", "the user's own variables are kept"
    assert _worker_env(replace(request(), placement={CPUS_ENV: "1"}))[CPUS_ENV] == "1", "its slot's cores"


@pytest.mark.slow
def test_a_trial_whose_tuner_died_before_it_started_exits_at_once(tmp_path):
    dead_tuner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_tuner.wait()
    request_path = tmp_path / "orphan.request.json"
    request_path.write_text(json.dumps(request().to_dict()))
    env = {**_worker_env(request()), TUNER_PID_ENV: str(dead_tuner.pid)}
    command = [sys.executable, "-m", "autotune.trial.worker", str(request_path), str(tmp_path / "orphan.json")]
    proc = subprocess.run(command, env=env, start_new_session=True, timeout=60, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not (tmp_path / "orphan.json").exists()


@pytest.mark.slow
def test_compile_trials_share_the_study_compile_cache(tmp_path, monkeypatch):
    # In a cold cache Inductor checks each vector ISA by compiling and running a program of its own (~6 CPU-seconds
    # on a CPU with AMX, whose checks run even where the ISA is declared good): this trial vectorises nothing instead,
    # as what is tested here is where the compiled code goes. Inductor reads the switch when it is imported, so the
    # trial is a fresh interpreter: a fork server started before this test imported it without the switch.
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "0")
    assert _worker_env(request()).get("TORCHINDUCTOR_CACHE_DIR") == os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    linear = request("profiled.FirstFeatures", "profiled.InMemoryFeatures", compile="default")  # the fewest kernels
    cached = replace(linear, compile_cache_dir=str(tmp_path / "cache"))
    assert _worker_env(cached)["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    result = run_trial(cached, 300, tmp_path, "compiled", launcher=FreshLauncher())
    assert result.ok, result.failure
    assert result.timing.compile_s > 0
    assert any((tmp_path / "cache" / "inductor").rglob("*.py")), "inductor wrote its generated code there"


def test_waiting_for_a_trial_wakes_the_tuner_a_few_times_a_second_not_every_few_ms(monkeypatch):
    # Each wake-up of the tuner takes a core's time from a trial whose threads fill the cores.
    # A poll far longer than the child lives: an exit noticed only at the next poll would come ~10 s late, so the
    # bound on the lag can leave a loaded host's scheduling delays a second and still fail there.
    monkeypatch.setattr(runner, "_POLL_S", 10.0)
    waits, watcher = [], threading.get_ident()  # sleep and select are patched process-wide: count this thread's
    for module, name in ((time, "sleep"), (select, "select")):
        original = getattr(module, name)

        def counted(*args, _original=original):
            if threading.get_ident() == watcher:
                waits.append(1)
            return _original(*args)

        monkeypatch.setattr(module, name, counted)
    code = "import os, time; time.sleep(0.5); print(time.monotonic(), flush=True); os._exit(0)"
    child = _FreshProcess(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True))
    watched = time.monotonic()
    assert runner._watch(child, timeout_s=30, budget=None) is None
    noticed = time.monotonic()
    exited = float(child.proc.stdout.read())  # CLOCK_MONOTONIC: one clock for every process
    assert child.kill() == 0
    assert noticed - exited < 1.0, "the exit is noticed at once, not at the next poll"
    # Every wait but the last lasts a whole poll: however long the child took to start, no more waits than that.
    assert len(waits) <= (noticed - watched) / runner._POLL_S + 1, "one wait per poll"


def test_a_reaped_trial_process_is_not_signalled_by_its_pid_which_another_process_may_now_hold(monkeypatch):
    child = _FreshProcess(subprocess.Popen(["true"]))
    assert child.exited_within(30)  # and reaped
    signalled = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: signalled.append(pid))
    assert child.kill() == 0
    assert child.pid not in signalled


@pytest.mark.parametrize("ends", ["measured", "raises"])
def test_a_credential_in_the_pipeline_is_in_a_private_request_deleted_with_its_trial(tmp_path, ends):
    password = "s3cret-Passw0rd"
    url, seen = f"https://bob:{password}@data.example/images", str(tmp_path / "seen.json")
    dataset = {"_target_": "tests.fixtures.credentials.UrlImages", "url": url, "seen": seen, "fail": ends != "measured"}
    req = request()
    req = replace(req, pipeline=type(req.pipeline)(req.pipeline.name, {**req.pipeline.components, "dataset": dataset}))
    result = run_trial(req, 120, tmp_path / "trials", "t")
    assert result.ok if ends == "measured" else result.failure.kind is FailureKind.EXCEPTION, result.failure
    assert json.loads((tmp_path / "seen.json").read_text()) == {"file": 0o600, "folder": 0o700}, "private while read"
    assert sorted(path.name for path in (tmp_path / "trials").iterdir()) == ["t.log", "t.result.json"], "then gone"
    for path in (tmp_path / "trials").iterdir():
        assert password not in path.read_text(errors="replace"), f"{path.name} echoes the credential"


class Scripted:
    """A launcher whose trial is ``python -c CODE`` with the trial's argv (request, result, progress), in a session
    of its own: a trial's way of ending without torch's imports."""

    servers_started = 0

    def __init__(self, code: str) -> None:
        self.code = code

    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> _FreshProcess:
        log = open_log(log_path)
        try:
            command = [sys.executable, "-c", self.code, *argv]
            return _FreshProcess(subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True))
        finally:
            os.close(log)

    def new_draw(self) -> None:
        """Nothing to draw."""


def test_a_trial_killed_by_a_real_time_signal_is_a_signal_failure_not_the_studys_end(tmp_path):
    # Python names SIGRTMIN and SIGRTMAX, not the 29 signals between them, which a POSIX timer may send.
    code = "import os, signal; os.kill(os.getpid(), signal.SIGRTMIN + 1)"
    result = run_trial(request(), 60, tmp_path, "timer", launcher=Scripted(code))
    assert result.failure.kind is FailureKind.SIGNAL
    assert result.failure.message == f"killed by signal {signal.SIGRTMIN + 1} ({signal.strsignal(signal.SIGRTMIN + 1)})"


def test_a_trial_leaves_ctrl_z_to_the_kernel_which_stops_the_tuner_alone(tmp_path):
    # The trial, in a session of its own, runs on. A tuner that stopped its trials with it left them stopped for ever
    # where it was killed while stopped (kill -9; kill %1, whose SIGTERM comes before the SIGCONT).
    stops = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
    assert [signal.getsignal(signum) for signum in stops] == [signal.SIG_DFL] * 3
    run_trial(request(), 60, tmp_path, "t", launcher=Scripted("pass"))
    assert [signal.getsignal(signum) for signum in stops] == [signal.SIG_DFL] * 3


def test_a_result_written_before_the_trial_died_in_its_exit_handlers_is_kept(tmp_path):
    # A C extension's exit handler that crashes, or the user's cleanup that signals its own group: the measurement,
    # written whole, stands.
    measured = TrialResult(knobs=request().knobs, measurement=fake_measurement(123.0))
    code = f"import os, signal, sys; open(sys.argv[2], 'w').write({json.dumps(measured.to_dict())!r}); "
    result = run_trial(request(), 60, tmp_path, "t", launcher=Scripted(code + "os.killpg(0, signal.SIGTERM)"))
    assert result.ok and result.timing.throughput == 123.0, result.failure
    log = (tmp_path / "t.log").read_text()
    assert log.endswith(
        "[autotune: the trial's process ended after it wrote its result (killed by SIGTERM); the result is kept]\n"
    )
    crashed = run_trial(request(), 60, tmp_path, "t", launcher=Scripted("import os; os.abort()"))
    assert crashed.failure.kind is FailureKind.SIGNAL, "the result an earlier run of that name wrote is not its result"


def test_a_request_is_written_though_another_trials_end_removed_its_folder_meanwhile(tmp_path, monkeypatch):
    # Trials at once (study.parallel) share the folder: the last request of one removed, the folder goes with it.
    folder, mkstemp, removed = tmp_path / ".requests", tempfile.mkstemp, []

    def after_another_trials_end(**options):
        if not removed:
            removed.append(folder.rmdir())
        return mkstemp(**options)

    monkeypatch.setattr(tempfile, "mkstemp", after_another_trials_end)
    path = _write_private(folder, "t", "{}")
    assert removed and path.read_text() == "{}" and path.parent == folder


def test_the_requests_a_dead_tuner_left_are_deleted_by_the_next_trial_and_a_running_tuners_kept(tmp_path):
    folder = tmp_path / ".requests"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = _write_private(folder, "trial-2.1", "{}")  # as a tuner killed with kill -9 leaves its trial's request
    orphan = left.rename(folder / left.name.replace(f".{os.getpid()}.", f".{int(dead.stdout)}.", 1))
    running = _write_private(folder, "trial-3", "{}")  # this process's: a tuner still running
    path = _write_private(folder, "trial-4", "{}")
    assert not orphan.exists() and running.exists() and path.exists()


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raising KeyboardInterrupt in this process, as in a terminal: a process started in the background by a
    shell without job control inherits SIGINT ignored, and Python then keeps it so."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _StoppedTwice:
    """A trial whose watch a Ctrl-C ends, and whose end another Ctrl-C comes in the middle of."""

    pid, lender = 0, None

    def __init__(self) -> None:
        self.ended = False

    def exited_within(self, seconds: float) -> bool:
        raise KeyboardInterrupt

    def kill(self) -> int | None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        self.ended = True
        return None


def test_a_second_ctrl_c_while_a_trial_is_ended_is_raised_once_it_has_ended(tmp_path, monkeypatch, ctrl_c_raises):
    trial = _StoppedTwice()
    launcher = Scripted("")
    monkeypatch.setattr(launcher, "start", lambda *args: trial)
    with pytest.raises(KeyboardInterrupt):
        run_trial(request(), 60, tmp_path, "t", launcher=launcher)
    assert trial.ended, "its processes were all ended before the second Ctrl-C was raised"
    assert not (tmp_path / ".requests").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _StuckInTheKernel(_StoppedTwice):
    """A trial whose end never returns (a process in uninterruptible sleep), Ctrl-C pressed twice meanwhile."""

    def kill(self) -> int | None:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the second is delivered at once, not after the end
        self.ended = True
        return None


def test_a_third_ctrl_c_while_a_trial_is_ended_is_delivered_at_once(ctrl_c_raises):
    trial = _StuckInTheKernel()
    with pytest.raises(KeyboardInterrupt):
        with runner.signals_held():
            trial.kill()
    assert not trial.ended, "the tuner heard it before the end came"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _JobStopped(Exception):
    """The tuner's own stop, as the CLI's handler raises it (``errors.Stopped``)."""


def test_a_trial_killed_with_its_job_waits_for_the_tuners_own_stop_and_is_interrupted_not_a_fault(tmp_path):
    # Slurm at its time limit signals every process of the job: the trial may die before the tuner's handler runs.
    dies = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"

    def stop(signum, frame):
        raise _JobStopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(_JobStopped):
            run_trial(request(), 60, tmp_path, "main", launcher=Scripted(dies))
    finally:
        signal.signal(signal.SIGTERM, previous)
    threading.Timer(0.3, runner.INTERRUPT.set).start()  # a slot's trial: the stop reaches it as INTERRUPT
    try:
        with pytest.raises(KeyboardInterrupt):
            run_trial(request(), 60, tmp_path, "slot", launcher=Scripted(dies))
    finally:
        runner.INTERRUPT.clear()


def test_a_trial_killed_by_a_stop_signal_with_no_stop_of_the_tuner_after_is_the_fault_it_looks(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "_OWN_STOP_GRACE_S", 0.05)
    # Its default action first: under nohup the test's processes inherit SIGHUP ignored.
    dies = "import os, signal; signal.signal(signal.SIGHUP, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGHUP)"
    result = run_trial(request(), 60, tmp_path, "t", launcher=Scripted(dies))
    assert result.failure.kind is FailureKind.SIGNAL and result.failure.message == "killed by SIGHUP"
