"""What the terminal shows: a line per trial as it finishes, and the summary at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from autotune.knobs import KNOBS
from autotune.report.document import headline
from autotune.report.rows import ranked_frame
from autotune.results.summary import Summary
from autotune.trial.result import TrialResult

_SUMMARY_COLUMNS = ["rank", "trial", *KNOBS, "throughput_sps", "speedup", "data_stall_fraction", "peak_memory_mb"]


def format_knobs(knobs: dict[str, Any]) -> str:
    return " ".join(f"{name}={value}" for name, value in knobs.items())


def format_result(result: TrialResult, baseline_throughput: float | None = None) -> str:
    """``knobs -> throughput (speedup), memory``, or the failure reason."""
    if not result.ok:
        return f"{format_knobs(result.knobs)} -> FAILED {result.failure} ({result.wall_s:.1f} s)"
    speedup = f" ({result.timing.throughput / baseline_throughput:.2f}x)" if baseline_throughput else ""
    compile_note = f", compile {result.timing.compile_s:.1f} s" if result.timing.compile_s else ""
    runs = result.repeat_throughputs or []
    if len(runs) > 1:
        compile_note += f", median of {len(runs)} runs ({min(runs):.1f}-{max(runs):.1f})"
    return (
        f"{format_knobs(result.knobs)} -> {result.timing.throughput:.1f} samples/s{speedup}, "
        f"data wait {result.timing.data_stall_fraction:.0%}, peak {result.peak_memory_mb:.0f} MB"
        f"{compile_note} ({result.wall_s:.1f} s)"
    )


def print_summary(summary: Summary, files: dict[str, Path], stop_reason: str, out: TextIO) -> None:
    frame = ranked_frame(summary)[_SUMMARY_COLUMNS]
    print(f"\nStopped: {stop_reason}.", file=out)
    print(frame.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.2f}"), file=out)
    print(f"\n{headline(summary)}", file=out)
    for name, path in files.items():
        print(f"  {name:<17} {path}", file=out)
