"""A race cut short by study.budget_s (or a stopped run) proves only by the wins its planned rounds need
(``Confirmation.proof_rounds``): one round the budget left proves nothing, the baseline is kept and the headline says
the budget left too few rounds to prove it."""

from __future__ import annotations

from dataclasses import replace

from autotune.report.headline import headline
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.results.trim_rules import measured_rounds
from autotune.results.tuner_time import RunTime, TunerTime
from tests.results.test_summary import results_with, trial

FAST = trial("0", 130.0, batch_size=32)


def cut_race(runs: list[float], baseline: list[float] | None = None, planned: int = 3, **fields) -> Confirmation:
    """The finalists' race of trial 0 (``FAST``), cut by study.budget_s after ``len(runs)`` of ``planned`` rounds."""
    finalist = Finalist("0", FAST.result.knobs, 1, 100.0, list(runs))
    return Confirmation(baseline or [100.0] * len(runs), [finalist], None, planned, True, {}, ["0"], **fields)


def test_one_round_won_of_three_planned_proves_nothing_and_the_baseline_is_kept():
    race = cut_race([104.0])
    assert race.proof_rounds == 3 and not race.confirmed, "a proof over 3 rounds takes 3 wins, not 1"
    assert race.short_of_rounds(race.finalists[0])
    said = race.describe()
    assert "a proof still counts the 3 rounds planned (a win in every round), not the 1 round run" in said
    assert said.endswith(
        "No finalist is proven: trial 0 read 1.04x by medians, but it won 1 of the 1 round it ran before the race was "
        "cut short (study.budget_s, or a stopped run), where a proof over the 3 planned needs 3, so the baseline is "
        "kept."
    )
    budget = TunerTime([RunTime(0.0, 600.0, {"search": 500.0, "race": 90.0}, {}, True, 600.0, ["confirm round 2"])])
    summary = summarise(replace(results_with(FAST), confirmation=race, tuner_time=budget))
    assert summary.is_baseline and not summary.confirmed, (
        "not 'Recommended ... confirmed by interleaved re-measurement'"
    )
    said = headline(summary)
    assert said.lead == "Keep your current settings."
    assert said.rest.startswith(
        "study.budget_s left the race too few rounds to prove the fastest trials: the best, trial 0, measured 1.04x "
        "by medians of 1 of the 3 planned interleaved rounds, and a proof takes a win in every round"
    )
    assert "The same command again goes on from the stored rounds" in said.rest


def test_a_race_cut_after_the_rounds_its_planned_proof_needs_proves_by_them():
    # Six rounds planned, five run and won: a proof over six takes five wins.
    race = cut_race([110.0, 111.0, 109.0, 112.0, 110.0], planned=6)
    assert race.proof_rounds == 6 and race.confirmed and not race.short_of_rounds(race.finalists[0])
    assert measured_rounds(race, "0") == 5


def test_a_race_decided_before_the_budget_cut_its_rounds_after_the_verdict_stands_on_its_verdict():
    race = cut_race([130.0, 128.0], decided_after=1)
    assert race.proof_rounds == 1 and race.confirmed, "the verdict (DECISIVE_GAIN) was in before the cut"


def test_a_cut_race_that_already_lost_more_rounds_than_its_proof_allows_counts_against_its_finalist():
    lost = cut_race([104.0, 99.0], baseline=[100.0, 100.0])
    assert not lost.confirmed and not lost.short_of_rounds(lost.finalists[0])
    assert measured_rounds(lost, "0") == 2, "it lost a round a proof over 3 allows none of: it counts"
    short = cut_race([104.0, 105.0])
    assert measured_rounds(short, "0") == 0, "cut short of its proof: it says nothing of the finalist yet"


def test_a_stale_race_cut_short_does_not_rule_its_finalist_out_of_a_single_run_pick():
    race = cut_race([104.0])  # trial 2, faster, was measured after it: it is stale
    results = replace(results_with(FAST, trial("2", 140.0, batch_size=64)), confirmation=race)
    summary = summarise(results)
    assert summary.confirmation is None and summary.ruled_out == frozenset(), "cut short of a proof: not disproven"
