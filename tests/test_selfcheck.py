"""Which configurations mode=selfcheck checks."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from autotune import selfcheck
from autotune.config.load import load_settings
from autotune.config.settings import Settings
from autotune.errors import HarnessDisagreesError
from autotune.measure.environment import describe_machine, machine_id, this_machine_id
from autotune.pipeline.facts import DeviceFacts, Inspection
from autotune.records import META_ATTR
from autotune.results.selfcheck import ConfigurationCheck, SelfCheck
from autotune.selfcheck import _configurations
from autotune.study.start import open_study
from autotune.study.tuner import ensure_baseline
from autotune.trial.placement import CPUS_ENV
from tests.conftest import tiny_config
from tests.study.test_tuner import fake_result
from tests.test_benchmark import _recommended_yaml


def test_without_a_tuned_study_only_the_baseline_is_checked(tiny_settings, tmp_path):
    settings = replace(tiny_settings, study=replace(tiny_settings.study, storage=f"sqlite:///{tmp_path}/none.db"))
    configurations, source, policy = _configurations(settings, this_machine_id())
    assert configurations == {"baseline": settings.baseline}
    assert source.startswith("the baseline only: no study 'tiny'") and policy == settings.batch_policy


def measured_elsewhere(settings: Settings, tmp_path) -> Settings:
    """``settings`` naming a study of its pipeline and baseline whose baseline was measured on another machine alone
    (one of other cores), and nothing on this one."""
    settings = replace(settings, study=replace(settings.study, storage=f"sqlite:///{tmp_path}/elsewhere.db"))
    meta = {"pipeline": settings.pipeline.to_dict(), "baseline": settings.baseline, "space": {}, "device": "cpu"}
    other = {**describe_machine(), "cpu_count": 999}
    study = open_study(settings.study, {**meta, "measure": {}}, machine=other)
    ensure_baseline(study, settings.baseline, lambda knobs, name, on_progress: fake_result(knobs), machine_id(other))
    return settings


def test_a_study_measured_on_another_machine_only_has_no_pick_to_check_here(tiny_settings, tmp_path):
    settings = measured_elsewhere(tiny_settings, tmp_path)
    configurations, source, _ = _configurations(settings, this_machine_id())
    assert configurations == {"baseline": settings.baseline}
    assert source == "the baseline only: study 'tiny' has no baseline measured on this machine"


def test_the_studys_pick_is_checked_training_as_it_was_tuned(tiny_settings, monkeypatch):
    # A study tuned under search.batch_policy=fixed_effective measured micro-batches accumulated to the baseline's
    # batch: checked without the command's saying so, the pick would be timed as another loop.
    pipeline, baseline = tiny_settings.pipeline.to_dict(), tiny_settings.baseline
    meta = {"pipeline": pipeline, "baseline": baseline, "device": "cpu", "space": {}, "measure": {}}
    micro = {**tiny_settings.baseline, "batch_size": 8}
    baseline_ok = SimpleNamespace(result=SimpleNamespace(ok=True))
    monkeypatch.setattr(selfcheck, "load_study", lambda name, storage: SimpleNamespace(user_attrs={META_ATTR: meta}))
    monkeypatch.setattr(
        selfcheck,
        "load_results",
        lambda study, here: SimpleNamespace(baseline=baseline_ok, batch_policy="fixed_effective"),
    )
    monkeypatch.setattr(
        selfcheck,
        "summarise",
        lambda results: SimpleNamespace(
            is_baseline=False, recommended=SimpleNamespace(label="3", result=SimpleNamespace(knobs=micro))
        ),
    )
    configurations, _, policy = _configurations(tiny_settings, this_machine_id())
    assert configurations["recommended (trial 3)"] == micro and policy == "fixed_effective"


def test_the_studys_pick_is_looked_up_under_the_machine_its_pinned_runs_were_stored_under(
    tiny_settings, tmp_path, monkeypatch
):
    # A study run with study.cpu_sets stores its results under the machine as a run pinned to one set sees it.
    core = min(os.sched_getaffinity(0))
    settings = replace(tiny_settings, study=replace(tiny_settings.study, cpu_sets=((core,),)))
    machine = {**describe_machine(), "cpu_count": 8, "torch_threads": 8}
    facts = Inspection(devices=DeviceFacts(), device="cpu", machine=machine)
    looked_up = []

    def configurations(settings, here):
        looked_up.append(here)
        return {"baseline": settings.baseline}, "the baseline only", settings.batch_policy

    monkeypatch.setattr(selfcheck, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr(selfcheck, "_configurations", configurations)
    monkeypatch.setattr(selfcheck, "check_configurations", lambda runner, configurations, rounds, out, runs: [])
    selfcheck.run(settings, tmp_path / "out", io.StringIO())
    assert looked_up == [machine_id({**machine, "cpu_count": 1, "torch_threads": 1})] != [machine_id(machine)]


def test_a_recommended_yaml_the_command_names_is_checked_training_as_it_was_tuned(tmp_path, monkeypatch):
    checked = []
    monkeypatch.setattr(
        selfcheck,
        "check_configurations",
        lambda runner, configurations, rounds, out, runs: checked.append(configurations),
    )
    path = _recommended_yaml(tmp_path, {"batch_size": 8}, "fixed_effective")
    config = {**tiny_config(), "mode": "selfcheck", "recommended": str(path)}
    out = io.StringIO()
    selfcheck.run(load_settings(config, "tiny"), tmp_path / "out", out)
    (configurations,) = checked
    assert list(configurations) == ["baseline", "recommended"] and configurations["recommended"]["batch_size"] == 8
    said = out.getvalue()
    assert f"the baseline and the recommendation of {path}" in said
    assert "note: trained as tuned: search.batch_policy=fixed_effective" in said, "micro-batches of 8 to 16"
    keeps = _recommended_yaml(tmp_path, {})
    config = {**config, "recommended": str(keeps)}
    selfcheck.run(load_settings(config, "tiny"), tmp_path / "out2", io.StringIO())
    assert list(checked[-1]) == ["baseline"], "a recommendation to keep the baseline: the baseline alone"


def test_each_configuration_runs_the_harness_first_in_one_round_and_the_plain_loop_first_in_the_next(monkeypatch):
    order = []
    monkeypatch.setattr(selfcheck, "_run_once", lambda runner, index, label, knobs, plain, runs, out: order.append(
        (index, label, "plain" if plain else "harness")))  # fmt: skip
    runner = SimpleNamespace(new_draw=lambda: None)
    selfcheck.check_configurations(runner, {"baseline": {}, "recommended": {}}, 2, io.StringIO())
    firsts = {(index, label): kind for index, label, kind in order[::2]}
    assert (
        firsts[(1, "baseline")] != firsts[(2, "baseline")] and firsts[(1, "recommended")] != firsts[(2, "recommended")]
    )
    assert firsts[(1, "baseline")] != firsts[(1, "recommended")], "and from one configuration to the next"


def test_a_configuration_the_harness_and_the_plain_loop_disagree_on_fails_the_selfcheck_with_exit_1():
    agree = ConfigurationCheck("baseline", {}, [100.0, 101.0, 99.0], [100.0, 100.5, 99.5])
    apart = ConfigurationCheck("recommended (trial 3)", {}, [90.0, 91.0, 89.0], [100.0, 100.5, 99.5])
    unresolved = ConfigurationCheck("recommended (trial 4)", {}, [90.0, 110.0], [100.0, 100.0])
    check = SelfCheck("tiny", "cpu", 3, "the baseline", {}, [agree, unresolved])
    selfcheck.fail_if_disagreeing(check)  # agree and unresolved: exit 0
    with pytest.raises(
        HarnessDisagreesError, match=r"disagree beyond 3%: recommended \(trial 3\): harness / plain 0.9"
    ) as e:
        selfcheck.fail_if_disagreeing(replace(check, configurations=[agree, apart]))
    assert e.value.exit_code == 1 and "baseline" not in str(e.value)


def test_a_selfcheck_runs_in_the_studys_first_slot_pinned_as_its_tuning_run_was(tiny_settings, tmp_path, monkeypatch):
    core = min(os.sched_getaffinity(0))
    settings = replace(tiny_settings, study=replace(tiny_settings.study, cpu_sets=((core,),)))
    machine = {**describe_machine(), "cpu_count": 8, "torch_threads": 8}
    facts = Inspection(devices=DeviceFacts(), device="cpu", machine=machine)
    runners = []
    monkeypatch.setattr(selfcheck, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr(
        selfcheck, "_configurations", lambda settings, here: ({"baseline": {}}, "the baseline only", "free")
    )
    monkeypatch.setattr(
        selfcheck, "check_configurations", lambda runner, configurations, rounds, out, runs: runners.append(runner)
    )
    files = selfcheck.run(settings, tmp_path / "out", io.StringIO())
    assert [runner.request.placement for runner in runners] == [{CPUS_ENV: str(core)}]
    recorded = json.loads(files["selfcheck.json"].read_text())["machine"]
    assert (recorded["cpu_count"], recorded["torch_threads"]) == (1, 1), "the machine as its pinned runs see it"
