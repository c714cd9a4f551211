"""report.md: before vs after, every trial ranked, how it was measured, and the machine."""

from __future__ import annotations

import html
from typing import Any

from autotune.knobs import KNOBS
from autotune.report.rows import ranked_rows, record_row
from autotune.results.model import StudyResults
from autotune.results.summary import Summary

_BEFORE_AFTER_METRICS = [
    ("throughput_sps", "throughput (samples/s)"),
    ("median_step_ms", "median step (ms)"),
    ("step_iqr_ms", "step interquartile range (ms)"),
    ("data_stall_fraction", "data wait share"),
    ("transfer_ms_per_step", "host-to-device per step (ms)"),
    ("compile_s", "compile (s)"),
    ("process_tree_cores", "CPU cores busy (process tree)"),
    ("gpu_utilization_percent", "GPU utilisation (%)"),
    ("achieved_gflops_per_s", "achieved GFLOP/s"),
    ("peak_memory_mb", "peak memory (MB)"),
    ("window_memory_growth_mb", "memory growth in window (MB)"),
    ("cuda_peak_allocated_mb", "CUDA peak allocated (MB)"),
]
_RANKED_COLUMNS = [
    ("rank", "rank"),
    ("trial", "trial"),
    *[(name, name) for name in KNOBS],
    ("throughput_sps", "samples/s"),
    ("speedup", "vs baseline"),
    ("mean_step_ms", "step ms"),
    ("data_stall_fraction", "data wait"),
    ("compile_s", "compile s"),
    ("peak_memory_mb", "peak MB"),
]


def render_markdown(results: StudyResults, summary: Summary) -> str:
    sections = [
        f"# autotune report: {_text(results.pipeline)}",
        headline(summary),
        "## Before and after\n\n" + _before_after(summary),
        "## All configurations, fastest first\n\n" + _ranked(summary),
        _failures(summary),
        "## How it was measured\n\n" + _method(results),
        "## Machine\n\n" + _machine(results.machine, results.device),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def headline(summary: Summary) -> str:
    """One sentence: what to change and what it gained, or that the baseline is best."""
    base, rec = summary.baseline, summary.recommended
    if summary.is_baseline:
        return (
            f"**Keep your current settings.** No configuration measured faster than the baseline "
            f"({base.throughput:.1f} samples/s)."
        )
    changes = ", ".join(f"{name} {before} → {after}" for name, (before, after) in summary.changed_knobs().items())
    return (
        f"**Recommended (trial {rec.label}): {summary.speedup:.2f}x the baseline's throughput** "
        f"({rec.throughput:.1f} vs {base.throughput:.1f} samples/s) by changing {changes}. "
        f"Peak memory {base.result.peak_memory_mb:.0f} → {rec.result.peak_memory_mb:.0f} MB."
    )


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _before_after(summary: Summary) -> str:
    base_throughput = summary.baseline.throughput
    before, after = (record_row(r, None, base_throughput) for r in (summary.baseline, summary.recommended))
    rows = [[name, before[name], after[name]] for name in KNOBS]
    rows.append(["throughput 95% CI (within run)", _interval(before), _interval(after)])
    rows += [[title, before[key], after[key]] for key, title in _BEFORE_AFTER_METRICS]
    return markdown_table(["", "baseline", "recommended"], rows)


def _interval(row: dict[str, Any]) -> str:
    return f"{row['throughput_ci95_low']:.1f} – {row['throughput_ci95_high']:.1f}"


def _ranked(summary: Summary) -> str:
    rows = [row for row in ranked_rows(summary) if row["state"] == "complete"]
    return markdown_table(
        [title for _, title in _RANKED_COLUMNS], [[row[key] for key, _ in _RANKED_COLUMNS] for row in rows]
    )


def _failures(summary: Summary) -> str:
    failed = [row for row in ranked_rows(summary) if row["state"] == "failed"]
    if not failed:
        return ""
    rows = [
        [row["trial"], *(row[name] for name in KNOBS), row["failure_kind"], row["failure_reason"]] for row in failed
    ]
    return "## Failed configurations\n\n" + markdown_table(["trial", *KNOBS, "failure", "reason"], rows)


def _method(results: StudyResults) -> str:
    plan = results.measure
    warmup = plan["warmup"]
    return (
        f"Each configuration ran in a fresh process on `{results.device}`. Warm-up (compilation happens here and "
        f"is reported as compile s) lasted until the median of the last {warmup['span']} step times was within "
        f"{warmup['tolerance']:.0%} of the {warmup['span']} before ({warmup['min_steps']} to {warmup['max_steps']} "
        f"steps), then a timed window of at least "
        f"{plan['min_steps']} steps and {plan['min_time_s']:g} s (at most {plan['max_time_s']:g} s). "
        "Throughput is samples in the window divided by its wall time; data wait is the share of the window "
        "spent blocked on the next batch. Peak memory sums the trial's process tree (DataLoader workers "
        "included) using PSS where the OS provides it, so shared pages are not counted twice. Each figure is "
        "one measurement: differences of a few percent can be run-to-run noise."
    )


def _machine(machine: dict[str, Any], device: str) -> str:
    gpu = machine.get("gpu") or "none"
    return "\n".join(
        [
            f"- CPU: {machine['cpu_model']} "
            f"({machine['cpu_count']} usable cores, {machine['physical_cores']} physical)",
            f"- Memory: {machine['memory_gb']} GB",
            f"- GPU: {gpu}; device used: {device}",
            f"- torch {machine['torch']} (CUDA {machine['cuda'] or 'none'}, cuDNN {machine['cudnn'] or 'none'}), "
            f"Python {machine['python']}, {machine['torch_threads']} torch threads",
            f"- Platform: {machine['platform']}",
        ]
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return _text(value).replace("|", "\\|")


def _text(value: Any) -> str:
    """User-controlled text (names, error messages) made inert: Markdown viewers render raw HTML."""
    return html.escape(str(value), quote=False)
