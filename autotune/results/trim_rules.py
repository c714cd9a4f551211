"""The trim's rules: only the changes that matter (``autotune/study/trim.py`` runs the trim's races). A winner
changing two knobs or more races again, by the finalists' race's rules (``autotune/results/race_rules.py``), against
itself with each change undone in turn (``undo``), the baseline racing too. A change whose
undoing costs nothing beyond noise goes back to the baseline's value (``trimmed_to``: the race's winner, where the
configuration it started from ran every round and does not beat it); the new winner races the variants undoing the
changes whose undoing also tied with the configuration they were made from (``undo_next``), each alone and, two or
more, all at once (``all_undone``: tied, it wins by fewest changes), until the winner of a race is the configuration
it started from. What a race leaves in place must leave the changes undone so far costing less than TRIM_BOUND
against the race's winner by the product of the paired ratios along the trim's races (``trim_path``: else nothing
is undone, and the trim ends): ties add up, and a trim gives back less than the smallest gain a change is
recommended for. A variant leaves such a race once it falls TRIM_MARGIN behind the configuration it was made from
(not the leader: a lucky variant must not push out the others), or once that configuration beats it whatever the
rounds left read, unless one reads the variant faster (``beaten_for_good``: each round so far by TIE_TOLERANCE; the
change it undid is kept, as ``beats`` would keep it after the last round). The race ends early only once every
variant has left it (``alone``: a run's noise can make two equal configurations look TIE_TOLERANCE apart in one
round), or, where the configuration it started from ran fewer rounds before (the finalists' race, ended at its
verdict), that configuration and the baseline run the rounds left. The recommendation is judged on the race
that measured it against the baseline in most rounds, a trim race counting as the race of the configuration it
started from against the baseline alone too (``judge_of``); its figures are that race's medians, and where it did
not win that race, the baseline is kept (``proof_of``). A stored trim stands for the race's
winner and rounds (``is_trim_of``); one of its races not ``settled`` goes on from its rounds in a later run where
study.budget_s or a stopped run cut it short, and is raced again where a failed run ended it or the configuration
it started from left it (it lost a round to the baseline there).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.race_rules import MIN_GAIN, beats, paired_ratio, unprovable

# In the trim's races a variant leaves once its median falls this far behind the configuration it was made from, and
# the change it undid is kept. Smaller, clear cases end sooner and a noisy round keeps more idle changes: the balance
# of runs against idle changes kept (docs/benchmarks.md, section 14, "The trim under noise: a model").
TRIM_MARGIN = 0.15
# A trim gives back less than this of the finalists' race's winner, by the product of its races' paired ratios
# (``trim_path``): less than the smallest gain a change is recommended for.
TRIM_BOUND = MIN_GAIN


def undone_again(reference: Finalist, variant: Finalist, new: Finalist) -> bool:
    """Whether a trim race of ``reference`` against its variants, won by ``new``, leaves ``variant``'s change to be
    undone again on top of ``new`` (``trim.undo_next``): ``variant`` is not ``new``, stayed in the race, and
    ``reference``, the configuration it was made from, did not beat it beyond noise (``beats``), as ``new`` did not.
    Against ``new`` itself a lucky winner's runs would keep a change that made no difference."""
    return variant is not new and variant.dropped is None and not beats(reference, variant)


def trimmed_to(race: Confirmation) -> Finalist | None:
    """What a trim race (``autotune/study/trim.py``) leaves in place of the configuration it started from (its first
    finalist): its winner, where that is the configuration itself or a variant it does not beat beyond noise, and
    only where the race was ``settled``; else None (the configuration stays: no variant was shown to cost nothing
    against it)."""
    winner = race.winner
    if winner is None or not settled(race):
        return None
    reference = race.finalists[0]
    return winner if winner is reference or not beats(reference, winner) else None


@dataclass(frozen=True)
class TrimStep:
    """What one race of a trim left in place of the configuration it started from (``left``: None where nothing, the
    configuration itself where nothing was undone), and ``behind``: how much faster than the trim's result the race's
    winner (the configuration the trim started from) then runs, by the product of the paired ratios along the races
    (``trim_path``). ``ends``: the trim ends at this race (it left nothing, or nothing was undone). ``refused``: the
    race's own verdict (``trimmed_to``) where that bound refused it, and how much faster the race's winner would have
    run than it."""

    left: Finalist | None
    behind: float
    ends: bool
    refused: Finalist | None = None
    refused_behind: float | None = None


def trim_path(races: list[Confirmation]) -> list[TrimStep]:
    """What each of a trim's races left in place of the configuration it started from: its verdict (``trimmed_to``)
    where the race's winner then runs less than TRIM_BOUND faster than the trim's result by the product of the paired
    ratios along the races, else that configuration itself (nothing undone). Changes undone one race at a time, each
    within noise of the configuration it was undone from, must not add up to a loss: a trim gives back less than the
    smallest gain a change is recommended for. The trim ends at a race that left nothing or undid nothing; a race
    after it, or one not started from what the race before left, leaves nothing."""
    steps: list[TrimStep] = []
    behind = 1.0
    for race in races:
        reference = race.finalists[0]
        goes_on = not steps or (not steps[-1].ends and steps[-1].left.label == reference.label)
        verdict = trimmed_to(race) if goes_on else None
        if verdict is None or verdict is reference:
            steps.append(TrimStep(verdict, behind, ends=True))
            continue
        after = behind * paired_ratio(reference.throughputs, verdict.throughputs)
        if after < 1 + TRIM_BOUND:
            behind = after
            steps.append(TrimStep(verdict, behind, ends=False))
        else:
            steps.append(TrimStep(reference, behind, True, verdict, after))
    return steps


