"""The report's sections on the races: the finalists' race (The finalists' race) and the trim's races (Only the changes
that matter), each with its runs round by round (``rounds_table``), and the runs something beside them slowed
(Measured on a busy machine)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from autotune.measure.core_speed import CoreSpeed
from autotune.measure.measurement import SystemReport
from autotune.records import TrialRecord
from autotune.report import plots
from autotune.report.document import Section, Table, format_cell, present
from autotune.report.rows import NAMED_RUNS, slowed_in_words
from autotune.results.finalist import Finalist, Left
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import (
    BEATS_WORDS,
    FINALIST_WINDOW,
    MAX_FINALISTS,
    TIE_TOLERANCE,
    beats,
    finalist_choice,
    leader_pace,
    losses_allowed,
    paired_ratio,
    rounds_lost,
    rounds_won,
)
from autotune.results.summary import Summary, race_name
from autotune.results.trim_rules import TRIM_BOUND, TRIM_MARGIN, TrimStep, started_alone, undone_again, unsettled
from autotune.trial.result import Disturbance
from autotune.words import counted, listed, rounds_named


def confirmation_sections(results: StudyResults, summary: Summary) -> list[Section]:
    """The finalists' race, and the trials left out of it though their runs came near the fastest, with why."""
    race = summary.confirmation
    if race is None:
        return []
    finalists, left_out = finalist_choice(results.baseline, results.trials)
    paragraphs = [race.describe()]
    if left_out and [f.label for f in finalists] == [f.label for f in race.finalists]:  # the race of these trials
        named = _left_out_words(left_out)
        paragraphs.append(
            f"Left out of the race, though their runs came within {FINALIST_WINDOW:.0%} of the fastest: {named}. "
            f"In the race a trial that changes more knobs wins over a simpler one only by beating it {BEATS_WORDS}, "
            f"and at most {MAX_FINALISTS} finalists race."
        )
    if (back := summary.taken_back) is not None and back.number == 0:
        paragraphs.append(_TAKEN_BACK.format(back.label).strip())
    table = rounds_table(race)
    return [Section("The finalists' race", paragraphs=[*paragraphs, *_rounds_key([table])], table=table)]


def _left_out_words(left_out: dict[str, str]) -> str:
    """The trials left out of the race (``finalist_choice``), those left out for the same reason named together:
    "trials 6, 3 and 0 (each changes more knobs than trial 7 ...)"."""
    by_why: dict[str, list[str]] = {}
    for label, why in left_out.items():
        by_why.setdefault(why, []).append(label)
    return "; ".join(
        f"trial {labels[0]} ({why})" if len(labels) == 1 else f"trials {listed(labels)} ({_each(why)})"
        for why, labels in by_why.items()
    )


def _each(why: str) -> str:
    """A reason said of one trial ("it changes ... its run"), said of each of several."""
    return f"each {why.removeprefix('it ')}" if why.startswith("it ") else why


# A round an entrant did not run: it had left the race, or the race ended first.
_NOT_RUN = "–"


# Said of an entrant's run in the round whose baseline run failed (it ran first, as the order rotates): no figure of
# the race counts it (``Confirmation.paired``).
_UNPAIRED = "unpaired"


def rounds_table(race: Confirmation, trim: bool = False) -> Table | None:
    """``race``'s runs round by round: a row for the baseline and for each entrant, a column for each round (a run's
    samples/s; in brackets its ratio to the baseline's run of that round, or "unpaired" where the baseline's run of
    that round failed, and "busy" where the race counted it though something beside it slowed it; "failed" where it
    failed), then the median of the rounds the baseline ran (``_median_cell``); the last row names the fastest of each
    round the baseline ran. A ``trim`` race's table judges its variants as the trim does: a last column gives each
    one's paired ratio to the configuration the race started from (``_against_cell``). None where no round ran."""
    entrants: list[Finalist | None] = [None, *race.finalists]  # None: the baseline
    runs = [_runs_by_round(race, entrant) for entrant in entrants]
    rounds = range(1, max(max(by_round, default=0) for by_round in runs) + 1)
    if not rounds:
        return None
    paired = range(1, race.rounds + 1)  # the rounds the baseline ran: the race's figures pair its runs with theirs
    reference = race.finalists[0]
    rows = []
    for entrant, by_round in zip(entrants, runs, strict=True):
        slowed = race.slowed_rounds(entrant.label if entrant else None)
        against = {} if entrant is None else runs[0]  # the baseline's runs, which the ratios are to
        cells = [_run_cell(by_round.get(n), against.get(n), n in slowed, n in paired) for n in rounds]
        variant = trim and entrant not in (None, reference)
        judged = [_against_cell(reference, entrant) if variant else ""] if trim else []
        rows.append([_entrant_named(entrant), *cells, _median_cell(race, entrant, variant), *judged])
    fastest = [_fastest(entrants, runs, n) if n in paired else _NOT_RUN for n in rounds]
    against_header = [f"vs trial {reference.label} (paired)"] if trim else []
    headers = ["", *(f"round {n}" for n in rounds), "median", *against_header]
    return Table(headers, [*rows, ["fastest", *fastest, "", *([""] if trim else [])]])


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


