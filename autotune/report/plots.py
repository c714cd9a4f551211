"""The study report's pictures, drawn with matplotlib from saved results; nothing here measures.

Each function returns a ``Plot`` (or None when its data is missing): what to draw and its caption, rendered to an
image only by a format that shows images (``png``). Colours keep one meaning across pictures.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.knobs import changed
from autotune.records import BASELINE_LABEL, TrialRecord
from autotune.report.rows import record_state
from autotune.results.benchmark import STOPPED, Benchmark
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import TIE_TOLERANCE, beats, paired_ratio
from autotune.results.summary import Summary
from autotune.results.trim_rules import TRIM_BOUND, settled
from autotune.results.tuner_time import PHASE_WORDS, PHASES, STAGE_WORDS, TunerTime

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn (``png``): a refused input exits ~0.7 s sooner
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BASELINE, RECOMMENDED, OTHER = "#7f7f7f", "#1f77b4", "#9ecae1"
STATE_STYLE = {  # marker, colour, legend label
    "complete": ("o", RECOMMENDED, "measured"),
    "pruned": ("v", "#ff7f0e", "pruned (running reading when stopped)"),
    "infeasible": ("s", "#9467bd", "infeasible (over budget or inexact)"),
    "failed": ("x", "#d62728", "failed (no reading)"),
}
# Where a configuration has no reading (failed, or pruned without one on record) it is marked on the x axis, at no
# throughput: the picture shows no number that was not measured.
UNREAD_LABEL = {"pruned": "pruned (no reading kept: on the axis)", "failed": "failed (no reading: on the axis)"}
# What the trim found of undoing a change (``_found``): the diamond's colour and legend label.
FOUND_STYLE = {
    "undone": (BASELINE, "undone: undoing it cost nothing"),
    "costs": (RECOMMENDED, "kept: the configuration it came from beat it"),
    "tied": ("#ff7f0e", "kept, though undoing it tied"),
    "unsettled": ("#9467bd", "kept: not settled (it left early, a run failed, the race was cut short)"),
}
# What the trim found, in the caption's words: each said only where the picture has it, by its diamond's colour.
FOUND_WORDS = {
    "undone": (
        "Grey: undone, as undoing it cost nothing beyond noise (a grey diamond right of the band: it ran faster "
        "without it)."
    ),
    "costs": "Blue: kept, as the configuration it was made from beat it (most rounds and beyond the grey band).",
    "tied": (
        "Orange: kept though undoing it tied, as undoing it with the changes undone before it would give back "
        f"{TRIM_BOUND:.0%} or more of the finalists' race's winner, or as a later race was to decide it and did not "
        "undo it or did not run."
    ),
    "unsettled": (
        "Purple: kept, as its run or its race did not run to the end (it left early, a run failed, the race was cut "
        "short): not shown either way."
    ),
}
WIDTH_IN, DPI = 8.0, 110
LEGEND_COLUMNS = 4
# The trim chart's row labels break into lines of at most this many characters: a variant with several changes undone
# has a long label, and one line of it would leave the plot narrower than its x label, which then passes the edge.
ROW_LABEL_CHARS = 40
ROW_IN, LINE_IN = 0.4, 0.18  # a row's height in the trim chart, and what each line of its label needs


@dataclass(frozen=True)
class Plot:
    """A picture: ``draw`` draws it on one matplotlib Axes; ``caption`` says what it shows (also its alt text);
    ``height`` in inches, at a width of WIDTH_IN."""

    caption: str
    draw: Callable[[Axes], None]
    height: float = 3.0


def png(plot: Plot) -> bytes:
    """``plot`` as a PNG image (matplotlib's Agg canvas: no display, no global pyplot state)."""
    buffer = io.BytesIO()
    figure_of(plot).savefig(buffer, format="png")
    return buffer.getvalue()


def figure_of(plot: Plot) -> Figure:
    """``plot`` drawn on a figure of its own, WIDTH_IN wide."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, plot.height), dpi=DPI, layout="constrained")
    plot.draw(figure.subplots())
    return figure


def legend_below(ax: Axes) -> None:
    """The legend under the picture, where it hides no data (constrained layout makes room for it), in as many
    columns, up to LEGEND_COLUMNS, as the picture's width holds; the picture grows by the rows that fewer columns
    add, so that its plot keeps its size."""
    figure = ax.figure
    planned = None
    for columns in range(LEGEND_COLUMNS, 0, -1):
        legend = figure.legend(loc="outside lower center", ncols=columns, fontsize="small", frameon=False)
        extent = legend.get_window_extent()
        planned = extent.height if planned is None else planned
        if columns == 1 or extent.width <= figure.bbox.width:
            break
        legend.remove()
    figure.set_figheight(figure.get_figheight() + (extent.height - planned) / figure.dpi)


def name_of(record: TrialRecord, summary: Summary) -> str:
    if record.label == BASELINE_LABEL:
        return "baseline"
    return f"trial {record.label}" + (" (recommended)" if record.label == summary.recommended.label else "")


def before_after(summary: Summary) -> Plot:
    """The two throughputs the headline states: medians of the rounds its gain counts (``Summary.gain_runs``, each
    round a dot), or single runs with the interval within their run."""
    proof = summary.proof
    rows = [
        ("baseline", summary.baseline_throughput, BASELINE),
        ("recommended", summary.recommended_throughput, RECOMMENDED),
    ]

    def draw(ax: Axes) -> None:
        ax.barh([label for label, _, _ in rows], [value for _, value, _ in rows], color=[c for _, _, c in rows])
        if proof is not None:  # the rounds the gain counts filled, those it leaves out hollow
            counted = set(summary.gain_rounds)
            for number, paired in enumerate(summary.gain_runs.rounds, 1):
                face = "black" if number in counted else "none"
                for y, run in enumerate((paired.baseline, paired.recommended)):
                    ax.plot([run], [y], "o", color="black", markerfacecolor=face, markersize=4)
        else:
            for y, record in enumerate((summary.baseline, summary.recommended)):
                _run_interval(ax, y, record)
        ax.invert_yaxis()
        ax.set_xlabel("samples/s")

    if proof is None:
        how = "single runs"
    else:
        hollow = ", hollow: left out" if summary.gain_rounds_left_out else ""
        how = f"medians of {summary.gain_rounds_said} interleaved rounds (dots: each round{hollow})"
    gain = "the paired rounds' geometric mean" if summary.gain_interval else "their ratio"
    caption = (
        f"Throughput before and after, {how}: {summary.speedup:.2f}x by {gain}{summary.left_out_note}"
        + ("" if proof else ", the bar's whisker the 95 % interval within its run")
        + "."
    )
    return Plot(caption, draw, height=1.9)


def _run_interval(ax: Axes, y: int, record: TrialRecord) -> None:
    timing = record.result.timing
    if timing.throughput_ci95_low is None:
        return
    high = timing.throughput_ci95_high if timing.throughput_ci95_high is not None else timing.throughput
    ax.plot([timing.throughput_ci95_low, high], [y, y], color="black", linewidth=2)


def undone_changes(summary: Summary) -> Plot | None:
    """Each trim race's variants against the configuration they were made from: the ratio round by round and the
    paired geometric mean the trim decides by (``beats``), marked by what the trim found (``_found``)."""
    trim = summary.trim
    rows = [
        (
            variant.label,
            [v / r for v, r in zip(variant.throughputs, race.finalists[0].throughputs, strict=False)],
            paired_ratio(variant.throughputs, race.finalists[0].throughputs),
            _found(race, variant, summary.no_difference),
        )
        for race in trim
        for variant in race.finalists[1:]
        if variant.throughputs and race.finalists[0].throughputs  # no ratio where either failed its first run
    ]
    if not rows:
        return None
    labels = [_row_label(label) for label, *_ in rows]

    def draw(ax: Axes) -> None:
        tied = f"tied by the geometric mean (±{TIE_TOLERANCE:.0%})"
        ax.axvspan(1 / (1 + TIE_TOLERANCE), 1 + TIE_TOLERANCE, color="#eeeeee", label=tied)
        ax.axvline(1, color=BASELINE, linewidth=1)
        legend: set[str] = set()
        for y, (_, ratios, geomean, found) in enumerate(rows):
            ax.plot(ratios, [y] * len(ratios), "o", color=OTHER, markersize=5, label=None if y else "a round")
            colour, label = FOUND_STYLE[found]
            ax.plot([geomean], [y], "D", color=colour, label=None if found in legend else label, zorder=3)
            legend.add(found)
        ax.set_yticks(range(len(rows)), labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the first on top, with room around each row
        ax.set_xlabel("throughput / the configuration it was made from")
        legend_below(ax)

    shown = {found for *_, found in rows}
    caption = " ".join(
        [
            "Each change undone in turn, against the configuration it was made from: dots, each round's ratio; a "
            "diamond, their geometric mean, by which with the rounds won the trim decides (rules: "
            "docs/how-it-decides.md).",
            *(words for found, words in FOUND_WORDS.items() if found in shown),
        ]
    )
    row_in = max(ROW_IN, LINE_IN * max(label.count("\n") + 1 for label in labels))
    return Plot(caption, draw, height=1.2 + row_in * len(rows))


def _row_label(label: str) -> str:
    """A trim variant's label ("7 without amp without num_threads") in lines of at most ROW_LABEL_CHARS where it can
    be: broken only before a "without", so that each change's name stays whole and next to its "without"."""
    first, *undone = label.split(" without ")
    lines = [first]
    for name in undone:
        part = f"without {name}"
        if len(lines[-1]) + 1 + len(part) <= ROW_LABEL_CHARS:
            lines[-1] += f" {part}"
        else:
            lines.append(part)
    return "\n".join(lines)


def _found(race: Confirmation, variant: Finalist, no_difference: dict[str, object]) -> str:
    """What the trim found of undoing ``variant``'s changes from the configuration ``race`` started from (a key of
    FOUND_STYLE): "undone" where the trim undid them all (``no_difference``); else "costs" where that configuration
    beats it (``beats``), "tied" where it does not and the variant ran every round of a ``settled`` race, else
    "unsettled" (a failed run, the race cut short or left by that configuration)."""
    reference = race.finalists[0]
    undid = changed(variant.knobs, reference.knobs)  # as the summary counts changes: not the options that follow
    if undid and all(name in no_difference for name in undid):
        return "undone"
    if beats(reference, variant):
        return "costs"
    ran = variant.dropped is None and len(variant.throughputs) == race.rounds
    return "tied" if ran and settled(race) else "unsettled"


def trials_in_order(results: StudyResults, summary: Summary) -> Plot:
    """Every configuration's throughput in the order measured, marked by how it ended; a recommendation the trim
    made (a variant of a trial, no trial itself) last, as it was measured after them."""
    records = list(results.records)
    variant = not summary.is_baseline and all(r.label != summary.recommended.label for r in records)
    if variant:
        records.append(summary.recommended)
    readings = [_reading(r) for r in records]

    def draw(ax: Axes) -> None:
        for state, (marker, colour, label) in STATE_STYLE.items():
            ours = [x for x, r in enumerate(records) if record_state(r) == state]
            read = [(x, readings[x]) for x in ours if readings[x] is not None]
            if read:
                ax.scatter(*zip(*read, strict=True), marker=marker, color=colour, label=label, zorder=3)
            unread = [x for x in ours if readings[x] is None]
            if unread:  # at the foot of the axes, in axes coordinates: no throughput claimed
                foot = {"transform": ax.get_xaxis_transform(), "clip_on": False, "zorder": 3}
                ax.scatter(unread, [0] * len(unread), marker=marker, color=colour, label=UNREAD_LABEL[state], **foot)
        ax.axhline(summary.baseline.throughput, color=BASELINE, linestyle="--", linewidth=1, label="baseline")
        if not summary.is_baseline:
            x = next(x for x, r in enumerate(records) if r.label == summary.recommended.label)
            ring = {"facecolors": "none", "edgecolors": "black", "label": "recommended"}
            ax.scatter([x], [summary.recommended.throughput], s=160, **ring)
        ticks = ["base" if r.label == BASELINE_LABEL else r.label for r in records]
        ax.set_xticks(range(len(records)), ticks[:-1] + ["trim"] if variant else ticks)
        ax.set_xlabel("trial, in the order measured")
        ax.set_ylabel("samples/s")
        legend_below(ax)

    caption = "Every configuration's throughput in its own run, in the order the study measured it" + (
        f"; last ('trim'), the recommendation, {summary.recommended.label}, which the trim measured after them."
        if variant
        else "."
    )
    return Plot(caption, draw)


def _reading(record: TrialRecord) -> float | None:
    """A record's throughput as measured; a pruned trial's running reading when stopped; else None (no reading)."""
    timing, failure = record.result.timing, record.result.failure
    if timing is not None:
        return timing.throughput
    return failure.reading if failure is not None else None


def throughput_by_batch(summary: Summary) -> Plot | None:
    """Throughput against batch size, when the study measured more than one."""
    measured = [r for r in summary.ranked if r.result.ok]
    if len({r.result.knobs["batch_size"] for r in measured}) < 2:
        return None

    def draw(ax: Axes) -> None:
        ends = (summary.baseline, summary.recommended)
        for record in [r for r in measured if r not in ends] + [r for r in ends if r in measured]:  # the ends on top
            ringed = record is summary.recommended and not summary.is_baseline
            ax.scatter(
                record.result.knobs["batch_size"],
                summary.standing(record).throughput,
                color="none" if ringed else _colour(record, summary),
                edgecolors=_colour(record, summary),
                s=120 if ringed else 36,
                linewidths=2 if ringed else 1,
                zorder=3,
            )
        sizes = sorted({r.result.knobs["batch_size"] for r in measured})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(size) for size in sizes])
        ax.minorticks_off()
        ax.set_xlabel("batch size" + (" (micro-batch)" if summary.batch_policy == "fixed_effective" else ""))
        ax.set_ylabel("samples/s")
        ax.grid(alpha=0.3)

    caption = (
        "Throughput against batch size, one dot per configuration at the samples/s the ranking gives it (a race's "
        "median where a race measured it, else its own run; grey: the baseline, a dark blue ring: the "
        "recommendation, light blue: the other trials)."
    )
    return Plot(caption, draw)


