"""A probe whose anchor failed: its failure names the settings the anchor ran at where they are not the baseline's,
and a failure of the anchor's DataLoader ends the probe at once."""

from __future__ import annotations

import pytest
import torch

from autotune.knobs import KNOBS
from autotune.measure.differential import LoaderRate
from autotune.pipeline.build import build_pipeline
from autotune.study.probe_model import anchor_loader, probe_once, probe_plan
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.trial import probe as probe_module
from autotune.trial.probe import run_probe
from autotune.trial.result import ProbeFailure, ProbePlan, ProbeResult, TrialResult
from tests.conftest import NEUTRAL_KNOBS, trial_request
from tests.study.test_tuner import META, settings

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}  # no workers: the DataLoader loads in the main process
# As the review ran it: the baseline's num_workers=0 is not searched.
VARIED = {"batch_size": [16, 32], "num_workers": [1, 2], "prefetch_factor": [2], "persistent_workers": [True]}
WORKERS_ONLY = SearchSpace({name: VARIED.get(name, [BASELINE[name]]) for name in KNOBS})
IN_A_WORKER = "ValueError: Caught ValueError in DataLoader worker process 0: ValueError: sample 1100 is corrupt"


def probed(tmp_path, space: SearchSpace, baseline: dict, failed: ProbeFailure) -> str:
    """The failure ``probe_once`` records for a probe of ``space`` whose one reading is ``failed``."""
    study = open_study(settings(tmp_path), META)

    def run(plan: ProbePlan) -> TrialResult:
        rates = 1000.0 if failed.half == "compute" else None
        computes = [None if failed.half == "compute" else 200.0] * len(plan.computes)
        return TrialResult(baseline, probe=ProbeResult([rates] * len(plan.loaders), computes, failed=[failed]))

    return probe_once(study, space, baseline, run, 200.0).failure


def test_the_plan_times_the_anchors_dataloader_first():
    assert probe_plan(WORKERS_ONLY, BASELINE).loaders[0] == {"batch_size": 16, "num_workers": 1}
    searched = SearchSpace({**WORKERS_ONLY.candidates, "num_workers": [1, 2]})
    with_two = {**BASELINE, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    assert anchor_loader(searched, with_two) == {"batch_size": 16, "num_workers": 2}, "the baseline's, searched"
    assert probe_plan(searched, with_two).loaders[0] == {"batch_size": 16, "num_workers": 2}


def test_a_failure_of_the_anchors_dataloader_names_the_workers_it_ran_with_not_the_baselines(tmp_path):
    failure = probed(tmp_path, WORKERS_ONLY, BASELINE, ProbeFailure("loader", 0, IN_A_WORKER))
    assert failure == (
        f"it raised {IN_A_WORKER} in its DataLoader at batch_size=16, num_workers=1, the probe's anchor, from which "
        "it predicts every configuration: the baseline's num_workers=0 is not in search.num_workers"
    )


def test_a_failure_of_the_anchors_model_step_names_the_knobs_the_probe_moved_and_why(tmp_path):
    baseline = {**BASELINE, "num_threads": None, "compile": "default"}
    candidates = {**WORKERS_ONLY.candidates, "num_workers": [0], "num_threads": [1, 2], "compile": ["default"]}
    raised = ProbeFailure("compute", 0, "ValueError: this model cannot run forward")
    failure = probed(tmp_path, SearchSpace(candidates), baseline, raised)
    assert failure == (
        "it raised ValueError: this model cannot run forward in its model step at batch_size=16, num_threads=1, "
        "compile=off, the probe's anchor, from which it predicts every configuration: the baseline's "
        "num_threads=None is not in search.num_threads; the probe runs compile=off: compile costs more than the "
        "whole probe"
    )


def test_the_probe_ends_where_its_anchors_dataloader_fails_and_not_where_another_does(monkeypatch):
    pipeline = build_pipeline(trial_request().pipeline)
    loaders = [{"batch_size": 8, "num_workers": 1}, {"batch_size": 8, "num_workers": 2}]
    plan = ProbePlan(loaders, [{**NEUTRAL_KNOBS, "batch_size": 8}], 0.05)
    timed: list = []

    def loader(_, setting, seconds, failing=None):
        timed.append(setting)
        if setting == failing:
            raise ValueError("sample 1100 is corrupt")
        return LoaderRate(100.0, 0.01)

    monkeypatch.setattr(probe_module, "_time_compute", lambda *args: timed.append("step") or 200.0)
    monkeypatch.setattr(probe_module, "_time_loader", lambda *args: loader(*args, failing=loaders[0]))
    result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert timed == [loaders[0]], "nothing after the anchor's DataLoader failed"
    assert result.failed == [ProbeFailure("loader", 0, "ValueError: sample 1100 is corrupt")]
    assert result.loader_throughputs == [None, None] and result.compute_throughputs == [None]
    assert ProbeResult.from_dict(result.to_dict()) == result, "stored as typed data"
    timed.clear()
    monkeypatch.setattr(probe_module, "_time_loader", lambda *args: loader(*args, failing=loaders[1]))
    result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert timed[:2] == loaders and "step" in timed, "another setting's failure leaves the rest timed"
    assert result.loader_throughputs == [100.0, None] and result.compute_throughputs == [pytest.approx(200.0)]
