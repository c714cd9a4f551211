"""One table row per measured configuration, shared by every report format."""

from __future__ import annotations

from typing import Any

import pandas as pd

from autotune.knobs import KNOBS
from autotune.records import TrialRecord
from autotune.results.summary import Summary
from autotune.trial.result import Disturbance, FailureKind

# Up to this many slowed runs are named one by one in a report's text; more are counted (report.json names each).
NAMED_RUNS = 5

# The figure a configuration is ranked by (``Summary.standing``): where it comes from, samples/s and the speedup.
STANDING_COLUMNS = ["measured", "ranked_sps", "ranked_speedup"]

MEASUREMENT_COLUMNS = [
    "throughput_sps",
    "throughput_ci95_low",
    "throughput_ci95_high",
    "mean_step_ms",
    "median_step_ms",
    "step_iqr_ms",
    "data_stall_fraction",
    "transfer_ms_per_step",
    "compile_s",
    "warmup_steps",
    "window_steps",
    "window_s",
    "peak_memory_mb",
    "host_peak_memory_mb",
    "memory_metric",
    "window_memory_growth_mb",
    "cuda_peak_allocated_mb",
    "cuda_peak_reserved_mb",
    "cpu_percent",
    "process_tree_cores",
    "other_processes_cores",
    "other_processes_busy",
    "gpu_utilization_percent",
    "gflops_per_sample",
    "achieved_gflops_per_s",
]


def record_row(record: TrialRecord, rank: int | None, summary: Summary) -> dict[str, Any]:
    """Knob values (and the gradient-accumulation steps they train with), state, the figure it is ranked by
    (``STANDING_COLUMNS``: a race's where one measured it), and the measurement of its own run (or failure) of one
    record of ``summary``, as flat plain values."""
    result = record.result
    row: dict[str, Any] = {"trial": record.label, "rank": rank, "state": record_state(record)}
    twin = summary.twin if record is summary.recommended else None
    row["same_as"] = twin.label if twin else None  # the trial whose configuration it is, ranked as it (``twin``)
    row.update({name: result.knobs[name] for name in KNOBS})
    row["gradient_accumulation_steps"] = summary.accumulation_steps(record)
    row.update(dict.fromkeys([*STANDING_COLUMNS, *MEASUREMENT_COLUMNS]))
    if result.measurement:  # measured, though over the memory budget or pruned: its figure stands beside its state
        standing = summary.standing(record)
        row.update(measured=standing.measured, ranked_sps=standing.throughput, ranked_speedup=standing.speedup)
        row.update(_measurement_columns(result.measurement))
    check = result.loss_check
    row.update(
        first_loss=check.first_loss if check else None,
        fp32_first_loss=check.fp32_loss if check else None,
        fp32_first_loss_spread=check.fp32_spread if check else None,
        wall_s=result.wall_s,
        cores_slowdown=result.core_speed.slowdown if result.core_speed else None,  # around the run: CoreSpeed
        disturbance=disturbance_words(slowed) if (slowed := result.disturbance) else None,
        failure_kind=result.failure.kind.value if result.failure else None,
        failure_reason=result.failure.message if result.failure else None,
    )
    return row


def record_state(record: TrialRecord) -> str:
    """complete, pruned (stopped early as clearly slower), infeasible (measured, but over the memory
    budget or with a wrong loss) or failed."""
    result = record.result
    if result.ok:
        return "complete"
    if result.failure.kind is FailureKind.PRUNED:
        return "pruned"
    return "infeasible" if result.measurement is not None else "failed"


def _measurement_columns(m) -> dict[str, Any]:
    timing, memory, compute, system = m.timing, m.memory, m.compute, m.system
    flops = compute.flops_per_sample
    return {
        "throughput_sps": timing.throughput,
        "throughput_ci95_low": timing.throughput_ci95_low,
        "throughput_ci95_high": timing.throughput_ci95_high,
        "mean_step_ms": timing.mean_step_s * 1e3,
        "median_step_ms": timing.median_step_s * 1e3,
        "step_iqr_ms": timing.step_iqr_s * 1e3,
        "data_stall_fraction": timing.data_stall_fraction,
        "transfer_ms_per_step": timing.transfer_s / timing.steps * 1e3,
        "compile_s": timing.compile_s,
        "warmup_steps": timing.warmup_steps,
        "window_steps": timing.steps,
        "window_s": timing.window_s,
        "peak_memory_mb": memory.limiting_peak_mb,  # the GPU's on CUDA: the memory every decision used
        "host_peak_memory_mb": memory.peak_mb,
        "memory_metric": memory.metric,
        "window_memory_growth_mb": memory.window_growth_mb,
        "cuda_peak_allocated_mb": memory.cuda_peak_allocated_mb,
        "cuda_peak_reserved_mb": memory.cuda_peak_reserved_mb,
        "cpu_percent": system.cpu_total_percent,
        "process_tree_cores": system.process_tree_cores,
        "other_processes_cores": system.other_processes_cores,
        "other_processes_busy": system.disturbed,  # they competed for its cores: it may read low
        "gpu_utilization_percent": system.gpu_utilization_percent,
        "gflops_per_sample": flops / 1e9 if flops is not None else None,
        "achieved_gflops_per_s": compute.achieved_flops_per_s / 1e9 if flops is not None else None,
    }


