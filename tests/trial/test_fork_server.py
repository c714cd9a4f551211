"""Trials forked from the fork server: each still its own process, as isolated and as measured as a fresh one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import psutil
import pytest
import torch

from autotune.config.load import load_settings
from autotune.runner import TrialRunner
from autotune.study.clock import RunClock
from autotune.trial import launch, reaper, worker
from autotune.trial import runner as runner_module
from autotune.trial.launch import ForkServer, FreshLauncher
from autotune.trial.result import FailureKind, TrialResult
from autotune.trial.runner import _worker_env, run_repeated, run_trial
from tests.conftest import REPO, SHIPPED_JUDGE_LAUNCHER, processes_mentioning, tiny_config
from tests.trial.test_runner import request


@pytest.mark.slow
def test_a_trial_is_forked_by_the_server_into_a_session_of_its_own(server, tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(request(dataset="HangingImages").to_dict()))
    proc = server.start(
        [str(tmp_path / "r.json"), str(tmp_path / "out.json")], tmp_path / "t.log", _worker_env(request())
    )
    try:
        deadline = time.monotonic() + 30
        while os.getpgid(proc.pid) != proc.pid:
            assert time.monotonic() < deadline, "the trial never led its own process group"
            time.sleep(0.01)
        assert psutil.Process(proc.pid).ppid() == proc.lender == server._server.pid
        assert not proc.exited_within(0.1)
    finally:
        assert proc.kill() == -9


@pytest.mark.slow
def test_a_trial_dies_with_its_server(tmp_path):
    launcher = ForkServer()  # a server of its own, killed here
    (tmp_path / "r.json").write_text(json.dumps(request(dataset="HangingImages", num_workers=1).to_dict()))
    proc = launcher.start(
        [str(tmp_path / "r.json"), str(tmp_path / "out.json")], tmp_path / "t.log", _worker_env(request())
    )
    try:
        trial = psutil.Process(proc.pid)
        os.kill(proc.lender, signal.SIGKILL)
        launcher._server.wait()
        trial.wait(timeout=10)  # raises if the trial outlives its server
    finally:
        proc.kill()
        launcher.close()


@pytest.mark.slow
def test_a_crashing_trial_takes_neither_the_server_nor_the_next_trial_down(server, tmp_path):
    crashed = run_trial(
        request(model="AbortOnChannelsLast", channels_last=True), 120, tmp_path, "aborts", launcher=server
    )
    assert crashed.failure.kind is FailureKind.SIGNAL and "SIGABRT" in crashed.failure.message
    assert "Fatal Python error: Aborted" in (tmp_path / "aborts.log").read_text(), "faulthandler wrote the stack"
    survivor = server._server.pid
    result = run_trial(request(), 120, tmp_path, "after", launcher=server)
    assert result.ok, result.failure
    assert server._server.pid == survivor, "the same server forked the next trial"


@pytest.mark.slow
def test_a_forked_trial_counts_the_pages_it_shares_with_the_server_as_its_own(server, tmp_path):
    # PSS would charge half of the pages of the server's imports to the server: a forked trial would read ~100 MiB
    # less than the same trial as a fresh process.
    peaks = {}
    for name, launcher in (("forked", server), ("fresh", FreshLauncher())):
        result = run_trial(request(), 120, tmp_path, name, launcher=launcher)
        assert result.ok, result.failure
        peaks[name] = result.measurement.memory.peak_mb
    # One peak reading per side varies by ±15 % under a busy machine; without the pages added back it read 0.73x.
    assert 0.85 * peaks["fresh"] <= peaks["forked"] <= 1.3 * peaks["fresh"], peaks


@pytest.mark.slow
def test_a_forked_trials_garbage_collector_walks_the_objects_a_fresh_ones_does(server, tmp_path):
    # A frozen object is skipped by every collection: a full one, ~0.1 s after torch's imports in the user's
    # process, would cost a forked trial and its DataLoader workers almost nothing.
    seen = {}
    for name, launcher in (("forked", server), ("fresh", FreshLauncher())):
        result = run_trial(request(model="GcReportingCNN"), 120, tmp_path, name, launcher=launcher)
        assert result.ok, result.failure
        line = next(line for line in (tmp_path / f"{name}.log").read_text().splitlines() if "frozen=" in line)
        seen[name] = dict(field.split("=") for field in line.split())
    assert seen["forked"]["frozen"] == seen["fresh"]["frozen"] == "0", seen
    assert 0.9 <= int(seen["forked"]["tracked"]) / int(seen["fresh"]["tracked"]) <= 1.1, seen


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["forked", "fresh"])
def test_a_trial_ends_without_the_interpreters_teardown_but_with_its_exit_handlers_and_its_output(
    kind, tmp_path, monkeypatch
):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # a trial's stdout, a file, then holds what it prints
    launcher = ForkServer() if kind == "forked" else FreshLauncher()
    try:
        result = run_trial(request(model="ChattyCNN"), 120, tmp_path, kind, launcher=launcher)
    finally:
        if isinstance(launcher, ForkServer):
            launcher.close()
    assert result.ok, result.failure
    log = (tmp_path / f"{kind}.log").read_text()
    assert "a ChattyCNN was built" in log and "C says hello" in log, "the buffered output was flushed"
    assert "a ChattyCNN says goodbye; its finalizer too" in log, "the exit handlers ran, the user's finalizers too"


def test_a_trial_leaves_torchs_operator_libraries_registered_at_exit_and_every_other_finalizer_to_run():
    library = torch.library.Library("autotune_exit_test", "FRAGMENT")
    users = weakref.finalize(library, print, "cleaned up")
    worker._skip_torch_teardown()
    torchs = [f for f in list(weakref.finalize._registry) if (f.peek() or (0, 0))[1] is torch.library._del_library]
    assert torchs and not any(f.atexit for f in torchs), "unregistering an operator at exit measures nothing"
    assert users.atexit
    users.detach()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["forked", "fresh"])
def test_a_trial_whose_exit_handlers_never_return_still_ends_with_its_result(kind, server, tmp_path):
    launcher = server if kind == "forked" else FreshLauncher()
    result = run_trial(request(model="ClingingCNN"), 30, tmp_path, kind, launcher=launcher)
    assert result.ok, result.failure


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["forked", "fresh"])
def test_a_trial_that_exits_in_the_users_code_ends_at_once_with_its_exit_code(kind, server, tmp_path):
    launcher = server if kind == "forked" else FreshLauncher()
    result = run_trial(request(model="ExitingCNN"), 60, tmp_path, kind, launcher=launcher)
    assert result.failure.kind is FailureKind.NO_RESULT, result.failure
    assert result.failure.message.startswith("exited with code 2 without a result"), result.failure


def test_a_trial_that_exits_with_a_message_ends_with_code_1_and_the_message_in_its_log(server, tmp_path):
    result = run_trial(request(model="ExitingWithAMessageCNN"), 60, tmp_path, "says", launcher=server)
    assert result.failure.message.startswith("exited with code 1 without a result"), result.failure
    assert "usage: train.py [--lr LR]" in (tmp_path / "says.log").read_text()


@pytest.mark.parametrize(
    "server_code",
    [
        "import sys; print(flush=True); sys.stdin.readline()",
        "import os, time; os.close(0); print(flush=True); time.sleep(60)",  # its order's pipe broken
        "import sys, time; print(flush=True); sys.stdin.readline(); time.sleep(60)",
    ],
    ids=["reads-the-order-then-dies", "stopped-reading", "stuck"],
)
def test_a_server_that_fails_its_reply_leaves_the_trial_to_a_fresh_process_and_nothing_registered(
    tmp_path, server_code, monkeypatch, capsys
):
    monkeypatch.setattr(launch, "_REPLY_S", 1.0)
    server = ForkServer()
    server._server = subprocess.Popen(
        [sys.executable, "-c", server_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    server._server.stdout = server._server.stdout.detach()
    assert server._server.stdout.readline() == b"\n", "it runs"
    running = set(reaper._RUNNING)
    argv = [str(tmp_path / "missing.json"), str(tmp_path / "out.json")]  # exits at once
    proc = server.start(argv, tmp_path / "t.log", _worker_env(request()))
    assert server._broken and proc.lender is None, "started fresh"
    assert proc.exited_within(60) and proc.kill() == 1
    assert reaper._RUNNING == running, "the failed exchange's trial left no Strays behind"
    said = capsys.readouterr().err
    assert said.startswith("autotune: the fork server failed an order (") and said.endswith(
        "; trials start as fresh processes from here on\n"
    ), said


@pytest.mark.slow
def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    script = (
        "import sys, time\n"
        "from autotune.trial.launch import ForkServer\n"
        "from autotune.trial.runner import _worker_env\n"
        "from tests.trial.test_runner import request\n"
        "server = ForkServer()\n"
        f"server.start(['{tmp_path}/none.json', '{tmp_path}/out.json'], __import__('pathlib').Path('{tmp_path}/t.log'),"
        " _worker_env(request()))\n"
        "print(server._server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    server = psutil.Process(int(owner.stdout.readline()))
    owner.kill()
    owner.wait()
    owner.stdout.close()
    server.wait(timeout=20)  # raises if the server outlives its owner


@pytest.mark.slow
def test_measure_fork_trials_false_starts_each_trial_as_a_fresh_interpreter(tmp_path):
    forked = TrialRunner(load_settings(tiny_config(), "tiny"), "cpu", tmp_path)
    fresh = TrialRunner(load_settings(tiny_config(measure={"fork_trials": False}), "tiny"), "cpu", tmp_path)
    assert isinstance(forked.launcher, ForkServer) and isinstance(fresh.launcher, FreshLauncher)
    result = fresh.check({**fresh.request.knobs}, "fresh", plain=False)
    assert result.ok, result.failure
    assert result.startup_s > 0.3, "a fresh interpreter imports torch before its first step"


@pytest.mark.slow
@pytest.mark.draws
def test_each_repeat_forks_from_a_new_server_and_the_next_trial_from_the_same(tmp_path, monkeypatch):
    # A forked trial inherits its server's memory layout: runs that must be independent draws need a server each.
    launcher, lenders = ForkServer(), []
    start = launcher.start

    def recorded(*args):
        started = start(*args)
        lenders.append(started.lender)
        return started

    monkeypatch.setattr(launcher, "start", recorded)
    try:
        assert run_repeated(request(), 2, 60, tmp_path, "repeated", launcher=launcher).ok
        assert run_trial(request(), 60, tmp_path, "next", launcher=launcher).ok
    finally:
        launcher.close()
    assert None not in lenders and lenders[0] != lenders[1] == lenders[2], lenders
    assert launcher.servers_started == 2, "each a new draw, whose start a budget counts"


def test_a_process_that_started_a_fork_server_is_counted_as_a_new_draw(tmp_path, monkeypatch):
    clock = RunClock()
    trials = TrialRunner(load_settings(tiny_config(), "tiny"), "cpu", tmp_path, clock=clock)
    monkeypatch.setattr(trials.launcher, "servers_started", trials.launcher.servers_started)  # the process's server

    def started(request, timeout_s, workdir, name, budget, launcher, gauge):  # a server's start, then a fork from it
        launcher.servers_started += name == "first"
        return TrialResult(knobs={}, startup_s=3.0 if name == "first" else 0.01)

    monkeypatch.setattr("autotune.runner.run_trial", started)
    trials.trial(trials.request, "first")
    trials.trial(trials.request, "second")
    assert clock.draw_s() == pytest.approx(2.99)


@pytest.mark.parametrize("plain", [False, True])
def test_the_plain_loop_that_judges_the_harness_starts_fresh_where_trials_are_forked(tmp_path, monkeypatch, plain):
    monkeypatch.setattr(runner_module, "JUDGE_LAUNCHER", SHIPPED_JUDGE_LAUNCHER)  # the tests' own forks it
    started = []
    monkeypatch.setattr(
        "autotune.runner.run_trial", lambda *a, launcher, **_: started.append(launcher) or TrialResult(knobs={})
    )
    trials = TrialRunner(load_settings(tiny_config(), "tiny"), "cpu", tmp_path)
    trials.check(dict(trials.request.knobs), "check", plain)
    assert type(started[0]) is (FreshLauncher if plain else ForkServer)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["forked", "fresh"])
def test_a_trial_stopped_at_its_timeout_ends_with_its_workers_at_once(kind, server, tmp_path, monkeypatch):
    # A killed leader is a zombie until reaped, and a zombie keeps its process group alive: reaped first.
    launcher = server if kind == "forked" else FreshLauncher()
    if kind == "forked":
        assert run_trial(request(), 120, tmp_path, "starts-the-server", launcher=server).ok
    watch, timed_out_at = runner_module._watch, []

    def watched(*args, **kwargs):
        stopped = watch(*args, **kwargs)
        timed_out_at.append(time.monotonic())
        return stopped

    monkeypatch.setattr(runner_module, "_watch", watched)
    result = run_trial(request(dataset="HangingImages", num_workers=2), 4, tmp_path, "hangs", launcher=launcher)
    stopping_s = time.monotonic() - timed_out_at[0]  # from its timeout to the trial's end, whatever its start took
    assert result.failure.kind is FailureKind.TIMEOUT and result.wall_s >= 4
    # A group waited out (its killed leader, unreaped, keeps it alive) takes reaper.END_S; a loaded host's stop, less.
    assert stopping_s < reaper.END_S, "stopped at its timeout, not after waiting out its own group"
    assert processes_mentioning(str(tmp_path / "hangs.log")) == []


class _ReadsLate:
    """The server's replies, the first read once the trial has ended (its log holds its last line, and a moment more):
    a tuner the machine's load kept from running."""

    def __init__(self, replies, log) -> None:
        self.replies, self.log, self.late = replies, log, True

    def readline(self) -> bytes:
        if self.late:
            self.late = False
            deadline = time.monotonic() + 30
            while "FileNotFoundError" not in (self.log.read_text() if self.log.exists() else ""):
                assert time.monotonic() < deadline, "the trial never failed"
                time.sleep(0.05)
            time.sleep(0.3)
        return self.replies.readline()

    def fileno(self) -> int:
        return self.replies.fileno()

    def close(self) -> None:
        self.replies.close()