def _colour(record: TrialRecord, summary: Summary) -> str:
    if record is summary.baseline:
        return BASELINE
    return RECOMMENDED if record is summary.recommended else OTHER


def time_split(summary: Summary, limit: int = 8) -> Plot:
    """Time per sample of the first ranked configurations, the baseline and the recommendation: waiting for data, and
    the rest."""
    ranked = [r for r in summary.ranked if r.result.ok]
    shown = {r.label for r in ranked[:limit]} | {summary.baseline.label, summary.recommended.label}
    measured = [r for r in ranked if r.label in shown]  # in rank, the baseline and the recommendation always

    def draw(ax: Axes) -> None:
        labels = [name_of(r, summary) for r in measured]
        per_sample = [1e3 / r.throughput for r in measured]
        wait = [ms * r.result.timing.data_stall_fraction for ms, r in zip(per_sample, measured, strict=True)]
        rest = [ms - w for ms, w in zip(per_sample, wait, strict=True)]
        ax.barh(labels, rest, color=RECOMMENDED, label="compute and the rest of the step")
        ax.barh(labels, wait, left=rest, color="#ff7f0e", label="waiting for the next batch")
        ax.invert_yaxis()
        ax.set_xlabel("ms per sample (shorter is faster)")
        legend_below(ax)

    some = f"the first {limit} ranked configurations', the baseline's and the recommendation's"
    which = "each configuration's" if len(measured) == len(ranked) else some
    caption = f"Where {which} time went in its own run: per sample, waiting for data against everything else."
    return Plot(caption, draw, height=1.0 + 0.35 * len(measured))


