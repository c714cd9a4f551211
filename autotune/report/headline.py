"""The report's verdict: its headline (what to change and what it gains, with the gain's interval, or why the
baseline stays) and the before-and-after table of the baseline against the recommendation."""

from __future__ import annotations

from typing import Any

from autotune.knobs import KNOBS
from autotune.measure.stats import RatioInterval
from autotune.records import TrialRecord
from autotune.report.document import Headline, Table, format_cell, table_of
from autotune.report.rows import record_row
from autotune.results.race import Confirmation
from autotune.results.race_rules import MIN_GAIN, TIE_TOLERANCE, rounds_lost, wins_in_words
from autotune.results.summary import Overruled, Summary, TakenBack, race_name
from autotune.results.trim_rules import unsettled
from autotune.words import by_the_medians, counted, interval_bounds

_BEFORE_AFTER_METRICS = [
    ("median_step_ms", "median step (ms)"),
    ("step_iqr_ms", "step interquartile range (ms)"),
    ("data_stall_fraction", "data wait"),
    ("transfer_ms_per_step", "to device and input layout per step (ms)"),
    ("compile_s", "compile (s)"),
    ("process_tree_cores", "CPU cores busy (process tree)"),
    ("gpu_utilization_percent", "GPU utilisation (%)"),
    ("achieved_gflops_per_s", "achieved GFLOP/s"),
    ("peak_memory_mb", "peak memory (MiB; the GPU's on CUDA)"),
    ("host_peak_memory_mb", "host peak memory (MiB, process tree)"),
    ("window_memory_growth_mb", "memory growth in window (MiB)"),
    ("cuda_peak_allocated_mb", "CUDA peak allocated (MiB)"),
]


def headline(summary: Summary) -> Headline:
    """What to change and what it gained, or that the baseline is best; where the machine's speed did not hold
    through the study (``Summary.unsteady``), first that none of it stands, then what it read."""
    said = _keep(summary) if summary.is_baseline else _recommended(summary)
    if not summary.unsteady:
        return said
    return Headline(unsteady_note(summary).strip(), f"What it read: {said.lead} {said.rest}")


def unsteady_note(summary: Summary) -> str:
    """That the machine's speed did not hold through the study (``Summary.unsteady``), with the baseline's readings
    that show it, to stand before or after a headline; empty where it held."""
    spread = summary.unsteady
    if spread is None:
        return ""
    read = [f"{samples:.1f} samples/s by the median of {where}" for where, samples in summary.baseline_readings.items()]
    return (
        f" None of this stands: the machine's speed did not hold through the study, the baseline reading "
        f"{', '.join(read)} ({spread:.1f}x apart). Run it again with nothing else running (a new study.name measures "
        "everything afresh)."
    )


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
    if summary.taken_back is not None:
        return Headline("Keep your current settings.", _taken_back(summary.taken_back, summary.trim_open))
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
    which = race_name(next(index for index, race in enumerate(races) if race is won))
    judged = overruled.race
    said = (
        f"Trial {overruled.label} won {which} against the baseline ({won.ratio(won.winner):.2f}x by medians of "
        f"{counted(won.rounds, 'round')}), but {race_name(overruled.number)} re-measured it against the baseline "
        f"in more ({counted(overruled.rounds, 'round')}, {overruled.speedup:.2f}x by medians) and did not prove it: "
        f"{judged.shortfall(overruled.finalist)}. The most rounds measuring it decide, so the baseline is kept."
    )
    if (open_for := unsettled(judged)) is not None:
        why = "" if overruled.finalist.dropped else f" ({open_for})"  # its leaving is said above
        said += f" That race did not end{why}: the same command again goes on with it."
    return said


def _taken_back(back: TakenBack, trim_open: str | None) -> str:
    """Why a configuration a race proved is not recommended: its gain falls under the least a change must gain, and the
    rounds of other races it counts read under it too; and where the trim did not end (``trim_open``), that the same
    command goes on with it."""
    proof, rounds = back.proof, back.rounds
    numbers = list(rounds.counted())
    said = (
        f"{race_name(back.number).capitalize()} proved trial {back.label} against the baseline "
        f"({proof.ratio(back.finalist):.2f}x by medians of {counted(proof.rounds, 'round')}), but over the "
        f"{counted(len(numbers), 'round')} its gain counts ({rounds.named(numbers, race_name)}"
        f"{rounds.left_out_note(race_name)}) it ran {_down_to_thousandths(rounds.gain)}x the baseline's throughput "
        f"(the geometric mean of their ratios), under the {MIN_GAIN:.0%} a change must gain, and the rounds of other "
        "races that did not choose it read under it too: they take that proof back, so the baseline is kept."
    )
    if trim_open is not None:
        said += f" The trim did not end: {trim_open}; the same command again goes on with it."
    return said