def _median_cell(race: Confirmation, entrant: Finalist | None, variant: bool) -> str:
    """``entrant``'s median over the rounds it and the baseline ran (``Confirmation.paired_median``; None: the
    baseline's over all it ran), with its ratio to the baseline's median over those same rounds
    (``Confirmation.ratio``). Where those are fewer than the baseline's (it left early), the cell names them: that
    ratio is to other baseline runs than the rows of every round are, and a trim race's ``variant`` gives none, as
    the trim judges it against the configuration it was made from (``_against_cell``), not the baseline."""
    if entrant is None:
        return format_cell(float(race.baseline_median)) if race.rounds else _NOT_RUN
    median = race.paired_median(entrant)
    if median is None:
        return _NOT_RUN
    both = len(race.paired(entrant)[0])
    ratio = [] if variant and both < race.rounds else [f"{race.ratio(entrant):.2f}x"]
    over = [rounds_named(list(range(1, both + 1)))] if both < race.rounds else []
    return f"{format_cell(float(median))} ({', '.join([*ratio, *over])})"


def _against_cell(reference: Finalist, variant: Finalist) -> str:
    """A trim variant's cell of the last column (``rounds_table``): its paired ratio to ``reference``, the
    configuration it was made from, and the rounds it read slower in (``_against``); a dash where they ran no round
    together."""
    against = _against(reference, variant)
    if against is None:
        return _NOT_RUN
    ratio, slower, rounds = against
    return f"{ratio:.2f}x, slower in {slower} of {counted(rounds, 'round')}"


def _against(reference: Finalist, variant: Finalist) -> tuple[float, int, int] | None:
    """What the trim judges ``variant`` by against ``reference`` (``beats``): the geometric mean of its per-round
    ratios to it (``paired_ratio``), the rounds it read slower in, and the rounds both ran; None where none."""
    slower, rounds = rounds_won(reference, variant)
    return (paired_ratio(variant.throughputs, reference.throughputs), slower, rounds) if rounds else None


def _fastest(entrants: list[Finalist | None], runs: list[dict[int, float | str]], n: int) -> str:
    """Which of ``entrants`` (their ``runs``) ran fastest in round ``n``, named as their rows are; all of those tied."""
    timed = {
        _entrant_named(entrant): run
        for entrant, by_round in zip(entrants, runs, strict=True)
        if not isinstance(run := by_round.get(n, ""), str)
    }
    top = max(timed.values(), default=None)
    return ", ".join(name for name, run in timed.items() if run == top) or _NOT_RUN


