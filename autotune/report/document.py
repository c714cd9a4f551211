"""The content of the human-readable report, built once and rendered as Markdown or HTML.

Every string here is plain text, user-controlled ones included (pipeline names, error messages):
renderers escape for their format.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from autotune.knobs import KNOBS, changed
from autotune.measure.core_speed import CoreSpeed
from autotune.measure.environment import thread_variables
from autotune.measure.measurement import SystemReport
from autotune.measure.warmup import WarmupPolicy
from autotune.records import TrialRecord
from autotune.report import plots
from autotune.report.plots import Plot
from autotune.report.profile_plots import paired_stage_bars
from autotune.report.profiles import current_profiles, describe, side_by_side_rows, sides
from autotune.report.rows import NAMED_RUNS, busy_note, marked, ranked_rows, record_row, slowed_in_words
from autotune.report.tuner_time import budget_lines, covers, forecast_lines
from autotune.results.advice import batch_advice
from autotune.results.batch_limit import batch_limit
from autotune.results.compile_payback import compile_payback
from autotune.results.finalist import Finalist
from autotune.results.model import IMPORTANCE_MIN_TRIALS, StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import (
    BEATS_WORDS,
    FINALIST_WINDOW,
    MAX_FINALISTS,
    MIN_GAIN,
    TIE_TOLERANCE,
    beats,
    finalist_choice,
    wins_in_words,
)
from autotune.results.summary import Overruled, Summary
from autotune.results.trim_rules import TRIM_BOUND, TrimStep, started_alone, undone_again, unsettled
from autotune.results.tuner_time import PHASE_WORDS, STAGE_WORDS, shares
from autotune.trial.result import Disturbance
from autotune.words import counted, percents, ratio_bounds

_BEFORE_AFTER_METRICS = [
    ("median_step_ms", "median step (ms)"),
    ("step_iqr_ms", "step interquartile range (ms)"),
    ("data_stall_fraction", "data wait"),
    ("transfer_ms_per_step", "to device and input layout per step (ms)"),
    ("compile_s", "compile (s)"),
    ("process_tree_cores", "CPU cores busy (process tree)"),
    ("gpu_utilization_percent", "GPU utilisation (%)"),
    ("achieved_gflops_per_s", "achieved GFLOP/s"),
    ("peak_memory_mb", "peak memory (MB; the GPU's on CUDA)"),
    ("host_peak_memory_mb", "host peak memory (MB, process tree)"),
    ("window_memory_growth_mb", "memory growth in window (MB)"),
    ("cuda_peak_allocated_mb", "CUDA peak allocated (MB)"),
]
RANKED_COLUMNS = [
    ("rank", "rank"),
    ("trial", "trial"),
    ("changes", "changes from the baseline"),
    ("throughput_sps", "samples/s"),
    ("speedup", "vs baseline"),
    ("mean_step_ms", "step ms"),
    ("data_stall_fraction", "data wait"),
    ("compile_s", "compile s"),
    ("peak_memory_mb", "peak MB"),
]


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Link:
    """A file or page the reader can open: its ``text`` and ``href`` (a path relative to the report, or a URL)."""

    text: str
    href: str


@dataclass(frozen=True)
class Section:
    """A part of a report under its ``heading``; its ``subsections`` follow its own content, each under a heading one
    level down (a trim race under "Only the changes that matter")."""

    heading: str
    paragraphs: list[str] = field(default_factory=list)
    table: Table | None = None
    bullets: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass(frozen=True)
class Headline:
    """``lead`` is the part to emphasise."""

    lead: str
    rest: str

    def __str__(self) -> str:
        return f"{self.lead} {self.rest}"


@dataclass(frozen=True)
class Document:
    title: str
    headline: Headline
    sections: list[Section]


def build_document(results: StudyResults, summary: Summary) -> Document:
    sections = [
        *_confirmation(results, summary),
        *_trim(summary),
        *_busy_machine(summary),
        Section(
            "Before and after",
            paragraphs=[
                f"Throughput: {summary.throughput_basis}, as in the recommendation above. Every other figure comes "
                "from one measured run of each configuration (a search trial's run has the shorter screening window)."
            ],
            table=_before_after(summary),
            plots=[plots.before_after(summary), plots.time_split(summary)],
        ),
        *_profiles(results, summary),
        Section("Training", paragraphs=_training(results, summary)),
        *_probe(results),
        *_pareto(summary),
        Section(
            "All configurations, fastest first",
            paragraphs=[ranked_basis(summary)],
            table=_ranked(summary),
            plots=_present(plots.trials_in_order(results, summary), plots.throughput_by_batch(summary)),
        ),
        *_importance(results),
        *_failures(summary),
        *_not_measured(results),
        *_tuner_time(results),
        Section("How it was measured", paragraphs=[_method(results, summary)]),
        Section("Machine", bullets=[*machine_lines(results.machine, results.device), *_other_machines(results)]),
    ]
    return Document(f"autotune report: {results.pipeline}", headline(summary), sections)


def _training(results: StudyResults, summary: Summary) -> list[str]:
    """What the recommendation means for training: a changed batch size, the batch sizes that fit, compile's cost."""
    payback = compile_payback(results, summary)
    return [
        batch_advice(results, summary).describe(),
        *batch_limit(results).sentences(),
        *(payback.sentences() if payback else []),
    ]


def headline(summary: Summary) -> Headline:
    """What to change and what it gained, or that the baseline is best."""
    return _keep(summary) if summary.is_baseline else _recommended(summary)


