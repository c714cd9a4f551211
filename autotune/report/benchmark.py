"""The benchmark's record as benchmark.json, benchmark.md and benchmark.html, and its table on the terminal; nothing
here measures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from autotune.files import write_atomic
from autotune.knobs import accumulated_to, conflict, device_kind
from autotune.measure.stats import RatioInterval
from autotune.report.document import Document, Headline, Section, Table, machine_lines
from autotune.report.html_report import to_html
from autotune.report.markdown import markdown_table, to_markdown
from autotune.report.plots import benchmark_ratios
from autotune.report.rows import slowed_in_words
from autotune.results.benchmark import Benchmark, Entry, share_knobs
from autotune.words import (
    READABLE_SPAN,
    by_the_medians,
    counted,
    interval_bounds,
    listed,
    rounds_named,
    slowed_rounds_counted,
    slowed_rounds_left_out,
    slowed_rounds_note,
)

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
        f"(autotune/results/benchmark.py). An interval whose high bound is over {READABLE_SPAN:.0f} times its low one "
        "is said to be too wide to read (benchmark.json keeps its bounds)."
    )
    sections = [
        Section(
            "Configurations",
            paragraphs=benchmark.notes,
            table=benchmark_table(benchmark),
            plots=[plot] if (plot := benchmark_ratios(benchmark)) else [],
        ),
        *_busy_machine(benchmark),
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
    for section in _busy_machine(benchmark):
        print(f"\n{section.heading}:", *(f"  {paragraph}" for paragraph in section.paragraphs), sep="\n", file=out)
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
    figure, bounds = f"{interval.geomean:.2f}x the baseline", interval_bounds(interval.low, interval.high)
    slowed = slowed_rounds_note(benchmark.rounds_left_out(recommended))
    measured = f"95 % interval {bounds} over {interval.n} paired rounds{slowed} on {benchmark.device}"
    if benchmark.stopped:
        so_far = f"The rounds that ran read the recommendation at {figure}, {measured}"
        return Headline(stopped, f"{so_far}: provisional, as are the figures below.")
    verdict = benchmark.verdict(recommended)
    if benchmark.counts_slowed_unreliably(recommended):  # a verdict of what the load did too: not one to act on unsaid
        verdict += "; unreliable, as it counts runs something slowed: see below"
    elif benchmark.counts_slowed(recommended):
        verdict += "; it counts a run the cores' reading flagged slow, so it may be a little off: see below"
    return Headline(
        f"The recommendation: {figure} ({verdict}).",
        f"{measured}{_by_the_medians(benchmark, interval)}.{_when_tuned(benchmark, interval)}",
    )


def _by_the_medians(benchmark: Benchmark, interval: RatioInterval) -> str:
    """What the headline's ratio (``interval``'s) is, and beside it the ratio of the two medians over the same rounds
    (``Benchmark.counted_medians``), where that reads otherwise: " (the geometric mean of their ratios; 1.92x by the
    medians of those rounds)"; empty where they read alike. The table's medians are each configuration's own, of
    every run it has."""
    recommended, baseline = benchmark.counted_medians(benchmark.recommendation)
    beside = by_the_medians(interval.geomean, recommended / baseline)
    return f" (the geometric mean of their ratios; {beside} of those rounds)" if beside else ""


# Why a recommended.yaml records no interval of its gain.
_NO_INTERVAL = "single runs, one race round, or a file from before autotune kept one"


def _when_tuned(benchmark: Benchmark, now: RatioInterval) -> str:
    """The gain the recommendation's file says it measured when tuned (``Benchmark.tuned``), and whether the gain
    measured ``now`` agrees with it within noise; empty where the file records none."""
    tuned = benchmark.tuned
    if tuned is None:
        return ""
    agrees = tuned.agrees_with(now)
    if agrees is None:
        return f" When tuned: {tuned.speedup:.2f}x; its file records no interval ({_NO_INTERVAL}): nothing to compare."
    bounds = interval_bounds(tuned.interval.low, tuned.interval.high)
    figure = f"{tuned.speedup:.2f}x (95 % interval {bounds} over {tuned.interval.n} paired rounds)"
    if agrees:
        return f" When tuned: {figure}, which overlaps this one."
    return f" When tuned: {figure}, apart from this one: the gain here differs from the tuned one beyond noise."


def run_label(index: int, entry: Entry) -> str:
    """``entry``'s run of round ``index`` in words, on the terminal and on the pages: "round 2 recommended - amp"."""
    return f"round {index} {entry.label}"


