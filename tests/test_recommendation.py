"""recommended.yaml read back as an API: what each method applies, and files from elsewhere."""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

import autotune
from autotune import recommendation as recommendation_module
from autotune.errors import ConfigError
from autotune.measure.environment import describe_machine, machine_fingerprint
from autotune.recommendation import (
    SCHEMA_VERSION,
    MachineMismatchWarning,
    Measured,
    Recommendation,
    Training,
    measured_where,
)
from tests.conftest import NEUTRAL_KNOBS

WORKERS = {
    **NEUTRAL_KNOBS,
    "batch_size": 32,
    "num_workers": 1,
    "prefetch_factor": 4,
    "persistent_workers": True,
    "num_threads": 1,
    "channels_last": True,
    "amp": "bf16",
    "optimizer_impl": "foreach",
    "set_to_none": False,
}


def recommendation(knobs=None, machine=None, policy="free", training=None, **changes) -> Recommendation:
    return Recommendation(
        knobs=dict(knobs or WORKERS),
        baseline={**NEUTRAL_KNOBS, "batch_size": 16},
        pipeline="mymodel",
        study="s",
        device="cpu",
        machine=machine_fingerprint(describe_machine()) if machine is None else machine,
        measured=Measured(300.0, 200.0, 1.5, "medians of 3 interleaved rounds", 500.0, 400.0),
        training=training or Training(policy, 2 if policy == "fixed_effective" else 1, "note"),
        **changes,
    )


def written(tmp_path, document) -> str:
    path = tmp_path / "recommended.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


def test_a_written_recommendation_reads_back_the_same_without_a_warning(tmp_path):
    original = recommendation(no_difference={"set_to_none": False})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = autotune.load_recommended(written(tmp_path, original.to_document()))
    assert loaded == original
    assert loaded.changes == {
        name: (original.baseline[name], value) for name, value in WORKERS.items() if original.baseline[name] != value
    }


def test_an_untrimmed_recommendation_reads_back_with_a_warning_that_not_every_change_was_shown_to_matter(tmp_path):
    original = recommendation(untrimmed=True)
    with pytest.warns(
        autotune.UntrimmedWarning, match="not every change in it was raced undone .* mode=benchmark measures"
    ):
        assert autotune.load_recommended(written(tmp_path, original.to_document())) == original


