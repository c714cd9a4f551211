"""mode=benchmark's configurations: the two ends, and each change alone and left out."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import yaml

from autotune import benchmark as benchmark_mode
from autotune.benchmark import baseline_note, configurations, trained_as_tuned, tuned_gain
from autotune.config.load import load_settings
from autotune.errors import ConfigError, NotMeasuredError
from autotune.measure.core_speed import CoreSpeed
from autotune.measure.environment import describe_machine
from autotune.measure.stats import RatioInterval
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.recommendation import MachineMismatchWarning, Measured, load_recommended
from autotune.report.benchmark import benchmark_document
from autotune.results.benchmark import Benchmark, TunedGain
from autotune.trial.placement import CPUS_ENV
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config


def test_each_change_alone_and_left_out_once_each():
    recommended = {**NEUTRAL_KNOBS, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "amp": "bf16"}
    entries = configurations(NEUTRAL_KNOBS, recommended, None, "cpu")
    assert [(e.kind, e.knob) for e in entries] == [
        ("baseline", None),
        ("recommended", None),
        ("alone", "num_workers"),
        ("without", "num_workers"),
        ("without", "persistent_workers"),
        ("alone", "amp"),
        ("without", "amp"),
    ], "persistent_workers alone, without workers, is the baseline: not measured twice"
    alone = entries[2].knobs
    assert (alone["num_workers"], alone["prefetch_factor"], alone["persistent_workers"]) == (2, 2, False)
    assert entries[3].knobs == entries[5].knobs == {**NEUTRAL_KNOBS, "amp": "bf16"}, "no worker options without workers"


def test_one_change_is_the_recommendation_alone():
    entries = configurations(NEUTRAL_KNOBS, {**NEUTRAL_KNOBS, "amp": "bf16"}, None, "cpu")
    assert [e.label for e in entries] == ["baseline", "recommended"]


def test_a_recommendation_without_workers_measured_with_them_has_the_users_worker_options_back():
    own = {**NEUTRAL_KNOBS, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    recommended = {**own, "num_workers": 0, "prefetch_factor": None, "persistent_workers": None, "amp": "bf16"}
    entries = {(e.kind, e.knob): e.knobs for e in configurations(own, recommended, None, "cpu")}
    assert len(entries) == 6, "two changes: num_workers (its options go with it) and amp"
    assert entries[("without", "num_workers")] == {**own, "amp": "bf16"}


def test_a_recommendation_is_benchmarked_with_the_batch_policy_it_was_tuned_with():
    settings = load_settings(tiny_config(), "tiny")  # search.batch_policy: free
    tuned, notes = trained_as_tuned(settings, "fixed_effective")
    assert tuned.batch_policy == "fixed_effective" and notes == [
        "trained as tuned: search.batch_policy=fixed_effective (the tuning run's), not free"
    ]
    assert trained_as_tuned(settings, "free") == (settings, [])


def test_no_entry_runs_cuda_graphs_over_accumulated_micro_batches():
    baseline = {**NEUTRAL_KNOBS, "batch_size": 32, "compile": "reduce-overhead"}
    recommended = {**baseline, "batch_size": 16, "compile": "off", "amp": "bf16"}
    labels = [entry.label for entry in configurations(baseline, recommended, 32, "cuda")]
    assert "baseline + batch_size" not in labels and "recommended - compile" not in labels, "micro-batch 16 of 32"
    assert "baseline + batch_size" in [entry.label for entry in configurations(baseline, recommended, None, "cuda")]
    assert "recommended - compile" in [entry.label for entry in configurations(baseline, recommended, 32, "cpu")]


def _recommended_yaml(tmp_path: Path, knobs: dict, policy: str = "free") -> Path:
    baseline = {**NEUTRAL_KNOBS, "batch_size": 16}  # tests/conf/pipeline/tiny.yaml's
    document = {
        "schema_version": 1,
        "pipeline": "tiny",
        "knobs": {**baseline, **knobs},
        "baseline": baseline,
        "training": {"batch_policy": policy},
    }
    path = tmp_path / "recommended.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _benchmark(path: Path, output_dir: Path, out: io.StringIO):
    config = {**tiny_config(), "mode": "benchmark", "recommended": str(path)}
    return benchmark_mode.run(load_settings(config, "tiny"), output_dir, out)


@pytest.mark.parametrize(
    ("knobs", "policy", "message"),
    [
        ({"batch_size": 100000}, "free", "knobs.batch_size=100000 cannot run here (it is larger than the dataset"),
        (
            {"batch_size": 32},
            "fixed_effective",
            "knobs.batch_size=32 cannot run here (with search.batch_policy=fixed_effective a micro-batch must divide "
            "the baseline's 16)",
        ),
    ],
)
def test_a_recommendation_that_cannot_train_here_is_refused_before_any_round(
    tmp_path, monkeypatch, knobs, policy, message
):
    monkeypatch.setattr(benchmark_mode, "measure_rounds", None)  # called, it would fail the test
    out = io.StringIO()
    with pytest.raises(ConfigError) as error:
        _benchmark(_recommended_yaml(tmp_path, knobs, policy), tmp_path / "out", out)
    assert str(error.value).startswith("recommended: ") and message in str(error.value)
    assert not (tmp_path / "out" / "benchmark.json").exists()


def test_a_benchmark_whose_recommendation_never_ran_fails_after_writing_its_record(tmp_path, monkeypatch):
    def the_recommendation_crashes(settings, benchmark, workdir, out, slot):
        for entry in benchmark.entries:
            ran = entry.kind == "baseline"
            entry.throughputs.extend([100.0 if ran else None] * benchmark.rounds)
            entry.peak_memory_mb.extend([100.0 if ran else None] * benchmark.rounds)
            entry.failures.extend([] if ran else ["round 1: crashed"])

    monkeypatch.setattr(benchmark_mode, "measure_rounds", the_recommendation_crashes)
    with pytest.raises(NotMeasuredError) as error:
        _benchmark(_recommended_yaml(tmp_path, {"batch_size": 32}), tmp_path / "out", io.StringIO())
    assert error.value.exit_code == 1
    assert "not measured: 0 of 5 rounds ran both the baseline and the recommendation" in str(error.value)
    assert (tmp_path / "out" / "benchmark.json").exists()


def test_a_recommendation_the_search_would_not_try_here_is_measured_all_the_same(tmp_path, monkeypatch):
    # Pinned memory without a GPU, cuDNN on a CPU: left out of a search here, as worth nothing; they run all the same.
    measured = []
    monkeypatch.setattr(
        benchmark_mode, "measure_rounds", lambda settings, bench, workdir, out, slot: measured.append(1)
    )
    with pytest.raises(NotMeasuredError):  # the stand-in measures nothing
        _benchmark(
            _recommended_yaml(tmp_path, {"pin_memory": True, "cudnn_benchmark": True}), tmp_path / "out", io.StringIO()
        )
    assert measured == [1]


def test_after_its_first_round_a_benchmark_says_what_the_rounds_left_will_take():
    assert benchmark_mode._rest_after_first(71.2, 5) == "round 1 took 71 s: about 5 min more for the 4 rounds left"
    assert benchmark_mode._rest_after_first(20.0, 2) == "round 1 took 20 s: about 20 s more for the 1 round left"


def test_a_benchmark_runs_in_the_studys_first_slot_pinned_as_its_tuning_run_was(tmp_path, monkeypatch):
    # A study tuned with study.cpu_sets measured every run on one set: its recommendation measured against a baseline
    # on every core would read a regression that is only the other cores.
    core = min(os.sched_getaffinity(0))
    machine = {**describe_machine(), "cpu_count": 8, "torch_threads": 8}
    facts = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=machine)
    placements = []

    def run_trial(request, *args, **kwargs):
        placements.append(request.placement)
        return TrialResult(knobs=request.knobs, measurement=fake_measurement(100.0))

    monkeypatch.setattr(benchmark_mode, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr("autotune.runner.run_trial", run_trial)
    config = {**tiny_config(study={"cpu_sets": [[core]]}), "mode": "benchmark"}
    config["recommended"] = str(_recommended_yaml(tmp_path, {"batch_size": 32}))
    files = benchmark_mode.run(load_settings(config, "tiny"), tmp_path / "out", io.StringIO())
    assert placements and all(placement == {CPUS_ENV: str(core)} for placement in placements)
    recorded = json.loads(files["benchmark.json"].read_text())["machine"]
    assert (recorded["cpu_count"], recorded["torch_threads"]) == (1, 1), "the machine as its pinned runs see it"


def test_only_another_kind_of_device_is_refused_naming_measure_device():
    benchmark_mode.refuse_other_device("cuda:1", "cuda", "recommended.yaml")  # another GPU: the machine note says
    benchmark_mode.refuse_other_device(None, "cuda", "report.json")  # a file that does not say
    with pytest.raises(ConfigError) as error:
        benchmark_mode.refuse_other_device("cpu", "cuda:0", "recommended.yaml")
    assert str(error.value) == (
        "measure.device: recommended.yaml was measured on cpu, and this run would measure it on cuda:0: set "
        "measure.device=cpu to measure it on the kind of device it was tuned on"
    )


def _refused(tmp_path: Path, monkeypatch, path: Path) -> str:
    """The refusal of a benchmark of ``path``: before any round and before any file is written."""
    monkeypatch.setattr(benchmark_mode, "measure_rounds", None)  # called, it would fail the test
    with pytest.raises(ConfigError) as error:
        _benchmark(path, tmp_path / "out", io.StringIO())
    assert not (tmp_path / "out" / "benchmark.json").exists()
    return str(error.value)


def test_a_recommendation_tuned_on_another_kind_of_device_is_refused(tmp_path, monkeypatch):
    path = _recommended_yaml(tmp_path, {"batch_size": 32})
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "device": "cuda"}))
    assert _refused(tmp_path, monkeypatch, path).startswith(f"measure.device: {path} was measured on cuda, and this")


def test_a_baseline_that_already_runs_the_recommendation_is_refused_as_check_refuses_it(tmp_path, monkeypatch):
    # Every round would measure one configuration twice: "1.00x within noise".
    path = _recommended_yaml(tmp_path, {"batch_size": 16})  # tests/conf/pipeline/tiny.yaml's baseline
    path.write_text(
        yaml.safe_dump({**yaml.safe_load(path.read_text()), "baseline": {**NEUTRAL_KNOBS, "batch_size": 8}})
    )
    assert _refused(tmp_path, monkeypatch, path).startswith("pipeline.baseline: it already runs the recommendation in")


def test_a_recommendation_of_the_baseline_it_was_tuned_against_is_nothing_to_measure_as_check_says(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(benchmark_mode, "measure_rounds", None)  # called, it would fail the test
    kept = _recommended_yaml(tmp_path, {})  # a tuning run that kept its baseline
    out = io.StringIO()
    assert _benchmark(kept, tmp_path / "out", out) == {}
    assert f"nothing to measure: {kept} recommends the baseline it was tuned against" in out.getvalue()
    assert not (tmp_path / "out" / "benchmark.json").exists()


def test_a_share_left_out_as_a_conflict_says_the_conflict():
    # On CUDA, compile=reduce-overhead alone keeps the baseline's set_to_none=false, and the recommendation without
    # set_to_none the same: CUDA graphs overwrite the gradients kept; neither runs, and the share says why.
    baseline = {**NEUTRAL_KNOBS, "batch_size": 32, "set_to_none": False}
    recommended = {**baseline, "compile": "reduce-overhead", "set_to_none": True}
    entries = configurations(baseline, recommended, None, "cuda")
    assert [entry.label for entry in entries] == [
        "baseline",
        "recommended",
        "recommended - compile",
        "baseline + set_to_none",
    ]
    for entry in entries:
        entry.throughputs.extend([100.0, 101.0, 99.0] if entry.kind == "baseline" else [150.0, 152.0, 149.0])
    (share,) = [
        section
        for section in benchmark_document(Benchmark("tiny", "cuda", 3, "recommended.yaml", {}, entries)).sections
        if section.heading == "Each change's share"
    ]
    conflict = (
        "not measured: it cannot run on cuda, where CUDA graphs (compile=reduce-overhead) overwrite the gradients of "
        "one step with the next step's, and set_to_none=false keeps them from one step to the next"
    )
    assert share.bullets[0].startswith(f"compile: alone {conflict}; left out, ")
    assert share.bullets[1].endswith(f"; left out, {conflict}")
    assert "applies only together" not in " ".join(share.bullets)


def test_a_recommendation_whose_baseline_leaves_a_knob_out_is_compared_with_it_at_its_default(tmp_path):
    # Its worker options null, num_workers left out (edited): read as no workers, not compared knob by knob as
    # written, where a worker option's verdict asks whether workers apply.
    baseline = {name: value for name, value in NEUTRAL_KNOBS.items() if name != "num_workers"} | {"batch_size": 16}
    path = tmp_path / "recommended.yaml"
    path.write_text(yaml.safe_dump({"knobs": {**baseline, "batch_size": 32}, "baseline": baseline}))
    with pytest.warns(MachineMismatchWarning, match="older autotune"):
        tuned_against = load_recommended(path).baseline
    here = {**NEUTRAL_KNOBS, "batch_size": 16, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}
    assert baseline_note(tuned_against, here) == [
        "the recommendation was tuned against another baseline (num_workers=0); measured here against pipeline.baseline"
    ]


# recommended.yaml's throughput section as a tuning run whose race proved its gain writes it.
TUNED_THROUGHPUT = {
    "recommended": 587.41,
    "baseline": 304.65,
    "speedup": 1.911,
    "unit": "samples/s",
    "method": "medians of 3 interleaved re-measurements; the speedup: the geometric mean of 3 paired rounds' ratios",
    "interval": {"low": 1.58, "high": 2.32, "rounds": 3},
}


def _plain_runs(monkeypatch) -> None:
    """mode=benchmark in this process, no run a process of its own: the tiny pipeline as inspected, each run reading
    150 samples/s at batch 32 and 100 at the baseline's batch."""
    facts = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=describe_machine())

    def run_trial(request, timeout_s, workdir, name, *args, **kwargs):
        throughput = 150.0 if request.knobs["batch_size"] == 32 else 100.0
        return TrialResult(knobs=request.knobs, measurement=fake_measurement(throughput))

    monkeypatch.setattr(benchmark_mode, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr("autotune.runner.run_trial", run_trial)


def test_the_gain_recommended_yaml_records_is_read_with_its_interval():
    measured = Measured(587.41, 304.65, 1.911, "", 1.0, 1.0, RatioInterval(1.911, 1.58, 2.32, 3))
    assert tuned_gain(measured) == TunedGain(1.911, RatioInterval(1.911, 1.58, 2.32, 3))
    single = Measured(150.0, 100.0, 1.5, "single measurements; the speedup: the ratio of the two throughputs", 1, 1)
    assert tuned_gain(single) == TunedGain(1.5)
    assert tuned_gain(Measured(0.0, 0.0, 1.0, "", 0.0, 0.0)) is None, "a file that records no throughputs"


def test_a_gain_tuned_on_a_machine_that_did_not_hold_its_speed_is_compared_with_nothing(tmp_path, monkeypatch):
    _plain_runs(monkeypatch)
    path = _recommended_yaml(tmp_path, {"batch_size": 32})
    unsteady = {**TUNED_THROUGHPUT, "unsteady": 3.47}
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "throughput": unsteady}))
    assert load_recommended(path).measured.unsteady == 3.47
    config = {**tiny_config(), "mode": "benchmark", "recommended": str(path)}
    out = io.StringIO()
    files = benchmark_mode.run(load_settings(config, "tiny"), tmp_path / "out", out)
    said = out.getvalue()
    assert "note: its tuning run's machine did not hold its speed (the baseline's race medians 3.47x apart)" in said
    assert "When tuned" not in said and json.loads(files["benchmark.json"].read_text())["tuned"] is None
    for value in ("yes", 0.9):
        path.write_text(
            yaml.safe_dump({**yaml.safe_load(path.read_text()), "throughput": {**unsteady, "unsteady": value}})
        )
        with pytest.raises(ConfigError, match="throughput.unsteady"):
            load_recommended(path)


