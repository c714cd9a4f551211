"""recommended.yaml: the chosen knob values, for the user's own training script to read (``load_recommended``)."""

from __future__ import annotations

import re
import textwrap
from typing import Any

import yaml

from autotune.knobs import KNOBS, Knob
from autotune.measure.environment import machine_fingerprint
from autotune.measure.stats import RatioInterval
from autotune.recommendation import APPLIED_BY, Measured, Recommendation, Training
from autotune.report.headline import unsteady_note
from autotune.results.advice import BatchAdvice, batch_advice
from autotune.results.model import StudyResults
from autotune.results.summary import Summary

# What each top-level field of recommended.yaml (``Recommendation.to_document``) holds and how it is used: the
# comment written above it. A knob's comment comes from the knob (``_knob_comment``).
FIELD_COMMENTS = {
    "schema_version": "The layout of this file: autotune.load_recommended reads layouts up to its own and refuses "
    "a newer one.",
    "pipeline": "The pipeline tuned.",
    "study": "The study (study.name) whose trials and races measured this recommendation.",
    "device": "The device the trials trained on: the process settings are applied for it, and the machine check "
    "compares its GPU.",
    "machine": "The machine and software that measured it: load_recommended warns (MachineMismatchWarning) where "
    "yours differs, as the gains may not hold there. torch_threads: torch's default thread count there, what "
    "num_threads: null ran with, which rec.apply_process_settings() sets on a machine like it.",
    "knobs": "The recommended value of every knob. In a training script, rec = autotune.load_recommended(this file); "
    "the calls named above each knob apply it as the trials did.",
    "baseline": "The knob values your pipeline ran before tuning (pipeline.baseline), the reference of every figure; "
    "rec.learning_rate(lr) scales from its batch_size.",
    "no_difference": "Changes tried on top of the recommendation whose undoing cost nothing beyond noise: left out of "
    "knobs, so not applied.",
    "untrimmed": "true: the trim, which undoes each change in knobs in turn, did not run to its end, or no race ran, "
    "so a change may be kept that does nothing; load_recommended then warns (UntrimmedWarning). false: each was "
    "raced undone, and kept where its undoing read slower or was not shown to cost nothing (mode=benchmark measures "
    "each change's share).",
    "throughput": "Training samples/s with the recommended knobs and with the baseline's, and the speedup of one over "
    "the other; method says how they were measured; interval: the speedup's 95 % interval over the races' paired "
    "rounds (null from fewer than two); unsteady: null, or how far apart the baseline's race medians read where the "
    "machine's speed did not hold through the study: none of these figures stands, and mode=benchmark compares "
    "nothing with them.",
    "peak_memory_mb": "Peak memory in MiB of the runs the throughputs are of (the race's medians, else a run of each): "
    "on a GPU what CUDA's caching allocator reserved, on a CPU that of the training process and its DataLoader "
    "workers.",
    "training": "How to train with the recommended batch: the batch policy, the gradient accumulation steps (rec."
    "accumulation_steps) and, under batch_policy free, the rule rec.learning_rate(lr) scales your learning rate by.",
}
# The width recommended.yaml's comments are wrapped to.
COMMENT_WIDTH = 118


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
            method=f"{summary.throughput_basis}; the speedup: {summary.speedup_basis}" + _unsteady(summary),
            peak_memory_mb=round(summary.recommended_peak_memory_mb, 1),
            baseline_peak_memory_mb=round(summary.baseline_peak_memory_mb, 1),
            interval=_rounded(summary.gain_interval),
            unsteady=round(summary.unsteady, 2) if summary.unsteady else None,
        ),
        training=_training(batch_advice(results, summary)),
        no_difference=dict(summary.no_difference),
        untrimmed=summary.untrimmed,
    )


def _unsteady(summary: Summary) -> str:
    """That none of the figures stands, where the machine's speed did not hold (``unsteady_note``), to end the
    throughput's method; empty elsewhere."""
    note = unsteady_note(summary)
    return f".{note}" if note else ""


def render_recommended(results: StudyResults, summary: Summary) -> str:
    """recommended.yaml's text: a header, then each top-level field of the recommendation's document with a comment
    above it (``FIELD_COMMENTS``), and each knob with one from the knob (``_knob_comment``). The comments leave the
    YAML as ``yaml.safe_dump`` writes it: the file reads back as the document."""
    header = (
        f"# autotune recommendation for pipeline {_one_line(results.pipeline)} "
        f"(study {_one_line(results.study_name)}).\n"
        "# In a training script: autotune.load_recommended(this file); see examples/train_with_recommended.py\n"
    )
    document = recommendation(results, summary).to_document()
    return header + "".join(_field(key, value) for key, value in document.items())


def _field(key: str, value: Any) -> str:
    """A top-level field of recommended.yaml after a blank line and its comment; the knobs each with its own."""
    text = "\n" + _comment(FIELD_COMMENTS[key])
    if key != "knobs":
        return text + _dumped(key, value)
    knobs = "".join(
        _comment(_knob_comment(KNOBS[name], value), "  ") + _dumped(name, v, "  ") for name, v in value.items()
    )
    return text + "knobs:\n" + knobs


def _knob_comment(knob: Knob, knobs: dict[str, Any]) -> str:
    """What ``knob`` is (its description's first sentence), why it is null where it does not apply beside the others
    of ``knobs``, and where a training script applies it, by which calls (``APPLIED_BY`` its targets)."""
    what = re.split(r"(?<=\.)\s+(?=[A-Z])", knob.description, maxsplit=1)[0]
    inactive = f" null: it {knob.inactive_because}." if knobs[knob.name] is None and not knob.active(knobs) else ""
    return f"{what}{inactive} Applied {'; '.join(APPLIED_BY[target] for target in knob.applies_to)}."


def _comment(text: str, indent: str = "") -> str:
    """``text`` as YAML comment lines at ``indent``, wrapped to COMMENT_WIDTH."""
    prefix = indent + "# "
    return textwrap.fill(text, COMMENT_WIDTH, initial_indent=prefix, subsequent_indent=prefix) + "\n"


def _dumped(key: str, value: Any, indent: str = "") -> str:
    """``key: value`` as ``yaml.safe_dump`` writes it within a mapping, at ``indent``."""
    return textwrap.indent(yaml.safe_dump({key: value}, sort_keys=False), indent)


def _rounded(interval: RatioInterval | None) -> RatioInterval | None:
    """``interval`` at the file's precision: the speedup's three decimals."""
    if interval is None:
        return None
    return RatioInterval(round(interval.geomean, 3), round(interval.low, 3), round(interval.high, 3), interval.n)


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
