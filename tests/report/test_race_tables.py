"""The races in the report: a verdict in words, the runs round by round in a table."""

from __future__ import annotations

from dataclasses import replace

from autotune.report.html_report import to_html
from autotune.report.markdown import to_markdown
from autotune.report.races import rounds_table
from autotune.report.study_document import build_document
from autotune.results.finalist import Finalist, Left
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.trial.result import Disturbance
from tests.report.test_reports import sample_results


def finalists_race() -> Confirmation:
    """Trial 0 against the baseline in 3 rounds; trial 2 left lagging after round 1 (trial 0 is the one finalist
    ``sample_results`` gives: trial 2 is the race's own, as a stored race may hold)."""
    lagging = Finalist("2", {}, 1, 100.0, [104.0], "more than 10% behind trial 0 after round 1")
    return Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 1, 100.0, [120.0, 119.0, 125.0]), lagging], None, 3)


def section(results, heading: str):
    (found,) = [s for s in build_document(results, summarise(results)).sections if s.heading == heading]
    return found


def test_the_finalists_race_table_holds_its_stored_rounds_and_the_verdict_no_figure_of_a_round():
    race = finalists_race()
    results = replace(sample_results(), confirmation=replace(race, trials=["0", "2"]))
    confirmation = section(results, "The finalists' race")
    assert confirmation.table.headers == ["", "round 1", "round 2", "round 3", "median"]
    assert confirmation.table.rows == [
        ["baseline", "100.0", "98.0", "102.0", "100.0"],
        ["trial 0", "120.0 (1.20x)", "119.0 (1.21x)", "125.0 (1.23x)", "120.0 (1.20x)"],
        ["trial 2", "104.0 (1.04x)", "–", "–", "104.0 (1.04x, round 1)"],
        ["fastest", "trial 0", "trial 0", "trial 0", ""],
    ]
    verdict, key = confirmation.paragraphs
    assert verdict.startswith("2 finalists, re-measured against the baseline in 3 interleaved rounds")
    assert "Trial 2 dropped: more than 10% behind trial 0 after round 1." in verdict, "why it left: in words only"
    assert verdict.endswith("Trial 0 is confirmed: 1.20x by medians (a win in every round and at least 2% gain).")
    assert not any(figure in verdict for figure in ("98.0", "119.0", "125.0")), "a round's figures: the table's"
    assert "A dash (–): not run" in key and "busy" not in key, "the key says what this table holds"


def test_each_trim_race_has_a_table_of_its_rounds_under_a_heading_of_its_own():
    sample = sample_results()
    run = sample.trials[0].result
    confirmation = Confirmation([100.0] * 3, [Finalist("0", {}, 3, 100.0, [150.0] * 3)], trials=["0", "2"])
    reference = Finalist("0", {}, 3, 100.0, [150.0, 151.0, 149.0])
    amp = Finalist("0 without amp", run.knobs, 2, 100.0, [150.0, 152.0, 149.0], result=run)
    workers = Finalist(
        "0 without num_workers", {}, 2, 100.0, [110.0], "more than 15% behind trial 0 after round 1", left=Left.LAGGING
    )
    trim = Confirmation([100.0, 98.0, 102.0], [reference, amp, workers], planned_rounds=3)
    results = replace(sample, confirmation=confirmation, trim=[trim])
    trimmed = section(results, "Only the changes that matter")
    (race,) = trimmed.subsections
    assert race.heading == "Trim race 1" and race.table == rounds_table(trim, trim=True)
    assert race.table.headers == ["", "round 1", "round 2", "round 3", "median", "vs trial 0 (paired)"]
    assert race.table.rows == [
        ["baseline", "100.0", "98.0", "102.0", "100.0", ""],
        ["trial 0", "150.0 (1.50x)", "151.0 (1.54x)", "149.0 (1.46x)", "150.0 (1.50x)", ""],
        [
            "trial 0 without amp",
            "150.0 (1.50x)",
            "152.0 (1.55x)",
            "149.0 (1.46x)",
            "150.0 (1.50x)",
            "1.00x, slower in 0 of 3 rounds",
        ],
        ["trial 0 without num_workers", "110.0 (1.10x)", "–", "–", "110.0 (round 1)", "0.73x, slower in 1 of 1 round"],
        ["fastest", "trial 0, trial 0 without amp", "trial 0 without amp", "trial 0, trial 0 without amp", "", ""],
    ]
    verdict, outcome = race.paragraphs
    assert verdict.startswith("Trial 0 and 2 variants of it, re-measured against the baseline in 3 interleaved")
    assert outcome == (
        "Kept, as undoing it fell more than 15% behind trial 0 by the medians of the runs not slowed: num_workers "
        "(after round 1: 0.73x). Left out, as fast without: amp."
    )
    assert trimmed.paragraphs[1].startswith("The table below gives the race round by round"), "the key, once"

    document = build_document(results, summarise(results))
    markdown = to_markdown(document)
    assert "\n\n### Trim race 1\n\n" in markdown and "| trial 0 without num_workers | 110.0 (1.10x) | – | – |" in (
        markdown
    )
    assert markdown.index("## Only the changes that matter") < markdown.index("### Trim race 1")
    page = to_html(document)
    assert "<h3>Trim race 1</h3>" in page and "<td>trial 0 without amp</td>" in page


def test_a_failed_run_reads_failed_in_its_round_not_a_figure():
    failed = Finalist("2", {}, 1, 100.0, [110.0], "round 2 failed: signal: SIGKILL", failed_round=2)
    race = Confirmation([100.0, 98.0, 101.0], [Finalist("0", {}, 1, 100.0, [120.0, 119.0, 121.0]), failed], None, 3)
    assert rounds_table(race).rows[2] == ["trial 2", "110.0 (1.10x)", "failed", "–", "110.0 (1.10x, round 1)"]
    # The baseline's run failed in round 2, after trial 0's: the race ended there; that run has no pair, no ratio, and
    # counts in no figure.
    ended = Confirmation([100.0], [Finalist("0", {}, 1, 100.0, [110.0, 112.0])], "confirm-2-baseline: signal: SIGKILL")
    assert rounds_table(ended).rows == [
        ["baseline", "100.0", "failed", "100.0"],
        ["trial 0", "110.0 (1.10x)", "112.0 (unpaired)", "110.0 (1.10x)"],
        ["fastest", "trial 0", "–", ""],
    ]


def test_a_run_counted_though_slowed_is_marked_busy_and_the_key_says_what_that_means():
    slowed = {"confirm-2-trial-0": Disturbance(cores_slowdown=1.4), "confirm-3-baseline": Disturbance(others_cores=1.0)}
    race = replace(finalists_race(), disturbed=slowed, trials=["0", "2"])
    table = rounds_table(race)
    assert table.rows[0][3] == "102.0 (busy)" and table.rows[1][2] == "119.0 (1.21x, busy)"
    key = section(replace(sample_results(), confirmation=race), "The finalists' race").paragraphs[-1]
    assert "A run marked busy was counted though something beside it slowed it" in key


def test_a_race_that_ran_no_round_has_no_table_and_no_key():
    race = Confirmation([], [Finalist("0", {}, 1, 100.0, [])], None, 3, cut=True, trials=["0", "2"])
    assert rounds_table(race) is None
    confirmation = section(replace(sample_results(), confirmation=race), "The finalists' race")
    assert confirmation.table is None
    assert confirmation.paragraphs == [
        "study.budget_s left no time to race 1 finalist against the baseline, so none is recommended unproven."
    ]