def _keep(summary: Summary) -> Headline:
    """The headline where the baseline stays: why, and what to do about it where the run can go on."""
    base, confirmation = summary.baseline, summary.confirmation
    if confirmation and confirmation.cut and not confirmation.rounds:
        best = next(r for r in summary.ranked if r.label == confirmation.finalists[0].label)
        return Headline(
            "Keep your current settings.",
            f"study.budget_s left no time to re-measure the fastest trials against the baseline (the best, trial "
            f"{best.label}, read {best.throughput / base.throughput:.2f}x in a single run), so none is recommended "
            "unproven.",
        )
    if summary.overruled is not None:
        return Headline("Keep your current settings.", _overruled(summary.overruled, summary.races))
    if confirmation and any(confirmation.short_of_rounds(f) for f in confirmation.finalists):
        return Headline("Keep your current settings.", _cut_short(confirmation))
    if confirmation and confirmation.leader and not confirmation.failure:
        leader = confirmation.leader
        rounds = len(leader.throughputs)
        taken_back = "".join(
            f" The race's verdict for trial {f.label} was taken back: {confirmation.shortfall(f)}."
            for f in confirmation.finalists
            if confirmation.faded(f)
        )
        return Headline(
            "Keep your current settings.",
            f"The fastest trials were not proven faster when re-measured against the baseline: the best, trial "
            f"{leader.label}, measured {confirmation.speedup:.2f}x by medians of {rounds} interleaved "
            f"round{'s' if rounds > 1 else ''}"
            + (f", then left the race: {leader.dropped}." if leader.dropped else ".")
            + taken_back,
        )
    if confirmation:
        reason = confirmation.failure or "every finalist's run failed"
        return Headline(
            "Keep your current settings.",
            f"The fastest trials could not be re-measured against the baseline ({reason}), so none is recommended.",
        )
    if summary.budget_left_out and len(summary.ranked) == 1:
        return Headline(
            "No recommendation yet.",
            f"study.budget_s left time to measure the baseline ({base.throughput:.1f} samples/s) alone, and left out "
            f"{'; '.join(summary.budget_left_out)}: run the same command with a larger study.budget_s to search.",
        )
    if summary.stopped_before_race_end and len(summary.ranked) == 1:
        return Headline(
            "No recommendation yet.",
            f"The run stopped after measuring the baseline ({base.throughput:.1f} samples/s) alone; run the same "
            "command again to resume from what the study stored.",
        )
    return Headline("Keep your current settings.", _why_keep(summary))


def _cut_short(race: Confirmation) -> str:
    """Why the baseline stays where study.budget_s cut the finalists' race short of the rounds a proof of a finalist
    needs (``Confirmation.short_of_rounds``), naming the best such (the leader, or where the leader left the race, the
    best still racing), and that the same command goes on from the rounds stored."""
    short = max((f for f in race.finalists if race.short_of_rounds(f)), key=race.ratio)
    best = "the best" if short is race.leader else "the best still racing"
    return (
        f"study.budget_s left the race too few rounds to prove the fastest trials: {best}, trial {short.label}, "
        f"measured {race.ratio(short):.2f}x by medians of {race.rounds} of the {race.proof_rounds} planned interleaved "
        f"rounds, and a proof takes a win in {wins_in_words(race.proof_rounds)}, so none is recommended "
        "unproven. The same command again goes on from the stored rounds (a larger study.budget_s leaves more for "
        "them)."
    )


def _overruled(overruled: Overruled, races: list[Confirmation]) -> str:
    """Why a configuration that won a race is not recommended: a longer race of the trim did not prove it, and
    where that race did not end, that the same command goes on with it."""
    won = max((race for race in races if race.winner and race.winner.label == overruled.label), key=lambda r: r.rounds)
    which = "the finalists' race" if won is races[0] else "a race of the trim"
    judged = overruled.race
    said = (
        f"Trial {overruled.label} won {which} against the baseline ({won.ratio(won.winner):.2f}x by medians of "
        f"{counted(won.rounds, 'round')}), but the trim's race {overruled.number} re-measured it against the baseline "
        f"in more ({counted(overruled.rounds, 'round')}, {overruled.speedup:.2f}x by medians) and did not prove it: "
        f"{judged.shortfall(overruled.finalist)}. The most rounds measuring it decide, so the baseline is kept."
    )
    if (open_for := unsettled(judged)) is not None:
        why = "" if overruled.finalist.dropped else f" ({open_for})"  # its leaving is said above
        said += f" That race did not end{why}: the same command again goes on with it."
    return said


def _recommended(summary: Summary) -> Headline:
    """The headline of a recommendation: its gain with the interval, its changes, its memory, and what it rests on."""
    base, rec = summary.baseline, summary.recommended
    changes = ", ".join(
        f"{name} {_value(before)} → {_value(after)}" for name, (before, after) in summary.changed_knobs().items()
    )
    how = "confirmed by interleaved re-measurement" if summary.confirmed else "single runs"
    by_medians = " by medians" if summary.gain_interval else ""
    geomean = " (the geometric mean of the paired rounds' ratios)" if summary.gain_interval else ""
    return Headline(
        f"Recommended (trial {rec.label}): {summary.speedup:.2f}x the baseline's throughput{geomean}, "
        f"{gain_interval(summary)}",
        f"({summary.recommended_throughput:.1f} vs {summary.baseline_throughput:.1f} samples/s{by_medians}, {how}) by "
        f"changing {changes}. Peak {_memory_kind(base)}memory {base.result.peak_memory_mb:.0f} → "
        f"{rec.result.peak_memory_mb:.0f} MB." + "".join(_caveats(summary)),
    )


def _caveats(summary: Summary) -> list[str]:
    """The sentences after a recommendation's figures: what its races left out, a trim not ended, a race not run yet,
    and runs it stands on that something beside them slowed."""
    said = []
    left_out = ", ".join(f"{name}={value}" for name, value in summary.no_difference.items())
    if left_out:
        said.append(f" Tried and left out, no faster beyond noise: {left_out}.")
    if summary.untrimmed and summary.confirmed:  # unconfirmed: "single runs" says more
        said.append(
            f" Not every change was shown to matter, as the trim that undoes each in turn did not end: "
            f"{summary.trim_open}. Running the study again goes on with it."
        )
    if summary.stopped_before_race_end and not summary.confirmed:
        left = sorted(summary.ruled_out)
        named = ", ".join(f"trial {label}" for label in left)
        them = "it" if len(left) == 1 else "them"
        dropped = f" (a race re-measured {named} and did not prove {them})" if left else ""
        said.append(
            f" No race has proven it against the baseline yet{dropped}: the study's last run stopped before its race "
            "ended, or another tuner of the study still searches; run the same command again to resume."
        )
    proof = summary.proof
    slowed = len(proof.slowed_rounds(None)) + len(proof.slowed_rounds(proof.winner.label)) if proof else 0
    if slowed:
        said.append(
            f" {slowed} of the runs it stands on {'was' if slowed == 1 else 'were'} disturbed: see "
            "'Measured on a busy machine'."
        )
    return said


