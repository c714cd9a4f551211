"""The benchmark's record as benchmark.json, benchmark.md and benchmark.html, and its table on the terminal; nothing
here measures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from autotune.files import write_atomic
from autotune.knobs import accumulated_to, conflict, device_kind
from autotune.report.document import Document, Headline, Section, Table, machine_lines
from autotune.report.html_report import to_html
from autotune.report.markdown import markdown_table, to_markdown
from autotune.report.plots import benchmark_ratios
from autotune.results.benchmark import Benchmark, Entry, share_knobs
from autotune.words import counted, ratio_bounds

_HEADERS = [
    "configuration",
    "samples/s (median)",
    "vs baseline (paired)",
    "95 % interval",
    "verdict vs baseline",
    "peak memory",
]


def write_benchmark(benchmark: Benchmark, out_dir: Path) -> dict[str, Path]:
    """Write benchmark.json first (the record), then the pages rendered from it; returns name → path."""
    files = {"benchmark.json": write_atomic(out_dir / "benchmark.json", json.dumps(benchmark.to_dict(), indent=1))}
    document = benchmark_document(benchmark)
    files["benchmark.md"] = write_atomic(out_dir / "benchmark.md", to_markdown(document))
    files["benchmark.html"] = write_atomic(out_dir / "benchmark.html", to_html(document))
    return files


def benchmark_document(benchmark: Benchmark) -> Document:
    """The benchmark as a report document: the verdict, the table, each change's share, how it was measured."""
    method = (
        f"{benchmark.rounds} interleaved rounds: each round runs every configuration once, each in a process of its "
        "own with the full measurement window, in an order that rotates from round to round. A configuration's ratio "
        "to the baseline is the geometric mean of its per-round ratios, with Student's t 95 % interval on their "
        "logarithms; a gain when the interval lies above 1, a loss when below, else within noise "
        "(autotune/results/benchmark.py)."
    )
    sections = [
        Section(
            "Configurations",
            paragraphs=benchmark.notes,
            table=benchmark_table(benchmark),
            plots=[plot] if (plot := benchmark_ratios(benchmark)) else [],
        ),
        *_shares(benchmark),
        Section("How it was measured", paragraphs=[method]),
        Section("Machine", bullets=machine_lines(benchmark.machine, benchmark.device)),
    ]
    return Document(f"autotune benchmark: {benchmark.pipeline}", _headline(benchmark), sections)


def benchmark_table(benchmark: Benchmark) -> Table:
    return Table(_HEADERS, [_row(benchmark, entry) for entry in benchmark.entries])


def print_benchmark(benchmark: Benchmark, files: dict[str, Path], out: TextIO) -> None:
    print(f"\n{_headline(benchmark)}\n", file=out)
    print(markdown_table(benchmark_table(benchmark)), file=out)
    if shares := _share_lines(benchmark):
        print("\nEach change's share:", *(f"  {line}" for line in shares), sep="\n", file=out)
    for name, path in files.items():
        print(f"  {name:<17} {path}", file=out)


def stopped_words(complete_rounds: int, rounds: int) -> str:
    """What a run of ``rounds`` rounds stopped after ``complete_rounds`` of them (an interrupt, an error) says of its
    verdict, in every mode that measures in rounds: it decides nothing. The round it stopped in, not a count of rounds
    that ran: a pair of its configurations may have run in more rounds than all of them did (the order rotates)."""
    if complete_rounds >= rounds:
        return "stopped after its last round: no verdict"
    return f"stopped in round {complete_rounds + 1} of {rounds}: no verdict"


def _headline(benchmark: Benchmark) -> Headline:
    """The recommendation against the baseline; a benchmark stopped before its last round leads with that, its
    figures the provisional ones of the rounds that ran, with no verdict (``Benchmark.recorded_verdict``)."""
    recommended = benchmark.recommendation
    interval = benchmark.interval(recommended) if recommended else None
    stopped = f"The benchmark {stopped_words(benchmark.complete_rounds, benchmark.rounds)}."
    if interval is None:
        both = len(benchmark.ratios(recommended)) if recommended else 0
        done = f"{both} of {benchmark.rounds} rounds measured both the baseline and the recommendation"
        lead = stopped if benchmark.stopped else "No verdict."
        return Headline(lead, f"{done}: an interval needs two (failures, if any, in the table).")
    figure, bounds = f"{interval.geomean:.2f}x the baseline", ratio_bounds(interval.low, interval.high)
    measured = f"95 % interval {bounds} over {interval.n} paired rounds on {benchmark.device}"
    if benchmark.stopped:
        so_far = f"The rounds that ran read the recommendation at {figure}, {measured}"
        return Headline(stopped, f"{so_far}: provisional, as are the figures below.")
    return Headline(f"The recommendation: {figure} ({benchmark.verdict(recommended)}).", f"{measured}.")