def test_each_configurations_changes_are_said_once_before_the_rounds_and_each_runs_line_names_it_only(
    tmp_path, monkeypatch
):
    # The review's console repeated every knob of its configuration on each of ~55 lines.
    facts = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=describe_machine())
    slowed = CoreSpeed([0], [200.0], [200.0], [100.0])  # the cores ran 2x their usual time around the run

    def run_trial(request, timeout_s, workdir, name, *args, **kwargs):
        throughput = 150.0 if request.knobs["batch_size"] == 32 else 100.0
        slow = slowed if name == "round2-recommended" else None  # measured again, as study.remeasure_disturbed says
        return TrialResult(knobs=request.knobs, measurement=fake_measurement(throughput), core_speed=slow)

    monkeypatch.setattr(benchmark_mode, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr("autotune.runner.run_trial", run_trial)
    path = _recommended_yaml(tmp_path, {"batch_size": 32})
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "throughput": TUNED_THROUGHPUT}))
    config = {**tiny_config(study={"remeasure_disturbed": True}), "mode": "benchmark", "recommended": str(path)}
    out = io.StringIO()
    files = benchmark_mode.run(load_settings(config, "tiny"), tmp_path / "out", out)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(
        "rounds of 2 configurations: the baseline, the recommendation, and each of its changes (1) alone and left "
        "out, less 2 that repeat one of the two or cannot run"
    ), lines[0]
    assert lines[1:3] == ["[baseline] the baseline's settings", "[recommended] batch_size=32"]
    assert lines[3:5] == [
        "[round 1 baseline] 100.0 samples/s, peak 100 MiB",
        "[round 1 recommended] 150.0 samples/s, peak 100 MiB",
    ]
    again = lines.index("[round 2 recommended] 150.0 samples/s, the cores ran 2.0x slow: measured again")
    assert lines[again + 1] == "[round 2 recommended, again] 150.0 samples/s, peak 100 MiB", "the second stands"
    assert out.getvalue().count("batch_size=32") == 1
    assert "When tuned: 1.91x (95 % interval 1.58-2.32 over 3 paired rounds), apart from this one" in out.getvalue()
    stored = json.loads(files["benchmark.json"].read_text())["tuned"]
    assert stored == {"speedup": 1.911, "interval": {"geomean": 1.911, "low": 1.58, "high": 2.32, "n": 3}}


