"""recommended.yaml: the chosen knob values, for the user's own training script to read (``load_recommended``)."""

from __future__ import annotations

import yaml

from autotune.measure.environment import machine_fingerprint
from autotune.recommendation import Measured, Recommendation, Training
from autotune.results.advice import BatchAdvice, batch_advice
from autotune.results.model import StudyResults
from autotune.results.summary import Summary


def recommendation(results: StudyResults, summary: Summary) -> Recommendation:
    """The study's recommendation as the API a training script reads."""
    rec, base = summary.recommended, summary.baseline
    return Recommendation(
        knobs=dict(rec.result.knobs),
        baseline=dict(base.result.knobs),
        pipeline=results.pipeline,
        study=results.study_name,
        device=results.device,
        # torch's default threads there: what num_threads: null ran with (not part of the machine's identity)
        machine=machine_fingerprint(results.machine) | {"torch_threads": results.machine.get("torch_threads")},
        measured=Measured(
            throughput=round(summary.recommended_throughput, 2),
            baseline_throughput=round(summary.baseline_throughput, 2),
            speedup=round(summary.speedup, 3),
            method=f"{summary.throughput_basis}; the speedup: {summary.speedup_basis}",
            peak_memory_mb=round(rec.result.peak_memory_mb, 1),
            baseline_peak_memory_mb=round(base.result.peak_memory_mb, 1),
        ),
        training=_training(batch_advice(results, summary)),
        no_difference=dict(summary.no_difference),
        untrimmed=summary.untrimmed,
    )


def render_recommended(results: StudyResults, summary: Summary) -> str:
    header = (
        f"# autotune recommendation for pipeline {_one_line(results.pipeline)} "
        f"(study {_one_line(results.study_name)}).\n"
        "# In a training script: autotune.load_recommended(this file); see examples/train_with_recommended.py\n"
    )
    return header + yaml.safe_dump(recommendation(results, summary).to_document(), sort_keys=False)


def _training(advice: BatchAdvice) -> Training:
    """How to train with the recommended batch: accumulation steps, a learning rate where it changes, and the rule
    it scales by (the optimizer's), which ``Recommendation.learning_rate`` applies in the training script."""
    changed = advice.suggested_learning_rate is not None and advice.batch_size != advice.baseline_batch_size
    return Training(
        batch_policy=advice.policy,
        accumulation_steps=advice.accumulation_steps,
        note=advice.describe(),
        baseline_learning_rate=advice.learning_rate if changed else None,
        suggested_learning_rate=advice.suggested_learning_rate if changed else None,
        learning_rate_rule=advice.rule,
    )


def _one_line(name: str) -> str:
    """``name`` quoted and escaped on one line (``repr``): a newline in it would end the comment and start YAML."""
    return repr(name)
