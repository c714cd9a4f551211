"""What the terminal shows: a line per trial as it finishes, and the summary at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from autotune.knobs import KNOBS
from autotune.records import ProbeRecord
from autotune.report.headline import headline, metric
from autotune.report.profiles import current_profiles, summary_lines
from autotune.report.rows import disturbance_words, marked, ranked_frame, ranked_rows
from autotune.report.study_document import RANKED_COLUMNS, ranked_basis
from autotune.report.tuner_time import budget_lines, forecast_lines, tuner_time_line
from autotune.results.advice import BatchAdvice
from autotune.results.profile import TunedProfiles
from autotune.results.summary import Summary
from autotune.results.tuner_time import TunerTime
from autotune.trial.result import FailureKind, TrialResult

# The measured columns of the ranked table, as the report's ranking names them (trials.csv keeps the field names).
_MEASURED_COLUMNS = {
    key: title
    for key, title in RANKED_COLUMNS
    if key in ("measured", "ranked_sps", "ranked_speedup", "data_stall_fraction", "peak_memory_mb")
}


def format_knobs(knobs: dict[str, Any], baseline: dict[str, Any] | None = None) -> str:
    """``name=value`` for every knob, or only for those that differ from ``baseline``."""
    shown = [f"{name}={value}" for name, value in knobs.items() if baseline is None or baseline.get(name) != value]
    return " ".join(shown) or "the baseline's settings"


def format_not_measured(knobs: dict[str, Any], baseline: TrialResult, reason: str) -> str:
    """``knobs -> not measured: reason``, the knobs that differ from ``baseline``'s: a configuration ruled out."""
    return f"{format_knobs(knobs, baseline.knobs)} -> not measured: {reason}"


def format_result(
    result: TrialResult, baseline: TrialResult | None = None, reference: TrialResult | None = None, ratio: bool = True
) -> str:
    """``knobs -> throughput (speedup), memory``, or the failure reason; with ``baseline``, only the knobs
    that differ from it are shown and the speedup is against it, or against ``reference`` (another run of the
    baseline) where given; none without ``ratio``."""
    knobs = format_knobs(result.knobs, baseline.knobs if baseline else None)
    if not result.ok:
        if result.measurement is not None:
            verdict = f"INFEASIBLE at {result.timing.throughput:.1f} samples/s: {result.failure.message}"
        elif result.failure.kind is FailureKind.PRUNED:
            verdict = f"PRUNED {result.failure.message}"
        else:
            verdict = f"FAILED {result.failure}"
        return f"{knobs} -> {verdict} ({result.wall_s:.1f} s)"
    against = reference or baseline
    shown = ratio and against and against.ok and result.knobs != against.knobs  # the baseline run again: no multiple
    speedup = f" ({result.timing.throughput / against.timing.throughput:.2f}x)" if shown else ""
    compile_note = f", compile {result.timing.compile_s:.1f} s" if result.timing.compile_s else ""
    runs = result.repeat_throughputs or []
    if len(runs) > 1:
        compile_note += f", median of {len(runs)} runs ({min(runs):.1f}-{max(runs):.1f})"
    if result.disturbance:
        compile_note += f", {disturbance_words(result.disturbance)}: may read low"
    return (
        f"{knobs} -> {result.timing.throughput:.1f} samples/s{speedup}, "
        f"data wait {result.timing.data_stall_fraction:.0%}, peak {result.peak_memory_mb:.0f} MiB"
        f"{compile_note} ({result.wall_s:.1f} s)"
    )


def format_probe(probe: ProbeRecord) -> str:
    """What the differential probe found."""
    if not probe.ok:
        later = "; a later run probes anew" if probe.retry else ""  # for want of time, not by what it read
        return f"the differential probe failed ({probe.failure}); the search goes on without it{later}"
    failed = probe.result.failed if probe.result else []
    raised = f"; {len(failed)} of its settings raised (first: {failed[0].message})" if failed else ""
    spread = probe.timing_spread
    noise = ""
    if spread is not None:
        noise = f"; one model step timing varies by {'under 1%' if spread < 0.005 else f'up to {spread:.0%}'} here"
    if spread is not None and probe.timing_move is not None and probe.timing_move > spread:
        noise += f", the machine's speed moved by up to {probe.timing_move:.0%} while it ran"
    return (
        f"at the baseline the DataLoader alone gives {probe.baseline_loader_sps:.1f} samples/s and the model "
        f"step alone {probe.baseline_compute_sps:.1f} samples/s{noise}; trials follow its predictions{raised} "
        f"({probe.wall_s:.1f} s)"
    )


def print_summary(
    summary: Summary,
    files: dict[str, Path],
    status: str,
    out: TextIO,
    profiles: TunedProfiles | None = None,
    tuner_time: TunerTime | None = None,
    training: BatchAdvice | None = None,
) -> None:
    """The run's ``status`` (why it stopped), the ranked table, the headline, what a changed batch size means for
    training (``training``, where the recommendation changes it and the study stands: ``Summary.unsteady``), what
    limits the baseline and the recommendation where ``profiles`` (the study's) are of these two, the files written,
    then where the tuner's time went (where the study recorded it: ``tuner_time``)."""
    frame = ranked_frame(summary)
    # Marked from the rows themselves, not the frame's records: the frame turns a clean row's None into NaN, truthy.
    frame["trial"] = [marked(row, summary) for row in ranked_rows(summary)]
    states = list(frame["state"])
    varied = [name for name in KNOBS if frame[name].nunique(dropna=False) > 1]  # fixed knobs say nothing here
    frame = frame[["rank", "trial", *varied, *_MEASURED_COLUMNS]]
    frame["data_stall_fraction"] = [metric("data_stall_fraction", share) for share in frame["data_stall_fraction"]]
    frame = frame.rename(columns=_MEASURED_COLUMNS)
    # Unranked (pruned, infeasible, failed): its state in place of a rank (to_string's na_rep skips nullable integers).
    frame["rank"] = [state if pd.isna(rank) else rank for rank, state in zip(frame["rank"], states, strict=True)]
    print(f"\n{status}.", file=out)
    print(frame.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.2f}"), file=out)
    print(ranked_basis(summary), file=out)
    print(f"\n{headline(summary)}", file=out)
    if training is not None and training.batch_size != training.baseline_batch_size and not summary.unsteady:
        print(f"Training: {training.describe()}", file=out)
    if current := current_profiles(profiles, summary):
        print("\n".join(summary_lines(current)), file=out)
    for name, path in files.items():
        print(f"  {name:<17} {path}", file=out)
    if tuner_time is not None:
        lines = [*forecast_lines(tuner_time), tuner_time_line(tuner_time), *budget_lines(tuner_time)]
        print("\n".join(lines), file=out)
