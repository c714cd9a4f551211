"""Ctrl-Z stops the tuner's trials with it and fg continues them; the time stopped is not a trial's time, and a run
whose clocks counted it is run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from autotune.trial import job_control, launch, runner
from autotune.trial.result import Failure, FailureKind, TrialResult
from autotune.trial.runner import run_trial
from tests.conftest import REPO, fake_measurement
from tests.trial.test_runner import Scripted, request

# A tuner whose one trial, in a session of its own as trials are, has a child of its own (a DataLoader worker);
# it prints their pids, then, once told, the seconds it spent stopped.
TUNER = """
import subprocess, sys
from autotune.trial import job_control
job_control.install()
child = "import time; time.sleep(60)"
trial = "import subprocess, sys, time; print(subprocess.Popen([sys.executable, '-c', %r]).pid, flush=True); "
trial = subprocess.Popen(
    [sys.executable, "-c", trial % child + "time.sleep(60)"], start_new_session=True, stdout=subprocess.PIPE, text=True
)
print(trial.pid, trial.stdout.readline().strip(), flush=True)
sys.stdin.readline()
print(job_control.stopped_s(), flush=True)
"""


def eventually(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def stopped(*processes: psutil.Process) -> bool:
    return all(process.status() == psutil.STATUS_STOPPED for process in processes)


def test_ctrl_z_stops_the_tuners_trials_with_it_and_fg_continues_them():
    tuner = subprocess.Popen(
        [sys.executable, "-c", TUNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    trial, worker = (psutil.Process(int(pid)) for pid in tuner.stdout.readline().split())
    try:
        os.kill(tuner.pid, signal.SIGTSTP)  # as the terminal sends Ctrl-Z to its foreground group: the tuner alone
        assert eventually(lambda: stopped(psutil.Process(tuner.pid)))
        assert eventually(lambda: stopped(trial, worker)), "the trial and its worker stop with the tuner"
        time.sleep(0.5)
        os.kill(tuner.pid, signal.SIGCONT)  # as fg sends it
        assert eventually(lambda: not stopped(trial) and not stopped(worker)), "and go on with it"
        tuner.stdin.write("\n")
        tuner.stdin.flush()
        assert float(tuner.stdout.readline()) >= 0.5, "the time it spent stopped is counted"
    finally:
        os.killpg(trial.pid, signal.SIGKILL)
        tuner.kill()
        tuner.wait()


def stopping(seconds: float):
    """``job_control.stopped_s`` of a tuner stopped from now on for ``seconds``, then continued."""
    began = time.monotonic()
    return lambda: min(time.monotonic() - began, seconds)


class EndsAfter:
    """A trial process that exits ``seconds`` after it started, by the monotonic clock."""

    pid, lender = 0, None

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def exited_within(self, seconds: float) -> bool:
        time.sleep(max(0.0, min(seconds, self.end - time.monotonic())))
        return time.monotonic() >= self.end

    def kill(self) -> int | None:
        return 0


def test_a_trials_timeout_leaves_out_the_time_the_tuner_was_stopped(monkeypatch):
    monkeypatch.setattr(job_control, "stopped_s", stopping(0.6))
    assert runner._watch(EndsAfter(0.8), 0.5, None) is None, "0.2 s of its own time: no timeout"
    monkeypatch.setattr(job_control, "stopped_s", stopping(0.3))
    started = time.monotonic()
    assert runner._watch(EndsAfter(60), 0.5, None).kind is FailureKind.TIMEOUT
    assert time.monotonic() - started >= 0.8, "its 0.5 s of its own after the stop"


def test_a_fork_servers_reply_is_awaited_for_its_time_not_the_time_it_was_stopped_with_the_tuner(monkeypatch):
    read, write = os.pipe()
    server = SimpleNamespace(stdout=os.fdopen(read, "rb", buffering=0))
    monkeypatch.setattr(job_control, "stopped_s", stopping(0.6))
    threading.Timer(0.4, os.write, args=(write, b'{"pid": 7}\n')).start()
    try:
        assert launch._reply(server, 0.3, "pid") == 7
    finally:
        server.stdout.close()
        os.close(write)


def written(result: TrialResult) -> str:
    """A scripted trial's code that writes ``result`` as its result."""
    return f"import sys; open(sys.argv[2], 'w').write({json.dumps(result.to_dict())!r})"


@pytest.mark.parametrize(
    "result, runs",
    [
        (TrialResult(knobs=request().knobs, measurement=fake_measurement(123.0)), 2),
        (TrialResult(knobs=request().knobs, failure=Failure(FailureKind.EXCEPTION, "ValueError: x")), 1),
    ],
    ids=["measured: again", "failed: kept"],
)
def test_a_trial_the_tuner_was_stopped_in_is_run_again_where_its_clocks_read_figures(
    tmp_path, monkeypatch, capsys, result, runs
):
    stops, starts = [0.0], []
    launcher = Scripted(written(result))

    def started(*args):
        starts.append(args)
        if len(starts) == 1:
            stops[0] += 5.0  # Ctrl-Z, then fg, while the first run ran
        return Scripted.start(launcher, *args)

    monkeypatch.setattr(launcher, "start", started)
    monkeypatch.setattr(job_control, "stopped_s", lambda: stops[0])
    assert run_trial(request(), 60, tmp_path, "t", launcher=launcher).failure == result.failure
    assert len(starts) == runs
    said = "autotune: t ran while the tuner was stopped, and its clocks counted the stop: it runs again"
    assert (said in capsys.readouterr().err) == (runs == 2)


def test_every_trial_has_the_tuner_stop_it_with_itself(tmp_path, monkeypatch):
    installed = []
    monkeypatch.setattr(job_control, "install", lambda: installed.append(True))
    run_trial(request(), 60, tmp_path, "t", launcher=Scripted(""))
    assert installed