def test_each_method_applies_its_knobs_as_the_trials_did():
    rec = recommendation()
    assert rec.dataloader_kwargs() == {
        "batch_size": 32,
        "num_workers": 1,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "pin_memory": False,
    }
    assert rec.optimizer_kwargs() == {"foreach": True}
    model = rec.prepare_model(torch.nn.Conv2d(3, 4, 3))
    assert model.weight.is_contiguous(memory_format=torch.channels_last)
    images, labels = rec.to_device((torch.zeros(2, 3, 8, 8), torch.zeros(2)), "cpu")
    assert images.is_contiguous(memory_format=torch.channels_last) and labels.shape == (2,)
    with rec.autocast("cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not rec.grad_scaler("cpu").is_enabled(), "loss scaling is for fp16 only"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.zeros(1, 3, 8, 8)).sum().backward()
    rec.zero_grad(optimizer)
    assert model.weight.grad is not None and not model.weight.grad.any(), "set_to_none=False zeroes the gradients"


def test_each_training_gets_a_new_grad_scaler_not_the_state_of_one_trained_before():
    rec = recommendation({**WORKERS, "amp": "fp16"})
    first = rec.grad_scaler("cpu")
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    first.scale((weight * torch.tensor([1.0, float("inf")])).sum()).backward()
    first.step(optimizer)  # its gradients overflowed: skipped, and the scale halved
    first.update()
    second = rec.grad_scaler("cpu")
    assert first.get_scale() == second.get_scale() / 2
    assert second is not first and second.is_enabled() and second.get_scale() == 65536.0


def test_process_settings_set_torchs_threads():
    threads = torch.get_num_threads()
    try:
        recommendation().apply_process_settings()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_num_threads_null_runs_the_measured_default_on_a_machine_like_the_measuring_one():
    threads = torch.get_num_threads()
    null, here = {**WORKERS, "num_threads": None}, machine_fingerprint(describe_machine())
    try:
        torch.set_num_threads(1)  # as a training script may, before it applies the file
        recommendation(knobs=null, machine=here | {"torch_threads": 3}).apply_process_settings()
        assert torch.get_num_threads() == 3, "torch's default where the runs were measured"
        torch.set_num_threads(1)
        elsewhere = here | {"cpu_count": here["cpu_count"] + 1, "torch_threads": 3}
        recommendation(knobs=null, machine=elsewhere).apply_process_settings()
        assert torch.get_num_threads() == 1, "another machine's default is not this one's"
        recommendation(knobs=null, machine=here).apply_process_settings()  # a file that does not record it
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_without_a_recommended_change_nothing_is_applied():
    rec = recommendation(knobs=NEUTRAL_KNOBS)
    with rec.autocast("cpu"):
        assert not torch.is_autocast_enabled("cpu")
    assert rec.optimizer_kwargs() == {} and rec.prepare_model(model := torch.nn.Linear(2, 2)) is model


def test_the_learning_rate_follows_the_batch_only_where_it_changes_training():
    assert recommendation().learning_rate(0.1) == pytest.approx(0.2), "batch 16 -> 32, linear scaling"
    fixed = recommendation(policy="fixed_effective")
    assert fixed.learning_rate(0.1) == 0.1 and fixed.accumulation_steps == 2


def test_the_learning_rate_follows_the_rule_the_file_records(tmp_path):
    adam = recommendation(
        knobs={**WORKERS, "batch_size": 64}, training=Training("free", 1, "note", 1e-3, 2e-3, "square-root")
    )
    document = adam.to_document()
    assert document["training"]["learning_rate"] == {"rule": "square-root", "baseline": 1e-3, "suggested": 2e-3}
    loaded = autotune.load_recommended(written(tmp_path, document))
    assert loaded == adam and loaded.learning_rate(1e-3) == pytest.approx(2e-3), "batch 16 -> 64: sqrt(4) = 2"


def test_a_file_without_a_rule_scales_linearly(tmp_path):
    document = recommendation().to_document()
    document["training"]["learning_rate"] = {"baseline": 0.1, "suggested": 0.2}  # as autotune wrote it before the rule
    assert autotune.load_recommended(written(tmp_path, document)).learning_rate(0.1) == pytest.approx(0.2)


def test_a_file_without_a_baseline_leaves_the_learning_rate_as_given_with_a_warning(tmp_path):
    path = written(tmp_path, {"pipeline": "mymodel", "knobs": {"batch_size": 8}})
    with pytest.warns(MachineMismatchWarning, match="older autotune"):
        loaded = autotune.load_recommended(path)
    with pytest.warns(UserWarning, match="records no baseline batch size"):
        assert loaded.learning_rate(0.1) == 0.1


def test_a_file_from_another_machine_is_read_with_a_warning_naming_what_differs(tmp_path):
    elsewhere = {**machine_fingerprint(describe_machine()), "cpu_model": "Some Other CPU", "cpu_flags": ["avx512_bf16"]}
    path = written(tmp_path, recommendation(machine=elsewhere).to_document())
    with pytest.warns(MachineMismatchWarning, match="cpu_model 'Some Other CPU' there") as caught:
        loaded = autotune.load_recommended(path)
    assert "cpu_flags" in str(caught[0].message) and loaded.knobs == WORKERS
    assert "measured on another machine" in str(caught[0].message)


def test_a_file_measured_on_some_of_this_machines_cores_is_said_to_be_so_not_from_another_machine(tmp_path):
    here = machine_fingerprint(describe_machine())
    pinned = {**here, "cpu_count": here["cpu_count"] + 1, "torch_threads": here["cpu_count"] + 1}  # study.cpu_sets
    path = written(tmp_path, recommendation(machine=pinned).to_document())
    with pytest.warns(MachineMismatchWarning, match="was measured on other cores \\(cpu_count") as caught:
        autotune.load_recommended(path)
    assert "another machine" not in str(caught[0].message)


def test_a_file_measured_under_other_software_here_is_said_to_be_so_not_from_another_machine(tmp_path):
    here = machine_fingerprint(describe_machine())
    upgraded = {**here, "torch": "0.0.1", "thread_env": {"OMP_NUM_THREADS": "3"}}
    path = written(tmp_path, recommendation(machine=upgraded).to_document())
    with pytest.warns(MachineMismatchWarning, match="measured with other software or thread settings") as caught:
        autotune.load_recommended(path)
    assert "another machine" not in str(caught[0].message)


def test_where_hardware_differs_the_record_is_from_another_machine_whatever_else_differs():
    assert measured_where(["torch", "gpu"]) == "on another machine"
    assert measured_where(["cpu_count", "cpu_model"]) == "on another machine"
    assert measured_where(["cpu_count", "torch_threads"]) == "on other cores"
    assert measured_where(["cuda", "thread_env"]) == "with other software or thread settings"
    assert measured_where(["cpu_count", "cuda"]) == "on other cores with other software or thread settings"


def test_a_file_naming_a_device_torch_does_not_know_is_compared_with_this_machine_not_refused(tmp_path, recwarn):
    path = written(tmp_path, {**recommendation().to_document(), "device": "gpu"})  # edited by hand
    assert autotune.load_recommended(path).device == "gpu"
    assert not [w for w in recwarn if issubclass(w.category, MachineMismatchWarning)]


def test_a_file_that_names_no_machine_is_applied_without_a_warning(tmp_path, recwarn):
    document = {**recommendation().to_document(), "machine": {}}
    assert autotune.load_recommended(written(tmp_path, document)).knobs == WORKERS
    assert not [w for w in recwarn if issubclass(w.category, MachineMismatchWarning)]


def test_a_file_from_an_older_autotune_is_applied_with_unset_knobs_at_their_defaults(tmp_path):
    path = written(tmp_path, {"pipeline": "mymodel", "knobs": {"batch_size": 8, "num_workers": 0, "amp": "bf16"}})
    with pytest.warns(MachineMismatchWarning, match="older autotune"):
        loaded = autotune.load_recommended(path)
    assert loaded.knobs["malloc"] == "default" and loaded.knobs["prefetch_factor"] is None
    assert loaded.dataloader_kwargs()["batch_size"] == 8


@pytest.mark.parametrize(
    "document, key, message",
    [
        ({"schema_version": SCHEMA_VERSION + 1, "knobs": {}}, "schema_version", "newer autotune"),
        ({"schema_version": str(SCHEMA_VERSION), "knobs": {}}, "schema_version", "expected a whole number"),
        ({"knobs": {"batch_size": 8, "warp_drive": True}}, "knobs", "knobs this one lacks: warp_drive; it has"),
        ({"knobs": {"batch_size": 8, "amp": "fp8"}}, "knobs.amp", "expected one of off, bf16, fp16"),
        ({"knobs": {"num_workers": 0}}, "knobs.batch_size", "missing"),
        ({"knobs": {"batch_size": None}}, "knobs.batch_size", "expected an integer"),
        ({"knobs": {"batch_size": 8, "amp": None}}, "knobs.amp", "expected one of off, bf16, fp16"),
        ({"knobs": {"batch_size": 8, "set_to_none": None}}, "knobs.set_to_none", "expected true or false"),
        ({"pipeline": "mymodel"}, "", "no 'knobs:'"),
    ],
)
def test_a_file_that_cannot_be_used_is_refused_naming_the_key(tmp_path, document, key, message):
    path = written(tmp_path, document)
    with pytest.raises(ConfigError, match=message) as raised:
        autotune.load_recommended(path)
    assert raised.value.key == f"{path}: {key}" if key else raised.value.key == path


@pytest.mark.parametrize(
    "document, key",
    [
        ({"knobs": None}, "knobs"),
        ({"knobs": [1]}, "knobs"),
        ({"knobs": {"batch_size": 8}, "training": None}, "training"),
        ({"knobs": {"batch_size": 8}, "throughput": None}, "throughput"),
        ({"knobs": {"batch_size": 8}, "peak_memory_mb": [1.0]}, "peak_memory_mb"),
        ({"knobs": {"batch_size": 8}, "baseline": None}, "baseline"),
        ({"knobs": {"batch_size": 8}, "baseline": {"batch_size": 0}}, "baseline.batch_size"),
        (
            {"knobs": {"batch_size": 8}, "training": {"gradient_accumulation_steps": 0}},
            "training.gradient_accumulation_steps",
        ),
        (
            {"knobs": {"batch_size": 8}, "training": {"gradient_accumulation_steps": -2}},
            "training.gradient_accumulation_steps",
        ),
        (
            {"knobs": {"batch_size": 8}, "training": {"gradient_accumulation_steps": 1.5}},
            "training.gradient_accumulation_steps",
        ),
        ({"knobs": {"batch_size": 8}, "training": {"batch_policy": "fixed-effective"}}, "training.batch_policy"),
        ({"knobs": {"batch_size": 8}, "untrimmed": "false"}, "untrimmed"),
        ({"knobs": {"batch_size": 8}, "untrimmed": 0}, "untrimmed"),
        (  # under batch_policy free every batch steps the optimizer
            {"knobs": {"batch_size": 8}, "training": {"gradient_accumulation_steps": 2}},
            "training.gradient_accumulation_steps",
        ),
        (  # 8 x 4 is not the baseline's 16
            {
                "knobs": {"batch_size": 8},
                "baseline": {"batch_size": 16},
                "training": {"batch_policy": "fixed_effective", "gradient_accumulation_steps": 4},
            },
            "training.gradient_accumulation_steps",
        ),
        ({"knobs": {"batch_size": 8}, "training": {"learning_rate": 0.1}}, "training.learning_rate"),
        ({"knobs": {"batch_size": 8}, "training": {"learning_rate": {"rule": "cubic"}}}, "training.learning_rate.rule"),
    ],
)
def test_a_malformed_section_is_refused_naming_it(tmp_path, document, key):
    path = written(tmp_path, {"schema_version": SCHEMA_VERSION, **document})
    with pytest.raises(ConfigError) as raised:
        autotune.load_recommended(path)
    assert raised.value.key == f"{path}: {key}"
    assert "\n" not in str(raised.value)


def test_accumulation_steps_that_agree_with_the_batch_policy_are_read(tmp_path):
    fixed = {"batch_policy": "fixed_effective", "gradient_accumulation_steps": 2, "note": "accumulate"}
    document = {"knobs": {"batch_size": 8}, "baseline": {"batch_size": 16}, "training": fixed}
    path = written(tmp_path, {**recommendation().to_document(), **document})
    assert autotune.load_recommended(path).accumulation_steps == 2, "micro-batches of 8 make the baseline's 16"
    del document["training"]["gradient_accumulation_steps"]
    path = written(tmp_path, {"schema_version": 1, **document})
    assert autotune.load_recommended(path).accumulation_steps == 1, "absent: as older autotunes meant"


@pytest.mark.parametrize(("gpus", "described"), [(2, "cuda:1"), (1, None)])
def test_this_machine_is_described_with_the_gpu_the_file_was_measured_on(tmp_path, monkeypatch, gpus, described):
    # On a machine of mixed GPUs, the one of the trials names it; where this process has no GPU of that index
    # (CUDA_VISIBLE_DEVICES), the current one does.
    here, devices = machine_fingerprint(describe_machine()), []
    monkeypatch.setattr(recommendation_module, "describe_machine", lambda device=None: devices.append(device) or here)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    measured = here | {"torch_threads": 3}  # compared where num_threads is null
    tuned = replace(recommendation(knobs={**WORKERS, "num_threads": None}, machine=measured), device="cuda:1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.load_recommended(written(tmp_path, tuned.to_document()))
    threads = torch.get_num_threads()
    try:
        tuned.apply_process_settings()
    finally:
        torch.set_num_threads(threads)
    assert devices == [described, described]


def test_nothing_in_the_file_is_executed(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "recommended.yaml"
    path.write_text(f"knobs: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        autotune.load_recommended(path)
    assert not marker.exists()


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        autotune.load_recommended(tmp_path / "nope.yaml")


def test_a_file_that_is_no_yaml_is_one_line_naming_where_it_fails(tmp_path):
    path = tmp_path / "report.md"
    path.write_text("# Report\n\nRecommended: 2.0x\n| a | b |\n|---|---|\n- [x]: {y\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML \(line \d+, column \d+: .+\); pass the recommended") as e:
        autotune.load_recommended(path)
    assert "\n" not in str(e.value)


def test_a_file_cut_short_anywhere_is_refused_not_read_with_the_knobs_it_lost_at_their_defaults(tmp_path):
    # A copy that stopped, a full disk: every line but the last is a file a truncation leaves, most of them YAML.
    lines = yaml.safe_dump(recommendation().to_document(), sort_keys=False).splitlines(keepends=True)
    path = tmp_path / "recommended.yaml"
    for end in range(len(lines)):
        path.write_text("".join(lines[:end]))
        with pytest.raises(ConfigError):
            autotune.load_recommended(path)
    knobs = lines.index("knobs:\n")
    path.write_text("".join(lines[: knobs + 3]))  # knobs: and two of them
    with pytest.raises(ConfigError) as refused:
        autotune.load_recommended(path)
    assert str(refused.value) == (
        f"{path}: baseline: missing, which autotune writes in every recommended.yaml of schema_version "
        f"{SCHEMA_VERSION}: the file was cut short or edited; use the file as autotune wrote it"
    )
    path.write_text("".join(lines))
    assert autotune.load_recommended(path) == recommendation(), "whole, it reads back"


def test_a_baseline_is_read_as_every_knob_the_knobs_are_read_as(tmp_path):
    # A knob left out takes the value a trial runs when it is unset: a worker option without workers none.
    document = recommendation().to_document()
    document["baseline"] = {"batch_size": 16, "prefetch_factor": None, "amp": "off"}
    loaded = autotune.load_recommended(written(tmp_path, document))
    assert loaded.baseline == {**NEUTRAL_KNOBS, "batch_size": 16}
    document["baseline"] = {**NEUTRAL_KNOBS, "batch_size": 16, "num_workers": "two"}
    with pytest.raises(ConfigError) as refused:
        autotune.load_recommended(written(tmp_path, document))
    assert refused.value.key == f"{tmp_path / 'recommended.yaml'}: baseline.num_workers"


@pytest.mark.parametrize("kind", ["fifo", "device", "too large"])
def test_a_file_that_would_be_read_without_end_or_is_too_large_is_refused_unread(tmp_path, monkeypatch, kind):
    path = tmp_path / "recommended.yaml"
    if kind == "fifo":  # opening it to read would wait for a writer
        os.mkfifo(path)
    elif kind == "device":  # read whole, it never ends
        path = Path("/dev/zero")
    else:
        monkeypatch.setattr(recommendation_module, "MAX_RECORD_BYTES", 2**20)
        path.write_text(yaml.safe_dump(recommendation().to_document()) + "#" * 2**20)
    with pytest.raises(ConfigError) as refused:
        autotune.load_recommended(path)
    said = "over 1 MiB, more than any file autotune writes" if kind == "too large" else "not a regular file"
    assert str(refused.value).startswith(f"{path}: cannot read it ({said}")
