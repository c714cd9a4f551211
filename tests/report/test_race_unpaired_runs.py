"""A race table's run of the round whose baseline run failed: shown, unpaired, and left out of the medians and the
round's fastest; the key says so."""

from __future__ import annotations

from dataclasses import replace

from autotune.report.races import rounds_table
from autotune.report.study_document import build_document
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from tests.report.test_reports import sample_results


def test_a_run_before_the_failed_baseline_run_is_unpaired_and_counts_in_no_figure():
    ahead, behind = Finalist("0", {}, 1, 100.0, [110.0, 200.0]), Finalist("2", {}, 1, 100.0, [115.0])
    race = Confirmation([100.0], [ahead, behind], "confirm-2-baseline: signal: SIGKILL", 3, trials=["0", "2"])
    assert rounds_table(race).rows == [
        ["baseline", "100.0", "failed", "100.0"],
        ["trial 0", "110.0 (1.10x)", "200.0 (unpaired)", "110.0 (1.10x)"],
        ["trial 2", "115.0 (1.15x)", "–", "115.0 (1.15x)"],
        ["fastest", "trial 2", "–", ""],
    ]
    results = replace(sample_results(), confirmation=race)
    (section,) = [s for s in build_document(results, summarise(results)).sections if s.heading == "The finalists' race"]
    key = section.paragraphs[-1]
    assert "median over the rounds it and the baseline ran" in key
    assert "A run marked unpaired ran in the round whose baseline run failed" in key


def test_a_race_whose_baseline_failed_in_round_one_shows_the_run_before_it_without_a_median():
    race = Confirmation([], [Finalist("0", {}, 1, 100.0, [110.0])], "confirm-1-baseline: signal: SIGKILL")
    assert rounds_table(race).rows == [
        ["baseline", "failed", "–"],
        ["trial 0", "110.0 (unpaired)", "–"],
        ["fastest", "–", ""],
    ]


def test_a_legacy_finalist_dropped_for_a_failed_run_reads_failed_in_its_round():
    failed = Finalist("2", {}, 1, 100.0, [110.0], "round 2 failed: signal: SIGKILL", failed_round=2)
    stored = Confirmation([100.0, 98.0, 101.0], [Finalist("0", {}, 1, 100.0, [120.0] * 3), failed], None, 3).to_dict()
    del stored["finalists"][1]["failed_round"]  # as stored before the field was kept
    race = Confirmation.from_dict(stored)
    assert rounds_table(race).rows[2] == ["trial 2", "110.0 (1.10x)", "failed", "–", "110.0 (1.10x, round 1)"]
