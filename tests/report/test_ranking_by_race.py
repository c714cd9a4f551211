"""The ranking, the headline and the busy-machine section agree with the race that decided: a configuration a race
measured is ranked by its race figures (the race's own table's median and paired ratio), the recommendation first;
the headline names the ratio of its medians beside the paired rounds' geometric mean; the busy-machine section says
which race's runs were slowed and whether the one that gave the gain ran undisturbed."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

from matplotlib.figure import Figure

from autotune.records import TrialRecord
from autotune.report import plots, write_reports
from autotune.report.console import print_summary
from autotune.report.headline import headline
from autotune.report.rows import ranked_rows
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import Standing, summarise
from autotune.results.trim_rules import started_alone
from autotune.trial.result import Disturbance, Failure, FailureKind
from tests.conftest import fake_measurement
from tests.report.test_plots import trim_variant_results
from tests.report.test_reports import MACHINE, MEASURE, busy_section
from tests.results.test_summary import results_with, trial
from tests.study.test_tuner import BASELINE, fake_result


def raced_results() -> StudyResults:
    """Trial 3 (one change) reads slowest of the trials in its own run, 120 against the baseline's 100, but wins
    every round of the race (140, 120, 125 against 100, 90, 110); trial 0 left the race after one round; trial 5
    was not raced. One run of trial 0 was slowed, none of trial 3 or the baseline."""
    base = results_with(
        trial("0", 130.0, num_workers=1), trial("3", 120.0, batch_size=32), trial("5", 125.0, num_workers=4)
    )
    finalists = [
        Finalist("3", {}, 1, 100.0, [140.0, 120.0, 125.0]),
        Finalist("0", {}, 1, 100.0, [101.0], dropped="its median fell 10 % behind the leader's"),
    ]
    slowed = {"confirm-1-trial-0": Disturbance(cores_slowdown=1.5)}
    confirmation = Confirmation([100.0, 90.0, 110.0], finalists, disturbed=slowed, trials=["0", "3", "5"])
    return StudyResults(**{**base.__dict__, "machine": MACHINE, "measure": MEASURE, "confirmation": confirmation})


def test_the_raced_configurations_lead_the_ranking_by_their_race_figures_the_recommendation_first():
    summary = summarise(raced_results())
    assert summary.recommended.label == "3"
    assert [r.label for r in summary.ranked] == ["3", "0", "baseline", "5"], "raced first, then the search run"
    figures = {r.label: summary.standing(r) for r in summary.ranked}
    race = summary.confirmation
    assert figures["3"].throughput == race.paired_median(race.finalists[0]) == 125.0
    assert figures["3"].speedup == race.ratio(race.finalists[0]) == 1.25, "the race table's median ratio"
    assert figures["3"].measured == "the finalists' race, 3 rounds"
    assert (figures["0"].throughput, figures["0"].measured) == (101.0, "the finalists' race, 1 round"), "left lagging"
    assert (figures["baseline"].throughput, figures["baseline"].speedup) == (100.0, 1.0), "the proof's median"
    assert (figures["5"].throughput, figures["5"].speedup, figures["5"].measured) == (125.0, 1.25, "search run")


def test_every_table_shows_the_figure_it_ranks_by(tmp_path):
    results = raced_results()
    summary = summarise(results)
    files = write_reports(results, summary, tmp_path)
    ranked = files["report.md"].read_text().split("## All configurations, ranked")[1].split("\n## ")[0]
    assert "| 1 | 3 (recommended) | batch_size=32 | the finalists' race, 3 rounds | 125.0 | 1.25 |" in ranked
    assert "| 4 | 5 | num_workers=4 | search run | 125.0 | 1.25 |" in ranked
    rows = list(csv.DictReader(files["trials.csv"].open()))
    assert [(r["trial"], r["measured"], float(r["ranked_sps"])) for r in rows[:2]] == [
        ("3", "the finalists' race, 3 rounds", 125.0),
        ("0", "the finalists' race, 1 round", 101.0),
    ]
    assert float(rows[0]["throughput_sps"]) == 120.0, "its own run's figure stays beside it"
    out = io.StringIO()
    print_summary(summary, {}, "done", out)
    first = next(line for line in out.getvalue().splitlines() if line.split()[:1] == ["1"])
    assert "3 (recommended)" in first and "the finalists' race, 3 rounds" in first and "125.00" in first


def test_the_chart_by_batch_size_plots_the_ranking_figure():
    summary = summarise(raced_results())
    ax = Figure().subplots()
    plots.throughput_by_batch(summary).draw(ax)
    points = sorted(tuple(p) for c in ax.collections for p in c.get_offsets().tolist())
    assert (32.0, 125.0) in points and (32.0, 120.0) not in points, "trial 3 at its race median"


def test_the_headline_names_the_ratio_of_medians_beside_the_geometric_mean():
    summary = summarise(raced_results())
    said = str(headline(summary))
    assert (
        f"{summary.speedup:.2f}x the baseline's throughput (the geometric mean of the paired rounds' ratios; " in said
    )
    assert "1.25x by the medians)" in said and "(125.0 vs 100.0 samples/s by medians" in said


def test_the_busy_machine_section_says_the_race_that_gave_the_gain_ran_its_runs_undisturbed(tmp_path):
    results = raced_results()
    busy = busy_section(results, tmp_path)
    assert (
        "confirm-1-trial-0: the cores ran 1.5x slow (the race that gave the gain, the finalists' race, ran the "
        "recommendation and the baseline undisturbed)"
    ) in busy


def kept_baseline_results() -> StudyResults:
    """Trials A and B raced, neither proven (A 0.90x, B 1.01x of the baseline's race median), so the baseline is
    kept; C (1.30x by its search run) was not raced."""
    base = results_with(
        trial("A", 140.0, num_workers=1), trial("B", 135.0, num_workers=3), trial("C", 130.0, batch_size=32)
    )
    finalists = [Finalist("A", {}, 1, 100.0, [90.0, 88.0, 92.0]), Finalist("B", {}, 1, 100.0, [101.0, 99.0, 103.0])]
    confirmation = Confirmation([100.0, 98.0, 102.0], finalists, planned_rounds=3, trials=["A", "B", "C"])
    return StudyResults(**{**base.__dict__, "machine": MACHINE, "measure": MEASURE, "confirmation": confirmation})


def test_a_kept_baseline_leads_the_raced_group_at_its_race_median():
    summary = summarise(kept_baseline_results())
    assert summary.is_baseline
    assert [r.label for r in summary.ranked] == ["baseline", "B", "A", "C"], "what is recommended first, raced next"
    assert summary.standing(summary.baseline) == Standing(100.0, 1.0, "the finalists' race, 3 rounds")


def trimmed_results() -> StudyResults:
    """Trial 2 (two changes) won the finalists' race at 1.94x, trial 0 ran second at 1.80x; the trim raced trial 2
    against it without num_threads in more rounds against another baseline median (120), tied at 200, and kept the
    variant: trial 2 reads 1.67x there."""
    two = trial("2", 180.0, batch_size=32, num_threads=1)
    knobs = two.result.knobs
    finalists = [Finalist("2", knobs, 2, 100.0, [194.0] * 3), Finalist("0", {}, 1, 100.0, [180.0] * 3)]
    proven = Confirmation([100.0] * 3, finalists, None, 3, trials=["0", "2"])
    undone = {**knobs, "num_threads": BASELINE["num_threads"]}
    variant = Finalist("2 without num_threads", undone, 1, 90.0, [200.0] * 5, result=fake_result(undone, 190.0))
    race = Confirmation([120.0] * 5, [Finalist("2", knobs, 2, 100.0, [200.0] * 5), variant])
    base = results_with(two, trial("0", 170.0, num_workers=1))
    return replace(base, machine=MACHINE, measure=MEASURE, confirmation=proven, trim=[race])


def test_a_finalist_keeps_the_finalists_race_figures_so_that_race_s_order_stands():
    summary = summarise(trimmed_results())
    assert summary.recommended.label == "2 without num_threads"
    assert [r.label for r in summary.ranked][:3] == ["2 without num_threads", "2", "0"], "2 beat 0 in their race"
    figures = {r.label: summary.standing(r) for r in summary.ranked}
    assert (figures["2"].speedup, figures["0"].speedup) == (1.94, 1.8), "both from the finalists' race"
    assert figures["2 without num_threads"].speedup == 200.0 / 120.0, "the headline's race, the trim's"


def test_each_raced_row_names_the_race_its_figure_comes_from():
    """The recommendation (the trim's variant) and the baseline read the trim race that proved it, in its 5 rounds;
    the other finalists the finalists' race, in its 3."""
    summary = summarise(trimmed_results())
    measured = {row["trial"]: row["measured"] for row in ranked_rows(summary)}
    assert measured == {
        "2 without num_threads": "trim race 1, 5 rounds",
        "2": "the finalists' race, 3 rounds",
        "0": "the finalists' race, 3 rounds",
        "baseline": "trim race 1, 5 rounds",
    }
    assert summary.race_named(started_alone(summary.trim[0])) == "trim race 1", "its start alone: that race"


def test_the_ranking_s_words_say_what_it_rests_on(tmp_path):
    results = kept_baseline_results()
    summary = summarise(results)
    markdown = write_reports(results, summary, tmp_path)["report.md"].read_text()
    ranked = markdown.split("## All configurations, ranked\n")[1].split("\n## ")[0]
    assert "the baseline (kept) first, by their figures in the race named under measured" in ranked
    assert "| 1 | baseline | none | the finalists' race, 3 rounds | 100.0 | 1.00 |" in ranked
    assert "| 4 | C | batch_size=32 | search run | 130.0 | 1.30 |" in ranked, "not a screening window"
    assert "fastest" not in ranked
    many = summarise(trim_variant_results(others=9))
    assert "the first 8 ranked configurations'" in plots.time_split(many).caption


def test_an_infeasible_configuration_keeps_its_own_run_s_figures(tmp_path):
    over = trial("4", 150.0, batch_size=64)
    over = TrialRecord("4", replace(over.result, failure=Failure(FailureKind.OUT_OF_MEMORY, "over the budget")))
    results = replace(results_with(trial("0", 90.0, num_workers=1), over), machine=MACHINE, measure=MEASURE)
    rows = list(csv.DictReader(write_reports(results, summarise(results), tmp_path)["trials.csv"].open()))
    row = next(row for row in rows if row["trial"] == "4")
    assert (row["state"], row["rank"], float(row["ranked_sps"]), float(row["ranked_speedup"])) == (
        "infeasible",
        "",
        150.0,
        1.5,
    )
    assert row["measured"] == "search run"


def test_the_ranking_and_each_figure_are_found_once(monkeypatch):
    summary = summarise(trimmed_results())
    ranked_rows(summary)
    calls = []
    paired = Confirmation.paired
    monkeypatch.setattr(
        Confirmation, "paired", lambda race, finalist: calls.append(finalist.label) or paired(race, finalist)
    )
    assert summary.ranked is summary.ranked
    ranked_rows(summary)
    assert calls == [], "no race looked up again"


def test_a_trim_variant_that_is_a_trials_configuration_is_ranked_once_as_the_recommendation(tmp_path):
    # The trim recommends trial 0 without num_threads: trial 1's configuration (batch 32), by its own run 180.
    results = trim_variant_results()
    twin = trial("1", 180.0, batch_size=32)
    proven = replace(results.confirmation, trials=["0", "1"])
    results = replace(results, trials=[*results.trials, twin], confirmation=proven, machine=MACHINE, measure=MEASURE)
    summary = summarise(results)
    assert summary.recommended.label == "0 without num_threads" and summary.twin.label == "1"
    assert [r.label for r in summary.ranked] == ["0 without num_threads", "0", "baseline"], "trial 1 once, as it"
    files = write_reports(results, summary, tmp_path)
    assert "| 1 | 0 without num_threads (recommended; trial 1's configuration) |" in files["report.md"].read_text()
    rows = list(csv.DictReader(files["trials.csv"].open()))
    assert [(r["trial"], r["same_as"]) for r in rows] == [("0 without num_threads", "1"), ("0", ""), ("baseline", "")]
    stored = json.loads(files["report.json"].read_text())["trials"]
    assert [(r["trial"], r.get("same_as")) for r in stored][0] == ("0 without num_threads", "1"), "named, not lost"
    lean = replace(twin, result=replace(twin.result, measurement=fake_measurement(180.0, peak_mb=50.0)))
    trials = [*results.trials[:-1], lean]  # its search run read less memory than any: on the front by it alone
    on_front = summarise(replace(results, trials=trials, objectives=["throughput", "peak_memory"]))
    assert "1" not in [r.label for r in on_front.pareto], "one configuration, one point: as the recommendation"
    alone = summarise(trim_variant_results())
    assert alone.twin is None and "0 without num_threads" in [r.label for r in alone.ranked]
