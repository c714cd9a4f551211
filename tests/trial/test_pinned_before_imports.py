"""A pinned trial starts on its cores, before its imports size their thread pools from the cores they see: a fresh
one as its process starts, a forked one as its fork server does; one pinned to cores no longer usable is refused,
typed as the run's problem (PLACEMENT: the tuner stops at it, ``tests/study/test_placement_refused.py``), and the
tuner's own thread keeps its cores."""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.trial import launch
from autotune.trial.launch import ForkServer, FreshLauncher
from autotune.trial.placement import CPUS_ENV, cores_text, starting_on
from autotune.trial.result import FailureKind
from autotune.trial.runner import _worker_env, run_trial
from tests.conftest import REPO
from tests.trial.test_runner import request

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs CPU affinity")
two_cores = pytest.mark.skipif(
    hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) < 2,
    reason="needs two usable cores to tell one from all",
)
CORE = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0


def _past_every_online_core() -> int:
    """A core this machine has none of online, as one the container no longer lets a process use (its cores shrank):
    past the last online CPU (where Linux lists them; else os.cpu_count()'s). A core past this process's affinity
    alone may be usable: taskset narrows the affinity, not what the machine lets a process use."""
    try:
        online = Path("/sys/devices/system/cpu/online").read_text(encoding="ascii")
    except OSError:
        return os.cpu_count() or 1
    return int(re.split(r"[-,]", online.strip())[-1]) + 1


GONE = _past_every_online_core()


def pinned_env() -> dict[str, str]:
    """A trial's environment, pinned to ``CORE``."""
    return _worker_env(replace(request(), placement={CPUS_ENV: str(CORE)}))


@pytest.mark.slow
@two_cores
def test_a_fresh_trial_starts_on_its_cores_and_its_imports_size_torchs_pool_to_them(tmp_path, monkeypatch):
    # Pinned only after its imports, it read all the tuner's cores at its start and torch's pool had one per core.
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.trial.pools_at_start")
    everywhere = os.sched_getaffinity(0)
    out = tmp_path / "pools.json"
    proc = FreshLauncher().start([str(out)], tmp_path / "t.log", {**pinned_env(), "PYTHONPATH": str(REPO)})
    assert proc.exited_within(60) and proc.kill() == 0, (tmp_path / "t.log").read_text()
    assert json.loads(out.read_text()) == {"started_on": [CORE], "torch_threads": 1}
    assert os.sched_getaffinity(0) == everywhere, "the tuner's thread is back on its cores"


@pytest.mark.slow
@two_cores
def test_a_fork_server_starts_on_its_trials_cores_and_a_trial_pinned_otherwise_gets_a_new_one(tmp_path):
    # A forked trial inherits the pools its server's imports sized: the study's first slot, pinned, follows the
    # inspection, unpinned, on the same server.
    server = ForkServer()
    argv = [str(tmp_path / "missing.json"), str(tmp_path / "out.json")]  # a trial that ends at once
    try:
        unpinned = server.start(argv, tmp_path / "a.log", _worker_env(request()))
        assert unpinned.exited_within(60) and unpinned.kill() == 1
        assert os.sched_getaffinity(unpinned.lender) == os.sched_getaffinity(0)
        pinned = server.start(argv, tmp_path / "b.log", pinned_env())
        assert pinned.exited_within(60) and pinned.kill() == 1
        assert pinned.lender != unpinned.lender, "a new server for the pinned trial"
        assert os.sched_getaffinity(pinned.lender) == {CORE}, "started on the trial's core, before its imports"
        again = server.start(argv, tmp_path / "c.log", pinned_env())
        assert again.exited_within(60) and again.kill() == 1
        assert again.lender == pinned.lender, "the same server while the trials' cores stay the same"
        assert server.servers_started == 2
    finally:
        server.close()


def test_a_thread_that_cannot_move_to_cores_no_longer_usable_starts_its_process_on_its_own():
    everywhere = os.sched_getaffinity(0)
    with starting_on(frozenset({GONE})):
        assert os.sched_getaffinity(0) == everywhere
    assert os.sched_getaffinity(0) == everywhere


def test_a_thread_that_cannot_move_back_keeps_the_cores_it_has(monkeypatch):
    everywhere, moves = os.sched_getaffinity(0), []

    def move_once(pid: int, cores) -> None:  # the cores it came from no longer usable once it moved
        moves.append(cores)
        if len(moves) > 1:
            raise OSError(errno.EINVAL, "Invalid argument")
        set_affinity(pid, cores)

    set_affinity = os.sched_setaffinity
    monkeypatch.setattr(os, "sched_setaffinity", move_once)
    try:
        with starting_on(frozenset({CORE})):
            pass
        assert os.sched_getaffinity(0) == {CORE} and moves == [{CORE}, everywhere]
    finally:
        set_affinity(0, everywhere)


@pytest.mark.parametrize("launcher", [ForkServer, FreshLauncher])
def test_a_trial_pinned_to_cores_no_longer_usable_is_refused_as_placement_naming_the_key_and_the_cores(
    tmp_path, launcher
):
    everywhere, started = os.sched_getaffinity(0), launcher()
    try:
        result = run_trial(replace(request(), placement={CPUS_ENV: str(GONE)}), 120, tmp_path, "gone", launcher=started)
    finally:
        if isinstance(started, ForkServer):
            started.close()
    assert result.failure.kind is FailureKind.PLACEMENT and result.failure.message == (
        f"study.cpu_sets: this trial's set, cores {GONE}, has none usable now: this process may use cores "
        f"{cores_text(everywhere)} (the cores the machine or its container lets it use shrank since the run began); "
        "give sets of the cores still usable"
    ), result.failure
    assert os.sched_getaffinity(0) == everywhere


@pytest.mark.parametrize("launcher", [ForkServer, FreshLauncher])
def test_a_trial_pinned_to_a_set_of_which_some_cores_are_gone_is_refused_naming_them_not_runs_on_fewer(
    tmp_path, launcher
):
    everywhere, started = os.sched_getaffinity(0), launcher()
    try:
        placement = {CPUS_ENV: f"{CORE},{GONE}"}
        result = run_trial(replace(request(), placement=placement), 120, tmp_path, "part", launcher=started)
    finally:
        if isinstance(started, ForkServer):
            started.close()
    assert result.failure.kind is FailureKind.PLACEMENT and result.failure.message == (
        f"study.cpu_sets: this trial's set, cores {cores_text({CORE, GONE})}, has cores {GONE} not usable now: it "
        "would run on fewer cores than its set (the cores the machine or its container lets it use shrank since the "
        "run began); give sets of the cores still usable"
    ), result.failure
    assert os.sched_getaffinity(0) == everywhere


def test_cores_are_written_as_ranges_so_a_large_machines_set_leaves_the_cause_and_remedy_in_the_failure():
    assert cores_text({3, 0, 1, 2, 8, 10, 11}) == "0-3, 8, 10-11"
    assert cores_text(range(64, 128)) == "64-127" and cores_text([5]) == "5"