def test_a_slowed_run_whose_run_measured_again_failed_is_said_to_stand_and_the_failure_said(tmp_path, monkeypatch):
    facts = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=describe_machine())
    slowed = CoreSpeed([0], [200.0], [200.0], [100.0])

    def run_trial(request, timeout_s, workdir, name, *args, **kwargs):
        if name == "round2-recommended-again":
            return TrialResult(knobs=request.knobs, failure=Failure(FailureKind.EXCEPTION, "RuntimeError: boom"))
        throughput = 150.0 if request.knobs["batch_size"] == 32 else 100.0
        slow = slowed if name == "round2-recommended" else None
        return TrialResult(knobs=request.knobs, measurement=fake_measurement(throughput), core_speed=slow)

    monkeypatch.setattr(benchmark_mode, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr("autotune.runner.run_trial", run_trial)
    path = _recommended_yaml(tmp_path, {"batch_size": 32})
    config = {**tiny_config(study={"remeasure_disturbed": True}), "mode": "benchmark", "recommended": str(path)}
    out = io.StringIO()
    benchmark_mode.run(load_settings(config, "tiny"), tmp_path / "out", out)
    lines = out.getvalue().splitlines()
    again = lines.index("[round 2 recommended] 150.0 samples/s, the cores ran 2.0x slow: measured again")
    assert lines[again + 1] == "[round 2 recommended, again] FAILED exception: RuntimeError: boom: the first run stands"
    assert not lines[again + 2].startswith("[round 2 recommended"), "the first, said, is not said again"


def test_a_gain_tuned_against_another_baseline_is_not_compared_with_this_one(tmp_path, monkeypatch):
    _plain_runs(monkeypatch)
    path = _recommended_yaml(tmp_path, {"batch_size": 32})
    document = yaml.safe_load(path.read_text())
    other = {**document["baseline"], "num_workers": 1, "prefetch_factor": 2, "persistent_workers": False}
    path.write_text(yaml.safe_dump({**document, "baseline": other, "throughput": TUNED_THROUGHPUT}))
    out = io.StringIO()
    files = _benchmark(path, tmp_path / "out", out)
    assert "tuned against another baseline" in out.getvalue()
    assert "When tuned" not in out.getvalue(), "1.91x was over another baseline: nothing to compare"
    assert json.loads(files["benchmark.json"].read_text())["tuned"] is None