def test_a_trial_that_ended_before_its_pid_was_read_is_seen_to_end_at_once(server, tmp_path):
    argv = [str(tmp_path / "missing.json"), str(tmp_path / "out.json")]  # the worker cannot read it: exit 1 at once
    first = server.start(argv, tmp_path / "first.log", _worker_env(request()))  # the server runs
    assert first.exited_within(60) and first.kill() == 1
    server._server.stdout = _ReadsLate(server._server.stdout, tmp_path / "late.log")
    late = server.start(argv, tmp_path / "late.log", _worker_env(request()))
    try:
        assert late.exited_within(5), "its end, read ahead with its pid, was never seen"
    finally:
        assert late.kill() == 1


# A fork server in miniature, speaking the zygote's protocol: ready after the seconds its argument gives; each order's
# trial a process that exits at once.
MINIATURE_SERVER = """
import json, subprocess, sys, time
time.sleep(float(sys.argv[1]))
print(json.dumps({"ready": 1}), flush=True)
for order in sys.stdin:
    trial = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    print(json.dumps({"pid": trial.pid}), flush=True)
    print(json.dumps({"exit": trial.pid, "code": trial.wait()}), flush=True)
    print(json.dumps({"ended": trial.pid}), flush=True)
"""


def serving(monkeypatch, code: str, *args: str, then=None) -> None:
    """Fork servers started from here on run ``python -c CODE ARGS`` instead of the zygote; ``then`` is called once
    each has started, with its process."""
    popen = subprocess.Popen

    def started(command, **options):
        if command[-2:] != ["-m", "autotune.trial.zygote"]:
            return popen(command, **options)
        server = popen([sys.executable, "-c", code, *args], **options)
        if then is not None:
            then(server)
        return server

    monkeypatch.setattr(subprocess, "Popen", started)