def _value(value: Any) -> str:
    """A knob's value in a sentence: None, a knob left unset (PyTorch's default), as "default"."""
    return "default" if value is None else str(value)


def _memory_kind(record: TrialRecord) -> str:
    """The word "GPU " where ``record``'s peak memory is the GPU's (``TrialResult.peak_memory_mb``), else nothing."""
    return "GPU " if record.result.measurement.device.startswith("cuda") else ""


def gain_interval(summary: Summary) -> str:
    """The recommendation's gain's 95 % interval in words, or why it has none: a figure a user will quote carries its
    uncertainty, and one resting on single runs or one round says so."""
    interval, proof = summary.gain_interval, summary.proof
    if interval is not None:
        more = "more study.confirm_rounds would tell"
        if proof.ended_early:
            more = "the race ended early on its verdict; mode=benchmark measures the gain over more rounds"
        # A proof (rounds won) beside an interval spanning 1x reads as a contradiction unless both are named.
        won = sum(ratio > 1 for ratio in proof.gain_ratios(proof.winner.label).values())
        spread = f"the recommendation ran faster in {won} of them, by amounts too far apart to bound the gain"
        spans = f" (it spans 1x: {spread}; {more})" if interval.low <= 1 else ""
        return (
            f"95 % interval {ratio_bounds(interval.low, interval.high)}x over {interval.n} paired rounds"
            f"{summary.left_out_note}{spans}"
        )
    if proof is not None:
        return "one race round: no interval"
    return "single runs: no interval"


def _profiles(results: StudyResults, summary: Summary) -> list[Section]:
    """The baseline and the recommendation side by side as profiled after the race: what limits each and what to
    change (none where the study holds no profiles of these two: study.diagnose=false, or a run stopped first)."""
    profiles = current_profiles(results.profiles, summary)
    if profiles is None:
        return []
    headers, rows = side_by_side_rows(profiles)
    named = sides(profiles)
    ran = {name: record.result.stages for name, record in named.items() if record.result is not None}
    name, last = list(named.items())[-1]
    measured_by = "the race's" if summary.confirmed else "from single runs"
    lead = (
        "Each configuration was then taken apart in a profiling run of its own, as mode=profile does "
        "(docs/profile.md): the step's stages, a torch.profiler trace, the data pipeline's hot functions under "
        "cProfile; the verdict is the first rule that holds (autotune/results/diagnosis.py). These figures are the "
        f"profiling runs', slowed by their instruments; the throughputs above are {measured_by}. Advice for the "
        "recommendation leaves out the knobs it already changes and says which values the tuner measured."
    )
    advice = last.diagnosis.advice if last.diagnosis else []
    if advice:
        no_gain = any(a.measured_no_gain for a in advice)
        last_ones = f", then what the tuner measured gaining under {MIN_GAIN:.0%}" if no_gain else ""
        lead += f" Below the table: what to change next in the {name}, most effective first{last_ones}."
    return [
        Section(
            "What limits each: the baseline and the recommendation profiled",
            paragraphs=[lead],
            table=Table(headers, rows),
            bullets=[describe(a) for a in advice],
            plots=[paired_stage_bars(ran)] if ran else [],
        )
    ]


def _confirmation(results: StudyResults, summary: Summary) -> list[Section]:
    """The finalists' race, and the trials left out of it though their runs came near the fastest, with why."""
    race = summary.confirmation
    if race is None:
        return []
    finalists, left_out = finalist_choice(results.baseline, results.trials)
    paragraphs = [race.describe()]
    if left_out and [f.label for f in finalists] == [f.label for f in race.finalists]:  # the race of these trials
        named = "; ".join(f"trial {label} ({why})" for label, why in left_out.items())
        paragraphs.append(
            f"Left out of the race, though their runs came within {FINALIST_WINDOW:.0%} of the fastest: {named}. "
            f"In the race a trial that changes more knobs wins over a simpler one only by beating it {BEATS_WORDS}, "
            f"and at most {MAX_FINALISTS} finalists race."
        )
    table = rounds_table(race)
    return [Section("Confirmation", paragraphs=[*paragraphs, *_rounds_key([table])], table=table)]


# A round an entrant did not run: it had left the race, or the race ended first.
_NOT_RUN = "–"
# Said of an entrant's run in the round whose baseline run failed (it ran first, as the order rotates): no figure of
# the race counts it (``Confirmation.paired``).
_UNPAIRED = "unpaired"


def rounds_table(race: Confirmation) -> Table | None:
    """``race``'s runs round by round: a row for the baseline and for each entrant, a column for each round (a run's
    samples/s; in brackets its ratio to the baseline's run of that round, or "unpaired" where the baseline's run of
    that round failed, and "busy" where the race counted it though something beside it slowed it; "failed" where it
    failed), then the median of the rounds the baseline ran (in brackets ``Confirmation.ratio``); the last row names
    the fastest of each round the baseline ran. None where no round ran."""
    entrants: list[Finalist | None] = [None, *race.finalists]  # None: the baseline
    runs = [_runs_by_round(race, entrant) for entrant in entrants]
    rounds = range(1, max(max(by_round, default=0) for by_round in runs) + 1)
    if not rounds:
        return None
    paired = range(1, race.rounds + 1)  # the rounds the baseline ran: the race's figures pair its runs with theirs
    rows = []
    for entrant, by_round in zip(entrants, runs, strict=True):
        slowed = race.slowed_rounds(entrant.label if entrant else None)
        against = {} if entrant is None else runs[0]  # the baseline's runs, which the ratios are to
        cells = [_run_cell(by_round.get(n), against.get(n), n in slowed, n in paired) for n in rounds]
        rows.append([_entrant_named(entrant), *cells, _median_cell(race, entrant)])
    fastest = [_fastest(entrants, runs, n) if n in paired else _NOT_RUN for n in rounds]
    return Table(["", *(f"round {n}" for n in rounds), "median"], [*rows, ["fastest", *fastest, ""]])


