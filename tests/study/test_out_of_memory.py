"""Out of memory, of any allocator, in the probe or a trial, is data: recognised, recorded per setting, and a bound on
the batch sizes the search measures, reported."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from optuna.trial import TrialState

from autotune.knobs import KNOBS
from autotune.measure.environment import this_machine_id
from autotune.records import NOT_MEASURED_ATTR, PROBE_ATTR, OutOfMemory, ProbeRecord, config_key, on_machine
from autotune.results.batch_limit import BatchEvidence, batch_limit
from autotune.results.model import load_results
from autotune.study.guide import Guide
from autotune.study.probe_model import ProbeModel, probe_once, probe_plan
from autotune.study.search_state import Observation, counted_trials
from autotune.study.space import SearchSpace, needs_no_less_memory
from autotune.study.start import open_study
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.exceptions import is_out_of_memory
from autotune.trial.result import Failure, FailureKind, ProbeFailure, ProbeOutOfMemory, ProbeResult, TrialResult
from autotune.trial.runner import run_trial
from autotune.trial.worker import describe_exception
from tests.conftest import (
    FAST_MEASURE,
    NEUTRAL_KNOBS,
    TEST_CONF,
    fake_measurement,
    fixed_search,
    trial_request,
)
from tests.fixtures.out_of_memory import ERRORS
from tests.study.test_tuner import META, settings

CUBLAS = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"


def cpu_allocator_error() -> RuntimeError:
    """What PyTorch's CPU allocator raises when the host has no memory for a tensor (a RuntimeError)."""
    try:
        torch.empty(2**62, dtype=torch.uint8)
    except RuntimeError as exc:
        return exc
    raise AssertionError("allocated 4 EiB")


def raised_from(cause: BaseException) -> RuntimeError:
    """A RuntimeError raised from ``cause``, as torch.compile wraps what fails inside it."""
    try:
        raise RuntimeError("backend='inductor' raised an error") from cause
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        RuntimeError(CUBLAS),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        RuntimeError("cuFFT error: CUFFT_ALLOC_FAILED"),
        RuntimeError("CURAND_STATUS_ALLOCATION_FAILED"),
        torch.AcceleratorError("CUDA error: out of memory\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side"),
        pytest.param(None, id="cpu-allocator"),
        raised_from(torch.OutOfMemoryError("CUDA out of memory")),
        RuntimeError(  # shared memory full, where a DataLoader worker puts its batch (Docker's /dev/shm: 64 MiB)
            "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n  ...\n"
            "RuntimeError: unable to write to file </torch_18692_1954506624_0>: No space left on device (28)"
        ),
    ],
)
def test_an_allocation_failure_of_any_allocator_is_out_of_memory(exc):
    exc = exc if exc is not None else cpu_allocator_error()
    assert is_out_of_memory(exc)
    assert describe_exception(exc).kind is FailureKind.OUT_OF_MEMORY, "a verdict, not a fault"


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"),
        RuntimeError("Expected all tensors to be on the same device"),
        ValueError("the model ran out of memory-mapped shards"),
        RuntimeError(  # the file handles DataLoader workers pass batches by ran out: not memory
            "unable to open shared memory object </torch_31_2107318574_0> in read-write mode: Too many open files (24)"
        ),
    ],
)
def test_other_errors_are_exceptions(exc):
    assert not is_out_of_memory(exc)
    assert describe_exception(exc).kind is FailureKind.EXCEPTION


def test_a_cublas_allocation_failure_in_a_trial_is_out_of_memory_not_a_fault(tmp_path):
    request = trial_request("out_of_memory.OutOfMemoryAbove", batch_size=128)
    request.pipeline.components["model"]["error"] = "cublas"
    result = run_trial(request, 60, tmp_path, "cublas")
    assert result.failure == Failure(FailureKind.OUT_OF_MEMORY, f"RuntimeError: {CUBLAS}")
    assert not result.failure.kind.is_fault


BASE = {**NEUTRAL_KNOBS, "batch_size": 32}


