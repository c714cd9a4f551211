"""The headline says what the race showed: "confirmed" where the gain's interval lies above 1x; where it spans 1x,
the rounds won against the baseline (the proof) and that the interval does not bound the gain. An interval too wide
to read (READABLE_SPAN) says so rather than print its bounds, in the tune's headline and in mode=benchmark's."""

from __future__ import annotations

import pytest

from autotune.report.benchmark import benchmark_document
from autotune.report.check import now_line
from autotune.report.headline import headline
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.words import READABLE_SPAN, interval_bounds
from tests.report.test_reports import sample_results
from tests.results.test_benchmark import benchmark
from tests.test_check import check

CONFIRMED = "confirmed by interleaved re-measurement"


def headline_of(confirmation: Confirmation):
    return headline(summarise(StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})))


def test_a_gain_whose_interval_spans_one_says_it_won_its_rounds_not_that_it_was_confirmed():
    said = headline_of(Confirmation([100.0, 100.0], [Finalist("0", {}, 1, 100.0, [150.0, 101.0])]))
    assert "(it spans 1x:" in said.lead
    assert CONFIRMED not in said.rest, said.rest
    assert said.rest.startswith(
        "(125.5 vs 100.0 samples/s by medians, won every round of the race against the baseline: faster, by an "
        "amount its interval does not bound) by changing"
    ), said.rest


def test_a_gain_proven_up_to_its_verdict_and_lost_after_it_counts_the_rounds_it_won():
    # Decided after round 2; round 3, run for the interval, read the baseline faster.
    race = Confirmation([100.0] * 3, [Finalist("0", {}, 1, 100.0, [150.0, 160.0, 99.0])], None, 3, decided_after=2)
    said = headline_of(race).rest
    assert "won 2 of the race's 3 rounds against the baseline: faster, by an amount its interval does not bound" in said


def test_a_gain_whose_interval_lies_above_one_is_confirmed():
    said = headline_of(Confirmation([100.0, 96.0, 104.0], [Finalist("0", {}, 1, 100.0, [118.0, 121.0, 119.0])]))
    assert f"samples/s by medians, {CONFIRMED}) by changing" in said.rest


@pytest.mark.parametrize(
    ("low", "high", "said"),
    [
        (0.38, 4.56, "0.38-4.56x"),
        (0.1, 0.1 * READABLE_SPAN, "0.10-10.00x"),
        (0.1, 0.1 * READABLE_SPAN * 1.01, "too wide to read"),
        (0.0000001, 855911.13, "too wide to read"),
    ],
)
def test_an_interval_over_the_readable_span_reads_too_wide_to_read(low, high, said):
    assert interval_bounds(low, high, "x") == said


def test_the_tunes_headline_says_an_interval_too_wide_to_read():
    lead = headline_of(Confirmation([100.0, 100.0], [Finalist("0", {}, 1, 100.0, [150.0, 3000.0])])).lead
    assert "95 % interval too wide to read over 2 paired rounds (it spans 1x:" in lead, lead


def test_the_benchmarks_headline_and_table_say_an_interval_too_wide_to_read():
    document = benchmark_document(benchmark([150.0, 3000.0, None], base_runs=(100.0, 100.0, 100.0)))
    assert document.headline.rest.startswith("95 % interval too wide to read over 2 paired rounds on cpu"), document
    recommended = document.sections[0].table.rows[1]
    assert recommended[3] == "too wide to read" and recommended[4] == "within noise"


def test_mode_checks_lines_say_an_interval_too_wide_to_read_as_the_other_pages_do():
    wide = check(2.0, [150.0, 900000.0], [100.0, 1.0])
    assert "too wide to read" in now_line(wide)