def _runs_by_round(race: Confirmation, entrant: Finalist | None) -> dict[int, float | str]:
    """``entrant``'s runs in ``race`` (None: the baseline's) by round, from 1: samples/s, or "failed" in the round its
    run failed (the baseline's ends the race: the round after its last run)."""
    throughputs = race.baseline_throughputs if entrant is None else entrant.throughputs
    runs: dict[int, float | str] = dict(enumerate(throughputs, 1))
    if entrant is None and race.failure:
        runs[len(throughputs) + 1] = "failed"
    if entrant is not None and entrant.failed_round is not None:
        runs[entrant.failed_round] = "failed"
    return runs


def _entrant_named(entrant: Finalist | None) -> str:
    return "baseline" if entrant is None else f"trial {entrant.label}"


def _run_cell(run: float | str | None, baseline_run: float | str | None, slowed: bool, paired: bool) -> str:
    """A round's cell: ``run``'s samples/s, with its ratio to ``baseline_run`` where that is a run's (None: the
    baseline's own row), or "unpaired" where the round is not ``paired`` (the baseline's run of it failed), and
    "busy" where ``slowed``; else what stands in its place ("failed", or not run)."""
    if run is None:
        return _NOT_RUN
    if isinstance(run, str):
        return run
    if not paired:
        notes = [_UNPAIRED]
    else:
        notes = [] if baseline_run is None else [f"{run / baseline_run:.2f}x"]
    notes += ["busy"] if slowed else []
    return format_cell(float(run)) + (f" ({', '.join(notes)})" if notes else "")


def _median_cell(race: Confirmation, entrant: Finalist | None) -> str:
    """``entrant``'s median over the rounds it and the baseline ran (``Confirmation.paired_median``; None: the
    baseline's), with its ratio to the baseline's over those rounds (``Confirmation.ratio``)."""
    if entrant is None:
        return format_cell(float(race.baseline_median)) if race.rounds else _NOT_RUN
    median = race.paired_median(entrant)
    if median is None:
        return _NOT_RUN
    return f"{format_cell(float(median))} ({race.ratio(entrant):.2f}x)"


def _fastest(entrants: list[Finalist | None], runs: list[dict[int, float | str]], n: int) -> str:
    """Which of ``entrants`` (their ``runs``) ran fastest in round ``n``, named as their rows are; all of those tied."""
    timed = {
        _entrant_named(entrant): run
        for entrant, by_round in zip(entrants, runs, strict=True)
        if not isinstance(run := by_round.get(n, ""), str)
    }
    top = max(timed.values(), default=None)
    return ", ".join(name for name, run in timed.items() if run == top) or _NOT_RUN


def _rounds_key(tables: list[Table | None]) -> list[str]:
    """What the cells of races' ``tables`` (``rounds_table``) mean, as a paragraph; none where no round ran."""
    shown = [table for table in tables if table is not None]
    if not shown:
        return []
    cells = [cell for table in shown for row in table.rows[:-1] for cell in row[1:]]  # not the row of the fastest
    which = "Each race's table gives it" if len(shown) > 1 else "The table below gives the race"
    key = (
        f"{which} round by round: each run's samples/s and, in brackets, its ratio to the baseline's run of that "
        "round; each entrant's median over the rounds it and the baseline ran, and its ratio to the baseline's median "
        "over those rounds; and each round's fastest."
    )
    if any(_UNPAIRED in cell for cell in cells):
        key += (
            f" A run marked {_UNPAIRED} ran in the round whose baseline run failed (before it, as the order rotates): "
            "with no baseline run to pair it with, it has no ratio, its median leaves it out, and that round names no "
            f"fastest ({_NOT_RUN})."
        )
    if any("busy" in cell for cell in cells):
        key += " A run marked busy was counted though something beside it slowed it (Measured on a busy machine)."
    if _NOT_RUN in cells:
        key += f" A dash ({_NOT_RUN}): not run, as it had left the race or the race had ended."
    return [key]


# Where the trim keeps the configuration a trim race started from though a variant won it (``proof_of``).
_PROVES_KEPT = " Its rounds of trial {} against the baseline give the recommendation's gain."
# Where a trim race measured the configuration it started from in the most rounds and did not prove it (``judge_of``).
_OVERRULES = (
    " These are the most rounds that measured trial {} against the baseline, and they did not prove it: the baseline "
    "is kept (the headline says why)."
)


def _trim(summary: Summary) -> list[Section]:
    """The races of the winner against its changes undone, each under a heading of its own: its verdict in words,
    its runs in a table."""
    if not summary.trim:
        return []
    lead = (
        "The race's winner raced again against itself with each of its changes undone in turn: a change whose "
        "undoing costs nothing beyond noise is not recommended, as long as the changes so undone give back less than "
        f"{TRIM_BOUND:.0%} of it (rules: autotune/results/trim_rules.py)."
    )
    winner, steps, proof = summary.trim[0].finalists[0].label, summary.trim_steps, summary.proof
    overruled = summary.overruled
    races = []
    for number, (race, step) in enumerate(zip(summary.trim, steps, strict=True), 1):
        proves_kept = proof == started_alone(race)  # a variant won it, yet the trim kept it: ``proof_of``
        kept = _PROVES_KEPT.format(race.finalists[0].label) if proves_kept else ""
        if overruled is not None and overruled.number == number:
            kept = _OVERRULES.format(overruled.label)
        left = (_trim_left(race, step, winner) + kept).strip()
        paragraphs = [race.describe(trim=True), *([left] if left else [])]
        races.append(Section(_race_named(number).capitalize(), paragraphs=paragraphs, table=rounds_table(race)))
    return [
        Section(
            "Only the changes that matter",
            paragraphs=[lead, *_rounds_key([race.table for race in races])],
            plots=_present(plots.undone_changes(summary)),
            subsections=races,
        )
    ]