def test_a_server_slow_to_import_is_waited_for_before_its_first_order_is(tmp_path, monkeypatch):
    # Its imports take seconds, more on a network file system or with several servers starting: no order's reply.
    # A reply is waited for 2 s (a fork and an exec take far less, however loaded the host), its imports take 4 s:
    # an order sent before it is ready would find no reply in time.
    monkeypatch.setattr(launch, "_REPLY_S", 2.0)
    serving(monkeypatch, MINIATURE_SERVER, "4.0")
    server = ForkServer()
    try:
        proc = server.start([str(tmp_path / "r.json")], tmp_path / "t.log", _worker_env(request()))
        assert not server._broken and proc.lender == server._server.pid, "forked"
        assert proc.exited_within(10) and proc.kill() == 0
    finally:
        server.close()


def test_a_server_that_never_gets_ready_is_given_up_once_saying_why(tmp_path, monkeypatch, capsys):
    serving(monkeypatch, "import sys; sys.exit(3)")
    monkeypatch.setattr(FreshLauncher, "start", lambda self, *args: "fresh")
    server = ForkServer()
    assert [server.start([], tmp_path / "t.log", _worker_env(request())) for _ in range(2)] == ["fresh", "fresh"]
    assert server.servers_started == 1, "given up for this process: a server that failed once would fail again"
    assert capsys.readouterr().err == (
        "autotune: the fork server did not start (it ended); trials start as fresh processes from here on\n"
    )


