"""torch.compile's cost up front in a recommendation, and the training steps after which it has paid it back."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from autotune.knobs import KNOBS
from autotune.results.compile_payback import CompilePayback, compile_payback
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.study.run_race import run_race
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.trim import run_trim
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement
from tests.study.test_tuner import META, settings

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
COMPILED = {**BASELINE, "batch_size": 64, "compile": "default"}


def test_the_payback_is_the_compile_time_over_the_time_each_step_saves():
    payback = CompilePayback(compile_s=30.0, compiled_sps=200.0, plain_sps=100.0, plain_by="x", batch_size=50)
    assert payback.steps == pytest.approx(30.0 / (0.5 - 0.25)), "a step of 50 samples: 0.5 s plain, 0.25 s compiled"
    (said,) = payback.sentences()
    assert "takes 30 s before the first training step" in said
    assert "after 120 batches of 50 (about 30 s of training): worth it for runs longer than that" in said
    assert replace(payback, compiled_sps=90.0).steps is None, "slower compiled: it never pays back"
    assert "never pays back" in replace(payback, compiled_sps=90.0).sentences()[0]
    assert replace(payback, plain_sps=None).steps is None
    unmeasured = replace(payback, plain_sps=None).sentences()[0]
    assert "the recommendation without it, every other knob as recommended, was not measured" in unmeasured
    assert unmeasured.endswith("payback is unknown (mode=benchmark measures it: recommended - compile).")


class Pipeline:
    """Batch 64 is 1.6x batch 16, compile 1.5x more after 30 s of compiling; runs wobble by +-2 %."""

    def __init__(self):
        self.wobble = itertools.cycle([1.02, 0.98, 1.0])

    def __call__(self, knobs, name, on_progress=None):
        compiled = knobs["compile"] != "off"
        value = 100.0 * (1.6 if knobs["batch_size"] == 64 else 1.0) * (1.5 if compiled else 1.0)
        measurement = fake_measurement(value * next(self.wobble))
        measurement = replace(measurement, timing=replace(measurement.timing, compile_s=30.0 if compiled else 0.0))
        return TrialResult(knobs=dict(knobs), measurement=measurement)


def test_a_compiled_recommendation_is_paid_back_against_its_twin_in_the_trims_race(tmp_path):
    study = open_study(settings(tmp_path), META)
    pipeline = Pipeline()
    ensure_baseline(study, BASELINE, pipeline)
    study.enqueue_trial(COMPILED)
    space = SearchSpace(
        {name: sorted({BASELINE[name], COMPILED[name]}, key=str) for name in KNOBS},
    )
    tune(study, space, settings(tmp_path, n_trials=1), pipeline, lambda e: None)
    confirmation = run_race(study, load_results(study), 3, pipeline, lambda name, result: None)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    results = load_results(study)
    summary = summarise(results)
    assert summary.recommended.result.knobs == COMPILED
    payback = compile_payback(results, summary)
    assert payback.plain_by == "medians of the trim's race" and payback.compile_s == 30.0
    assert payback.plain_sps == pytest.approx(160.0, rel=0.03) and payback.compiled_sps == pytest.approx(240, rel=0.03)
    assert payback.steps == pytest.approx(30.0 / (64 / 160 - 64 / 240), rel=0.1)

    baseline_only = replace(summary, recommended=summary.baseline)
    assert compile_payback(results, baseline_only) is None, "nothing compiled: nothing to pay back"