def _down_to_thousandths(ratio: float) -> str:
    """``ratio`` to three decimals, rounded down: a gain under the least a change must gain never reads as that least
    (1.0199 as 1.019, not 1.020)."""
    shown = f"{ratio:.3f}"
    return shown if float(shown) <= ratio else f"{float(shown) - 0.001:.3f}"


def _recommended(summary: Summary) -> Headline:
    """The headline of a recommendation: its gain with the interval, its changes, its memory, and what it rests on."""
    base, rec = summary.baseline, summary.recommended
    changes = ", ".join(
        f"{name} {_value(before)} → {_value(after)}" for name, (before, after) in summary.changed_knobs().items()
    )
    how = _race_showed(summary) if summary.confirmed else "single runs"
    geomean = f" ({_geomean_and_medians(summary)})" if summary.gain_interval else ""
    before, after, runs = _peak_memories(summary)
    return Headline(
        f"Recommended (trial {rec.label}): {summary.speedup:.2f}x the baseline's throughput{geomean}, "
        f"{gain_interval(summary)}",
        f"({summary.recommended_throughput:.1f} vs {summary.baseline_throughput:.1f} samples/s{_by_medians(summary)}, "
        f"{how}) by changing {changes}. Peak {_memory_kind(base)}memory {before:.0f} → {after:.0f} MiB{runs}."
        + "".join(_caveats(summary)),
    )


def _by_medians(summary: Summary) -> str:
    """What the headline's two throughputs are, to follow them, where a race's paired rounds give the gain: their
    medians over the rounds the gain counts (``Summary.gain_rounds``), " by medians", and where it left a slowed
    round out, " by medians of the same rounds"; nothing for single runs or one round."""
    if summary.gain_interval is None:
        return ""
    return " by medians of the same rounds" if summary.gain_rounds_left_out else " by medians"


def _race_showed(summary: Summary) -> str:
    """What the race that proved the recommendation showed, to follow its throughputs: confirmed where its gain's
    interval lies above 1x (or one round gave it no interval); where the interval spans 1x, the rounds it won against
    the baseline, which prove it faster (``Confirmation.proven``: a sign test), and that the interval does not bound
    by how much: "confirmed" beside an interval that spans 1x would read as a contradiction."""
    interval, proof = summary.gain_interval, summary.proof
    if interval is None or not _spans_one(interval):
        return "confirmed by interleaved re-measurement"
    won = proof.rounds - rounds_lost(proof.winner, proof.baseline_throughputs)
    race = summary.race_named(proof) if len(summary.gain_races) > 1 else "the race"
    rounds = f"every round of {race}" if won == proof.rounds else f"{won} of {race}'s {proof.rounds} rounds"
    return f"won {rounds} against the baseline: faster, by an amount its interval does not bound"


def _peak_memories(summary: Summary) -> tuple[float, float, str]:
    """The headline's peak memories of the baseline and the recommendation, and which runs they are (words to follow
    them): the medians of their runs in the rounds the gain counts (``Summary.gain_rounds``), as its throughputs
    are; where those races kept none (ones stored before races kept them), each one's own single run, "one run of
    each" where a race gave the throughputs."""
    figures = (summary.baseline_peak_memory_mb, summary.recommended_peak_memory_mb)
    if summary.race_peak_memories:
        rounds = summary.gain_runs.of(summary.gain_rounds)
        read = (
            sum(paired.baseline_memory is not None for paired in rounds),
            sum(paired.recommended_memory is not None for paired in rounds),
        )
        return *figures, f" ({_medians_of(*read)})"
    return *figures, " (one run of each)" if summary.confirmed else ""


def _medians_of(baseline_runs: int, recommended_runs: int) -> str:
    """Which race runs the headline's peak memories are the medians of, told how many of each read one."""
    if baseline_runs == recommended_runs:
        return f"medians of {counted(baseline_runs, 'race run')} each"
    return f"medians of {baseline_runs} and {recommended_runs} race runs"


def _geomean_and_medians(summary: Summary) -> str:
    """What the headline's gain is, where a race's paired rounds give it, and the ratio of the medians it states
    beside it where that reads otherwise: "the geometric mean of the paired rounds' ratios; 1.86x by the medians"."""
    said = "the geometric mean of the paired rounds' ratios"
    beside = by_the_medians(summary.speedup, summary.recommended_throughput / summary.baseline_throughput)
    return f"{said}; {beside}" if beside else said