def test_a_server_start_interrupted_before_it_is_ready_is_ended_not_kept_for_the_next_trial(tmp_path, monkeypatch):
    serving(monkeypatch, MINIATURE_SERVER, "60")
    server = ForkServer()

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "_reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        server.start([str(tmp_path / "r.json")], tmp_path / "t.log", _worker_env(request()))
    assert server._server is None and not server._broken, "the next trial starts a server of its own"


def test_an_order_interrupted_before_its_reply_ends_the_server_not_kept_out_of_step_for_the_next(tmp_path, monkeypatch):
    serving(monkeypatch, MINIATURE_SERVER, "0")
    server = ForkServer()
    reply = launch._reply

    def interrupted_at_the_pid(process, seconds, key):
        if key == "pid":
            raise KeyboardInterrupt  # Ctrl-C while the server forks: its pid line stays unread
        return reply(process, seconds, key)

    monkeypatch.setattr(launch, "_reply", interrupted_at_the_pid)
    with pytest.raises(KeyboardInterrupt):
        server.start([str(tmp_path / "r.json")], tmp_path / "t.log", _worker_env(request()))
    assert server._server is None and not server._broken, "the next trial starts a server of its own"


def test_a_server_starting_is_never_an_orphan_to_the_end_of_a_trial_running_alone_meanwhile(tmp_path, monkeypatch):
    # study.parallel: one slot starts a server (a new draw) while another's trial, the only one running, ends and kills
    # the children of the tuner it did not start; the server, carrying no trial's token, must not be one of them.
    monkeypatch.setattr(reaper, "_RUNNING", set())
    ending, found, sweeps = reaper.Strays(None), [], []

    def swept_meanwhile(started):
        sweep = threading.Thread(target=lambda: found.append(ending._adopted()))
        sweep.start()
        sweep.join(0.5)  # the other trial's end looks at the children now, or once the server is recorded
        sweeps.append(sweep)

    serving(monkeypatch, MINIATURE_SERVER, "0", then=swept_meanwhile)
    server = ForkServer()
    try:
        proc = server.start([str(tmp_path / "r.json")], tmp_path / "t.log", _worker_env(request()))
        sweeps[0].join()
        assert found == [[]], "the server was taken for an orphan"
        assert not server._broken and proc.lender == server._server.pid
        assert proc.exited_within(10) and proc.kill() == 0
    finally:
        ending.forget()
        server.close()