@pytest.mark.parametrize(
    ("knobs", "bounded"),
    [
        (BASE, True),
        ({**BASE, "batch_size": 64}, True),
        ({**BASE, "num_threads": 1, "malloc": "keep", "cudnn_benchmark": True}, True),
        ({**BASE, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}, True),
        ({**BASE, "batch_size": 16}, False),
        ({**BASE, "amp": "bf16"}, False),
        ({**BASE, "compile": "default"}, False),
        ({**BASE, "channels_last": True}, False),
        ({**BASE, "optimizer_impl": "foreach"}, False),
        ({**BASE, "set_to_none": False}, False),
    ],
)
def test_a_configuration_needs_no_less_memory_with_a_batch_and_workers_as_large_and_the_same_step(knobs, bounded):
    assert needs_no_less_memory(knobs, BASE) is bounded


def test_an_allocator_returning_freed_memory_may_fit_where_one_keeping_it_ran_out_and_not_the_other_way():
    keeping = {**BASE, "malloc": "keep"}
    assert not needs_no_less_memory(BASE, keeping), "malloc=default returns what keep held"
    assert needs_no_less_memory(keeping, BASE) and needs_no_less_memory({**keeping, "batch_size": 64}, keeping)


def test_fewer_workers_may_fit_where_more_ran_out_and_a_loader_setting_bounds_any_model_step():
    with_workers = {**BASE, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    assert not needs_no_less_memory(BASE, with_workers)
    loading = {"batch_size": 32, "num_workers": 2}  # the probe's DataLoader alone ran out
    assert needs_no_less_memory({**with_workers, "amp": "bf16"}, loading)
    assert not needs_no_less_memory({**with_workers, "num_workers": 1}, loading)
    deep = {**with_workers, "num_workers": 8, "prefetch_factor": 4}  # 32 batches held ahead
    assert not needs_no_less_memory({**deep, "prefetch_factor": 2}, deep), "16 batches may fit"
    assert needs_no_less_memory({**deep, "num_workers": 10}, deep)


SIZES = [16, 32, 64, 128]
SPACE = SearchSpace({name: {"batch_size": SIZES, "num_threads": [1, None]}.get(name, [BASE[name]]) for name in KNOBS})


def over_64(knobs) -> bool:
    return knobs["batch_size"] > 64


def measure_until_64(calls: list):
    """A fake run that runs out of memory above batch 64, else trains at a rate that grows with the batch."""

    def run(knobs, name, on_progress):
        calls.append(knobs)
        if over_64(knobs):
            return TrialResult(
                knobs, failure=Failure(FailureKind.OUT_OF_MEMORY, "OutOfMemoryError: CUDA out of memory")
            )
        return TrialResult(knobs, measurement=fake_measurement(10.0 * knobs["batch_size"]))

    return run


def test_once_a_trial_runs_out_of_memory_the_search_measures_no_configuration_that_needs_as_much(tmp_path):
    study = open_study(settings(tmp_path), META)
    calls: list = []
    ensure_baseline(study, BASE, measure_until_64(calls))
    for threads in (None, 1):  # both configurations at batch 128 come up, whatever the sampler does
        study.enqueue_trial({"batch_size": 128, "num_threads": threads})
    reason = tune(study, SPACE, settings(tmp_path, n_trials=20), measure_until_64(calls), print)
    assert sum(map(over_64, calls)) == 1, "the second configuration at batch 128 is not run"
    assert {knobs["batch_size"] for knobs in calls} == set(SIZES)
    ruled = "or ruled out by a failure (out of memory, or in a DataLoader worker)"
    assert reason.message == f"all 8 configurations of the search space are measured {ruled}"
    ran_out = next(t for t in study.trials if t.user_attrs.get("failure", "").startswith("out_of_memory"))
    skipped = [t for t in study.trials if NOT_MEASURED_ATTR in t.user_attrs]
    assert len(skipped) == 1 and skipped[0].state is TrialState.PRUNED and skipped[0].params["batch_size"] == 128
    why = f"it needs no less memory than trial {ran_out.number}, which ran out (OutOfMemoryError: CUDA out of memory)"
    assert skipped[0].user_attrs[NOT_MEASURED_ATTR] == why
    results = load_results(study)
    assert counted_trials(study) == len(results.trials) == 6, "what was not measured is no trial"
    (shown,) = results.not_measured  # for the reports, each configuration once
    assert (shown.label, shown.knobs["batch_size"], shown.reason) == (str(skipped[0].number), 128, why)
    limit = batch_limit(results)
    fits = next(r.label for r in results.trials if r.result.knobs["batch_size"] == 64)
    assert limit.fits == BatchEvidence(64, f"trial {fits}")
    assert limit.out_of_memory == BatchEvidence(128, f"trial {ran_out.number}")


def test_a_resumed_study_remembers_what_ran_out_of_memory(tmp_path):
    study = open_study(settings(tmp_path), META)
    calls: list = []
    at_128 = {**BASE, "batch_size": 128}
    study.enqueue_trial({"batch_size": 128, "num_threads": None})
    tune(study, SPACE, settings(tmp_path, n_trials=1), measure_until_64(calls), print)
    assert calls == [at_128]
    resumed = open_study(settings(tmp_path), META)
    resumed.enqueue_trial({"batch_size": 128, "num_threads": 1})
    tune(resumed, SPACE, settings(tmp_path, n_trials=2), measure_until_64(calls), print)
    assert not any(over_64(knobs) for knobs in calls[1:])
    skipped = [t.params for t in resumed.trials if NOT_MEASURED_ATTR in t.user_attrs]
    assert skipped == [{"batch_size": 128, "num_threads": 1}]


def probe_result(plan, error=ERRORS["cuda"]) -> ProbeResult:
    """The probe of ``plan`` on a pipeline whose model step runs out of memory above batch 64 (``error``)."""
    computes = [None if over_64(k) else 100.0 * k["batch_size"] for k in plan.computes]
    out = [
        ProbeOutOfMemory("compute", i, f"OutOfMemoryError: {error()}")
        for i, k in enumerate(plan.computes)
        if over_64(k)
    ]
    return ProbeResult([5000.0] * len(plan.loaders), computes, out)


def probed_study(tmp_path):
    """A study whose baseline is measured and whose probe ran out of memory at batch 128."""
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASE, measure_until_64([]))
    record = probe_once(study, SPACE, BASE, lambda plan: TrialResult(BASE, probe=probe_result(plan)), 200.0)
    return study, record