def disturbance_words(disturbance: Disturbance) -> str:
    """What disturbed a run, in words: "other processes busy (0.8 cores)", "1 other process on the GPU", "the cores
    ran 1.4x slow", joined by "; "."""
    found = []
    if disturbance.others_cores is not None:
        found.append(f"other processes busy ({disturbance.others_cores:.1f} cores)")
    if count := disturbance.gpu_processes:
        found.append(f"{count} other process{'es' if count > 1 else ''} on the GPU")
    if disturbance.cores_slowdown is not None:
        found.append(f"the cores ran {disturbance.cores_slowdown:.1f}x slow")
    return "; ".join(found)


def slowed_in_words(slowed: dict[str, Disturbance]) -> str:
    """The runs ``slowed`` (by name) and what slowed them: each named, where they are up to NAMED_RUNS; else counted
    by what slowed them, with how much."""
    if len(slowed) <= NAMED_RUNS:
        return "; ".join(f"{name}: {disturbance_words(disturbance)}" for name, disturbance in slowed.items())
    return _kinds(list(slowed.values()))


def _kinds(disturbances: list[Disturbance]) -> str:
    """What slowed ``disturbances``' runs, by kind, each with how many runs (a run slowed two ways counts under both)
    and, for the cores and other processes' CPU, the span of how much."""
    slow = [d.cores_slowdown for d in disturbances if d.cores_slowdown is not None]
    busy = [d.others_cores for d in disturbances if d.others_cores is not None]
    on_gpu = [d.gpu_processes for d in disturbances if d.gpu_processes]
    found = [f"the cores ran {_span(slow)}x slow in {len(slow)} of them"] if slow else []
    found += [f"other processes busy ({_span(busy)} cores) in {len(busy)} of them"] if busy else []
    found += [f"other processes on the GPU in {len(on_gpu)} of them"] if on_gpu else []
    return ", ".join(found)


def _span(values: list[float]) -> str:
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}-{high}"


def ranked_rows(summary: Summary) -> list[dict[str, Any]]:
    """Rows in ranking order; records not complete have no rank and come last."""
    return [
        record_row(record, rank if record.result.ok else None, summary)
        for rank, record in enumerate(summary.ranked, start=1)
    ]


def marked(row: dict[str, Any], summary: Summary) -> str:
    """A ranked row's trial label, marked where it is the recommendation and where something disturbed its own run
    (which may read low, though the row shows a race's median: ``busy_note``)."""
    label, twin, recommended = row["trial"], summary.twin, ""
    if label == summary.recommended.label and not summary.is_baseline:
        recommended = f" (recommended; trial {twin.label}'s configuration)" if twin else " (recommended)"
    return f"{label}{recommended}{' (busy)' if row['disturbance'] else ''}"


def busy_note(rows: list[dict[str, Any]]) -> str:
    """What "(busy)" in the ranked rows means, where a row has it."""
    if not any(row["disturbance"] for row in rows):
        return ""
    return (
        " (busy): something slowed the configuration's own run (other processes on its cores or its GPU, or its cores"
        " ran slow), so that run may read low; where the row shows a race's median, the mark is of that run, not of "
        "the race."
    )


def ranked_frame(summary: Summary) -> pd.DataFrame:
    """The ranked rows as a table; knob columns keep their values as given (1 stays 1 beside a null)."""
    rows = ranked_rows(summary)
    frame = pd.DataFrame(rows)
    frame["rank"] = frame["rank"].astype("Int64")  # stays an integer beside the unranked (pruned, failed)
    for name in KNOBS:
        frame[name] = pd.Series([row[name] for row in rows], dtype=object)
    return frame