@pytest.mark.slow
def test_a_forked_trial_in_a_relative_workdir_has_its_log_there(server, tmp_path, monkeypatch):
    # As a library user calls it: run_trial(..., workdir=Path("trials")), the server's own directory being "/".
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the test pipeline's modules, no longer in the current directory
    result = run_trial(request(), 120, Path("trials"), "relative", launcher=server)
    assert result.ok, result.failure
    assert "relative.log" in os.listdir(tmp_path / "trials")


# The zygote, its orphans' end made slow: as a trial's orphans that take the server up to END_S to end. They end
# once the file its argument names exists (at the latest after a minute).
SLOW_TO_END_ORPHANS = """
import os, sys, time
from autotune.trial import zygote
end_children = zygote.end_children

def end_children_once_let():
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    end_children()

zygote.end_children = end_children_once_let
sys.exit(zygote.main())
"""


@pytest.mark.slow
def test_a_forked_trial_ends_as_it_is_reaped_not_once_its_orphans_are_and_its_pid_is_not_signalled(
    tmp_path, monkeypatch
):
    ended = tmp_path / "orphans-may-end"
    serving(monkeypatch, SLOW_TO_END_ORPHANS, str(ended))
    server = ForkServer()
    argv = [str(tmp_path / "missing.json"), str(tmp_path / "out.json")]  # the worker cannot read it: exit 1 at once
    let_end = threading.Timer(1.5, ended.touch)
    try:
        proc = server.start(argv, tmp_path / "t.log", _worker_env(request()))
        assert proc.lender is not None
        # Its orphans do not end until let: an exit told only after theirs would reach the timeout.
        assert runner_module._watch(proc, timeout_s=30.0, budget=None) is None, "ended, not at its timeout"
        signalled, asked = [], time.monotonic()
        let_end.start()
        with monkeypatch.context() as patch:
            patch.setattr(os, "kill", lambda pid, sig: signalled.append(pid))
            assert proc.kill() == 1
        assert proc.pid not in signalled, "reaped: its pid may be another process's"
        assert time.monotonic() - asked > 1.0, "its end waited for its orphans to be ended (let 1.5 s after)"
    finally:
        let_end.cancel()
        ended.touch()
        server.close()


