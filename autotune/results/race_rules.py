"""The finalists' race: its rules on runs and finalists, each written once here. The race's record and verdict are
``autotune/results/race.py``'s (``Confirmation``), a finalist's record ``autotune/results/finalist.py``'s, and the
trim's rules ``autotune/results/trim_rules.py``'s.

Before a trial is recommended over the baseline, the finalists are measured again, against the baseline and each
other, in rounds of processes of their own, the order rotating each round (``autotune/study/run_race.py`` runs them).

- Finalists (``select_finalists``): the trials whose single run beat the baseline's and came within FINALIST_WINDOW
  of the fastest, at most three, the simplest one tied with the fastest (``choose_candidate``) always among them;
  not one that changes more knobs than a simpler trial worth racing without beating its run by TIE_TOLERANCE; where
  every finalist compiles, each one's plain twin too, beyond the three, where it beat the baseline. A
  stored race stands for the trials measured when it ran (``Confirmation.is_current``).
- Left to a trim (``left_to_trims``): a finalist that is another finalist with a change undone, where that one's trim
  will race it (``trim.trim_ahead``), does not race: that trim race measures it against that one and the baseline
  every round, as this race would.
- Leaving the race: a finalist whose run fails, that lost more rounds to the baseline than a proof allows
  (``unprovable``), or whose median falls RACE_MARGIN behind the leader's (``lagging``: of the runs not disturbed,
  ``TrialResult.disturbed``; the slowest of the leader's runs, where every one was: ``leader_pace``).
- The verdict early (``decided``): when more rounds could not change it (DECISIVE_GAIN), on a round none of whose runs
  was disturbed (``run_race.race``): a gain read against a slowed run is not decided by it. The other
  finalists then leave, and the winner and the baseline run the rounds left (``run_race._leave_to``), so that the
  gain stated has the interval of study.confirm_rounds rounds; the proof is the rounds won up to the verdict, which
  the rounds after it take back where they pull the winner's median under MIN_GAIN (``Confirmation.decided_after``,
  ``Confirmation.faded``; the finalists that left at the verdict do not come back). A winner the trim will race
  (``trim.trim_ahead``) does not: the race ends there, and the trim's first race runs them.
- Figures (``Confirmation.paired``): a finalist's ratio, wins and medians against the baseline are of the rounds
  both ran; a run of the round whose baseline run failed (the finalist ran first there) counts in none of them.
- Proof (``Confirmation.proven``): a win over the baseline in ``wins_needed`` rounds (a one-sided sign test at
  PROOF_LEVEL: every round of up to 5) and MIN_GAIN by medians, those of the rounds up to the verdict and of all. A
  race cut short before its verdict (by study.budget_s or a stopped run) proves only by the wins its planned rounds
  need (``Confirmation.proof_rounds``): one round the budget left proves nothing, and where the rounds it ran cannot
  prove the finalist (``short_of_rounds``), the baseline is kept and the same command again goes on from them.
- Ties (``beats``): a finalist is faster than another when it won most of their rounds and by more than
  TIE_TOLERANCE by the geometric mean of the per-round ratios; otherwise they are tied within noise.
- The winner (``Confirmation.winner``): of the proven finalists that no other proven finalist beats, the fastest by
  median, or of those tied with it, the one changing fewest knobs, then using least memory. No winner: keep the
  baseline.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable

from autotune.knobs import KNOBS, changed, costly_values
from autotune.records import TrialRecord
from autotune.results.finalist import Finalist
from autotune.trial.result import Disturbance

# A trial whose single run came within this fraction of the fastest may be the fastest: a single run varies by 6-20 %
# on our build machines (docs/benchmarks.md).
FINALIST_WINDOW = 0.15
# At most this many finalists race the baseline (and, where they all compile, their plain twins: ``select_finalists``).
MAX_FINALISTS = 3
# A finalist whose median falls this far behind the leader's leaves: about twice one run's noise.
RACE_MARGIN = 0.10
# The race ends once a finalist's slowest run beats the baseline's fastest by this much (twice that after round 1,
# counting the runs made before the race) and every other finalist's fastest by TIE_TOLERANCE; or, from round 2 on,
# once every finalist left beats the baseline so: more rounds could not tell them a few per cent apart.
DECISIVE_GAIN = 0.10
# Two finalists closer than this (geometric mean of their per-round ratios) are tied: about one run's noise.
TIE_TOLERANCE = 0.03
# What ``beats`` asks of the faster of two finalists, in words.
BEATS_WORDS = f"in most rounds and by more than {TIE_TOLERANCE:.0%} by the geometric mean of the per-round ratios"
# A finalist is proven when one no faster than the baseline would win as many rounds by chance at most this often,
# and its median beats the baseline's by MIN_GAIN.
PROOF_LEVEL = 0.125
MIN_GAIN = 0.02


def count_changes(knobs: dict[str, object], baseline: dict[str, object]) -> int:
    """How many knobs ``knobs`` changes from ``baseline`` (``changed``)."""
    return len(changed(knobs, baseline))


def choose_candidate(baseline: TrialRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The trial to recommend over the baseline from single runs, or None when the baseline is as good (the tie rule
    without a race).

    Among the measured configurations within TIE_TOLERANCE of the fastest (the baseline included, but no trial
    itself within TIE_TOLERANCE of the baseline: it would change knobs for nothing), the one that changes fewest
    knobs from the baseline wins, then the one with the lowest peak memory: a tie within noise is no reason to
    change more than needed.
    """
    measured = [r for r in [baseline, *trials] if r.result.ok]
    if not measured:
        return None
    fastest = max(r.throughput for r in measured)
    beyond_baseline = baseline.throughput * (1 + TIE_TOLERANCE) if baseline.result.ok else 0.0
    tied = [
        r
        for r in measured
        if r.throughput >= fastest * (1 - TIE_TOLERANCE) and (r is baseline or r.throughput > beyond_baseline)
    ]
    base = baseline.result.knobs
    chosen = min(tied, key=lambda r: (count_changes(r.result.knobs, base), r.result.peak_memory_mb, -r.throughput))
    return None if chosen is baseline else chosen


