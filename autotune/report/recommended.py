"""recommended.yaml: the chosen knob values, for the user's own training script to read."""

from __future__ import annotations

import yaml

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
            "recommended": round(rec.throughput, 2),
            "baseline": round(base.throughput, 2),
            "speedup": round(summary.speedup, 3),
            "unit": "samples/s",
        },
        "peak_memory_mb": {
            "recommended": round(rec.result.peak_memory_mb, 1),
            "baseline": round(base.result.peak_memory_mb, 1),
        },
    }
    header = f"# autotune recommendation for pipeline '{results.pipeline}' (study '{results.study_name}')\n"
    return header + yaml.safe_dump(document, sort_keys=False)