def trim_rounds(confirmation: Confirmation) -> int:
    """How many rounds each race of the trim of ``confirmation``'s winner is planned for: the race's own."""
    return confirmation.planned_rounds or confirmation.rounds


def is_trim_of(trim: list[Confirmation], confirmation: Confirmation) -> bool:
    """Whether the stored trim races ``trim`` are about ``confirmation``'s winner and its rounds: the first started
    from that winner and was planned for ``trim_rounds`` (else they are about an older winner, or a race of other
    rounds: study.confirm_rounds changed), so that the trim goes on from them (``autotune/study/trim.py``) and the
    summary recommends from them; else they stand for nothing. A race recorded without its plan (none that
    ``run_trim`` stored: it always records one) is taken as planned for these rounds."""
    winner = confirmation.winner
    return winner is not None and trim_started_from(trim, winner.label, trim_rounds(confirmation))


def trim_started_from(trim: list[Confirmation], label: str, rounds: int) -> bool:
    """Whether the stored trim races ``trim`` started from trial ``label`` and were planned for ``rounds`` rounds (one
    recorded without its plan is taken as planned for these): ``is_trim_of``'s rule."""
    return bool(trim) and trim[0].finalists[0].label == label and (trim[0].planned_rounds or rounds) == rounds


def started_alone(race: Confirmation) -> Confirmation:
    """``race`` with the configuration it started from (its first finalist) alone against the baseline."""
    return replace(race, finalists=race.finalists[:1])


def _as_proof(race: Confirmation) -> list[Confirmation]:
    """What a trim race stands as for ``judge_of``: itself, and where the configuration it started from did not win
    it, that configuration alone against the baseline (``started_alone``)."""
    reference, winner = race.finalists[0], race.winner
    return [race] if winner is not None and winner.label == reference.label else [race, started_alone(race)]


def proof_of(label: str, races: list[Confirmation]) -> Confirmation | None:
    """The race that proves ``label`` (``Summary.proof``): its judge (``judge_of``), where ``label`` won it; else
    None. A trim race also stands as the race of the configuration it started from against the baseline alone: where
    the trim keeps that configuration though a variant won (its verdict refused by TRIM_BOUND, or the race cut short),
    its rounds against the baseline still prove it, and the finalists' race, which ended at its verdict for the
    trim's first race to run the rounds left, may hold fewer."""
    judge = judge_of(label, races)
    return judge if judge is not None and _won_by(judge, label) else None


def judge_of(label: str, races: list[Confirmation]) -> Confirmation | None:
    """Of ``races`` (the finalists' race, then the trim's), the one that measured ``label`` against the baseline in
    most rounds (``measured_rounds``); of those of most rounds, one ``label`` won, the last of those. A trim race also
    stands as the race of the configuration it started from against the baseline alone (``started_alone``). A
    recommendation is judged on the most rounds measuring it: a longer race it did not win is not outweighed by a
    shorter one it did."""
    views = races[:1] + [each for race in races[1:] for each in _as_proof(race)]
    measuring = [(rounds, _won_by(race, label), race) for race in views if (rounds := measured_rounds(race, label))]
    return max(reversed(measuring), key=lambda judged: judged[:2], default=(0, False, None))[2]


def measured_rounds(race: Confirmation, label: str) -> int:
    """The rounds in which ``race`` measured ``label`` against the baseline, as ``judge_of`` counts them: every round,
    where it ran them all; the rounds it ran, where it left having lost more of them to the baseline than a proof
    over the race's planned rounds allows (``unprovable``); else none (it left for a failed run, or lagging, which say
    nothing of it against the baseline; a baseline run failed, which ends the race without a verdict; or the race was
    cut short before the rounds its proof needs, ``short_of_rounds``: not yet)."""
    finalist = next((f for f in race.finalists if f.label == label), None)
    if finalist is None or race.failure or not race.rounds:
        return 0
    ran = len(finalist.throughputs)
    if finalist.dropped is None:
        return race.rounds if ran == race.rounds and not race.short_of_rounds(finalist) else 0
    lost = unprovable(finalist, race.baseline_throughputs[:ran], race.planned_rounds or race.rounds)
    return ran if lost else 0


def _won_by(race: Confirmation, label: str) -> bool:
    return race.winner is not None and race.winner.label == label


def settled(race: Confirmation) -> bool:
    """Whether a trim race tested its variants to its end (``unsettled`` finds no reason it did not)."""
    return unsettled(race) is None


def unsettled(race: Confirmation) -> str | None:
    """Why a trim race did not test its variants to its end, in words: a baseline run failed, the configuration it
    started from left it (a failed run, a round lost to the baseline) or missed a round, or it was cut short (by
    study.budget_s or a stopped run); None where it did."""
    reference = race.finalists[0]
    if race.failure is not None:
        return f"a baseline run failed in it ({race.failure})"
    if reference.dropped is not None:
        return f"trial {reference.label}, the configuration it started from, left it ({reference.dropped})"
    if len(reference.throughputs) != race.rounds:
        return f"trial {reference.label}, the configuration it started from, did not run every round"
    if race.cut and not race.rounds:
        return "it did not start (study.budget_s left no time for it, or the run stopped)"
    if race.cut:
        return f"it stopped after {race.rounds} of {race.planned_rounds} rounds (study.budget_s, or the run stopped)"
    return None


def alone(running: list[Finalist], baseline_runs: list[float], before_race: dict[str, float]) -> bool:
    """Whether at most one finalist is still running: the trim's races are decided only then."""
    return len(running) <= 1