def select_finalists(baseline: TrialRecord, trials: list[TrialRecord], limit: int = MAX_FINALISTS) -> list[TrialRecord]:
    """The trials worth re-measuring before recommending one: those whose single run beat the baseline's and
    came within FINALIST_WINDOW of the fastest, fastest first, at most ``limit``; the simplest one tied with
    the fastest (``choose_candidate``) is always among them. Where every finalist compiles, each one's plain twin (the
    same without the costly knob) races too, beyond ``limit``, where its run beat the baseline's: one lucky compiled
    run would otherwise push it out of the window, and where compile fails to prove its gain nothing that beat the
    baseline would be left to race.

    Left out: a trial that changes more knobs than a simpler one worth racing and whose run did not beat that one's
    by TIE_TOLERANCE. The race's tie rule could recommend it only where it beat the simpler one (``beats``: most
    rounds, and by more than TIE_TOLERANCE by the geometric mean of the per-round ratios), and its own run already did
    not by that much; racing it would cost a run per round (a compiled one, its compile).
    """
    return finalist_choice(baseline, trials, limit)[0]


def finalist_choice(
    baseline: TrialRecord, trials: list[TrialRecord], limit: int = MAX_FINALISTS
) -> tuple[list[TrialRecord], dict[str, str]]:
    """``select_finalists``'s finalists, and why each other trial whose run came within FINALIST_WINDOW of the
    fastest was left out, by label: a simpler one worth racing its run did not beat by TIE_TOLERANCE, or the
    ``limit``."""
    if not baseline.result.ok:
        return [], {}
    measured = [r for r in trials if r.result.ok and r.throughput > baseline.throughput]
    if not measured:
        return [], {}
    fastest = max(r.throughput for r in measured)
    near = [r for r in measured if r.throughput >= fastest * (1 - FINALIST_WINDOW)]
    base = baseline.result.knobs
    worth: list[TrialRecord] = []  # simplest first: only a trial worth racing leaves out one that changes more
    left_out: dict[str, str] = {}
    for record in sorted(near, key=lambda r: (count_changes(r.result.knobs, base), -r.throughput)):
        simpler = _outdone_by_simpler(record, worth, base)
        if simpler is None:
            worth.append(record)
        else:
            left_out[record.label] = (
                f"it changes more knobs than trial {simpler.label} and its run did not beat that one's by "
                f"{TIE_TOLERANCE:.0%}"
            )
    finalists = sorted(worth, key=lambda r: -r.throughput)[:limit]
    simplest = choose_candidate(baseline, trials)
    if simplest is not None and simplest not in finalists:
        finalists = [*finalists[: limit - 1], simplest]
    if all(costly_values(f.result.knobs) for f in finalists):
        plain = [twin for f in finalists if (twin := _plain_twin(f, measured)) is not None]
        finalists = [*finalists, *[twin for i, twin in enumerate(plain) if twin not in plain[:i]]]
    for record in worth:
        if record not in finalists:
            left_out[record.label] = f"at most {limit} finalists race, the fastest runs first"
    racing = {f.label for f in finalists}
    return finalists, {label: why for label, why in left_out.items() if label not in racing}


