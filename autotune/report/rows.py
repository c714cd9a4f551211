"""One table row per measured configuration, shared by every report format."""

from __future__ import annotations

from typing import Any

import pandas as pd

from autotune.knobs import KNOBS
from autotune.results.model import TrialRecord
from autotune.results.summary import Summary


def record_row(record: TrialRecord, rank: int | None, baseline_throughput: float) -> dict[str, Any]:
    """Knob values, state, and the measurement (or failure) of one record, as flat plain values."""
    result, timing = record.result, record.result.timing
    row: dict[str, Any] = {"trial": record.label, "rank": rank, "state": "complete" if result.ok else "failed"}
    row.update({name: result.knobs[name] for name in KNOBS})
    row.update(
        throughput_sps=timing.throughput if timing else None,
        speedup=timing.throughput / baseline_throughput if timing else None,
        mean_step_ms=timing.mean_step_s * 1e3 if timing else None,
        median_step_ms=timing.median_step_s * 1e3 if timing else None,
        data_stall_fraction=timing.data_stall_fraction if timing else None,
        compile_s=timing.compile_s if timing else None,
        window_steps=timing.steps if timing else None,
        window_s=timing.window_s if timing else None,
        peak_memory_mb=result.memory.peak_mb if result.memory else None,
        memory_metric=result.memory.metric if result.memory else None,
        cuda_peak_mb=result.cuda_peak_mb,
        wall_s=result.wall_s,
        failure_kind=result.failure.kind.value if result.failure else None,
        failure_reason=result.failure.message if result.failure else None,
    )
    return row


def ranked_rows(summary: Summary) -> list[dict[str, Any]]:
    """Rows in ranking order; failed records have no rank and come last."""
    base = summary.baseline.throughput
    return [
        record_row(record, rank if record.result.ok else None, base)
        for rank, record in enumerate(summary.ranked, start=1)
    ]


def ranked_frame(summary: Summary) -> pd.DataFrame:
    return pd.DataFrame(ranked_rows(summary))