def _trim_left(race: Confirmation, step: TrimStep, winner: str) -> str:
    """What a trim race left in place of the configuration it started from, in words, where its verdict
    (``Confirmation.describe``) does not say it: where its winner is a variant it does not leave in place
    (``trimmed_to``, ``trim_path``: ``step``), why; where it leaves one, what became of each change
    (``_trim_outcome``). ``winner``: the finalists' race's, which the trim started from."""
    reference = race.finalists[0]
    if step.refused is not None:
        return (
            f"Trial {step.refused.label} is not taken: trial {winner}, the finalists' race's winner, would run "
            f"{step.refused_behind - 1:.1%} faster than it by the product of the trim's paired ratios, and a trim "
            f"gives back less than {TRIM_BOUND:.0%}, the smallest gain a change is recommended for; nothing is undone."
        )
    if step.left is not None:
        return _trim_outcome(race, step.left)
    if race.winner is None or race.winner is reference:
        return ""
    why = unsettled(race) or f"trial {reference.label}, the configuration it started from, ran faster beyond noise"
    return f"Nothing is undone, as no variant was shown to cost nothing: {why}."


def _trim_outcome(race: Confirmation, new: Finalist) -> str:
    """What a settled trim race did to each change it undid alone, in words: left out where its variant is ``new``,
    the race's winner, or undoes only changes ``new`` undoes too (the race's variant undoing several at once: said
    where undoing it alone was not shown to cost nothing); kept where the configuration it was made from beat it
    beyond noise (undoing it cost throughput), or where it left the race unbeaten (a failed run) or nothing was undone
    (not shown to cost nothing); else undone again on top of ``new`` (``undone_again``)."""
    reference = race.finalists[0]

    def undone_by(variant: Finalist) -> list[str]:
        return variant.label.removeprefix(f"{reference.label} without ").split(" without ")

    left_out = set(undone_by(new)) if new is not reference else set()
    outcome: dict[str, list[str]] = {
        key: [] for key in ("costs", "unshown", "left out", "together costs", "together", "tied")
    }
    for variant in race.finalists[1:]:
        undone = undone_by(variant)
        if variant is new:
            outcome["left out"] += undone
        elif left_out.issuperset(undone):  # said as left out with new's
            costs = beats(reference, variant)
            outcome["together costs" if costs else "together"] += (
                [] if undone_again(reference, variant, new) else undone
            )
        elif len(undone) == 1 and beats(reference, variant):
            outcome["costs"] += undone
        elif len(undone) == 1:  # it left the race unbeaten (a failed run, say), or tied where nothing was undone
            # undone again only where the next race can race it: run_trim races a configuration of two changes or more
            tied = undone_again(reference, variant, new) and new is not reference and new.changes >= 2
            outcome["tied" if tied else "unshown"] += undone
    said = {
        "costs": "Kept, as undoing it cost throughput",
        "unshown": "Kept, as undoing it was not shown to cost nothing",
        "left out": "Left out, as fast without",
        "together costs": "Left out with the others, though undoing it alone cost throughput",
        "together": "Left out with the others, though undoing it alone was not shown to cost nothing",
        "tied": "As fast without too, so undone on top of that in the next race",
    }
    return " ".join(f"{said[key]}: {', '.join(names)}." for key, names in outcome.items() if names)


def _present(*found: Plot | None) -> list[Plot]:
    """The pictures whose data exists (a plot function returns None without it)."""
    return [plot for plot in found if plot is not None]


def _importance(results: StudyResults) -> list[Section]:
    completed = sum(record.result.ok for record in results.trials)
    if not results.importance and 0 < completed < IMPORTANCE_MIN_TRIALS:
        text = (
            f"Optuna's importance is left out: from fewer than {IMPORTANCE_MIN_TRIALS} completed trials (this study "
            f"has {completed}) it ranks knobs little better than chance (docs/benchmarks.md). Each change's share "
            "is measured instead: where the race ran, by racing its winner with each change undone (above), and "
            "by mode=benchmark."
        )
        return [Section("Which knobs mattered", paragraphs=[text])]
    if not results.importance:
        return []
    text = (
        "How much each knob that varied among the search's trials mattered to reaching the best throughputs, by "
        "Optuna's PED-ANOVA (the best half of the trials against all of them). The search chose which "
        "configurations to measure, so this describes the trials run, not every possible configuration; the races "
        "above measure each change."
    )
    shares = [f"{name}: {share:.2f}" for name, share in results.importance.items()]
    return [
        Section(
            "Which knobs mattered",
            paragraphs=[text],
            bullets=shares,
            plots=_present(plots.importance(results.importance)),
        )
    ]


def _why_keep(summary: Summary) -> str:
    """Why the baseline stays without a race: nothing else measured, nothing faster, or the baseline tied with the
    fastest (``choose_candidate``); and any faster configuration that could not be recommended (infeasible: a
    measurement with a failure; or one an earlier race measured no faster: ``Summary.ruled_out``)."""
    base = summary.baseline
    ruled_out = [r for r in summary.ranked if r.label in summary.ruled_out]
    others = [r for r in summary.ranked if r is not base and r not in ruled_out]
    measured = [r.throughput for r in others if r.result.ok]
    at = f"the baseline ({base.throughput:.1f} samples/s)"
    if not measured and ruled_out:
        text = "No other configuration is left to recommend."
    elif not measured:
        ran_to_end = any(r.result.measurement is not None for r in others)  # but over the budget or inexact
        ending = " to the end and feasible" if ran_to_end else " to the end" if others else ""
        text = f"No configuration other than {at} was measured{ending}" + (" (see below)." if others else ".")
    elif max(measured) <= base.throughput:
        text = f"No configuration measured faster than {at}."
    else:
        text = (
            f"The fastest configuration measured ({max(measured):.1f} samples/s) is within {TIE_TOLERANCE:.0%} of "
            f"{at}: a tie within noise, which is no reason to change anything."
        )
    if summary.budget_left_out:
        text += f" study.budget_s left out {'; '.join(summary.budget_left_out)}: a larger budget may find a faster one."
    faster = [r for r in others if not r.result.ok and r.result.timing and r.result.timing.throughput > base.throughput]
    if faster:
        text += (
            f" {counted(len(faster), 'faster configuration')} could not be recommended: infeasible or stopped (below)."
        )
    if ruled_out:
        named = ", ".join(f"trial {r.label} ({r.throughput / base.throughput:.2f}x in one run)" for r in ruled_out)
        them = "them" if len(ruled_out) > 1 else "it"
        text += (
            f" A race re-measured {named} and did not prove {them}; that race did not end the study (trials were "
            "measured after it, or it was stopped): the same command again races."
        )
    return text