def test_the_probe_keeps_its_other_settings_and_guides_the_search_to_the_largest_batch_that_fits(tmp_path):
    study, record = probed_study(tmp_path)
    assert record.ok, "an out of memory at one setting does not fail the probe"
    assert [o.shown_by for o in record.out_of_memory] == [
        "the probe's model step at batch_size=128",
        "the probe's model step at batch_size=128, num_threads=1",
    ]
    assert ProbeRecord.from_dict(study.user_attrs[on_machine(PROBE_ATTR, this_machine_id())]) == record
    guide = Guide(ProbeModel.from_record(record), SPACE, BASE)
    with pytest.raises(ValueError, match="did not run in the probe"):
        guide.probe_model.predict({**BASE, "batch_size": 128})
    calls: list = []
    tune(study, SPACE, settings(tmp_path, n_trials=6), measure_until_64(calls), print, guide.propose)
    assert calls and calls[0]["batch_size"] == 64, "the first trial is the largest batch that fits"
    assert not any(map(over_64, calls)), "nothing at batch 128 is measured: the probe showed it runs out"
    assert batch_limit(load_results(study)).out_of_memory == BatchEvidence(128, record.out_of_memory[0].shown_by)


def test_without_a_guide_the_probes_out_of_memory_still_bounds_the_search(tmp_path):
    study, _ = probed_study(tmp_path)
    study.enqueue_trial({"batch_size": 128, "num_threads": 1})  # as a sampler would, sooner or later
    calls: list = []
    tune(study, SPACE, settings(tmp_path, n_trials=20), measure_until_64(calls), print)
    assert calls and not any(map(over_64, calls))
    reasons = [t.user_attrs[NOT_MEASURED_ATTR] for t in study.trials if NOT_MEASURED_ATTR in t.user_attrs]
    assert reasons and all("the probe's model step at batch_size=128" in reason for reason in reasons)