def left_to_trims(
    finalists: list[Finalist], trim_ahead: Callable[[Finalist], dict[str, Finalist]]
) -> dict[str, tuple[Finalist, str]]:
    """The finalists that leave the race before it starts, by label, each with the finalist whose trim races it and
    the knob that trim's variant undoes: one whose configuration is a variant the trim's first race of another
    finalist will race (``trim_ahead``: those variants by the knob each undoes, none where no trim will race it),
    that one racing and setting no costly knob (a compiled finalist's plain twin races beside it:
    ``select_finalists``). That trim race measures it against that finalist and the baseline every round, and picks
    it where it ties (fewest changes) or wins, as this race would: racing it here too would measure it twice. The
    finalists changing most knobs are taken first: one left to a trim races in none of its own."""
    left: dict[str, tuple[Finalist, str]] = {}
    for trimmed in sorted(finalists, key=lambda f: -f.changes):
        if trimmed.label in left or costly_values(trimmed.knobs):
            continue
        for knob, variant in trim_ahead(trimmed).items():
            for other in finalists:
                if other is not trimmed and other.label not in left and other.knobs == variant.knobs:
                    left[other.label] = (trimmed, knob)
    return left


def _plain_twin(record: TrialRecord, measured: list[TrialRecord]) -> TrialRecord | None:
    """Of ``measured``, ``record``'s configuration with its costly knobs (torch.compile) at their defaults, where
    ``record`` sets one."""
    costly = costly_values(record.result.knobs)
    if not costly:
        return None
    plain = {**record.result.knobs, **{name: KNOBS[name].baseline_default for name in costly}}
    return next((other for other in measured if other.result.knobs == plain), None)


def _outdone_by_simpler(record: TrialRecord, worth: list[TrialRecord], base: dict[str, object]) -> TrialRecord | None:
    """The first trial of ``worth`` that changes fewer knobs than ``record`` and whose run ``record``'s did not beat
    by TIE_TOLERANCE; None where there is none."""
    changes = count_changes(record.result.knobs, base)
    simpler = [other for other in worth if count_changes(other.result.knobs, base) < changes]
    return next((other for other in simpler if record.throughput <= other.throughput * (1 + TIE_TOLERANCE)), None)


def rounds_lost(finalist: Finalist, baseline_runs: list[float]) -> int:
    """The rounds so far in which ``finalist`` was no faster than the baseline."""
    return sum(f <= b for f, b in zip(finalist.throughputs, baseline_runs, strict=True))


def unprovable(finalist: Finalist, baseline_runs: list[float], rounds: int) -> bool:
    """Whether ``finalist`` has lost more rounds to the baseline than a proof over ``rounds`` rounds allows."""
    return rounds_lost(finalist, baseline_runs) > losses_allowed(rounds)


def lagging(
    runs: list[float], leader_quiet: list[float], leader_runs: list[float], margin: float = RACE_MARGIN
) -> bool:
    """Whether a finalist's median so far, of its ``runs`` not disturbed, is ``margin`` or more behind the leader's
    pace (``leader_pace``). A load slows configurations unalike: a finalist whose every run was slowed stays for the
    next round."""
    pace = leader_pace(leader_quiet, leader_runs)
    return bool(runs) and pace is not None and statistics.median(runs) < pace * (1 - margin)


def leader_pace(leader_quiet: list[float], leader_runs: list[float]) -> float | None:
    """What ``lagging`` holds a finalist against: the median of the leader's runs not disturbed (``leader_quiet``),
    or, where every one was, the slowest of all its runs (``leader_runs``); None where it has none. A slowed run reads
    low, so one behind the leader's slowed runs is behind the leader (the slowest: the faster of two slowed runs may
    stand for one, ``autotune/study/disturbed.py``)."""
    if leader_quiet:
        return statistics.median(leader_quiet)
    return min(leader_runs) if leader_runs else None


def decided(running: list[Finalist], baseline_runs: list[float], before_race: dict[str, float]) -> bool:
    """Whether more rounds could not change the verdict (DECISIVE_GAIN): one running finalist leads the baseline and
    every other beyond doubt, or (from round 2 on) every running finalist leads the baseline beyond doubt.
    ``before_race`` holds the throughput of the baseline and of each finalist measured before the race, where one
    was, counted after round 1."""
    if not running:
        return False
    gain, runs, base = DECISIVE_GAIN, {f.label: f.throughputs for f in running}, baseline_runs
    if len(baseline_runs) == 1:
        gain = 2 * DECISIVE_GAIN
        runs = {f.label: [*_before(before_race, f.label), *f.throughputs] for f in running}
        base = [*_before(before_race, "baseline"), *baseline_runs]
    clear_of_baseline = {f.label for f in running if min(runs[f.label]) > max(base) * (1 + gain)}
    if len(baseline_runs) > 1 and len(clear_of_baseline) == len(running):
        return True
    leader = max(running, key=lambda f: min(runs[f.label]))
    others_fastest = max((max(runs[f.label]) for f in running if f is not leader), default=0.0)
    return leader.label in clear_of_baseline and min(runs[leader.label]) > others_fastest * (1 + TIE_TOLERANCE)


