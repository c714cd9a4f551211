"""A trial whose process refuses the cores its slot pins it to (study.cpu_sets, the machine's cores shrank since the
run began: ``FailureKind.PLACEMENT``) is the run's problem, not its configuration's: the run stops with the key's
line, its reports written, and nothing of the configuration is stored as failed; the trial is left for a later run."""

from __future__ import annotations

import io
import json
import time
from dataclasses import replace

import pytest

from autotune import app
from autotune.cli_errors import report_errors
from autotune.config.load import load_settings
from autotune.errors import PlacementRefusedError
from autotune.measure.environment import this_machine_id
from autotune.records import CONFIG_ATTR, RESULT_ATTR, interrupted
from autotune.runner import TrialRunner
from autotune.study.search_state import _owed, counted_trials
from autotune.study.start import open_study
from autotune.study.storage import load_study
from autotune.study.tuner import tune_in_slots
from autotune.trial import runner as trial_runner
from autotune.trial.result import Failure, FailureKind, ProbePlan, TrialResult
from tests.conftest import NEUTRAL_KNOBS, tiny_config
from tests.study.test_tuner import META, SPACE, FakeMeasure, settings

REFUSAL = (
    "study.cpu_sets: this trial's set, cores 2-3, has cores 3 not usable now: it would run on fewer cores than its set "
    "(the cores the machine or its container lets it use shrank since the run began); give sets of the cores still "
    "usable"
)


def _refused(knobs: dict) -> TrialResult:
    return TrialResult(knobs=knobs, failure=Failure(FailureKind.PLACEMENT, REFUSAL))


def _settings(tmp_path):
    fixed = {name: [value] for name, value in NEUTRAL_KNOBS.items() if value is not None}
    config = tiny_config(study={"n_trials": 1}, search={**fixed, "batch_size": [16, 32]})
    settings_ = load_settings(config, "tiny")
    return replace(settings_, study=replace(settings_.study, storage=f"sqlite:///{tmp_path}/study.db"))


def _refusing(monkeypatch, names: str) -> None:
    """The runs whose name starts with ``names`` refused their cores; the others run as they do."""
    real = trial_runner.run_repeated

    def run_repeated(request, repeats, timeout_s, workdir, name, *rest):
        if name.startswith(names):
            timeout_s()  # as each process does as it starts
            return _refused(request.knobs)
        return real(request, repeats, timeout_s, workdir, name, *rest)

    monkeypatch.setattr("autotune.runner.run_repeated", run_repeated)


def test_a_search_trial_refused_its_cores_stops_the_run_with_the_keys_line_and_is_left_for_a_later_run(
    tmp_path, monkeypatch, capsys
):
    settings_ = _settings(tmp_path)
    _refusing(monkeypatch, "trial-")
    out = io.StringIO()
    with pytest.raises(SystemExit) as ended:
        report_errors(lambda: app.run(settings_, tmp_path / "out", out))
    assert ended.value.code == 1, "the run had begun and kept what it measured: no refused input (2)"
    assert capsys.readouterr().err == f"autotune: error: {REFUSAL}\n"
    assert f"Stopped: {REFUSAL}" in out.getvalue(), "the reports' summary names why"
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [row["trial"] for row in report["trials"]] == ["baseline"], "what was measured is reported"
    study = load_study(settings_.study.name, settings_.study.storage)
    (trial,) = study.trials
    assert interrupted(trial) and RESULT_ATTR not in trial.user_attrs, "no failed configuration stored"
    machine = this_machine_id()
    assert counted_trials(study, machine) == 0, "study.n_trials not consumed"
    owed = [json.dumps(proposal.knobs, sort_keys=True) for proposal in _owed(study.trials, machine, set())]
    assert owed == [trial.user_attrs[CONFIG_ATTR]], "a later run measures it first"


def test_a_baseline_refused_its_cores_is_the_keys_error_not_a_failed_pipeline(tmp_path, monkeypatch):
    settings_ = _settings(tmp_path)
    _refusing(monkeypatch, "baseline")
    with pytest.raises(PlacementRefusedError, match="^study.cpu_sets: this trial's set"):
        app.run(settings_, tmp_path / "out", io.StringIO())
    study = load_study(settings_.study.name, settings_.study.storage)
    assert not [key for key in study.user_attrs if key.startswith("autotune.baseline")], "no failed baseline stored"


def test_a_run_of_one_process_refused_its_cores_raises_the_keys_error(tmp_path, monkeypatch):
    # The probe, a profile, mode=check's and mode=benchmark's runs: each runs one process (``TrialRunner.trial``).
    monkeypatch.setattr("autotune.runner.run_trial", lambda request, *args, **kwargs: _refused(request.knobs))
    runner = TrialRunner(_settings(tmp_path), "cpu", tmp_path)
    with pytest.raises(PlacementRefusedError, match="^study.cpu_sets: this trial's set"):
        runner.probe(ProbePlan(loaders=[], computes=[]))


def test_a_slot_whose_trial_refused_its_cores_stops_the_others_at_once_not_after_their_search(tmp_path):
    study = open_study(settings(tmp_path), META)
    slow = FakeMeasure()

    def searching_on(knobs, name, on_progress=None):
        time.sleep(0.3)
        return slow(knobs, name, on_progress)

    def refused(knobs, name, on_progress=None):
        raise PlacementRefusedError(REFUSAL)

    with pytest.raises(PlacementRefusedError):
        tune_in_slots(study, SPACE, settings(tmp_path, n_trials=5), [searching_on, refused], lambda event: None)
    assert len(slow.calls) <= 2, "the other slot stopped at its trial's end, its search not run to study.n_trials"
    assert counted_trials(study) == len(slow.calls), "the refused trial is not counted"
