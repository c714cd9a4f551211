"""The headline gain carries its 95 % interval from the paired rounds of the race that proved it, or says why it has
none: in the console, report.md, report.html and report.json."""

from __future__ import annotations

import io
import json
from html import escape

import pytest
import yaml

from autotune.measure.stats import ratio_interval
from autotune.report import plots, write_reports
from autotune.report.check import now_line, verdict_line
from autotune.report.console import print_summary
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.trial.result import Disturbance
from autotune.words import ratio_bounds
from tests.report.test_reports import sample_results
from tests.test_check import check


def _reported(tmp_path, confirmation: Confirmation | None) -> tuple[str, str, str, dict]:
    """The console, report.md, report.html and report.json of the sample results with ``confirmation``."""
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    summary = summarise(results)
    files = write_reports(results, summary, tmp_path)
    out = io.StringIO()
    print_summary(summary, files, "done", out)
    texts = (out.getvalue(), files["report.md"].read_text(), files["report.html"].read_text())
    return *texts, json.loads(files["report.json"].read_text())


def test_a_gain_proven_over_paired_rounds_carries_their_95_percent_interval(tmp_path):
    baseline, winner = [100.0, 96.0, 104.0], [118.0, 121.0, 119.0]
    console, markdown, page, report = _reported(tmp_path, Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)]))
    interval = ratio_interval([w / b for w, b in zip(winner, baseline, strict=True)])
    bounds = f"{interval.low:.2f}-{interval.high:.2f}x"
    said = f"1.19x the baseline's throughput (the geometric mean of the paired rounds' ratios), 95 % interval {bounds}"
    assert interval.low < 1.19 < interval.high
    assert said in console and said in markdown and escape(said) in page
    assert report["speedup_rounds"] == 3
    assert report["speedup_interval"] == pytest.approx(
        {"geomean": interval.geomean, "low": interval.low, "high": interval.high, "n": 3}
    )


@pytest.mark.parametrize(
    ("confirmation", "rounds", "said"),
    [
        (None, 0, "1.20x the baseline's throughput, single runs: no interval"),
        (Confirmation([100.0], [Finalist("0", {}, 1, 100.0, [115.0])]), 1, "1.15x the baseline's throughput, one race "
         "round: no interval"),
    ],
)  # fmt: skip
def test_a_gain_from_single_runs_or_one_round_says_it_has_no_interval(tmp_path, confirmation, rounds, said):
    console, markdown, page, report = _reported(tmp_path, confirmation)
    assert said in console and said in markdown and escape(said) in page
    assert report["speedup_interval"] is None and report["speedup_rounds"] == rounds


def test_the_headline_gain_is_the_centre_of_its_interval_when_the_machine_drifts(tmp_path):
    # The machine speeds up over the rounds: a ratio of medians (210 / 150 = 1.40) pairs runs of different rounds
    # and lies outside the paired interval; the paired rounds' geometric mean does not.
    baseline, winner = [100.0, 100.0, 150.0, 200.0, 200.0], [102.0, 102.0, 210.0, 210.0, 210.0]
    console, markdown, _, report = _reported(tmp_path, Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)]))
    interval = ratio_interval([w / b for w, b in zip(winner, baseline, strict=True)])
    assert report["speedup"] == pytest.approx(interval.geomean) and interval.low < interval.geomean < interval.high
    assert f"{interval.geomean:.2f}x the baseline's throughput" in console
    assert "(210.0 vs 150.0 samples/s by medians," in markdown


def test_a_round_whose_run_something_beside_it_slowed_is_left_out_of_the_gain_and_the_headline_says_so(tmp_path):
    # Round 2's baseline run read 5x slow (the cores ran 3.5x slow): with it the paired geometric mean read 4.2x.
    baseline, winner = [100.0, 20.0, 100.0, 100.0], [242.0, 250.0, 263.0, 251.0]
    slowed = {"confirm-2-baseline": Disturbance(cores_slowdown=3.5)}
    confirmation = Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)], disturbed=slowed)
    console, markdown, page, report = _reported(tmp_path, confirmation)
    interval = ratio_interval([2.42, 2.63, 2.51])
    said = f"95 % interval {interval.low:.2f}-{interval.high:.2f}x over 3 paired rounds (round 2 left out: a run of it"
    assert report["speedup"] == pytest.approx(interval.geomean) and report["speedup_interval"]["n"] == 3
    assert f"{interval.geomean:.2f}x the baseline's throughput" in console and said in console and said in markdown
    assert "1 of the runs it stands on was disturbed" in markdown
    method = yaml.safe_load((tmp_path / "recommended.yaml").read_text())["throughput"]["method"]
    assert "paired rounds' ratios (round 2 left out: a run of it was slowed)" in method


