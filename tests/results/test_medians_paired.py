"""The medians said beside a gain are of the rounds the gain counts: in a tune, the rounds of the race that proved it
less those its geometric mean leaves out as slowed (the headline, the before-and-after table, recommended.yaml and
report.json agree); in mode=benchmark, the rounds its paired ratios count, not a round one of the two ran alone."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from autotune.report import write_reports
from autotune.report.benchmark import benchmark_document
from autotune.report.headline import before_after_table, headline
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.trial.result import Disturbance
from tests.report.test_reports import sample_results
from tests.results.test_benchmark import benchmark

# Round 2's baseline run read half its speed (the cores ran slow): the gain leaves it out, and so must its medians.
BASELINE_RUNS, WINNER_RUNS = [100.0, 50.0, 110.0, 104.0], [150.0, 160.0, 160.0, 156.0]
SLOWED = {"confirm-2-baseline": Disturbance(cores_slowdown=2.0)}


def race_with_round_2_slowed() -> Confirmation:
    winner = Finalist("0", {}, 1, 100.0, list(WINNER_RUNS), peak_memories=[400.0, 900.0, 420.0, 410.0])
    return Confirmation(
        list(BASELINE_RUNS), [winner], disturbed=SLOWED, baseline_peak_memories=[300.0, 800.0, 310.0, 305.0]
    )


def results_with(confirmation: Confirmation) -> StudyResults:
    return StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})


def test_the_tunes_medians_are_of_the_rounds_its_gain_counts_not_the_slowed_one_it_leaves_out(tmp_path):
    results = results_with(race_with_round_2_slowed())
    summary = summarise(results)
    assert summary.gain_rounds == [1, 3, 4] and summary.gain_rounds_left_out == [2]
    # Rounds 1, 3 and 4: 156 over 104 (with round 2, 158 over 102: 1.55x beside a gain of 1.50x).
    assert (summary.recommended_throughput, summary.baseline_throughput) == (156.0, 104.0)
    said = headline(summary).rest
    assert said.startswith("(156.0 vs 104.0 samples/s by medians of the same rounds, confirmed by"), said
    assert "Peak memory 305 → 410 MiB (medians of 3 race runs each)." in said, "the same runs' peak memories"
    rows = {row[0]: row[1:] for row in before_after_table(summary).rows}
    assert rows["throughput (samples/s)"] == ["104.0", "156.0"]
    files = write_reports(results, summary, tmp_path)
    throughput = yaml.safe_load(files["recommended.yaml"].read_text())["throughput"]
    assert (throughput["recommended"], throughput["baseline"]) == (156.0, 104.0)
    assert throughput["method"].startswith(
        "medians of 3 of 4 interleaved re-measurements (round 2 left out: a run of it was slowed); the speedup: "
    ), throughput["method"]
    report = json.loads(files["report.json"].read_text())
    assert (report["recommended"]["throughput_sps"], report["baseline"]["throughput_sps"]) == (156.0, 104.0)


def test_the_tunes_by_the_medians_ratio_is_of_the_rounds_the_geometric_mean_counts():
    # Round 2's baseline run slowed to a fifth: the medians of every round read 1.67x beside a gain of 1.41x.
    winner = Finalist("0", {}, 1, 100.0, [150.0, 200.0, 200.0, 175.0])
    race = Confirmation(
        [100.0, 20.0, 150.0, 125.0], [winner], disturbed={"confirm-2-baseline": Disturbance(others_cores=1.0)}
    )
    lead = headline(summarise(results_with(race))).lead
    assert "(the geometric mean of the paired rounds' ratios; 1.40x by the medians)" in lead, lead


def test_a_race_no_round_of_which_was_left_out_states_the_medians_of_every_round():
    race = Confirmation([100.0, 96.0, 104.0], [Finalist("0", {}, 1, 100.0, [118.0, 121.0, 119.0])])
    summary = summarise(results_with(race))
    assert summary.gain_rounds == [1, 2, 3] and summary.throughput_basis == "medians of 3 interleaved re-measurements"
    assert headline(summary).rest.startswith("(119.0 vs 100.0 samples/s by medians, confirmed by")


def test_the_benchmarks_by_the_medians_ratio_leaves_out_a_round_the_recommendation_did_not_run():
    # Its run of round 2 failed: the baseline's 20.0 there has no pair. Over rounds 1 and 3: 175 over 105.
    record = benchmark([150.0, None, 200.0], base_runs=(100.0, 20.0, 110.0))
    assert record.counted_medians(record.recommendation) == pytest.approx((175.0, 105.0))
    rest = benchmark_document(record).headline.rest
    assert "(the geometric mean of their ratios; 1.67x by the medians of those rounds)" in rest, rest
    table = benchmark_document(record).sections[0].table
    assert table.rows[0][1] == "100.0", "the table's median stays the baseline's own, of every run it has"


def test_the_benchmarks_medians_leave_out_the_round_its_ratio_leaves_out_as_slowed():
    # Round 2's baseline run slowed: over rounds 1, 3 and 4, 150 over 104 (with it, 150 over 102: 1.47x, as the
    # geometric mean reads, so nothing would be said beside it).
    record = benchmark([150.0, 150.0, 160.0, 150.0], base_runs=(100.0, 50.0, 110.0, 104.0))
    record.entries[0] = replace(record.baseline, disturbed={2: Disturbance(others_cores=1.0)})
    assert record.rounds_left_out(record.recommendation) == [2]
    assert record.counted_medians(record.recommendation) == pytest.approx((150.0, 104.0))
    rest = benchmark_document(record).headline.rest
    assert "(the geometric mean of their ratios; 1.44x by the medians of those rounds)" in rest, rest