def _before(before_race: dict[str, float], label: str) -> list[float]:
    return [before_race[label]] if label in before_race else []


def wins_needed(rounds: int) -> int:
    """How many of ``rounds`` rounds a finalist must win against the baseline to be proven: the fewest that one no
    faster would win with probability at most PROOF_LEVEL, or all of them where even all would not do (1-2 rounds)."""
    for wins in range(rounds + 1):
        if sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds <= PROOF_LEVEL:
            return wins
    return rounds


def losses_allowed(rounds: int) -> int:
    """How many of ``rounds`` rounds a finalist may lose to the baseline and still be proven (``wins_needed``)."""
    return rounds - wins_needed(rounds)


def wins_in_words(rounds: int) -> str:
    """The wins a proof over ``rounds`` rounds takes (``wins_needed``), in words: "every round", or "at least 5 of 6
    rounds"."""
    needed = wins_needed(rounds)
    return "every round" if needed == rounds else f"at least {needed} of {rounds} rounds"


def beats(faster: Finalist, other: Finalist) -> bool:
    """Whether ``faster`` is faster than ``other`` beyond noise: it won more than half of the rounds they both ran,
    and by more than TIE_TOLERANCE by the geometric mean of their per-round ratios."""
    won, rounds = rounds_won(faster, other)
    return won > rounds / 2 and paired_ratio(faster.throughputs, other.throughputs) > 1 + TIE_TOLERANCE


def why_not_beaten(faster: Finalist, other: Finalist) -> str:
    """Which condition of ``beats`` ``faster`` missed against ``other``, in words."""
    won, rounds = rounds_won(faster, other)
    if won <= rounds / 2:
        return f"it read faster in {won} of the {rounds} rounds both ran"
    return f"within {TIE_TOLERANCE:.0%} by the paired rounds' ratios"


def rounds_won(faster: Finalist, other: Finalist) -> tuple[int, int]:
    """The rounds ``faster`` read faster than ``other`` in, of the rounds both ran."""
    pairs = list(zip(faster.throughputs, other.throughputs, strict=False))
    return sum(a > b for a, b in pairs), len(pairs)


def beaten_for_good(faster: Finalist, other: Finalist, rounds: int) -> bool:
    """Whether ``faster`` beats ``other`` (``beats``) over ``rounds`` rounds whatever the rounds still to run read,
    unless one reads ``other`` faster: it won every round so far, more than half of ``rounds``, each by more than
    TIE_TOLERANCE, and by more than TIE_TOLERANCE by the geometric mean over all ``rounds`` were the rest ties. Each
    round by the tolerance: at a run's noise, two rounds won by chance would often keep a change that does nothing
    (``benchmarks/trim_model.py``)."""
    pairs = list(zip(faster.throughputs, other.throughputs, strict=False))
    clear = all(a > b * (1 + TIE_TOLERANCE) for a, b in pairs)
    return (
        clear
        and len(pairs) > rounds / 2
        and sum(math.log(a / b) for a, b in pairs) > rounds * math.log(1 + TIE_TOLERANCE)
    )


def paired_ratio(runs: list[float], others: list[float]) -> float:
    """The geometric mean of the per-round ratios ``runs[i] / others[i]`` (over the rounds both ran)."""
    pairs = list(zip(runs, others, strict=False))
    return math.exp(statistics.fmean(math.log(a / b) for a, b in pairs))


def counted_slowed_unreliable(slowed: list[int], rounds: int, runs: Iterable[tuple[int, Disturbance]]) -> bool:
    """Whether a ratio over ``rounds`` paired rounds that counts the rounds ``slowed``, in which something beside a run
    slowed it (too few were quiet to leave them out: ``quiet_rounds``), is unreliable: most of its rounds were slowed,
    or other processes took the cores or GPU of one of its ``runs`` (what slowed each, by round) in those rounds,
    which can slow it several-fold; else, a few runs the cores' reading flagged, it may be a little off: such a run
    reads about 0.94x (docs/benchmarks.md, section 13)."""
    loaded = any(not disturbance.cores_alone for index, disturbance in runs if index in slowed)
    return loaded or 2 * len(slowed) > rounds