def format_cell(value: Any) -> str:
    """A table's cell: a number to a tenth from 10 up (as samples/s are said everywhere), to three significant
    digits below (2.08, 0.247), zero as 0."""
    if value is None:
        return ""
    if isinstance(value, float):
        size = abs(value)
        decimals = 0 if value == 0 else 1 if size >= 10 else 2 if size >= 1 else 3
        return f"{value:.{decimals}f}"
    return str(value)


def _table(headers: list[str], rows: list[list[Any]]) -> Table:
    return Table(headers, [[format_cell(value) for value in row] for row in rows])


def _before_after(summary: Summary) -> Table:
    before, after = (record_row(r, None, summary) for r in (summary.baseline, summary.recommended))
    rows = [[name, _value(before[name]), _value(after[name])] for name in KNOBS]  # unset: "default", as said above
    if summary.batch_policy == "fixed_effective":
        rows.append(["gradient accumulation steps", *(row["gradient_accumulation_steps"] for row in (before, after))])
    rows.append(["throughput (samples/s)", summary.baseline_throughput, summary.recommended_throughput])
    if summary.confirmed:
        # The row above is the race's medians; the interval is one run's step-to-step (batch means) interval, which
        # the same configuration's other runs fall outside: said so, lest it read as the throughput's across runs.
        single_run = "a single run (samples/s, 95% CI within that run: runs vary more)"
        rows.append([single_run, *(_run_and_interval(r) for r in (before, after))])
    else:
        rows.append(["throughput 95% CI (within its one run)", _interval(before), _interval(after)])
    rows += [
        [title, metric(key, before[key]), metric(key, after[key])]
        for key, title in _BEFORE_AFTER_METRICS
        if _shown(key, before, after)
    ]
    return _table(["", "baseline", "recommended"], rows)


# Shares of the step, said in per cent as the console and the headline say them ("data wait 66%").
_PERCENT_KEYS = frozenset({"data_stall_fraction"})


def metric(key: str, value: Any) -> Any:
    """A row's figure ``key`` as a table shows it: a share in per cent, else as read (None, or a frame's NaN: none)."""
    if value is None or value != value:  # NaN is the one value not equal to itself
        return None
    return f"{value:.0%}" if key in _PERCENT_KEYS else value


def _shown(key: str, *rows: dict[str, Any]) -> bool:
    """Every metric read for either configuration (not the GPU's on a CPU), but the host's peak where it is the
    peak every decision used (on a CPU)."""
    read = any(row[key] is not None for row in rows)
    return read and (key != "host_peak_memory_mb" or any(row[key] != row["peak_memory_mb"] for row in rows))


def _run_and_interval(row: dict[str, Any]) -> str:
    return f"{format_cell(row['throughput_sps'])} ({_interval(row)})"


def _interval(row: dict[str, Any]) -> str:
    low, high = row["throughput_ci95_low"], row["throughput_ci95_high"]
    if low is None:
        return "window too short to tell"
    return f"{low:.1f} – {'no upper bound' if high is None else f'{high:.1f}'}"


def _ranked(summary: Summary) -> Table:
    rows = [_with_changes(row, summary) for row in ranked_rows(summary) if row["state"] == "complete"]
    for row in rows:
        row["trial"] = marked(row, summary)
    cells = [[metric(key, row[key]) for key, _ in RANKED_COLUMNS] for row in rows]
    return _table([title for _, title in RANKED_COLUMNS], cells)


def ranked_basis(summary: Summary) -> str:
    """What the rank below rests on, and where the recommendation comes from when it is not the rank."""
    basis = (
        "Ranked by each configuration's own run (for a search trial, its run in the shorter screening window; for "
        "one first measured in a race, its first race run), its speedup against the baseline's own run, not against "
        "the baseline's run of the same round."
    )
    if summary.confirmed:
        basis += " The recommendation is chosen by the races, not by this rank."
    return basis + busy_note([row for row in ranked_rows(summary) if row["state"] == "complete"])


def _with_changes(row: dict[str, Any], summary: Summary) -> dict[str, Any]:
    """``row`` with its knobs as one cell: the knobs that differ from the baseline (every knob: trials.csv)."""
    return {**row, "changes": _changes_from(summary.baseline, {name: row[name] for name in KNOBS})}


def _probe(results: StudyResults) -> list[Section]:
    probe = results.probe
    if probe is None:
        return []
    heading = "Where the time goes (differential probe)"
    if not probe.ok:
        said = f"The probe failed ({probe.failure}); any search trial went on without it."
        if probe.retry:  # study.budget_s left it no time to end or to run again: ``ProbeRecord.retry``
            said += " A later run probes anew."
        return [Section(heading, paragraphs=[said])]
    loading, compute = probe.baseline_loader_sps, probe.baseline_compute_sps
    slower = "the DataLoader" if loading < compute else "the model step"
    text = (
        f"Timed apart at the baseline's settings, the DataLoader alone delivered {loading:.1f} samples/s and the "
        f"model step alone (on a cached batch) {compute:.1f} samples/s: {slower} is the slower half. From such "
        f"timings ({probe.wall_s:.1f} s in all) the probe predicted each configuration's throughput; each trial "
        "measured the configuration predicted fastest, its prediction corrected by the trials measured before it, "
        "until none left was predicted to beat the best or come within a run's noise of it, or study.n_trials ran "
        "out (no prediction: a twin of the best with a knob the probe "
        "does not time, such as torch.compile). The prediction only orders the search; every figure in this report "
        "is measured."
    )
    rows = [
        [r.label, _changes_from(results.baseline, r.result.knobs), _predicted(r.predicted_sps), r.throughput]
        for r in results.trials
    ]
    table = _table(["trial", "changes from the baseline", "predicted samples/s", "measured samples/s"], rows)
    return [Section(heading, paragraphs=[text], table=table)]


