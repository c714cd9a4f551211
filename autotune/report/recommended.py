"""recommended.yaml: the chosen knob values, for the user's own training script to read."""

from __future__ import annotations

import yaml

from autotune.results.advice import batch_advice
from autotune.results.model import StudyResults
from autotune.results.summary import Summary


def render_recommended(results: StudyResults, summary: Summary) -> str:
    rec, base = summary.recommended, summary.baseline
    document = {
        "pipeline": results.pipeline,
        "device": results.device,
        "knobs": dict(rec.result.knobs),
        "baseline": dict(base.result.knobs),
        "throughput": {
            "recommended": round(summary.recommended_throughput, 2),
            "baseline": round(summary.baseline_throughput, 2),
            "speedup": round(summary.speedup, 3),
            "unit": "samples/s",
            "method": summary.throughput_basis,
        },
        "peak_memory_mb": {
            "recommended": round(rec.result.peak_memory_mb, 1),
            "baseline": round(base.result.peak_memory_mb, 1),
        },
        "training": _training(batch_advice(results, summary)),
    }
    header = f"# autotune recommendation for pipeline '{results.pipeline}' (study '{results.study_name}')\n"
    return header + yaml.safe_dump(document, sort_keys=False)


def _training(advice) -> dict:
    """How to train with the recommended batch: accumulation steps, and a learning rate where it changes."""
    training = {
        "batch_policy": advice.policy,
        "gradient_accumulation_steps": advice.accumulation_steps,
        "note": advice.describe(),
    }
    if advice.suggested_learning_rate is not None and advice.batch_size != advice.baseline_batch_size:
        training["learning_rate"] = {"baseline": advice.learning_rate, "suggested": advice.suggested_learning_rate}
    return training
