"""A trim race's table and words say what the trim decided on: each variant against the configuration it was made
from, paired round by round, and each change kept by the rule that kept it, with its figures; a ratio to the
baseline's median is never over other rounds than its row says."""

from __future__ import annotations

from dataclasses import replace

from autotune.report.races import _trim_outcome, rounds_table
from autotune.report.study_document import build_document
from autotune.results.finalist import Finalist, Left
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from tests.report.test_reports import sample_results

# A busy baseline run in round 2 (129.8 against 1144.3 and 1359.8): the baseline's median of rounds 1-2 is half its
# median of all three, so a ratio to it over those two rounds reads far above one over all three.
BUSY_BASELINE = [1144.3, 129.8, 1359.8]
BEATEN_FOR_GOOD = "trial 0 ran 1.07x its speed in rounds 1-2, each by more than 3%"


def trim_section(trim: Confirmation):
    """The trim's section of a report of ``sample_results`` whose finalists' race trial 0 won, trimmed by ``trim``."""
    confirmation = Confirmation([100.0] * 3, [Finalist("0", {}, 3, 100.0, [150.0] * 3)], trials=["0", "2"])
    results = replace(sample_results(), confirmation=confirmation, trim=[trim])
    document = build_document(results, summarise(results))
    (found,) = [s for s in document.sections if s.heading == "Only the changes that matter"]
    return found


def test_a_variant_that_left_is_shown_against_its_configuration_paired_not_against_a_baseline_median_of_fewer_rounds():
    reference = Finalist("0", {}, 3, 100.0, [1661.8, 1630.4, 1624.3])
    left = Finalist("0 without batch_size", {}, 2, 100.0, [1539.2, 1530.7], BEATEN_FOR_GOOD)
    trim = Confirmation(BUSY_BASELINE, [reference, left], planned_rounds=3)
    section = trim_section(trim)
    (race,) = section.subsections
    assert race.table == rounds_table(trim, trim=True)
    assert race.table.headers == ["", "round 1", "round 2", "round 3", "median", "vs trial 0 (paired)"]
    assert race.table.rows[1:3] == [
        ["trial 0", "1661.8 (1.45x)", "1630.4 (12.56x)", "1624.3 (1.19x)", "1630.4 (1.42x)", ""],
        ["trial 0 without batch_size", "1539.2 (1.35x)", "1530.7 (11.79x)", "–", "1535.0 (rounds 1 and 2)", (
            "0.93x, slower in 2 of 2 rounds"
        )],
    ]  # fmt: skip
    assert trim.ratio(left) > trim.ratio(reference), "the ratio over its two rounds alone would read it faster"
    key = section.paragraphs[1]
    assert "A variant that left early names the rounds its median is of and gives no ratio to the baseline" in key
    assert "The last column gives each variant against the configuration it was made from" in key


def test_a_finalist_that_left_early_names_the_rounds_its_ratio_to_the_baseline_is_over():
    stayed = Finalist("0", {}, 1, 100.0, [1661.8, 1630.4, 1624.3])
    left = Finalist("2", {}, 1, 100.0, [1539.2, 1530.7], "more than 10% behind trial 0 after round 2")
    race = Confirmation(BUSY_BASELINE, [stayed, left], None, 3, trials=["0", "2"])
    table = rounds_table(race)
    assert table.headers[-1] == "median", "the finalists' race judges against the baseline: no column of a trim's"
    assert [row[-1] for row in table.rows[:3]] == ["1144.3", "1630.4 (1.42x)", "1535.0 (2.41x, rounds 1 and 2)"]
    results = replace(sample_results(), confirmation=race)
    (section,) = [s for s in build_document(results, summarise(results)).sections if s.heading == "The finalists' race"]
    assert "An entrant that left early names the rounds its median is of" in section.paragraphs[-1]


def test_a_change_whose_undoing_read_faster_in_a_round_is_kept_by_the_paired_rule_and_its_figures():
    reference = Finalist("1", {}, 4, 100.0, [543.7, 731.1, 769.5])
    workers = Finalist("1 without num_workers", {}, 3, 100.0, [773.7, 620.9, 558.5])  # faster in round 1
    race = Confirmation([371.2, 180.7, 96.3], [reference, workers], planned_rounds=3)
    assert race.winner is reference
    assert _trim_outcome(race, reference) == (
        "Kept, as undoing it read slower than trial 1 in most rounds and by more than 3% by the geometric mean of the "
        "per-round ratios: num_workers (0.96x, slower in 2 of 3 rounds)."
    )


def test_each_change_kept_as_its_variant_left_early_is_said_by_the_rule_it_left_by_with_its_figures():
    reference = Finalist("4", {}, 5, 100.0, [150.0, 151.0, 149.0])
    lagging = Finalist(
        "4 without a", {}, 4, 100.0, [120.0], "more than 15% behind trial 4 after round 1", left=Left.LAGGING
    )
    beaten = Finalist(
        "4 without b", {}, 4, 100.0, [140.0, 141.0], "trial 4 ran 1.07x its speed in rounds 1-2", left=Left.BEATEN
    )
    lost = Finalist("4 without c", {}, 4, 100.0, [95.0], "slower than the baseline in round 1", left=Left.UNPROVABLE)
    failed = Finalist(
        "4 without d", {}, 4, 100.0, [], "round 1 failed: signal: SIGKILL", failed_round=1, left=Left.FAILED
    )
    race = Confirmation([100.0, 98.0, 102.0], [reference, lagging, beaten, lost, failed], planned_rounds=3)
    assert race.winner is reference
    assert _trim_outcome(race, reference) == (
        "Kept, as undoing it fell more than 15% behind trial 4 by the medians of the runs not slowed: a (after round "
        "1: 0.80x). Kept, as undoing it read more than 3% slower than trial 4 in each round it ran, which only a round "
        "reading it faster could have changed: b (rounds 1 and 2: 0.93x by the paired ratios). Kept, as undoing it "
        "lost more rounds to the baseline than a proof over 3 rounds allows (none): c (1 of 1 round lost). Kept, as "
        "undoing it failed a run: d (round 1)."
    )