def _busy_machine(benchmark: Benchmark) -> list[Section]:
    """Where something beside a run the record keeps slowed it (``Entry.disturbed``): how many of the runs, what
    slowed them, what the ratios made of the rounds they ran in, and what to do; none where nothing slowed a run."""
    entries = benchmark.entries
    runs = sorted((index, position) for position, entry in enumerate(entries) for index in entry.disturbed)
    if not runs:
        return []
    slowed = {run_label(index, entries[at]): entries[at].disturbed[index] for index, at in runs}
    measured = sum(run is not None for entry in entries for run in entry.throughputs)
    said = [
        f"{len(slowed)} of the {measured} runs measured {'was' if len(slowed) == 1 else 'were'} slowed by something "
        f"beside {'it' if len(slowed) == 1 else 'them'}: {slowed_in_words(slowed)}.",
        *_slowed_rounds_counted(benchmark),
        "A load slows configurations unalike, so the ratios may be off: run the benchmark again when the machine is "
        "quiet.",
    ]
    return [Section("Measured on a busy machine", paragraphs=[" ".join(said)])]  # the tuning run's report's name


def _slowed_rounds_counted(benchmark: Benchmark) -> list[str]:
    """What the ratios to the baseline made of the rounds something slowed a run of (``Benchmark.slowed_rounds``):
    the recommendation's, which rounds it left out or that it counts them all, too few being quiet (``quiet_rounds``);
    the other configurations', how many did which."""
    said = []
    recommended = benchmark.recommendation
    left_out = benchmark.rounds_left_out(recommended) if recommended else []
    if left_out:
        said.append(
            f"The recommendation's ratio to the baseline leaves out {rounds_named(left_out)}, in which a run of one of "
            "the two was slowed."
        )
    elif recommended and benchmark.counts_slowed(recommended):
        slowed, paired = len(benchmark.slowed_rounds(recommended)), len(benchmark.paired_ratios(recommended))
        which = f"all {paired}" if slowed == paired else f"{slowed} of the {paired}"
        said.append(
            f"A run of the recommendation or of the baseline was slowed in {which} rounds that ran both, so the "
            "headline's ratio counts every round, slowed runs and all: too few were quiet to leave them out."
        )
    others = [entry for entry in benchmark.entries if entry.kind in ("alone", "without")]
    counting = sum(benchmark.counts_slowed(entry) for entry in others)
    leaving = sum(bool(benchmark.rounds_left_out(entry)) for entry in others)
    parts = (
        [f"{counting} count{_s(counting)} the slowed rounds, too few being quiet to leave them out"] if counting else []
    )
    parts += [f"{leaving} leave{_s(leaving)} them out"] if leaving else []
    if parts:
        said.append(f"Of the other configurations' ratios to the baseline, {listed(parts)}.")
    return said


def _s(count: int) -> str:
    """A verb's ending after ``count`` of them: "1 counts", "2 count"."""
    return "s" if count == 1 else ""


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
    words = (verdicts or {}).get(verdict, verdict) + _rounds_counted(benchmark, entry, reference)
    return f"{interval.geomean:.2f}x {name} ({interval_bounds(interval.low, interval.high)}, {words})"


def _rounds_counted(benchmark: Benchmark, entry: Entry, reference: Entry | None) -> str:
    """Where a ratio does not stand on every round alike, in words to follow its verdict: the slowed rounds it leaves
    out, or that it counts them (too few rounds were quiet: its verdict reads the load too); empty elsewhere."""
    if left_out := benchmark.rounds_left_out(entry, reference):
        return f"; {slowed_rounds_left_out(left_out)}"
    if benchmark.counts_slowed(entry, reference):
        return f"; {slowed_rounds_counted(benchmark.slowed_rounds(entry, reference))}"
    return ""


def _row(benchmark: Benchmark, entry: Entry) -> list[str]:
    interval = benchmark.interval(entry)
    median = f"{entry.median:.1f}" if entry.median is not None else "-"
    memory = benchmark.memory_change(entry)
    notes = [f"{counted(len(entry.failures), 'run')} failed"] if entry.failures else []
    notes += [f"{counted(len(entry.disturbed), 'run')} disturbed"] if entry.disturbed else []
    label = entry.label + (f" ({'; '.join(notes)})" if notes else "")
    if entry is benchmark.baseline:
        peak = f"{entry.median_peak_mb:.0f} MiB" if entry.median_peak_mb is not None else "-"
        return [label, median, "1.00", "", "", peak]
    return [
        label,
        median,
        f"{interval.geomean:.2f}" if interval else "-",
        interval_bounds(interval.low, interval.high) if interval else "-",
        benchmark.recorded_verdict(entry),
        f"{round((memory - 1) * 100):+d}%" if memory is not None else "-",
    ]
