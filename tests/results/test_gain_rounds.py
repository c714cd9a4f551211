"""The recommendation's gain counts every race round that ran it beside the baseline: the finalists' race's and the
trim's, each named where the rounds come from more than one race."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autotune.measure.stats import ratio_interval
from autotune.report import write_reports
from autotune.report.headline import headline
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.trial.result import Disturbance
from tests.report.test_reports import MACHINE, MEASURE
from tests.results.test_summary import results_with, trial

BASELINE = [100.0, 104.0, 96.0]
WINNER = [150.0, 160.0, 140.0]  # the finalists' race: 1.50x, 1.54x, 1.46x
TRIM_BASELINE = [90.0, 92.0, 94.0]
TRIM_WINNER = [160.0, 170.0, 165.0]  # the trim's race: 1.78x, 1.85x, 1.76x


def _studied(slowed: dict[str, Disturbance] | None = None):
    """Trial 0 (two changes), proven by the finalists' race, and its trim's one race, in which its variant undoing
    amp ran slower every round and trial 0 stayed."""
    winner = trial("0", 150.0, num_workers=1, amp="bf16")
    knobs = winner.result.knobs
    race = Confirmation(
        list(BASELINE), [Finalist("0", knobs, 2, 100.0, list(WINNER))], None, 3, disturbed=slowed or {}, trials=["0"]
    )
    variant = Finalist("0 without amp", {**knobs, "amp": "off"}, 1, 100.0, [120.0, 125.0, 121.0])
    trim = Confirmation(list(TRIM_BASELINE), [Finalist("0", knobs, 2, 100.0, list(TRIM_WINNER)), variant], None, 3)
    return replace(results_with(winner), confirmation=race, trim=[trim])


def test_the_gain_counts_the_rounds_of_every_race_that_ran_the_recommendation_beside_the_baseline():
    summary = summarise(_studied())
    assert summary.recommended.label == "0" and summary.trim_open is None
    every = [w / b for w, b in zip(WINNER + TRIM_WINNER, BASELINE + TRIM_BASELINE, strict=True)]
    assert summary.gain_interval == ratio_interval(every) and summary.gain_interval.n == 6
    assert summary.speedup == pytest.approx(ratio_interval(every).geomean)
    assert summary.gain_races == [0, 1]
    assert "over 6 paired rounds" in headline(summary).lead


def test_a_variant_the_trim_recommends_counts_its_trim_rounds_not_the_finalists_race_of_another_configuration():
    winner = trial("0", 150.0, num_workers=1, amp="bf16")
    knobs = winner.result.knobs
    race = Confirmation(list(BASELINE), [Finalist("0", knobs, 2, 100.0, list(WINNER))], None, 3, trials=["0"])
    undone = {**knobs, "amp": "off"}
    tied = Finalist("0 without amp", undone, 1, 100.0, [161.0, 169.0, 166.0], result=trial("v", 161.0, **undone).result)
    trim = Confirmation(list(TRIM_BASELINE), [Finalist("0", knobs, 2, 100.0, list(TRIM_WINNER)), tied], None, 3)
    summary = summarise(replace(results_with(winner), confirmation=race, trim=[trim]))
    assert summary.recommended.label == "0 without amp"
    assert summary.gain_races == [1]
    ratios = [w / b for w, b in zip(tied.throughputs, TRIM_BASELINE, strict=True)]
    assert summary.gain_interval == ratio_interval(ratios)


def test_a_slowed_round_is_left_out_where_the_pooled_rounds_leave_three_quiet_and_is_named_by_its_race():
    # Alone, the finalists' race's three rounds, one slowed, would have to count it (two quiet rounds bound nothing).
    summary = summarise(_studied({"confirm-2-baseline": Disturbance(cores_slowdown=2.0)}))
    assert summary.gain_rounds_left_out == [2] and summary.gain_interval.n == 5
    assert "over 5 paired rounds (round 2 of the finalists' race left out: a run of it was slowed)" in (
        headline(summary).lead
    )


def test_report_json_lists_the_paired_rounds_the_speedup_is_of(tmp_path):
    studied = _studied({"confirm-2-baseline": Disturbance(cores_slowdown=2.0)})
    results = replace(studied, machine=MACHINE, measure=MEASURE)
    report = json.loads(write_reports(results, summarise(results), tmp_path)["report.json"].read_text())
    assert report["speedup_rounds"] == 6
    paired = report["speedup_paired"]
    assert [(each["race"], each["round"], each["counted"]) for each in paired] == [
        ("the finalists' race", 1, True),
        ("the finalists' race", 2, False),
        ("the finalists' race", 3, True),
        ("trim race 1", 1, True),
        ("trim race 1", 2, True),
        ("trim race 1", 3, True),
    ]
    assert paired[3]["recommended_sps"] == TRIM_WINNER[0] and paired[3]["baseline_sps"] == TRIM_BASELINE[0]


def test_the_ranking_states_the_recommendation_and_the_baseline_by_the_headlines_rounds():
    summary = summarise(_studied())
    recommended, baseline = summary.standing(summary.recommended), summary.standing(summary.baseline)
    assert (
        recommended.throughput == summary.recommended_throughput and baseline.throughput == summary.baseline_throughput
    )
    assert recommended.speedup == pytest.approx(summary.recommended_throughput / summary.baseline_throughput)
    assert recommended.measured == baseline.measured == "the finalists' race and trim race 1, 6 rounds"
    assert [record.label for record in summary.ranked][:2] == ["0", "baseline"]