def _predicted(sps: float | None) -> float | str:
    """A trial's predicted throughput, or why there is none: a twin of the best by a knob the probe does not time."""
    return "none (an untimed knob)" if sps is None else sps


def _changes_from(baseline, knobs: dict[str, Any]) -> str:
    return ", ".join(f"{name}={after}" for name, (_, after) in changed(knobs, baseline.result.knobs).items()) or "none"


def _pareto(summary: Summary) -> list[Section]:
    if not summary.pareto:
        return []
    base = summary.baseline.throughput
    rows = [
        [
            r.label,
            r.throughput,
            r.throughput / base,
            r.result.peak_memory_mb,
            _changes_from(summary.baseline, r.result.knobs),
        ]
        for r in summary.pareto
    ]
    table = _table(["trial", "samples/s", "vs baseline", "peak MB", "changes from the baseline"], rows)
    intro = "No configuration is both faster and leaner than these (study.objectives=[throughput, peak_memory])."
    section = Section(
        "Pareto front: throughput against peak memory", [intro], table, plots=_present(plots.pareto(summary))
    )
    return [section]


def _failures(summary: Summary) -> list[Section]:
    failed = [row for row in ranked_rows(summary) if row["state"] != "complete"]
    if not failed:
        return []
    rows = [
        [
            row["trial"],
            row["state"],
            _with_changes(row, summary)["changes"],
            row["throughput_sps"],
            row["failure_reason"],
        ]
        for row in failed
    ]
    headers = ["trial", "state", "changes from the baseline", "samples/s", "reason"]
    return [Section("Pruned, infeasible and failed configurations", table=_table(headers, rows))]


def _not_measured(results: StudyResults) -> list[Section]:
    """The configurations the search ruled out unmeasured, and why: the trial numbers the ranking skips."""
    if not results.not_measured:
        return []
    rows = [[n.label, _changes_from(results.baseline, n.knobs), n.reason] for n in results.not_measured]
    text = (
        "What a failure showed would fail too was not run: a configuration needing no less memory than one that ran "
        "out, or loading in DataLoader workers after two trials failed in one while no configuration with workers ran."
    )
    table = _table(["trial", "changes from the baseline", "why not measured"], rows)
    return [Section("Not measured", paragraphs=[text], table=table)]


def _tuner_time(results: StudyResults) -> list[Section]:
    """Where the tuner's own time went, stage by stage and phase by phase (none where the study did not record it)."""
    split = results.tuner_time
    if split is None:
        return []
    text = (
        f"The tuner's {split.wall_s:.0f} s ({covers(split)}), from the start of each run to its reports, by stage "
        "and, within each, by the phases of its trial processes: start-up (the interpreter and imports, or the fork), "
        "the pipeline's build, warm-up, compile, the timed windows, the probe's probing, the profiling runs' "
        "profiling, the rest of each process (DataLoader shutdown, the FLOP count, memory reads, exit), stopped "
        "trials (pruned, timed out or crashed: no breakdown comes back), waiting for other tuners of a shared study "
        "(their trials and searches on this machine, their turn at the race), idle parallel slots (study.parallel: "
        "a slot with nothing left to run while another's trial still ran), and the tuner's own work between them "
        "(what remains of the stage's time). With several trials at once each counts its share."
    )
    stage_shares = percents(shares(split.stages()))
    rows = [
        [STAGE_WORDS.get(stage, stage), sum(parts.values()), f"{stage_shares[stage]}%", _phases_in_words(parts)]
        for stage, parts in split.by_stage().items()
    ]
    rows.append(["all", split.wall_s, "100%", _phases_in_words(split.phases())])
    table = _table(["stage", "seconds", "share", "of which (seconds)"], rows)
    paragraphs = [text, *forecast_lines(split), *budget_lines(split)]
    return [Section("Where the tuner's time went", paragraphs=paragraphs, table=table, plots=[plots.tuner_time(split)])]


def _phases_in_words(seconds: dict[str, float]) -> str:
    return ", ".join(f"{PHASE_WORDS[phase]} {value:.1f}" for phase, value in seconds.items() if round(value, 1))


def _busy_machine(summary: Summary) -> list[Section]:
    """A warning naming the runs something beside them slowed down, if any were: the search's and the races'."""
    measured = [r for r in summary.ranked if r.result.measurement is not None]
    busy = [r for r in measured if r.result.disturbed]
    raced = _disturbed_race_runs(summary)
    paragraphs = []
    if busy:
        named = slowed_in_words({_run_label(r, summary): r.result.disturbance for r in busy})
        named += ", each marked (busy) in the ranking" if len(busy) > NAMED_RUNS else ""
        paragraphs.append(
            f"{len(busy)} of the {len(measured)} measured configurations {'was' if len(busy) == 1 else 'were'} "
            "measured while other processes competed for its cores (nearly all busy, at least "
            f"{SystemReport.BUSY_OTHERS_CORES:g} cores' worth of them taken by others on average) or computed on "
            f"its GPU, or while its cores ran {CoreSpeed.SLOW:g}x slower than usual or more, read just before and "
            f"after its run: {named}. Their throughput may read low and the ranking may be off; close other work "
            "and run the study again (a new study.name measures everything afresh)."
        )
    if raced:
        named = slowed_in_words(raced)
        if len(raced) > NAMED_RUNS:
            by_race = [f"{len(r.disturbed)} in {_race_named(i)}" for i, r in enumerate(summary.races) if r.disturbed]
            named += f" ({', '.join(by_race)}; report.json names each, under its race's `disturbed`)"
        paragraphs.append(
            f"The races counted {len(raced)} run{'s' if len(raced) > 1 else ''} that something beside "
            f"{'it' if len(raced) == 1 else 'them'} slowed: {named}. A load slows configurations unalike, so the "
            f"recommendation and its gain may be off: {_quieter(raced.values())}."
        )
    return [Section("Measured on a busy machine", paragraphs=paragraphs)] if paragraphs else []


def _race_named(index: int) -> str:
    """``Summary.races``' race at ``index`` in words: the finalists' race first, then the trim's, from 1."""
    return "the finalists' race" if index == 0 else f"trim race {index}"