@pytest.mark.parametrize(
    ("baseline", "slowed", "rounds"),
    [
        ([100.0, 20.0], {"confirm-2-baseline"}, 2),  # one quiet round would leave no interval: both count
        ([20.0, 100.0, 20.0], {"confirm-1-baseline", "confirm-3-trial-0"}, 3),
        ([100.0, 100.0, 20.0], {"confirm-3-baseline"}, 3),  # two quiet rounds would bound nothing (t 12.7)
        (
            [100.0] * 3 + [20.0] * 4,
            {"confirm-4-baseline", "confirm-5-trial-0", "confirm-6-baseline", "confirm-7-baseline"},
            7,
        ),
    ],
)
def test_where_fewer_than_three_rounds_would_be_left_every_round_counts(tmp_path, baseline, slowed, rounds):
    winner = [250.0] * len(baseline)
    disturbed = dict.fromkeys(slowed, Disturbance(others_cores=1.0))
    confirmation = Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)], disturbed=disturbed)
    console, _, _, report = _reported(tmp_path, confirmation)
    assert report["speedup_interval"]["n"] == rounds and "left out" not in console


@pytest.mark.parametrize(
    ("low", "high", "said"),
    [
        (1.20, 1.90, "1.20-1.90"),
        (1.0031, 1.0045, "1.003-1.004"),  # a gain: not "1.00-1.00"
        (0.996, 1.05, "0.996-1.05"),  # spans 1: not "1.00-1.05"
        (1.0031, 1.0034, "1.0031-1.0034"),
        (0.9, 0.9, "0.90-0.90"),
    ],
)
def test_an_intervals_bounds_print_apart_and_each_on_its_side_of_one(low, high, said):
    assert ratio_bounds(low, high) == said


def test_a_gain_interval_reaching_just_below_one_prints_its_low_end_below_one(tmp_path):
    baseline, winner = [100.0] * 3, [102.5, 101.0, 103.0]  # ratios 1.025, 1.01, 1.03: 95 % interval 0.996-1.05
    console, markdown, _, _ = _reported(tmp_path, Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)]))
    said = "95 % interval 0.996-1.05x over 3 paired rounds (it spans 1x"
    assert said in console and said in markdown


def test_the_checks_lines_print_an_intervals_bounds_apart():
    record = check(1.0, [100.35, 104.4, 98.4], tolerance=0.5)  # 1.0031-1.0045
    assert now_line(record) == "1.00x the baseline, 95 % interval 1.003-1.005 over 3 paired rounds"
    assert "(95 % interval 1.003-1.005)" in verdict_line(record)


def test_a_gain_that_counts_rounds_something_slowed_as_most_were_is_called_unreliable(tmp_path):
    # Rounds 1 and 2 of 3 read on slowed cores: too few quiet rounds to leave them out, so all three count.
    baseline, winner = [100.0, 60.0, 100.0], [242.0, 250.0, 263.0]
    slowed = {
        "confirm-1-baseline": Disturbance(cores_slowdown=1.6),
        "confirm-2-baseline": Disturbance(others_cores=1.2),
    }
    console, markdown, _, report = _reported(tmp_path, Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)]))
    assert "unreliable" not in console, "nothing slowed: nothing to doubt"
    confirmation = Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)], disturbed=slowed)
    console, markdown, _, report = _reported(tmp_path, confirmation)
    said = "The gain is unreliable: it counts rounds 1 and 2, in which something beside the runs slowed one"
    assert report["speedup_interval"]["n"] == 3 and said in console and said in markdown
    assert "of the runs it stands on" not in markdown


def test_the_before_and_after_picture_says_of_how_many_rounds_its_bars_are_the_medians():
    baseline, winner = [100.0, 96.0, 104.0, 100.0, 50.0], [118.0, 121.0, 119.0, 120.0, 130.0]
    slowed = {"confirm-5-baseline": Disturbance(cores_slowdown=2.0)}
    results = StudyResults(
        **{
            **sample_results().__dict__,
            "confirmation": Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)], disturbed=slowed),
        }
    )
    caption = plots.before_after(summarise(results)).caption
    assert caption.startswith("Throughput before and after, medians of 4 of 5 interleaved rounds (dots: each round, ")
    assert "hollow: left out" in caption and "(round 5 left out: a run of it was slowed)" in caption


def test_a_gain_that_counts_one_slowed_round_of_three_says_it_may_be_a_little_off_not_unreliable(tmp_path):
    baseline, winner = [100.0, 96.0, 100.0], [242.0, 250.0, 263.0]
    slowed = {"confirm-3-baseline": Disturbance(cores_slowdown=1.6)}
    confirmation = Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)], disturbed=slowed)
    console, markdown, _, report = _reported(tmp_path, confirmation)
    said = (
        "The gain counts round 3, in which something beside the runs slowed one (too few rounds were quiet to leave "
        "it out, so every round counts): it may be a little off; see 'Measured on a busy machine'."
    )
    assert report["speedup_interval"]["n"] == 3 and said in console and said in markdown
    assert "unreliable" not in console.split("Recommended")[1].split("\n")[0]


def test_a_gain_that_counts_a_run_other_processes_slowed_is_unreliable_however_few(tmp_path):
    baseline, winner = [100.0, 96.0, 30.0], [120.0, 118.0, 122.0]
    slowed = {"confirm-3-baseline": Disturbance(others_cores=3.0)}
    confirmation = Confirmation(baseline, [Finalist("0", {}, 1, 100.0, winner)], disturbed=slowed)
    console, _, _, _ = _reported(tmp_path, confirmation)
    assert "The gain is unreliable: it counts round 3, in which something beside the runs slowed one" in console