def test_a_forked_trial_reaped_as_it_is_stopped_is_not_signalled_by_its_pid(server, tmp_path, monkeypatch):
    # Stopped (a timeout, a prune) as it ended: the server reaped it and said so, the tuner has not read it yet.
    argv = [str(tmp_path / "missing.json"), str(tmp_path / "out.json")]  # the worker cannot read it: exit 1 at once
    proc = server.start(argv, tmp_path / "t.log", _worker_env(request()))
    deadline = time.monotonic() + 30
    while psutil.pid_exists(proc.pid):
        assert time.monotonic() < deadline, "the trial was never reaped"
        time.sleep(0.01)
    time.sleep(0.2)  # the server's report of it, written as it reaped it
    signalled = []
    with monkeypatch.context() as patch:
        patch.setattr(os, "kill", lambda pid, sig: signalled.append(pid))
        assert proc.kill() == 1
    assert proc.pid not in signalled, "its pid may be another process's"


# The zygote, its trial one that leaves a process in a session of its own that never execs (so it carries no trial's
# token), then waits for the test's word to end.
ORPHAN_LEAVING = """
import os, sys, time
from autotune.trial import worker, zygote

def leave_an_orphan(argv):
    pid_file, release = argv
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(600)
        os._exit(0)
    while not os.path.exists(release):
        time.sleep(0.01)
    os._exit(0)

worker.run = leave_an_orphan
sys.exit(zygote.main())
"""


@pytest.mark.slow
def test_a_server_whose_tuner_was_killed_still_ends_the_orphans_of_its_trial(tmp_path):
    # kill -9 of the tuner closes its ends of the server's pipes: the server's report of the trial's end meets a broken
    # pipe, and it must end what the trial left before it ends itself (no subreaper is left to end them after it).
    pid_file, release = tmp_path / "orphan.pid", tmp_path / "release"
    server = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_LEAVING],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    orphan = None
    try:
        assert "ready" in json.loads(server.stdout.readline())
        order = {"argv": [str(pid_file), str(release)], "log": "t.log", "env": {}, "cwd": str(tmp_path)}
        server.stdin.write((json.dumps(order) + "\n").encode())
        server.stdin.flush()
        assert "pid" in json.loads(server.stdout.readline())
        deadline = time.monotonic() + 30
        while not pid_file.exists():
            assert time.monotonic() < deadline, "the trial never left its orphan"
            time.sleep(0.01)
        orphan = psutil.Process(int(pid_file.read_text()))
        server.stdout.close()  # the tuner killed: its ends of the pipes close
        server.stdin.close()
        release.touch()  # the trial ends, which the server can tell no one
        server.wait(timeout=30)
        orphan.wait(timeout=10)  # raises if the orphan outlives its server
        assert server.returncode == 0, "the server ends at the end of its input, not of the broken pipe"
    finally:
        if orphan is not None and orphan.is_running():
            orphan.kill()
        server.kill()
        server.wait()
