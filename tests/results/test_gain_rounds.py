"""The recommendation's gain counts the rounds of the race that proves it and every other race round that ran it
beside the baseline without choosing it (a trim race that started from it, a race's rounds after its verdict for it),
each round named by its race where they come from more than one."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autotune.measure.stats import ratio_interval
from autotune.report import write_reports
from autotune.report.headline import headline
from autotune.results.finalist import Finalist, Left
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.trial.result import Disturbance
from tests.report.test_reports import MACHINE, MEASURE, busy_section
from tests.results.test_summary import results_with, trial

BASELINE = [100.0, 104.0, 96.0]
WINNER = [150.0, 160.0, 140.0]  # the finalists' race: 1.50x, 1.54x, 1.46x
TRIM_BASELINE = [90.0, 92.0, 94.0]
TRIM_WINNER = [160.0, 170.0, 165.0]  # the trim's race: 1.78x, 1.85x, 1.76x
WINNER_TRIAL = trial("0", 150.0, num_workers=1, amp="bf16")
KNOBS = WINNER_TRIAL.result.knobs
UNDONE = {**KNOBS, "amp": "off"}


def _ratios(runs: list[float], base: list[float]) -> list[float]:
    return [run / base_run for run, base_run in zip(runs, base, strict=True)]


def _studied(trim_rounds: int = 2, slowed: dict[str, Disturbance] | None = None, decided_after: int | None = None):
    """Trial 0 (two changes), proven by the finalists' race (3 rounds), and its trim's one race, in which its variant
    undoing amp left after round 1, beaten, and trial 0 ran ``trim_rounds`` rounds with the baseline."""
    race = Confirmation(
        list(BASELINE), [Finalist("0", KNOBS, 2, 100.0, list(WINNER))], None, 3, disturbed=slowed or {},
        trials=["0"], decided_after=decided_after,
    )  # fmt: skip
    variant = Finalist("0 without amp", UNDONE, 1, 100.0, [120.0], left=Left.BEATEN, dropped="beaten")
    leader = Finalist("0", KNOBS, 2, 100.0, TRIM_WINNER[:trim_rounds])
    trim = Confirmation(TRIM_BASELINE[:trim_rounds], [leader, variant], None, 3)
    return replace(results_with(WINNER_TRIAL), confirmation=race, trim=[trim])


def test_the_gain_counts_the_proving_races_rounds_and_those_of_a_trim_race_that_started_from_it():
    summary = summarise(_studied())
    assert summary.recommended.label == "0" and summary.trim_open is None
    assert summary.proof is summary.confirmation, "3 rounds against the trim race's 2"
    every = _ratios(WINNER, BASELINE) + _ratios(TRIM_WINNER[:2], TRIM_BASELINE[:2])
    assert summary.gain_interval == ratio_interval(every) and summary.gain_interval.n == 5
    assert summary.speedup == pytest.approx(ratio_interval(every).geomean)
    assert summary.gain_races == [0, 1]
    assert "over 5 paired rounds" in headline(summary).lead


def test_where_a_trim_race_proves_it_the_finalists_race_which_chose_it_on_its_rounds_is_not_counted():
    summary = summarise(_studied(trim_rounds=3))
    assert summary.race_index(summary.proof) == 1, "as many rounds as the finalists' race, and the later"
    assert summary.gain_races == [1]
    assert summary.gain_interval == ratio_interval(_ratios(TRIM_WINNER, TRIM_BASELINE))


def test_a_races_rounds_after_its_verdict_which_only_the_winner_and_the_baseline_ran_are_counted():
    summary = summarise(_studied(trim_rounds=3, decided_after=1))
    assert summary.race_index(summary.proof) == 1
    after = _ratios(WINNER[1:], BASELINE[1:])
    assert summary.gain_interval == ratio_interval(_ratios(TRIM_WINNER, TRIM_BASELINE) + after)
    assert summary.gain_rounds_named([1, 3]) == "round 2 of the finalists' race and round 1 of trim race 1"


def test_a_variant_the_trim_recommends_counts_its_own_race_not_a_trial_of_the_same_knobs_in_the_finalists_race():
    # Trial 3 is the variant's configuration: it left the finalists' race after one low round (lagging).
    twin = Finalist("3", UNDONE, 1, 100.0, [80.0], left=Left.LAGGING, dropped="lagging")
    race = Confirmation(
        list(BASELINE), [Finalist("0", KNOBS, 2, 100.0, list(WINNER)), twin], None, 3, trials=["0", "3"]
    )
    tied = Finalist("0 without amp", UNDONE, 1, 100.0, [161.0, 169.0, 166.0], result=trial("v", 161.0, **UNDONE).result)
    trim = Confirmation(list(TRIM_BASELINE), [Finalist("0", KNOBS, 2, 100.0, list(TRIM_WINNER)), tied], None, 3)
    results = replace(results_with(WINNER_TRIAL, trial("3", 80.0, **UNDONE)), confirmation=race, trim=[trim])
    summary = summarise(results)
    assert summary.recommended.label == "0 without amp"
    assert summary.gain_races == [1]
    assert summary.gain_interval == ratio_interval(_ratios(tied.throughputs, TRIM_BASELINE))


def test_a_slowed_round_is_left_out_where_the_counted_rounds_leave_three_quiet_and_is_named_by_its_race():
    # The finalists' race alone, its round 2 slowed, would have to count it: two quiet rounds bound nothing.
    summary = summarise(_studied(slowed={"confirm-2-baseline": Disturbance(cores_slowdown=2.0)}))
    assert summary.gain_rounds_left_out == [2] and summary.gain_interval.n == 4
    assert "over 4 paired rounds (round 2 of the finalists' race left out: a run of it was slowed)" in (
        headline(summary).lead
    )


def test_report_json_lists_the_paired_rounds_the_speedup_is_of(tmp_path):
    studied = _studied(slowed={"confirm-2-baseline": Disturbance(cores_slowdown=2.0)})
    results = replace(studied, machine=MACHINE, measure=MEASURE)
    report = json.loads(write_reports(results, summarise(results), tmp_path)["report.json"].read_text())
    assert report["speedup_rounds"] == 5
    paired = report["speedup_paired"]
    assert [(each["race"], each["round"], each["counted"]) for each in paired] == [
        ("the finalists' race", 1, True),
        ("the finalists' race", 2, False),
        ("the finalists' race", 3, True),
        ("trim race 1", 1, True),
        ("trim race 1", 2, True),
    ]
    assert paired[3]["recommended_sps"] == TRIM_WINNER[0] and paired[3]["baseline_sps"] == TRIM_BASELINE[0]


def test_the_ranking_states_the_recommendation_and_the_baseline_by_the_headlines_rounds():
    summary = summarise(_studied())
    recommended, baseline = summary.standing(summary.recommended), summary.standing(summary.baseline)
    assert recommended.throughput == summary.recommended_throughput
    assert baseline.throughput == summary.baseline_throughput
    assert recommended.speedup == pytest.approx(summary.recommended_throughput / summary.baseline_throughput)
    assert recommended.measured == baseline.measured == "the finalists' race and trim race 1, 5 rounds"
    assert [record.label for record in summary.ranked][:2] == ["0", "baseline"]


def test_a_proof_the_gain_counts_beside_other_rounds_is_named_where_the_headline_says_it_won_every_round():
    # The interval of five rounds spans 1x: the headline names the race whose every round it won.
    race = Confirmation(list(BASELINE), [Finalist("0", KNOBS, 2, 100.0, [103.0, 107.0, 99.0])], None, 3, trials=["0"])
    leader = Finalist("0", KNOBS, 2, 100.0, [80.0, 140.0])
    variant = Finalist("0 without amp", UNDONE, 1, 100.0, [50.0], left=Left.BEATEN, dropped="beaten")
    trim = Confirmation([100.0, 100.0], [leader, variant], None, 3)
    summary = summarise(replace(results_with(WINNER_TRIAL), confirmation=race, trim=[trim]))
    assert summary.proof is summary.confirmation and summary.gain_interval.low < 1
    assert "won every round of the finalists' race against the baseline" in headline(summary).rest


def test_a_busy_machines_note_names_the_rounds_that_gave_the_gain_where_a_race_gave_only_some(tmp_path):
    # The finalists' race, decided after round 1 whose run of trial 0 was slowed, gives the gain its rounds 2 and 3.
    studied = _studied(trim_rounds=3, decided_after=1, slowed={"confirm-1-trial-0": Disturbance(cores_slowdown=2.0)})
    results = replace(studied, machine=MACHINE, measure=MEASURE)
    busy = busy_section(results, tmp_path)
    assert (
        "the rounds that gave the gain, rounds 2 and 3 of the finalists' race and rounds 1, 2 and 3 of trim race 1, "
        "ran the recommendation and the baseline undisturbed"
    ) in busy


def _trim_reads(leader: float, left: bool = False, slowed: dict[str, Disturbance] | None = None, finalists=None):
    """The results of trial 0, proven by the finalists' race (3 rounds: ``finalists``, 1.03x each by default), and its
    trim's race of one round, in which its variant fell behind and it read ``leader`` against the baseline's 100
    (``left``: it left that race, having lost the round to the baseline)."""
    runs = finalists or [103.0] * 3
    race = Confirmation([100.0] * 3, [Finalist("0", KNOBS, 2, 100.0, runs)], None, 3, trials=["0"])
    dropped = {"left": Left.UNPROVABLE, "dropped": "lost a round to the baseline"} if left else {}
    variant = Finalist("0 without amp", UNDONE, 1, 100.0, [60.0], left=Left.BEATEN, dropped="beaten")
    started = Finalist("0", KNOBS, 2, 100.0, [leader], **dropped)
    trim = Confirmation([100.0], [started, variant], None, 3, disturbed=slowed or {})
    return replace(results_with(WINNER_TRIAL), confirmation=race, trim=[trim], machine=MACHINE, measure=MEASURE)


def test_rounds_of_other_races_that_pull_its_gain_under_the_least_a_change_must_gain_take_its_proof_back():
    # Trial 0 left its trim's race, having lost its round to the baseline (0.95x): the round counts all the same, as
    # leaving out the rounds that read low would lift the gain.
    summary = summarise(_trim_reads(95.0, left=True))
    assert summary.is_baseline and summary.speedup == 1.0, "never pulled under what a change must gain"
    back = summary.taken_back
    assert back.label == "0" and back.number == 0, "the finalists' race proved it"
    assert back.rounds.gain == pytest.approx((1.03**3 * 0.95) ** (1 / 4))
    said = headline(summary)
    assert said.lead == "Keep your current settings."
    assert said.rest == (
        "The finalists' race proved trial 0 against the baseline (1.03x by medians of 3 rounds), but over the 4 "
        "rounds its gain counts (rounds 1, 2 and 3 of the finalists' race and round 1 of trim race 1) it ran 1.009x "
        "the baseline's throughput (the geometric mean of their ratios), under the 2% a change must gain, and the "
        "rounds of other races that did not choose it read under it too: they take that proof back, so the baseline "
        "is kept. The trim did not end: trial 0, the configuration it started from, left it (lost a round to the "
        "baseline); the same command again goes on with it."
    )


def test_rounds_of_other_races_that_keep_its_gain_over_the_least_a_change_must_gain_leave_its_proof():
    summary = summarise(_trim_reads(102.0))
    assert summary.recommended.label == "0" and summary.taken_back is None
    assert summary.gain_interval == ratio_interval([1.03] * 3 + [1.02])


def test_rounds_of_other_races_left_out_as_slowed_take_nothing_back():
    summary = summarise(_trim_reads(50.0, left=True, slowed={"trim-1-1-baseline": Disturbance(cores_slowdown=2.0)}))
    assert summary.recommended.label == "0" and summary.taken_back is None
    assert summary.gain_rounds_left_out == [4] and summary.speedup == pytest.approx(1.03)


def test_the_proving_races_own_rounds_are_its_verdicts_to_judge():
    # Won every round, 1.021x by medians (a proof), 1.016x by the rounds' geometric mean; the trim's round, at 1.025x,
    # lifts it to 1.018x: no other race pulled it under what a change must gain.
    summary = summarise(_trim_reads(102.5, finalists=[100.5, 102.1, 102.1]))
    assert summary.recommended.label == "0" and summary.taken_back is None
    assert summary.speedup == pytest.approx((1.005 * 1.021**2 * 1.025) ** (1 / 4))


def test_the_sections_of_the_race_whose_proof_is_taken_back_say_so(tmp_path):
    results = _trim_reads(95.0, left=True)
    summary = summarise(results)
    report = json.loads(write_reports(results, summary, tmp_path)["report.json"].read_text())
    gain = pytest.approx((1.03**3 * 0.95) ** (1 / 4))
    assert report["taken_back"] == {"trial": "0", "race": "the finalists' race", "rounds": 4, "speedup": gain}
    finalists_race = (tmp_path / "report.md").read_text().split("## The finalists' race")[1].split("\n## ")[0]
    assert "Its proof of trial 0 is taken back by the rounds of other races that did not choose it" in finalists_race


def test_other_races_that_pull_a_gain_already_under_the_least_a_change_must_gain_lower_take_its_proof_back():
    # A proof by medians (1.021x) at 1.016x by its rounds' geometric mean; the trim's round at 0.43x pulls it to 0.82x.
    summary = summarise(_trim_reads(43.0, left=True, finalists=[100.5, 102.1, 102.1]))
    assert summary.is_baseline and summary.taken_back.rounds.gain == pytest.approx((1.005 * 1.021**2 * 0.43) ** 0.25)


def test_a_slowed_round_the_proving_race_leaves_out_is_not_said_to_be_taken_back_by_other_races():
    # Round 1 of the finalists' race, slowed, is left out: the gain over the rest, 1.0199x, is under 2 %, but the
    # proving race's own counted rounds give 1.017x, and the trim's round (1.025x) lifts it.
    slowed = {"confirm-1-baseline": Disturbance(cores_slowdown=2.0)}
    results = _trim_reads(102.5, finalists=[110.0, 100.5, 103.0])
    results = replace(results, confirmation=replace(results.confirmation, disturbed=slowed))
    summary = summarise(results)
    assert summary.gain_rounds_left_out == [1] and summary.recommended.label == "0" and summary.taken_back is None


def test_a_gain_just_under_the_least_a_change_must_gain_never_reads_as_that_least():
    summary = summarise(_trim_reads(99.0, left=True))  # (1.03 ** 3 * 0.99) ** (1 / 4) = 1.01985
    assert summary.taken_back.rounds.gain == pytest.approx(1.01985, abs=1e-5)
    assert "it ran 1.019x the baseline's throughput" in headline(summary).rest


def test_a_gain_under_the_least_a_change_must_gain_in_every_counted_race_is_taken_back():
    # Rounds 1-3 of the proof, slowed, are left out (the trim's quiet rounds make up the three quiet rounds needed):
    # its counted rounds read 1.005x, the trim's 1.01x: every counted round is under 2 %.
    finalists = [110.0, 110.0, 110.0, 100.5, 100.5]
    race = Confirmation([100.0] * 5, [Finalist("0", KNOBS, 2, 100.0, finalists)], None, 5, trials=["0"])
    slowed = {f"confirm-{number}-baseline": Disturbance(cores_slowdown=2.0) for number in (1, 2, 3)}
    race = replace(race, disturbed=slowed)
    trim = Confirmation([100.0] * 4, [Finalist("0", KNOBS, 2, 100.0, [101.0] * 4)], None, 5, cut=True)
    summary = summarise(replace(results_with(WINNER_TRIAL), confirmation=race, trim=[trim]))
    assert summary.is_baseline and summary.taken_back.rounds.left_out == [1, 2, 3]