def _rounds_key(tables: list[Table | None], trim: bool = False) -> list[str]:
    """What the cells of races' ``tables`` (``rounds_table``; ``trim``: the trim's) mean, as a paragraph; none where
    no round ran."""
    shown = [table for table in tables if table is not None]
    if not shown:
        return []
    cells = [cell for table in shown for row in table.rows[:-1] for cell in row[1:]]  # not the row of the fastest
    medians = [row[table.headers.index("median")] for table in shown for row in table.rows[:-1]]
    which = "Each race's table gives it" if len(shown) > 1 else "The table below gives the race"
    key = (
        f"{which} round by round: each run's samples/s and, in brackets, its ratio to the baseline's run of that "
        "round; each entrant's median over the rounds it and the baseline ran, and its ratio to the baseline's median "
        "over those same rounds; and each round's fastest."
    )
    left_early = any("round" in cell for cell in medians)
    if left_early and trim:
        key += (
            " A variant that left early names the rounds its median is of and gives no ratio to the baseline, whose "
            "runs of those rounds alone may read far from its row's median: the trim judges it by the last column."
        )
    elif left_early:
        key += (
            " An entrant that left early names the rounds its median is of: its ratio is to the baseline's median "
            "over those rounds alone, not to the baseline's row."
        )
    if trim:
        key += (
            " The last column gives each variant against the configuration it was made from, as the trim judges it: "
            "the geometric mean of its per-round ratios to that configuration over the rounds both ran, and the "
            f"rounds it read slower in. Where that configuration beats it {BEATS_WORDS}, the change is kept."
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
_PROVES_KEPT = " Its rounds of trial {} against the baseline prove the recommendation (its gain counts them)."


# Where a trim race measured the configuration it started from in the most rounds and did not prove it (``judge_of``).
_OVERRULES = (
    " These are the most rounds that measured trial {} against the baseline, and they did not prove it: the baseline "
    "is kept (the headline says why)."
)


# Where the rounds of other races the gain counts took back a race's proof (``Summary.taken_back``).
_TAKEN_BACK = (
    " Its proof of trial {} is taken back by the rounds of other races that did not choose it, which its gain counts: "
    "the baseline is kept (the headline says why)."
)


def trim_sections(summary: Summary) -> list[Section]:
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
        if summary.taken_back is not None and summary.taken_back.number == number:
            kept = _TAKEN_BACK.format(summary.taken_back.label)
        left = (_trim_left(race, step, winner) + kept).strip()
        paragraphs = [race.describe(trim=True), *([left] if left else [])]
        races.append(
            Section(race_name(number).capitalize(), paragraphs=paragraphs, table=rounds_table(race, trim=True))
        )
    return [
        Section(
            "Only the changes that matter",
            paragraphs=[lead, *_rounds_key([race.table for race in races], trim=True)],
            plots=present(plots.undone_changes(summary)),
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
    the race's winner, or undoes only changes ``new`` undoes too (the race's variant undoing several at once: said,
    with why, where undoing it alone was kept); undone again on top of ``new`` where it tied and the next race can
    race it (``undone_again``); else kept, each by the rule that kept it, with its figures (``_why_kept``)."""
    reference = race.finalists[0]

    def undone_by(variant: Finalist) -> list[str]:
        return variant.label.removeprefix(f"{reference.label} without ").split(" without ")

    left_out = set(undone_by(new)) if new is not reference else set()
    kept: dict[str, list[str]] = {}  # by the rule that kept them, in words: each change kept, with its figures
    together: dict[str, list[str]] = {}  # the same, of undoing alone a change left out with new's
    undone: dict[str, list[str]] = {"left out": [], "tied": []}
    for variant in race.finalists[1:]:
        names = undone_by(variant)
        if variant is new:
            undone["left out"] += names
        elif left_out.issuperset(names):  # said as left out with new's
            if not undone_again(reference, variant, new):
                why, figures = _why_kept(race, variant, new, "undoing it alone")
                together.setdefault(why, []).append(f"{listed(names)} ({figures})")
        elif len(names) == 1:
            # undone again only where the next race can race it: run_trim races a configuration of two changes or more
            if undone_again(reference, variant, new) and new is not reference and new.changes >= 2:
                undone["tied"] += names
            else:
                why, figures = _why_kept(race, variant, new, "undoing it")
                kept.setdefault(why, []).append(f"{names[0]} ({figures})")
    said = [f"Kept, as {why}: {', '.join(names)}." for why, names in kept.items()]
    said += [f"Left out, as fast without: {', '.join(undone['left out'])}."] if undone["left out"] else []
    said += [f"Left out with the others, though {why}: {', '.join(names)}." for why, names in together.items()]
    if undone["tied"]:
        said.append(f"As fast without too, so undone on top of that in the next race: {', '.join(undone['tied'])}.")
    return " ".join(said)


def _why_kept(race: Confirmation, variant: Finalist, new: Finalist, undoing: str) -> tuple[str, str]:
    """Why trim race ``race``, won by ``new``, did not leave ``variant`` in place of the configuration it started
    from, in words to follow "as" or "though" (``undoing``: what undoing its change is called), and the figures that
    rule read:
    it left the race (``_why_left``); the configuration beat it (``beats``); ``new``, which changes only its change,
    beat the baseline, so undoing it too is no race the trim can run; or it was not proven against the baseline."""
    reference = race.finalists[0]
    if variant.dropped is not None:
        return _why_left(race, variant, undoing)
    ratio, slower, rounds = _against(reference, variant)
    figures = f"{ratio:.2f}x, slower in {slower} of {counted(rounds, 'round')}"
    if beats(reference, variant):
        return f"{undoing} read slower than trial {reference.label} {BEATS_WORDS}", figures
    if new is not reference and undone_again(reference, variant, new):  # tied, but new changes one knob: this one
        return (
            f"trial {new.label}, which changes only it, beat the baseline (undoing it tied with trial "
            f"{reference.label})",
            figures,
        )
    if not race.proven(variant):
        return f"{undoing} was not proven against the baseline", race.shortfall(variant)
    return f"{undoing} was not shown to cost nothing", figures


def _why_left(race: Confirmation, variant: Finalist, undoing: str) -> tuple[str, str]:
    """Why ``variant`` left trim race ``race``, in words to follow "as" or "though" (``undoing``: what undoing its
    change is called), and the figures, by the rule it left by (``Finalist.left``); what it was recorded leaving for
    where the race was stored before the rule was kept."""
    reference, ran = race.finalists[0], len(variant.throughputs)
    if variant.left is Left.FAILED:
        return f"{undoing} failed a run", rounds_named([variant.failed_round])
    if variant.left is Left.UNPROVABLE:
        planned, baseline = race.planned_rounds or race.rounds, race.baseline_throughputs[:ran]
        allowed = losses_allowed(planned)
        return (
            f"{undoing} lost more rounds to the baseline than a proof over {counted(planned, 'round')} allows "
            f"({allowed or 'none'})",
            f"{rounds_lost(variant, baseline)} of {counted(ran, 'round')} lost",
        )
    if variant.left is Left.LAGGING:
        quiet, quiet_reference = _quiet_runs(race, variant, ran), _quiet_runs(race, reference, ran)
        behind = statistics.median(quiet) / leader_pace(quiet_reference, reference.throughputs[:ran])
        by = (
            "by the medians of the runs not slowed"
            if quiet_reference
            else "by the median of its runs not slowed against the slowest of that trial's runs, each slowed"
        )
        return (
            f"{undoing} fell more than {TRIM_MARGIN:.0%} behind trial {reference.label} {by}",
            f"after {rounds_named([ran])}: {behind:.2f}x",
        )
    if variant.left is Left.BEATEN:
        return (
            f"{undoing} read more than {TIE_TOLERANCE:.0%} slower than trial {reference.label} in each round it ran, "
            "which only a round reading it faster could have changed",
            f"{rounds_named(list(range(1, ran + 1)))}: {_against(reference, variant)[0]:.2f}x by the paired ratios",
        )
    return f"{undoing} left the race", variant.dropped


def _quiet_runs(race: Confirmation, entrant: Finalist, rounds: int) -> list[float]:
    """``entrant``'s runs of ``race``'s first ``rounds`` rounds that nothing beside them slowed
    (``Confirmation.slowed_rounds``)."""
    slowed = race.slowed_rounds(entrant.label)
    return [run for index, run in enumerate(entrant.throughputs[:rounds], 1) if index not in slowed]


def busy_machine_sections(summary: Summary) -> list[Section]:
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
        where = _slowed_by_race(summary, counted=len(raced) > NAMED_RUNS)
        named += f" ({where})" if where else ""
        paragraphs.append(
            f"The races counted {len(raced)} run{'s' if len(raced) > 1 else ''} that something beside "
            f"{'it' if len(raced) == 1 else 'them'} slowed: {named}. A load slows configurations unalike, so the "
            f"recommendation and its gain may be off: {_quieter(raced.values())}."
        )
    return [Section("Measured on a busy machine", paragraphs=paragraphs)] if paragraphs else []


def _slowed_by_race(summary: Summary, counted: bool) -> str:
    """Where ``counted`` (the runs are not each named), which races' runs were slowed ("all 8 in trim race 1", "2 in
    the finalists' race, 1 in trim race 2"); and where a race proved the recommendation (``Summary.proof``), whether
    the runs of the recommendation and the baseline that give the gain (``Summary.gain_runs``: the race, or the rounds
    where they come from several) ran undisturbed."""
    races = summary.races
    disturbed = {index: len(race.disturbed) for index, race in enumerate(races) if race.disturbed}
    said = []
    if counted:
        by_race = ", ".join(f"{count} in {race_name(index)}" for index, count in disturbed.items())
        said.append(f"all {by_race}" if len(disturbed) == 1 else by_race)
    if summary.proof is not None:
        gain_races, rounds = summary.gain_races, summary.gain_runs.rounds
        gain_runs = sum(len(paired.disturbed) for paired in rounds)
        if len(gain_races) == 1:
            gave = f"the race that gave the gain, {race_name(gain_races[0])},"
        else:  # a race's rounds before its verdict for the recommendation give none of it
            gave = f"the rounds that gave the gain, {summary.gain_rounds_named(list(range(1, len(rounds) + 1)))},"
        if gain_runs:
            said.append(f"{gave} counted {gain_runs} of them among the recommendation's and the baseline's runs")
        else:
            which = " the recommendation and the baseline" if set(gain_races) & disturbed.keys() else ""
            said.append(f"{gave} ran{which} undisturbed")
    if counted:
        said.append("report.json names each, under its race's `disturbed`")
    return "; ".join(said)


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