# A change left out of the recommendation, by the verdict of that against the recommendation, paired by round.
_LEFT_OUT = {"loss": "the change matters", "within noise": "not shown to matter", "gain": "faster without it"}


def _shares(benchmark: Benchmark) -> list[Section]:
    lines = _share_lines(benchmark)
    return [Section("Each change's share", bullets=lines)] if lines else []


def _share_lines(benchmark: Benchmark) -> list[str]:
    """Each change's share: what it gives alone on top of the baseline, and what leaving it out does to the
    recommendation (paired round by round with it: whether the change matters)."""
    lines = []
    for knob in benchmark.changes:
        alone, without = benchmark.share(knob)
        if alone is None:
            on_its_own = _not_measured(benchmark, knob, "alone")
        else:
            on_its_own = _ratio(benchmark, alone)
            on_its_own += " (that is the recommendation)" if alone.kind == "recommended" else ""
        if without is None:
            left_out = _not_measured(benchmark, knob, "without")
        else:
            left_out = _ratio(benchmark, without, benchmark.recommendation, "the recommendation", _LEFT_OUT)
            left_out += " (that is the baseline)" if without is benchmark.baseline else ""
        lines.append(f"{knob}: alone {on_its_own}; left out, {left_out}")
    return lines


def _not_measured(benchmark: Benchmark, knob: str, kind: str) -> str:
    """Why ``knob``'s change has no entry of ``kind`` (alone on top of the baseline, or the recommendation
    ``without`` it), in words: its values cannot run together on the benchmark's kind of device, in the conflict's own
    words (``knobs.conflict``, by which ``configurations`` left it out); else, alone, it is the baseline itself: an
    option that applies only together with another change (``Benchmark.share``)."""
    base, rec = benchmark.baseline.knobs, benchmark.recommendation.knobs
    found = conflict(
        share_knobs(base, rec, knob, kind), accumulated_to(benchmark.batch_policy, base), device_kind(benchmark.device)
    )
    if found is None:
        return "not measured (it applies only together with another change)"
    return f"not measured: it cannot run on {benchmark.device}, where {found[1]}"


def _ratio(
    benchmark: Benchmark,
    entry: Entry,
    reference: Entry | None = None,
    name: str = "the baseline",
    verdicts: dict[str, str] | None = None,
) -> str:
    """``entry`` against ``reference`` (the baseline where None), called ``name``, with the benchmark's verdict on it
    (``Benchmark.recorded_verdict``, in the words of ``verdicts``, where given)."""
    interval = benchmark.interval(entry, reference)
    if interval is None:
        return "too few rounds"
    verdict = benchmark.recorded_verdict(entry, reference)
    words = (verdicts or {}).get(verdict, verdict)
    return f"{interval.geomean:.2f}x {name} ({ratio_bounds(interval.low, interval.high)}, {words})"


def _row(benchmark: Benchmark, entry: Entry) -> list[str]:
    interval = benchmark.interval(entry)
    median = f"{entry.median:.1f}" if entry.median is not None else "-"
    memory = benchmark.memory_change(entry)
    notes = [f"{counted(len(entry.failures), 'run')} failed"] if entry.failures else []
    notes += [f"{counted(len(entry.disturbed), 'run')} disturbed"] if entry.disturbed else []
    label = entry.label + (f" ({'; '.join(notes)})" if notes else "")
    if entry is benchmark.baseline:
        peak = f"{entry.median_peak_mb:.0f} MB" if entry.median_peak_mb is not None else "-"
        return [label, median, "1.00", "", "", peak]
    return [
        label,
        median,
        f"{interval.geomean:.2f}" if interval else "-",
        ratio_bounds(interval.low, interval.high) if interval else "-",
        benchmark.recorded_verdict(entry),
        f"{round((memory - 1) * 100):+d}%" if memory is not None else "-",
    ]
