"""A process the user's code detaches from its trial (a new session, a double fork, a wiped environment) ends with the
trial, however the trial ends; nothing else is touched: the fork server, an unrelated child of the tuner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace

import psutil
import pytest

from autotune.trial import runner
from autotune.trial.launch import FreshLauncher
from autotune.trial.result import FailureKind, TrialRequest
from autotune.trial.runner import run_trial
from tests.conftest import REPO, trial_request
from tests.fixtures.detached import VARIANTS


@pytest.fixture
def tag():
    """A word in the detached process's command line; a process left behind by a failing test is killed."""
    word = f"autotune-detached-{uuid.uuid4().hex}"
    yield word
    for proc in psutil.process_iter(["cmdline"]):
        if word in (proc.info["cmdline"] or []):
            proc.kill()


def detaching(variant: str, tag: str, pid_file, hang: bool, model: str = "tiny.TinyCNN") -> TrialRequest:
    req = trial_request(model)
    dataset = {
        "_target_": "tests.fixtures.detached.DetachingImages",
        **dict(variant=variant, tag=tag, pid_file=str(pid_file), hang=hang),
    }
    pipeline = type(req.pipeline)(req.pipeline.name, {**req.pipeline.components, "dataset": dataset})
    return TrialRequest(pipeline, req.knobs, "cpu", req.plan, 0.1)


def alive(pid: int, tag: str) -> bool:
    try:
        proc = psutil.Process(pid)
        return tag in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def timed_from_detaching(monkeypatch, pid_file) -> None:
    """The trial's timeout counted from when its dataset has detached its process, not from its launch: a slow
    host's start and imports under the suite's load (over 10 s seen) must not end it before that."""
    watch = runner._watch

    def watched(proc, timeout_s, *args, **kwargs):
        deadline = time.monotonic() + 120
        while not pid_file.exists() and not proc.exited_within(0.05) and time.monotonic() < deadline:
            pass
        return watch(proc, timeout_s, *args, **kwargs)

    monkeypatch.setattr(runner, "_watch", watched)


def run_detaching(variant, ending, launcher, tmp_path, tag, timeout_s, monkeypatch) -> None:
    """A trial whose dataset detaches a process, ended as ``ending`` says (a hanging one by a timeout of
    ``timeout_s``, counted from its detaching); the process ran, and is gone after."""
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        pid_file = tmp_path / "detached.pid"
        if ending == "timeout":
            timed_from_detaching(monkeypatch, pid_file)
        req = detaching(variant, tag, pid_file, hang=ending == "timeout")
        # One that exits has the time a slow host's fresh process under the suite's load needs (over 10 s seen)
        result = run_trial(req, timeout_s if ending == "timeout" else 120, tmp_path, "t", launcher=launcher)
        if ending == "timeout":
            assert result.failure.kind is FailureKind.TIMEOUT, result.failure
        else:
            assert result.ok, result.failure
        assert pid_file.exists(), "the dataset started its detached process"
        assert not alive(int(pid_file.read_text()), tag), "the detached process ended with its trial"
        assert unrelated.poll() is None, "an unrelated child of the tuner lives on"
    finally:
        unrelated.kill()
    assert unrelated.wait(timeout=10) == -signal.SIGKILL, "and its Popen still reads its exit (it was not reaped)"


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["exits", "timeout"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_detached_process_ends_with_its_forked_trial(variant, ending, server, tmp_path, tag, monkeypatch):
    assert run_trial(trial_request(), 120, tmp_path, "starts-the-server", launcher=server).ok
    server_pid = server._server.pid
    run_detaching(variant, ending, server, tmp_path, tag, 4, monkeypatch)
    assert server._server.poll() is None and server._server.pid == server_pid, "the fork server lives on"


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "ending"), [("double_fork_no_env", "exits"), ("new_session", "timeout")])
def test_a_detached_process_ends_with_its_fresh_trial(variant, ending, tmp_path, tag, monkeypatch):
    run_detaching(variant, ending, FreshLauncher(), tmp_path, tag, 10, monkeypatch)


@pytest.mark.slow
def test_trials_at_once_end_only_their_own_processes(tmp_path, tag):
    """Trials at once (study.parallel): the first to end kills neither a trial started after it nor that trial's
    detached process, which carries no token (its environment wiped) and so waits for the last trial to end."""
    waiting = trial_request(model="tiny.StepBoundCNN")  # long windows that wait rather than hold the suite's cores
    plan, results = waiting.plan, {}
    short = replace(waiting, plan=replace(plan, min_time_s=3, max_time_s=4))
    pid_file = tmp_path / "detached.pid"
    long = detaching("double_fork_no_env", tag, pid_file, hang=False, model="tiny.StepBoundCNN")
    long = replace(long, plan=replace(plan, min_time_s=9, max_time_s=10))

    def run(name, req) -> None:
        results[name] = run_trial(req, 120, tmp_path, name, launcher=FreshLauncher())

    first = threading.Thread(target=run, args=("short", short))
    first.start()
    while not (tmp_path / "short.log").exists():
        time.sleep(0.01)
    second = threading.Thread(target=run, args=("long", long))
    second.start()
    first.join()
    assert results["short"].ok, results["short"].failure
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the long trial never started its detached process"
        time.sleep(0.1)
    assert second.is_alive() and alive(int(pid_file.read_text()), tag), "the long trial and its process run on"
    second.join()
    assert results["long"].ok, results["long"].failure
    assert not alive(int(pid_file.read_text()), tag), "its process ended with the last trial"


TUNER = """
import sys
from pathlib import Path
from autotune.trial.launch import FreshLauncher
from autotune.trial.runner import run_trial
from tests.trial.test_detached import detaching
tag, where = sys.argv[1], Path(sys.argv[2])
run_trial(detaching("new_session", tag, where / "detached.pid", hang=True), 600, where, "t", launcher=FreshLauncher())
"""


@pytest.mark.slow
def test_a_detached_process_ends_with_its_trial_when_the_tuner_is_killed(tmp_path, tag):
    """The tuner is gone (kill -9), so the trial, which kills its group then, ends the processes carrying its token."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    tuner = subprocess.Popen([sys.executable, "-c", TUNER, tag, str(tmp_path)], cwd=REPO, env=env)
    pid_file, deadline = tmp_path / "detached.pid", time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and tuner.poll() is None, "the trial never started its detached process"
        time.sleep(0.1)
    tuner.kill()
    tuner.wait()
    pid, deadline = int(pid_file.read_text()), time.monotonic() + 10
    while alive(pid, tag):
        assert time.monotonic() < deadline, "the detached process outlived its trial and its tuner"
        time.sleep(0.1)