def _quieter(disturbances: Iterable[Disturbance]) -> str:
    """What to do about runs slowed by ``disturbances``: where only the cores ran slow, nothing on this machine
    slowed them (the host did: another tenant on its cores, a lower clock), so closing work here cannot help."""
    if all(d.others_cores is None and not d.gpu_processes for d in disturbances):
        return (
            "the cores ran slow while nothing else here was busy, by the host's doing (another tenant on its cores, a "
            "lower clock), so check them (mode=check) when the host runs steadier, or on another machine"
        )
    return "close other work and check them (mode=check) on a quiet machine"


def _run_label(record: TrialRecord, summary: Summary) -> str:
    return "the baseline" if record is summary.baseline else f"trial {record.label}"


def _disturbed_race_runs(summary: Summary) -> dict[str, Disturbance]:
    """The races' runs (the finalists' and the trim's) counted though something beside them slowed them."""
    return {name: disturbance for race in summary.races for name, disturbance in race.disturbed.items()}


def _windows_of_whole_epochs(results: StudyResults) -> str:
    """How many of the windows of the baseline and the search ended on whole epochs, in words ("" where none
    did)."""
    timings = [r.result.timing for r in [results.baseline, *results.trials] if r is not None and r.result.timing]
    whole = sum(timing.epochs > 0 for timing in timings)
    if not whole:
        return ""
    return (
        f" {whole} of the {len(timings)} windows of the baseline and the search ended on whole epochs (DataLoader "
        "workers whose epochs were short enough: docs/measurement.md), so that they held the stalls of the epochs' "
        "starts as often as training does."
    )


def _method(results: StudyResults, summary: Summary) -> str:
    plan = results.measure
    warmup = WarmupPolicy(**plan["warmup"]).on(results.device.split(":")[0])
    lasting = f" and at least {warmup.min_time_s:g} s" if warmup.min_time_s else ""
    repeats = plan.get("repeats", 1)
    screen = plan.get("screen")
    screened = (
        f" A search trial's window was the shorter screening one: at least {screen['min_steps']} steps and "
        f"{screen['min_time_s']:g} s; the baseline, the races and the profiles ran the full one."
        if screen
        else ""
    )
    gpu = results.device.startswith("cuda")
    peak = (
        "Peak memory is the GPU's: the peak CUDA's caching allocator reserved (what must fit on the device; the "
        "CUDA context is not in it); the host's process tree is reported beside it. "
        if gpu
        else ""
    )
    each = (
        f"the median of {repeats} runs, each in a process of its own"
        if repeats > 1
        else "one measurement: differences of a few percent can be run-to-run noise"
    )
    repeated = f"Each figure of a trial's own run (the ranking, the tables of trials) is {each}.{_of_rounds(summary)}"
    return (
        f"Each configuration ran in a process of its own on {results.device}. Warm-up (compilation happens here and "
        f"is reported as compile s) lasted until the median of the last {warmup.compared} step times was within "
        f"{warmup.tolerance:.0%} of the {warmup.compared} before ({warmup.min_steps} to {warmup.max_steps} "
        f"steps{lasting}; the warm-up steps counted include those run after it to use up the batches DataLoader "
        "workers loaded while the window's start was read), then a timed window of at least "
        f"{plan['min_steps']} steps and {plan['min_time_s']:g} s "
        f"(at most {plan['max_time_s']:g} s).{_windows_of_whole_epochs(results)}{screened} Each trial ran the loop "
        "a user runs: one DataLoader over its epochs, nothing waiting for a GPU inside the window but its end. "
        "Throughput is samples in the window divided by its wall time; data wait is the share of the window spent "
        f"blocked on the next batch (on a GPU: the device idle before a batch, from CUDA events). {peak}The "
        f"{'host' if gpu else 'peak'} memory sums the trial's process tree (DataLoader workers included) "
        "using PSS where the OS provides it, so shared pages are not counted twice: PSS is read outside the window; "
        "inside it, where such a read would slow the loop, resident sizes are sampled and corrected by the shared "
        "pages a PSS read of the same processes found, and the training process's high-water mark catches peaks "
        f"between. {repeated}"
    )


def _of_rounds(summary: Summary) -> str:
    """Which figures are medians of a race's interleaved rounds, as a sentence ("" where no race ran a round): the
    races', and the headline's where a race confirmed the recommendation."""
    if not any(race.rounds for race in summary.races):
        return ""
    if summary.confirmed:
        return (
            " The races' figures and the headline's throughputs are medians of their interleaved rounds, its gain the "
            "geometric mean of the rounds' paired ratios."
        )
    return " The races' figures are medians of their interleaved rounds."


def _other_machines(results: StudyResults) -> list[str]:
    """Where the study holds results of other machines too: which, and that they are ranked apart."""
    if not results.other_machines:
        return []
    others = "; ".join(
        f"{about.get('cpu_model', '?')}, {about.get('cpu_count', '?')} cores, GPU {about.get('gpu') or 'none'} "
        f"(machine {machine})"
        for machine, about in results.other_machines.items()
    )
    return [
        f"Machine {results.machine_id}. This study holds results of other machines too, never ranked with these: "
        f"{others}. `mode=report` renders one report per machine."
    ]


def machine_lines(machine: dict[str, Any], device: str) -> list[str]:
    """The machine a report's figures were measured on (``describe_machine``'s description), a line per part, in
    words; "?" for what a description stored by an earlier version lacks."""

    def of(key: str) -> Any:
        return machine.get(key, "?")

    return [
        f"CPU: {of('cpu_model')} ({of('cpu_count')} usable cores, {of('physical_cores')} physical; "
        f"flags: {', '.join(machine.get('cpu_flags') or ['none of note'])})",
        f"Memory: {of('memory_gb')} GB",
        f"GPU: {machine.get('gpu') or 'none'}; device used: {device}",
        f"torch {of('torch')} (CUDA {machine.get('cuda') or 'none'}, cuDNN {machine.get('cudnn') or 'none'}), "
        f"Python {of('python')}, {of('torch_threads')} torch threads"
        + (f" (by {variables})" if (variables := thread_variables(machine)) else ""),
        f"Platform: {of('platform')}",
    ]