def pareto(summary: Summary) -> Plot | None:
    """Throughput against peak memory, the front joined."""
    if not summary.pareto:
        return None
    measured = [r for r in summary.ranked if r.result.ok]

    def draw(ax: Axes) -> None:
        ax.scatter([r.result.peak_memory_mb for r in measured], [r.throughput for r in measured], color=OTHER)
        front = sorted(summary.pareto, key=lambda r: r.result.peak_memory_mb)
        xs, ys = [r.result.peak_memory_mb for r in front], [r.throughput for r in front]
        ax.plot(xs, ys, "o-", color=RECOMMENDED, drawstyle="steps-post", label="Pareto front")
        for record in front:
            ax.annotate(name_of(record, summary), (record.result.peak_memory_mb, record.throughput), fontsize=8)
        ax.set_xlabel("peak memory (MiB)")
        ax.set_ylabel("samples/s")
        legend_below(ax)

    return Plot("Throughput against peak memory: up and to the left is better.", draw)


def importance(values: dict[str, float]) -> Plot | None:
    """Optuna's importance of each knob that varied, largest first."""
    if not values:
        return None
    names = sorted(values, key=values.get, reverse=True)

    def draw(ax: Axes) -> None:
        ax.barh(names, [values[name] for name in names], color=RECOMMENDED)
        ax.invert_yaxis()
        ax.set_xlabel("importance (Optuna's PED-ANOVA; the knobs' importances sum to 1)")

    return Plot("Which knobs the throughput depended on, across the search's trials.", draw, 1.0 + 0.35 * len(names))