def _caveats(summary: Summary) -> list[str]:
    """The sentences after a recommendation's figures: what its races left out, a trim not ended, a race not run yet,
    and runs it stands on that something beside them slowed."""
    said = []
    left_out = ", ".join(f"{name}={value}" for name, value in summary.no_difference.items())
    if left_out:
        said.append(f" Tried and left out, no faster beyond noise: {left_out}.")
    if summary.untrimmed and summary.confirmed:  # unconfirmed: "single runs" says more
        said.append(
            f" Not every change was raced undone, as the trim that undoes each in turn did not end: "
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
    slowed = sum(len(paired.disturbed) for paired in summary.gain_runs.rounds)  # those left out of the gain too
    if counted_slowed := summary.gain_counts_slowed:  # a gain of what the load did too: not one to act on unsaid
        them, unreliable = "it" if len(counted_slowed) == 1 else "them", summary.gain_unreliable
        said.append(
            f" {'The gain is unreliable: it counts' if unreliable else 'The gain counts'} "
            f"{summary.gain_rounds_named(counted_slowed)}, in which something beside the runs slowed one (too few "
            f"rounds were quiet to leave {them} out, so every round counts)"
            f"{'' if unreliable else ': it may be a little off'}; see 'Measured on a busy machine'."
        )
    elif slowed:
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
        spans = f" (it spans 1x: {_why_unbounded(summary)})" if _spans_one(interval) else ""
        return (
            f"95 % interval {interval_bounds(interval.low, interval.high, 'x')} over {interval.n} paired rounds"
            f"{summary.left_out_note}{spans}"
        )
    if proof is not None:
        return "one race round: no interval"
    return "single runs: no interval"


def _spans_one(interval: RatioInterval) -> bool:
    """Whether a gain's ``interval`` reaches 1x: it does not bound the gain away from none."""
    return interval.low <= 1


def _why_unbounded(summary: Summary) -> str:
    """Why a proven gain's interval spans 1x, and what would bound it: a proof (rounds won) beside such an interval
    reads as a contradiction unless both are named. Two rounds bound a gain only where they read almost alike (a 95 %
    interval from two paired ratios is about 13 times as wide as their spread)."""
    ratios, proof = list(summary.gain_ratios.values()), summary.proof
    won = sum(ratio > 1 for ratio in ratios)
    if len(ratios) == 2:
        read = " and ".join(f"{ratio:.2f}x" for ratio in ratios)
        spread = (
            f"the recommendation ran faster in {won} of them ({read}), and two rounds are too few to bound the gain"
        )
    else:
        spread = f"the recommendation ran faster in {won} of them, by amounts too far apart to bound the gain"
    more = "more study.confirm_rounds would tell"
    if proof.cut and proof.planned_rounds:
        cut = f"{proof.rounds} of its {proof.planned_rounds} rounds"
        more = f"the race was cut after {cut} (study.budget_s, or the run stopped)"
    elif proof.ended_early:
        more = "the race ended early on its verdict; mode=benchmark measures the gain over more rounds"
    return f"{spread}; {more}"


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


def before_after_table(summary: Summary) -> Table:
    """The baseline against the recommendation: each knob, the throughputs, and each metric read for either."""
    before, after = (record_row(r, None, summary) for r in (summary.baseline, summary.recommended))
    changes = summary.changed_knobs()
    rows = [[name, _value(before[name]), _comes_with(name, after[name], before[name], changes)] for name in KNOBS]
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
        _metric_row(summary, key, title, before, after)
        for key, title in _BEFORE_AFTER_METRICS
        if _shown(key, before, after)
    ]
    return table_of(["", "baseline", "recommended"], rows)


def _metric_row(summary: Summary, key: str, title: str, before: dict[str, Any], after: dict[str, Any]) -> list[Any]:
    """A metric's row of the before/after table: each configuration's own run's figure, but the peak memory the
    headline gives (``_peak_memories``: the race runs' medians, as the throughputs are) where the race kept them, so
    that one report gives one figure for it."""
    if key == "peak_memory_mb" and summary.race_peak_memories:
        baseline, recommended, runs = _peak_memories(summary)
        return [f"{title}{runs}", baseline, recommended]
    return [title, metric(key, before[key]), metric(key, after[key])]


def _comes_with(name: str, after: Any, before: Any, changes: dict[str, tuple[Any, Any]]) -> Any:
    """The recommendation's value of knob ``name`` in the before/after table (unset: "default", as said above),
    marked where it differs from the baseline's but is no change of its own (``knobs.changed``: an option at its
    default that another change makes apply, or that one ends)."""
    shown = _value(after)
    if after == before or name in changes:
        return shown
    return f"{shown} (comes with another change)"


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
