"""A study's description and each machine's baseline and probe are read through one typed reader each
(``autotune/records.py``): every form an autotune stored reads back, with the defaults of what it lacked, and the
rule "this stored study is this pipeline's" keeps each command's strictness."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from autotune import diagnose, selfcheck
from autotune.app import _study_meta
from autotune.config.load import load_settings
from autotune.pipeline.spec import PipelineSpec
from autotune.records import (
    BASELINE_ATTR,
    CONFIRMATION_ATTR,
    META_ATTR,
    PROBE_ATTR,
    ProbeRecord,
    StudyDescription,
    baseline_record,
    on_machine,
    probe_record,
    stored_description,
)
from autotune.results.model import load_results
from tests.conftest import tiny_config
from tests.study.test_tuner import BASELINE, SPACE, fake_result

OPTIMIZER = {"_target_": "torch.optim.SGD", "lr": 0.1}
PIPELINE = PipelineSpec("p", {"model": {"_target_": "mine.Net"}, "optimizer": OPTIMIZER})
# The description as the first autotune stored it: its machine inside, no objectives, batch policy or budgets.
FIRST_FORM = {
    "pipeline": PIPELINE.to_dict(),
    "baseline": BASELINE,
    "device": "cpu",
    "space": SPACE.candidates,
    "measure": {"min_steps": 8, "trial_timeout_s": 300.0},
    "machine": {"cpu_model": "an earlier host"},
}


def test_a_description_stored_before_objectives_batch_policy_and_budgets_reads_with_their_defaults():
    described = StudyDescription.from_dict(FIRST_FORM)
    assert (described.objectives, described.batch_policy, described.memory_budgets) == (["throughput"], "free", None)
    assert described.pipeline == PIPELINE and described.optimizer == OPTIMIZER
    assert "machine" not in described.to_dict() and "study" not in described.to_dict(), "no budgets: none written"


def test_a_pipeline_stored_without_components_reads_as_one_without_an_optimizer():
    described = StudyDescription.from_dict({**FIRST_FORM, "pipeline": {"name": "p"}})
    assert described.pipeline == PipelineSpec("p", {}) and described.optimizer is None


def test_the_tuners_description_round_trips_as_it_stores_it():
    stored = _study_meta(load_settings(tiny_config(study={"memory_budget_mb": 500}), "tiny"), "cpu", SPACE)
    assert set(stored) == {"study", "pipeline", "baseline", "batch_policy", "objectives", "device", "space", "measure"}
    described = StudyDescription.from_dict(stored)
    assert described.memory_budgets == {"memory_budget_mb": 500.0} and described.to_dict() == stored
    assert StudyDescription.from_dict(described.to_dict()) == described
    beside = {**stored, "fingerprint": "0123", "code": {"mine.data": "aaaa"}}  # what open_study stores beside it
    assert StudyDescription.from_dict(beside) == described


def test_a_study_without_a_description_has_none():
    assert stored_description(SimpleNamespace(user_attrs={})) is None
    assert stored_description(SimpleNamespace(user_attrs={META_ATTR: FIRST_FORM})) == StudyDescription.from_dict(
        FIRST_FORM
    )


def test_a_description_is_this_pipelines_by_its_pipeline_and_where_asked_its_baseline():
    described = StudyDescription.from_dict(FIRST_FORM)
    other_baseline = {**BASELINE, "batch_size": 64}
    assert described.describes(PIPELINE) and described.describes(PIPELINE, BASELINE)
    assert described.describes(PIPELINE, None) and not described.describes(PIPELINE, other_baseline)
    other = PipelineSpec("p", {**PIPELINE.components, "optimizer": {**OPTIMIZER, "lr": 0.2}})
    assert not described.describes(other) and not described.describes(PipelineSpec("q", PIPELINE.components))


def _stored_study(monkeypatch, module, described: dict | None) -> None:
    """``module`` (diagnose or selfcheck) finds a study storing ``described`` (None: none) that measured a baseline
    here, and reads its results through stand-ins."""
    attrs = {} if described is None else {META_ATTR: described}
    monkeypatch.setattr(module, "load_study", lambda name, storage: SimpleNamespace(user_attrs=attrs))
    measured = SimpleNamespace(records=["baseline"], baseline=SimpleNamespace(result=SimpleNamespace(ok=True)))
    monkeypatch.setattr(module, "load_results", lambda study, here: measured)


def test_mode_profile_reads_a_stored_study_of_this_pipeline_whatever_its_baseline(tiny_settings, monkeypatch):
    monkeypatch.setattr(diagnose, "tries_of", lambda results: "tried")
    described = {**FIRST_FORM, "pipeline": tiny_settings.pipeline.to_dict()}
    _stored_study(monkeypatch, diagnose, {**described, "baseline": {**tiny_settings.baseline, "batch_size": 64}})
    assert diagnose.stored_tries(tiny_settings, "here") == "tried"
    _stored_study(monkeypatch, diagnose, {**described, "pipeline": {"name": "tiny", "components": {}}})
    assert diagnose.stored_tries(tiny_settings, "here") is None, "another pipeline's tries say nothing of this one"
    _stored_study(monkeypatch, diagnose, None)
    assert diagnose.stored_tries(tiny_settings, "here") is None


@pytest.mark.parametrize("differs", ["pipeline", "baseline", "no description"])
def test_mode_selfcheck_checks_a_stored_pick_only_of_this_pipeline_and_baseline(tiny_settings, monkeypatch, differs):
    described = {**FIRST_FORM, "pipeline": tiny_settings.pipeline.to_dict(), "baseline": tiny_settings.baseline}
    other = {
        "pipeline": {**described, "pipeline": {"name": "tiny", "components": {}}},
        "baseline": {**described, "baseline": {**tiny_settings.baseline, "batch_size": 64}},
        "no description": None,
    }
    _stored_study(monkeypatch, selfcheck, other[differs])
    configurations, source, _ = selfcheck._configurations(tiny_settings, "here")
    assert configurations == {"baseline": tiny_settings.baseline}
    assert source == "the baseline only: study 'tiny' was tuned with another pipeline or baseline"


def test_a_machines_baseline_and_probe_are_read_from_its_own_records_only():
    probe = ProbeRecord(wall_s=12.0, failure="it ran out of time")
    result = fake_result(BASELINE)
    attrs = {on_machine(BASELINE_ATTR, "m1"): result.to_dict(), on_machine(PROBE_ATTR, "m1"): probe.to_dict()}
    assert baseline_record(attrs, "m1") == result and probe_record(attrs, "m1") == probe
    assert baseline_record(attrs, "m2") is None and probe_record(attrs, "m2") is None


def test_the_results_of_a_study_read_its_oldest_description_and_a_race_stored_as_none():
    # an earlier autotune stored a race left out entire as None (e8d8272, until c5a188b)
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(META_ATTR, FIRST_FORM)
    study.set_user_attr(on_machine(BASELINE_ATTR, "m1"), fake_result(BASELINE).to_dict())
    study.set_user_attr(on_machine(CONFIRMATION_ATTR, "m1"), None)
    results = load_results(study, "m1")
    assert (results.objectives, results.batch_policy, results.optimizer) == (["throughput"], "free", OPTIMIZER)
    assert results.confirmation is None and results.probe is None and results.baseline.result == fake_result(BASELINE)
    assert (results.pipeline, results.device, results.space) == ("p", "cpu", SPACE.candidates)