def test_the_guide_proposes_no_configuration_that_needs_as_much_memory_as_a_trial_that_ran_out():
    varied = {"batch_size": SIZES, "num_workers": [0, 2], "prefetch_factor": [2], "persistent_workers": [True]}
    space = SearchSpace({name: varied.get(name, [BASE[name]]) for name in KNOBS})
    plan = probe_plan(space, BASE)
    timed = ProbeResult([20000.0] * len(plan.loaders), [100.0 * k["batch_size"] for k in plan.computes])
    guide = Guide(ProbeModel(plan, timed), space, BASE)
    at_128 = {**BASE, "batch_size": 128}
    observations, measured = [Observation(BASE, 3200.0)], {config_key(BASE), config_key(at_128)}
    first = guide.propose(observations, measured, [])
    assert first.knobs == {**at_128, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    ran_out = [OutOfMemory(at_128, "trial 0", "OutOfMemoryError: CUDA out of memory")]  # the probe ran everything
    while (proposal := guide.propose(observations, measured, ran_out)) is not None:
        assert not needs_no_less_memory(proposal.knobs, at_128)
        observations.append(Observation(proposal.knobs, 100.0 * proposal.knobs["batch_size"]))
        measured.add(config_key(proposal.knobs))
    assert {(o.knobs["batch_size"], o.knobs["num_workers"]) for o in observations} >= {(64, 2)}


def test_a_probe_that_runs_out_of_memory_at_the_baselines_own_settings_fails_but_keeps_its_settings(tmp_path):
    study = open_study(settings(tmp_path), META)

    def anchor_too(plan):  # as if the baseline's batch ran out too
        computes = [None] * len(plan.computes)
        out = [ProbeOutOfMemory("compute", i, "OutOfMemoryError: CUDA out of memory") for i in range(len(computes))]
        return TrialResult(BASE, probe=ProbeResult([5000.0] * len(plan.loaders), computes, out))

    record = probe_once(study, SPACE, BASE, anchor_too, 200.0)
    assert record.failure.startswith("it ran out of memory at the baseline's own settings")
    assert len(record.out_of_memory) == len(record.plan.computes), "its settings still bound the search"


def test_a_probe_whose_model_step_raises_at_the_baselines_own_settings_fails_saying_what_it_raised(tmp_path):
    study = open_study(settings(tmp_path), META)

    def raising(plan):
        failed = [
            ProbeFailure("compute", i, "ValueError: this model cannot run forward") for i in range(len(plan.computes))
        ]
        return TrialResult(
            BASE, probe=ProbeResult([5000.0] * len(plan.loaders), [None] * len(plan.computes), [], failed)
        )

    record = probe_once(study, SPACE, BASE, raising, 200.0)
    assert record.failure.startswith("it raised ValueError: this model cannot run forward at the baseline's own")
    assert record.out_of_memory == [], "an error bounds no batch size"


@pytest.mark.slow
def test_the_cli_keeps_the_probe_measures_the_largest_batch_that_fits_and_recommends_it(tmp_path, cli_here):
    args = [
        "-cd",
        str(TEST_CONF),
        "pipeline=tiny",
        *FAST_MEASURE,
        "measure.device=cpu",
        "pipeline.model._target_=tests.fixtures.out_of_memory.OutOfMemoryAbove",
        "+pipeline.model.error=cublas",
        # Most of a step, even on a machine other tests load (which stretched a 0.06 s step's compute to ~85 ms at
        # batch 64): batch 64 trains ~1.7x as fast as 32 or better.
        "+pipeline.model.step_s=0.15",
        "pipeline.baseline.batch_size=32",
        "pipeline.dataset.length=512",
        *fixed_search(batch_size=SIZES),
        "study.probe=true",
        "study.n_trials=4",
        "study.confirm_rounds=0",
        f"hydra.run.dir={tmp_path}/out",
    ]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Kept, or discarded as contradicting the baseline on a machine other tests load: its out of memory counts.
    kept = "[probe] at the baseline the DataLoader alone gives" in proc.stdout
    assert kept or "contradict" in proc.stdout, proc.stdout
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert "128" not in {row["batch_size"] for row in rows}, "the probe showed batch 128 runs out of memory"
    assert any(row["batch_size"] == "64" and row["state"] == "complete" for row in rows)
    assert report["recommended"]["knobs"]["batch_size"] == 64, proc.stdout  # not "keep your current settings"
    assert report["batch_limit"] == {
        "fits": {"batch_size": 64, "shown_by": f"trial {report['recommended']['trial']}"},
        "out_of_memory": {"batch_size": 128, "shown_by": "the probe's model step at batch_size=128"},
    }
    assert "Batch size 128 ran out of memory (the probe's model step at batch_size=128)" in (
        (out / "report.md").read_text()
    )
