"""Two tuner processes, pinned to different cores, join one study on a shared storage (a journal file; PostgreSQL
where AUTOTUNE_TEST_POSTGRES gives a database, as .ci/run does); one is killed with SIGKILL mid-trial and the other
finishes: the killed trial is failed and its configuration measured again, nothing lost or counted twice, and the
reports rendered from the study are the same whichever tuner's side renders them."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from autotune import app, rerender
from autotune.records import CONFIG_ATTR, INTERRUPTED_ATTR, MACHINE_ATTR, TUNER_ATTR, measured_trials, study_machines
from autotune.runner import TrialRunner
from autotune.study.storage import load_study
from tests.conftest import FAST_MEASURE, REPO, TEST_CONF, fixed_search

POSTGRES = os.environ.get("AUTOTUNE_TEST_POSTGRES")
N_TRIALS = 3
# Two cores this process may use (a CI runner's container may not hold cores 0 and 1), one per tuner or slot.
CORES = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []
two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs 2 usable cores")


@pytest.fixture(params=["journal", "postgresql"])
def storage(request, tmp_path):
    if request.param == "journal":
        return f"journal://{tmp_path}/study.log"
    if not POSTGRES:
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES"):
            pytest.fail("AUTOTUNE_REQUIRE_POSTGRES is set but AUTOTUNE_TEST_POSTGRES gives no database")
        pytest.skip("no PostgreSQL: set AUTOTUNE_TEST_POSTGRES=postgresql://USER:PASSWORD@HOST/DB (.ci/run does)")
    return POSTGRES


def start_tuner(storage: str, study: str, core: int, out, tmp_path) -> subprocess.Popen:
    args = [
        "-cd",
        str(TEST_CONF),
        "pipeline=tiny",
        *FAST_MEASURE,
        "measure.min_time_s=1.0",
        "measure.screen_min_time_s=1.0",  # the search trial killed (FAST_MEASURE's 0.05 s ends before the kill)
        *fixed_search(batch_size=[8, 16, 32, 64]),
        "pipeline.model._target_=tests.fixtures.tiny.StepBoundCNN",
        "pipeline.baseline.batch_size=2",  # slower than every candidate however loaded the machine: the race runs
        f"study.n_trials={N_TRIALS}",
        "study.probe=false",
        "study.confirm_rounds=1",
        "study.heartbeat_s=0.5",
        f"study.storage={storage}",
        f"study.name={study}",
        f"hydra.run.dir={tmp_path}/{out}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AUTOTUNE_DEBUG", None)
    return subprocess.Popen(
        ["taskset", "-c", str(core), sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def running_trial_of(storage: str, study_name: str, pid: int, timeout_s: float = 120) -> int:
    """The number of a trial tuner ``pid`` is measuring, once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            study = load_study(study_name, storage)
        except KeyError:
            study = None
        running = running_trials_of(study, pid) if study else []
        if running:
            return running[0]
        time.sleep(0.2)
    raise AssertionError(f"tuner {pid} started no trial in {timeout_s} s")


def running_trials_of(study: optuna.Study, pid: int) -> list[int]:
    """The numbers of the trials of ``study`` that tuner ``pid`` is measuring."""
    return [
        trial.number
        for trial in study.get_trials(states=(TrialState.RUNNING,))
        if trial.user_attrs.get(TUNER_ATTR, "").endswith(f":{pid}") and CONFIG_ATTR in trial.user_attrs
    ]


@pytest.mark.slow
@two_cores
def test_two_tuners_share_a_study_and_one_killed_mid_trial_loses_nothing(storage, tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = f"shared-{uuid.uuid4().hex[:8]}"
    killed = start_tuner(storage, name, CORES[0], "killed", tmp_path)
    running_trial_of(storage, name, killed.pid)
    survivor = start_tuner(storage, name, CORES[1], "survivor", tmp_path)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    # The trial the kill ended, whichever it was: on a loaded host the one seen running may have ended before it.
    running = running_trials_of(load_study(name, storage), killed.pid)
    assert len(running) == 1, f"killed mid-trial: its trials running then, {running}"
    (lost,) = running
    out, _ = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, out

    study = load_study(name, storage)
    (machine,) = study_machines(study)  # both tuners ran here, on one core each: alike
    measured = measured_trials(study, machine)
    keys = [trial.user_attrs[CONFIG_ATTR] for trial, _ in measured]
    assert len(measured) == N_TRIALS and len(set(keys)) == N_TRIALS, "nothing lost, nothing counted twice"
    dead = study.trials[lost]
    assert dead.state is TrialState.FAIL and dead.user_attrs[INTERRUPTED_ATTR]
    assert dead.user_attrs[CONFIG_ATTR] in keys, "the killed trial's configuration measured again"
    assert not study.get_trials(states=(TrialState.RUNNING,)), "no trial left running"
    assert all(t.user_attrs.get(MACHINE_ATTR) == machine for t in study.trials if CONFIG_ATTR in t.user_attrs)
    assert "[confirm-1-baseline]" in out, "the race ran on the survivor, where its finalists were measured"
    claims = [s.study_name for s in study._storage.get_all_studies() if s.study_name.startswith(f"{name}#")]
    assert claims == [], "every claim ended"

    rendered = rerender.run(name, storage, tmp_path / "rendered", out=io.StringIO())
    survivors = json.loads((tmp_path / "survivor" / "report.json").read_text())
    assert json.loads(rendered["report.json"].read_text()) == survivors, "the report is the study's, from any side"


@pytest.mark.slow
@two_cores
def test_two_trials_at_once_each_on_its_own_core(tmp_path, cli_here, monkeypatch):
    args = [
        "-cd",
        str(TEST_CONF),
        "pipeline=tiny",
        *FAST_MEASURE,
        "measure.min_time_s=1.0",
        *fixed_search(batch_size=[8, 16, 32, 64]),
        "study.n_trials=3",
        "study.probe=false",
        "study.confirm_rounds=0",
        "study.parallel=2",
        f"study.cpu_sets=[[{CORES[0]}],[{CORES[1]}]]",
        f"study.storage=sqlite:///{tmp_path}/study.db",
        f"hydra.run.dir={tmp_path}/out",
    ]
    events, close, finish = [], TrialRunner.close, app._finish
    # An idle fork server maps the libraries a trial maps and takes a share of its memory: none is left running.
    monkeypatch.setattr(app, "end_shared_fork_server", lambda: events.append("the inspection's server ended"))
    monkeypatch.setattr(TrialRunner, "close", lambda runner: events.append("a slot's ended") or close(runner))
    monkeypatch.setattr(app, "_finish", lambda *args: events.append("race") or finish(*args))
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"[parallel] 2 trials at once: cores {CORES[0]}, cores {CORES[1]}" in proc.stdout
    assert events[:3] == ["the inspection's server ended", "a slot's ended", "race"], "the second slot's, idle"
    study = load_study("tiny", f"sqlite:///{tmp_path}/study.db")
    (machine,) = study_machines(study)
    measured = measured_trials(study, machine)
    assert len(measured) >= 3 and study_machines(study)[machine]["cpu_count"] == 1, proc.stdout
    assert all(result.measurement.environment["cpu_count"] == 1 for _, result in measured)
    spans = sorted((t.datetime_start, t.datetime_complete) for t, _ in measured)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), (
        "two trials ran at once"
    )