# One colour a phase of the tuner's time: the measuring phases blue to green, fixed costs orange to red, waits and
# idle slots pale, the rest grey.
PHASE_COLOUR = dict(
    zip(
        PHASES,
        [
            *("#d62728", "#ff7f0e", "#bcbd22", "#9467bd", "#1f77b4", "#17becf", "#2ca02c", "#c7c7c7", "#8c564b"),
            *("#c5b0d5", "#dbdb8d", "#7f7f7f"),
        ],
        strict=True,
    )
)


def tuner_time(split: TunerTime) -> Plot:
    """Where the tuner's time went: a bar a stage, stacked by the phases of its trial processes and its own work."""
    by_stage = split.by_stage()

    def draw(ax: Axes) -> None:
        labels = [STAGE_WORDS.get(stage, stage) for stage in by_stage]
        left = [0.0] * len(by_stage)
        for phase in PHASES:
            widths = [max(0.0, parts.get(phase, 0.0)) for parts in by_stage.values()]
            if any(widths):
                ax.barh(labels, widths, left=left, color=PHASE_COLOUR[phase], label=PHASE_WORDS[phase])
                left = [x + w for x, w in zip(left, widths, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        legend_below(ax)

    runs = f" over its {len(split.runs)} runs" if len(split.runs) > 1 else ""
    caption = (
        f"Where the tuner's {split.wall_s:.0f} s went{runs}: each stage's time, split into its trial processes' "
        "phases, its waits for other tuners, its idle parallel slots and the tuner's own work between them."
    )
    return Plot(caption, draw, height=1.6 + 0.35 * len(by_stage))


VERDICT_COLOUR = {"gain": "#2ca02c", "loss": "#d62728", "within noise": BASELINE, STOPPED: OTHER}


def benchmark_ratios(benchmark: Benchmark) -> Plot | None:
    """Each configuration's ratio to the baseline with its 95 % interval, coloured by its verdict: all alike where
    the benchmark stopped (``Benchmark.recorded_verdict``), its figures provisional."""
    rows = [(e.label, benchmark.interval(e), benchmark.recorded_verdict(e)) for e in benchmark.entries[1:]]
    rows = [(label, interval, verdict) for label, interval, verdict in rows if interval is not None]
    if not rows:
        return None
    recommended = benchmark.interval(benchmark.recommendation) if benchmark.recommendation else None

    def draw(ax: Axes) -> None:
        ax.axvline(1, color=BASELINE, linewidth=1)
        if recommended is not None:
            ax.axvline(recommended.geomean, color=RECOMMENDED, linewidth=1, linestyle=":")
        for y, (_, interval, verdict) in enumerate(rows):
            colour = VERDICT_COLOUR[verdict]
            ax.plot([interval.low, interval.high], [y, y], color=colour, linewidth=3, solid_capstyle="butt")
            ax.plot([interval.geomean], [y], "D", color=colour)
        ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("throughput / the baseline's (paired rounds: geometric mean, 95 % interval)")

    colours = (
        "light blue: the benchmark stopped before its last round, so its figures are provisional and none has a verdict"
        if benchmark.stopped
        else "green, a gain; red, a loss; grey, within noise (the interval spans 1)"
    )
    caption = (
        f"Each configuration against the baseline: {colours}. Dotted: the recommendation, against which to read each "
        "change left out."
    )
    return Plot(caption, draw, height=1.0 + 0.4 * len(rows))
