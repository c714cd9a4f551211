"""Every report renders from saved results and agrees with the others."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import asdict, replace

import pytest
import yaml

from autotune.knobs import KNOBS
from autotune.measure.environment import describe_machine
from autotune.measure.measurement import SystemReport
from autotune.measure.warmup import WarmupPolicy
from autotune.records import NotMeasured, ProbeRecord, TrialRecord
from autotune.report import write_reports
from autotune.report.console import print_summary
from autotune.report.document import format_cell, machine_lines
from autotune.report.headline import before_after_table, headline
from autotune.report.markdown import render_markdown
from autotune.report.races import _trim_outcome, rounds_table
from autotune.report.rows import NAMED_RUNS, slowed_in_words
from autotune.report.study_document import build_document
from autotune.report.tuner_time import tuner_time_line
from autotune.results.finalist import Finalist, Left
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.results.tuner_time import LEFT_TO_OTHERS_STEP, RunTime, TunerTime
from autotune.study.trim import undo_next
from autotune.trial.result import Disturbance, Failure, FailureKind
from autotune.words import percents
from tests.results.test_summary import failed, results_with, trial

MACHINE = {
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "physical_cores": 1,
    "memory_gb": 24.0,
    "gpu": None,
    "python": "3.11",
    "platform": "Linux",
    "torch": "2.13.0",
    "cuda": None,
    "cudnn": None,
    "torch_threads": 2,
}
MEASURE = {
    "warmup": asdict(WarmupPolicy()),  # as stored: its span None, the two medians' steps left to the policy
    "min_steps": 30,
    "min_time_s": 4.0,
    "max_time_s": 30.0,
    "trial_timeout_s": 300,
}


def sample_results() -> StudyResults:
    base = results_with(trial("0", 120.0, num_workers=1), failed("1", num_workers=2), trial("2", 90.0, batch_size=32))
    return StudyResults(**{**base.__dict__, "machine": MACHINE, "measure": MEASURE})


def busy_section(results: StudyResults, tmp_path) -> str:
    """The "Measured on a busy machine" section of the report.md written for ``results``."""
    markdown = write_reports(results, summarise(results), tmp_path)["report.md"].read_text()
    return markdown.split("## Measured on a busy machine", 1)[1].split("##", 1)[0]


def test_reports_are_written_and_consistent(tmp_path):
    results = sample_results()
    files = write_reports(results, summarise(results), tmp_path)
    assert set(files) == {"recommended.yaml", "trials.csv", "report.md", "report.json", "report.html"}

    recommended = yaml.safe_load(files["recommended.yaml"].read_text())
    assert recommended["knobs"] == {**recommended["baseline"], "num_workers": 1}
    assert set(recommended["knobs"]) == set(KNOBS)
    assert recommended["machine"]["torch_threads"] == 2, "what num_threads: null ran with"
    assert recommended["throughput"] == {
        "recommended": 120.0,
        "baseline": 100.0,
        "speedup": 1.2,
        "unit": "samples/s",
        "method": "single measurements; the speedup: the ratio of the two throughputs",
        "interval": None,
        "unsteady": None,
    }
    assert recommended["peak_memory_mb"] == {"recommended": 100.0, "baseline": 100.0}

    report = json.loads(files["report.json"].read_text())
    assert report["speedup"] == recommended["throughput"]["speedup"]
    assert report["recommended"]["knobs"] == recommended["knobs"]
    assert report["recommended"]["changed"] == {"num_workers": {"before": 0, "after": 1}}
    assert [t["trial"] for t in report["trials"]] == ["0", "baseline", "2", "1"]
    assert report["trials"][-1]["failure_reason"] == "timeout after 5 s"
    assert report["machine"]["cpu_model"] == "Test CPU"

    rows = list(csv.DictReader(io.StringIO(files["trials.csv"].read_text())))
    assert [r["trial"] for r in rows] == ["0", "baseline", "2", "1"]
    assert [r["state"] for r in rows] == ["complete"] * 3 + ["failed"]
    assert float(rows[0]["throughput_sps"]) == 120.0 and rows[3]["failure_kind"] == "timeout"

    markdown = files["report.md"].read_text()
    assert "1.20x the baseline's throughput" in markdown
    assert "num_workers 0 → 1" in markdown
    assert "## Pruned, infeasible and failed configurations" in markdown and "timeout after 5 s" in markdown
    assert "Test CPU" in markdown
    assert "the median of the last 4 step times was within 15% of the 4 before (8 to 60 steps" in markdown


def test_the_configurations_ruled_out_unmeasured_are_listed_with_why_in_every_report_but_the_ranking(tmp_path):
    results = sample_results()
    why = "it needs no less memory than trial 2, which ran out (OutOfMemoryError: CUDA out of memory)"
    ruled = NotMeasured("4", {**results.baseline.result.knobs, "batch_size": 64}, why)
    files = write_reports(replace(results, not_measured=[ruled]), summarise(results), tmp_path)
    report = json.loads(files["report.json"].read_text())
    assert report["not_measured"] == [{"trial": "4", "knobs": ruled.knobs, "reason": why}]
    assert "4" not in [t["trial"] for t in report["trials"]], "not measured: not ranked"
    markdown = files["report.md"].read_text()
    section = markdown.split("## Not measured", 1)[1]
    assert "| 4 | batch_size=64 | " + why + " |" in section
    assert "Not measured" in files["report.html"].read_text()


def test_the_headline_says_when_to_keep_the_baseline():
    results = results_with(trial("0", 50.0, num_workers=1))
    assert headline(summarise(results)).lead == "Keep your current settings."


def test_writing_leaves_no_temporary_files(tmp_path):
    results = sample_results()
    write_reports(results, summarise(results), tmp_path)
    names = ["recommended.yaml", "report.html", "report.json", "report.md", "trials.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_user_strings_are_inert_in_every_report(tmp_path):
    hostile = "<script>alert(1)</script> !!python/object/apply:os.system ['echo pwned'] | x\ninjected: true\n#"
    base = sample_results()
    failing = failed("9", num_workers=1)
    failing = type(failing)(failing.label, type(failing.result)(failing.result.knobs, failure=Failure(
        FailureKind.EXCEPTION, f"ValueError: {hostile}")))  # fmt: skip
    results = StudyResults(**{**base.__dict__, "pipeline": hostile, "trials": [*base.trials, failing]})
    files = write_reports(results, summarise(results), tmp_path)
    markdown = files["report.md"].read_text()
    assert "<script>" not in markdown and "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    assert "ValueError: &lt;script&gt;" in markdown
    page = files["report.html"].read_text()
    assert "<script" not in page.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") >= 3, "title, heading and the failure reason"
    recommended = yaml.safe_load(files["recommended.yaml"].read_text())
    assert recommended["pipeline"] == hostile, "YAML quotes it: loading gives the string back, runs nothing"
    assert "injected" not in recommended, "a newline in the name did not end the header's comment and add a key"
    assert json.loads(files["report.json"].read_text())["pipeline"] == hostile


def test_a_confirmed_recommendation_reports_the_interleaved_medians(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    files = write_reports(results, summarise(results), tmp_path)
    recommended = yaml.safe_load(files["recommended.yaml"].read_text())
    assert recommended["throughput"]["recommended"] == 111.0 and recommended["throughput"]["baseline"] == 100.0
    method = "medians of 3 interleaved re-measurements; the speedup: the geometric mean of 3 paired rounds' ratios"
    assert recommended["throughput"]["method"].startswith(method + ", 95 % interval 1.0")
    assert "confirmed by interleaved re-measurement" in files["report.md"].read_text()
    assert json.loads(files["report.json"].read_text())["confirmation"]["confirmed"] is True


def test_an_unconfirmed_trial_is_not_recommended(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 1, 100.0, [101.0, 97.0, 103.0])])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    files = write_reports(results, summarise(results), tmp_path)
    recommended = yaml.safe_load(files["recommended.yaml"].read_text())
    assert recommended["knobs"] == recommended["baseline"] and recommended["throughput"]["speedup"] == 1.0
    assert "were not proven faster when re-measured" in files["report.md"].read_text()


def test_a_finalist_whose_race_run_failed_is_named_with_why_it_left_and_its_gain_over_the_rounds_it_ran():
    finalist = Finalist("0", {}, 1, 100.0, [150.0], dropped="round 2 failed: exception: RuntimeError", failed_round=2)
    confirmation = Confirmation([100.0, 200.0], [finalist], planned_rounds=3)
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    said = headline(summarise(results)).rest
    assert "trial 0, measured 1.50x by medians of 1 interleaved round, then left the race: round 2 failed" in said
    assert "Trial 0 dropped: round 2 failed: exception: RuntimeError." in confirmation.describe()
    assert rounds_table(confirmation).rows[1] == ["trial 0", "150.0 (1.50x)", "failed", "150.0 (1.50x, round 1)"]


def test_a_race_ended_by_a_failed_baseline_run_says_so_not_that_the_gain_did_not_hold():
    finalist = Finalist("0", {}, 1, 100.0, [110.0, 112.0])
    confirmation = Confirmation([100.0], [finalist], failure="confirm-2-baseline: signal: SIGKILL")
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    rest = headline(summarise(results)).rest
    assert "could not be re-measured" in rest and "confirm-2-baseline: signal: SIGKILL" in rest, rest


def test_the_runs_a_race_counted_though_other_processes_slowed_them_are_named_and_the_headline_says_so(tmp_path):
    finalist, other = Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0, 113.0]), Finalist("2", {}, 1, 100.0, [90.0])
    slowed = {"confirm-2-baseline": Disturbance(others_cores=1.0), "confirm-1-trial-2": Disturbance(cores_slowdown=1.4)}
    confirmation = Confirmation([100.0, 98.0, 102.0, 101.0], [finalist, other], disturbed=slowed, trials=["0", "2"])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    files = write_reports(results, summarise(results), tmp_path)
    markdown = files["report.md"].read_text()
    assert "1 of the runs it stands on was disturbed" in markdown, "not trial 2's"
    assert "## Measured on a busy machine" in markdown and "confirm-2-baseline: other processes busy (1.0" in markdown
    assert (
        "confirm-1-trial-2: the cores ran 1.4x slow (the race that gave the gain, the finalists' race, counted 1 of"
        in (markdown)
    )
    stored = json.loads(files["report.json"].read_text())["confirmation"]
    assert Confirmation.from_dict(stored).disturbed == slowed


def test_many_slowed_race_runs_are_counted_by_race_and_by_what_slowed_them_not_each_named(tmp_path):
    finalist = Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])
    slowed = {f"confirm-{i}-trial-0": Disturbance(cores_slowdown=1.4 + i / 10) for i in (1, 2, 3)}
    slowed |= {f"confirm-{i}-baseline": Disturbance(others_cores=0.8) for i in (1, 2)}
    trimmed = {"trim-1-1-trial-0-without-amp": Disturbance(cores_slowdown=2.0, others_cores=1.2)}
    confirmation = Confirmation([100.0, 98.0, 102.0], [finalist], disturbed=slowed, trials=["0"])
    variant = Finalist("0 without amp", {}, 0, 100.0, [90.0, 91.0, 89.0])
    trim = [Confirmation([100.0, 98.0, 102.0], [finalist, variant], disturbed=trimmed)]
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation, "trim": trim})
    busy = busy_section(results, tmp_path)
    assert (
        "The races counted 6 runs that something beside them slowed: the cores ran 1.5-2.0x slow in 4 of them, "
        "other processes busy (0.8-1.2 cores) in 3 of them (5 in the finalists' race, 1 in trim race 1; the race that "
        "gave the gain, trim race 1, ran the recommendation and the baseline undisturbed; report.json names each"
    ) in busy
    assert "confirm-1-trial-0" not in busy
    few = dict(list((slowed | trimmed).items())[:NAMED_RUNS])
    assert slowed_in_words(few).count(": ") == NAMED_RUNS, "up to NAMED_RUNS, each is named"


@pytest.mark.parametrize(
    ("slowed", "advice"),
    [
        ({"confirm-2-baseline": Disturbance(cores_slowdown=1.6)}, "by the host's doing"),
        ({"confirm-2-baseline": Disturbance(others_cores=1.0, cores_slowdown=1.6)}, "close other work"),
    ],
)
def test_races_slowed_only_by_the_host_are_not_told_to_close_other_work(tmp_path, slowed, advice):
    finalist = Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])
    confirmation = Confirmation([100.0, 98.0, 102.0], [finalist], disturbed=slowed, trials=["0"])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    busy = busy_section(results, tmp_path)
    assert advice in busy and ("close other work" in busy) == (advice == "close other work")


def test_a_race_an_earlier_version_stored_with_its_disturbed_runs_in_words_renders_them_as_todays_do(tmp_path):
    finalist = Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])
    stored = Confirmation([100.0, 98.0, 102.0], [finalist], trials=["0", "2"]).to_dict()
    words = {"confirm-2-baseline": "0.8 cores", "confirm-3-trial-0": "1 other process on the GPU"}
    confirmation = Confirmation.from_dict({**stored, "disturbed": words})
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    markdown = write_reports(results, summarise(results), tmp_path)["report.md"].read_text()
    assert "confirm-2-baseline: other processes busy (0.8 cores); confirm-3-trial-0: 1 other process on the GPU (" in (
        markdown
    )


def test_a_trim_race_whose_variant_won_without_its_reference_running_every_round_undoes_nothing_and_says_so(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])])
    reference = Finalist("0", {}, 2, 100.0, [150.0], "round 2 failed: signal: SIGKILL")
    variant = Finalist("0 without amp", {}, 1, 100.0, [110.0, 111.0, 109.0])
    trim = [Confirmation([100.0, 98.0, 102.0], [reference, variant])]
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation, "trim": trim})
    files = write_reports(results, summarise(results), tmp_path)
    assert yaml.safe_load(files["recommended.yaml"].read_text())["knobs"]["num_workers"] == 1, "trial 0's own"
    assert (
        "Nothing is undone, as no variant was shown to cost nothing: trial 0, the configuration it started from, left "
        "it (round 2 failed: signal: SIGKILL)." in files["report.md"].read_text()
    )
    (race,) = json.loads(files["report.json"].read_text())["trim"]
    assert (race["winner"], race["trimmed_to"]) == ("0 without amp", None)


def test_a_settled_trim_race_says_which_change_it_kept_which_it_left_out_and_which_it_races_again(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 3, 100.0, [150.0, 151.0, 149.0])])
    reference = Finalist("0", {}, 3, 100.0, [150.0, 151.0, 149.0])
    workers = Finalist(
        "0 without num_workers", {}, 2, 100.0, [110.0], "more than 15% behind trial 0 after round 1", left=Left.LAGGING
    )
    sample = sample_results()
    first_run = sample.trials[0].result
    amp = Finalist("0 without amp", first_run.knobs, 2, 100.0, [150.0, 150.0, 150.0], result=first_run)
    malloc = Finalist("0 without malloc", {}, 2, 110.0, [150.0, 151.0, 150.0])
    # Beaten in every round, by 3.4 % by the paired ratios (``beats``), though it never fell far enough behind to
    # leave: not undone again (``trim.undo_next``), so not "as fast without".
    threads = Finalist("0 without num_threads", {}, 2, 110.0, [145.0, 146.0, 144.0])
    failed = Finalist("0 without channels_last", {}, 2, 110.0, [], "round 1 failed: signal: SIGKILL")
    finalists = [reference, workers, amp, malloc, threads, failed]
    trim = [Confirmation([100.0, 98.0, 102.0], finalists, planned_rounds=3)]
    results = StudyResults(**{**sample.__dict__, "confirmation": confirmation, "trim": trim})
    markdown = write_reports(results, summarise(results), tmp_path)["report.md"].read_text()
    said = (
        "Kept, as undoing it fell more than 15% behind trial 0 by the medians of the runs not slowed: num_workers "
        "(after round 1: 0.73x). Kept, as undoing it read slower than trial 0 in most rounds and by more than 3% by "
        "the geometric mean of the per-round ratios: num_threads (0.97x, slower in 3 of 3 rounds). Kept, as undoing "
        "it left the race: channels_last (round 1 failed: signal: SIGKILL). Left out, as fast without: amp. As fast "
        "without too, so undone on top of that in the next race: malloc."
    )
    assert said in markdown, markdown.split("## Only the changes that matter")[1][:3000]
    assert undo_next(reference, {"malloc": malloc, "num_threads": threads}, amp) == ["malloc"], "as the trim does"


def test_a_variant_undoing_several_changes_that_won_leaves_out_each_and_says_where_one_alone_read_slower(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 4, 100.0, [150.0, 151.0, 149.0])])
    reference = Finalist("0", {}, 4, 100.0, [150.0, 151.0, 149.0])
    slower = Finalist("0 without malloc", {}, 3, 100.0, [140.0, 141.0], "beaten for good", left=Left.BEATEN)
    tied = Finalist("0 without batch_size", {}, 3, 100.0, [150.0, 149.0, 150.0])
    sample = sample_results()
    run = sample.trials[0].result
    both = Finalist("0 without malloc without batch_size", run.knobs, 2, 100.0, [149.0, 150.0, 150.0], result=run)
    trim = [Confirmation([100.0, 98.0, 102.0], [reference, slower, tied, both], planned_rounds=3)]
    results = StudyResults(**{**sample.__dict__, "confirmation": confirmation, "trim": trim})
    files = write_reports(results, summarise(results), tmp_path)
    said = (
        "Left out, as fast without: malloc, batch_size. Left out with the others, though undoing it alone read more "
        "than 3% slower than trial 0 in each round it ran, which only a round reading it faster could have changed: "
        "malloc (rounds 1 and 2: 0.93x by the paired ratios)."
    )
    markdown = files["report.md"].read_text()
    assert said in markdown and "Kept" not in markdown.split("## Only the changes that matter")[1].split("\n## ")[0]
    (race,) = json.loads(files["report.json"].read_text())["trim"]
    assert race["trimmed_to"] == both.label and race["behind_race_winner"] == pytest.approx(150 / 149.66, rel=1e-3)


def test_a_trim_race_whose_verdict_would_give_back_a_gain_with_the_races_before_undoes_nothing_and_says_so(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 4, 100.0, [150.0, 151.0, 149.0])])
    run = sample_results().trials[0].result
    undone = Finalist("0 without malloc", run.knobs, 3, 100.0, [148.0] * 3, result=run)
    first = [Finalist("0", {}, 4, 100.0, [150.0] * 3), undone]
    second = [
        replace(undone, throughputs=[148.0] * 3),
        Finalist("0 without malloc without batch_size", {}, 2, 100.0, [146.0] * 3),
    ]
    trim = [Confirmation([100.0] * 3, first, planned_rounds=3), Confirmation([100.0] * 3, second, planned_rounds=3)]
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation, "trim": trim})
    summary = summarise(results)
    assert summary.recommended.label == "0 without malloc"
    files = write_reports(results, summary, tmp_path)
    assert (
        "Trial 0 without malloc without batch_size is not taken: trial 0, the finalists' race's winner, would run 2.7% "
        "faster than it by the product of the trim's paired ratios, and a trim gives back less than 2%, the smallest "
        "gain a change is recommended for; nothing is undone. Its rounds of trial 0 without malloc against the "
        "baseline prove the recommendation (its gain counts them)." in files["report.md"].read_text()
    )
    races = json.loads(files["report.json"].read_text())["trim"]
    assert [race["trimmed_to"] for race in races] == ["0 without malloc", "0 without malloc"]
    assert races[1]["refused"] == {
        "trial": "0 without malloc without batch_size",
        "behind_race_winner": pytest.approx(150 / 146),
    }


def test_a_stored_trim_that_went_on_after_a_race_the_bound_now_refuses_ends_there_as_a_trim_would_now(tmp_path):
    confirmation = Confirmation([100.0] * 3, [Finalist("0", {}, 4, 100.0, [150.0] * 3)])
    run = sample_results().trials[0].result
    undone = Finalist("0 without malloc", run.knobs, 3, 100.0, [146.3] * 3, result=run)  # 2.5 % behind: refused
    first = Confirmation([100.0] * 3, [Finalist("0", {}, 4, 100.0, [150.0] * 3), undone], planned_rounds=3)
    more = Finalist("0 without malloc without amp", run.knobs, 2, 100.0, [146.3] * 3, result=run)
    later = Confirmation([100.0] * 3, [replace(undone), more], planned_rounds=3, cut=True)  # stored by an older rule
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation, "trim": [first, later]})
    summary = summarise(results)
    assert summary.recommended.label == "0" and summary.no_difference == {}
    assert summary.trim == [first] and summary.trim_open is None, "the trim ended at its first race"
    markdown = write_reports(results, summary, tmp_path)["report.md"].read_text()
    assert (
        "nothing is undone. Its rounds of trial 0 against the baseline prove the recommendation (its gain counts them)."
        in markdown
    )


def test_a_tie_left_where_the_trims_next_race_cannot_undo_it_is_kept_not_promised_to_a_next_race():
    reference = Finalist("7", {}, 2, 100.0, [150.0, 151.0, 149.0])
    one = Finalist("7 without a", {}, 1, 100.0, [150.0, 150.0, 150.0])
    other = Finalist("7 without b", {}, 1, 110.0, [149.0, 151.0, 150.0])
    race = Confirmation([100.0] * 3, [reference, one, other], planned_rounds=3)
    assert race.winner is one and one.changes == 1, "a configuration of one change: the trim races it no further"
    assert _trim_outcome(race, one) == (
        "Kept, as trial 7 without a, which changes only it, beat the baseline (undoing it tied with trial 7): b "
        "(1.00x, slower in 1 of 3 rounds). Left out, as fast without: a."
    )


def test_keeping_the_baseline_after_a_stale_race_names_the_trial_it_did_not_prove():
    lucky = trial("0", 115.0, batch_size=64)
    dropped = Finalist("0", lucky.result.knobs, 1, 100.0, [100.0], "slower than the baseline in round 1")
    results = replace(results_with(lucky, trial("1", 102.0, amp="bf16")), confirmation=Confirmation([100.0], [dropped]))
    text = headline(summarise(results)).rest
    assert "within 3% of the baseline" in text and "1.15x" not in text.split("A race re-measured")[0], text
    assert "A race re-measured trial 0 (1.15x in one run) and did not prove it; that race did not end" in text


def test_a_trim_race_without_a_winner_keeps_its_reference_and_says_so(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])])
    reference = Finalist("0", {}, 2, 100.0, [], "its run failed in round 1")  # no round lost: its proof stands
    variant = Finalist("0 without amp", {}, 1, 100.0, [98.0], "slower than the baseline in round 1")
    trim = [Confirmation([100.0], [reference, variant])]
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation, "trim": trim})
    markdown = write_reports(results, summarise(results), tmp_path)["report.md"].read_text()
    section = markdown.split("## Only the changes that matter")[1].split("\n## ")[0]
    assert "so trial 0, with every change, is kept" in section and "the baseline is kept" not in section


def test_before_and_after_leaves_out_the_rows_read_for_neither_configuration():
    results = sample_results()
    on_cpu = markdown_of(results)
    assert "| achieved GFLOP/s |" in on_cpu
    assert "GPU utilisation" not in on_cpu and "CUDA peak allocated" not in on_cpu, "a CPU reads neither"

    measurement = results.baseline.result.measurement
    busy_gpu = replace(measurement, system=replace(measurement.system, gpu_utilization_percent=87.0))
    baseline = replace(results.baseline, result=replace(results.baseline.result, measurement=busy_gpu))
    assert "| GPU utilisation (%) | 87.0 |  |" in markdown_of(replace(results, baseline=baseline))


def markdown_of(results: StudyResults) -> str:
    return render_markdown(results, summarise(results))


def test_probe_pareto_and_training_sections(tmp_path):
    results = sample_results()
    probe = ProbeRecord(12.5, baseline_loader_sps=80.0, baseline_compute_sps=300.0)
    results = replace(
        results,
        trials=[replace(results.trials[0], predicted_sps=130.0), *results.trials[1:]],
        probe=probe,
        objectives=["throughput", "peak_memory"],
        optimizer={"_target_": "torch.optim.SGD", "lr": 0.1},
    )
    files = write_reports(results, summarise(results), tmp_path)
    markdown = files["report.md"].read_text()
    assert "## Where the time goes (differential probe)" in markdown
    assert "DataLoader alone delivered 80.0 samples/s" in markdown and "the DataLoader is the slower half" in markdown
    assert "| 0 | num_workers=1 | 130.0 | 120.0 |" in markdown, "predicted beside measured"
    assert "| 1 |" in markdown and "| none (an untimed knob) |" in markdown, "a trial not predicted says why"
    assert "## Pareto front: throughput against peak memory" in markdown
    assert "## Training" in markdown and "Batch size unchanged" in markdown
    data = json.loads(files["report.json"].read_text())
    assert data["pareto_front"] == ["0"] and data["training"]["accumulation_steps"] == 1
    recommended = yaml.safe_load(files["recommended.yaml"].read_text())
    assert recommended["training"]["gradient_accumulation_steps"] == 1


def test_a_batch_change_carries_a_learning_rate_suggestion_into_recommended_yaml(tmp_path):
    results = replace(
        results_with(trial("0", 200.0, batch_size=64)), machine=MACHINE, measure=MEASURE, optimizer={"lr": 0.01}
    )
    files = write_reports(results, summarise(results), tmp_path)
    training = yaml.safe_load(files["recommended.yaml"].read_text())["training"]
    assert training["learning_rate"] == {"rule": "linear", "baseline": 0.01, "suggested": 0.04}
    assert "linear scaling rule (assumed: autotune does not know the optimizer)" in training["note"]


def test_every_row_says_the_gradient_accumulation_steps_it_trains_with(tmp_path):
    micro = results_with(trial("0", 200.0, batch_size=4), trial("1", 150.0, batch_size=8))
    micro = replace(micro, machine=MACHINE, measure=MEASURE)
    files = write_reports(micro, summarise(micro), tmp_path / "free")
    rows = list(csv.DictReader(io.StringIO(files["trials.csv"].read_text())))
    assert {r["gradient_accumulation_steps"] for r in rows} == {"1"}, "batch_policy=free: every batch is a step"
    assert "gradient accumulation steps" not in files["report.md"].read_text()
    results = replace(micro, batch_policy="fixed_effective")
    files = write_reports(results, summarise(results), tmp_path / "fixed")
    rows = list(csv.DictReader(io.StringIO(files["trials.csv"].read_text())))
    steps = {r["batch_size"]: r["gradient_accumulation_steps"] for r in rows}
    assert steps == {"4": "4", "8": "2", "16": "1"}, "the baseline's batch of 16 in micro-batches"
    assert "| gradient accumulation steps | 1 | 4 |" in files["report.md"].read_text()
    report = json.loads(files["report.json"].read_text())
    assert [t["gradient_accumulation_steps"] for t in report["trials"]] == [4, 2, 1]


def with_timing(record, **changes):
    """``record`` with its measurement's timing fields changed."""
    m = record.result.measurement
    return replace(record, result=replace(record.result, measurement=replace(m, timing=replace(m.timing, **changes))))


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_an_interval_the_window_cannot_bound_is_written_as_null_and_said_in_words(tmp_path):
    base = sample_results()
    short = with_timing(trial("3", 150.0, batch_size=64), throughput_ci95_low=140.0, throughput_ci95_high=None)
    baseline = with_timing(base.baseline, throughput_ci95_low=None, throughput_ci95_high=None)
    results = StudyResults(**{**base.__dict__, "baseline": baseline, "trials": [*base.trials, short]})
    files = write_reports(results, summarise(results), tmp_path)
    report = strict_json(files["report.json"].read_text())
    row = next(t for t in report["trials"] if t["trial"] == "3")
    assert row["throughput_ci95_low"] == 140.0 and row["throughput_ci95_high"] is None
    markdown = files["report.md"].read_text()
    assert "| window too short to tell | 140.0 – no upper bound |" in markdown


def test_before_and_after_shows_the_throughputs_the_headline_states(tmp_path):
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", {}, 1, 100.0, [110.0, 112.0, 111.0])])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    markdown = write_reports(results, summarise(results), tmp_path)["report.md"].read_text()
    assert "(111.0 vs 100.0 samples/s by medians, confirmed by interleaved re-measurement)" in markdown
    assert "| throughput (samples/s) | 100.0 | 111.0 |" in markdown, "the medians, not the single runs (100, 120)"
    single_run = "| a single run (samples/s, 95% CI within that run: runs vary more) | 100.0 (98.0 – 102.0) |"
    assert single_run + " 120.0 (117.6 – 122.4) |" in markdown, (
        "the interval beside the run it belongs to, not beside the race's median, and said to be that run's own"
    )
    assert "Throughput: medians of 3 interleaved re-measurements" in markdown
    assert "| prefetch_factor | default |" in markdown, "an unset knob as the headline says it, not a blank cell"
    assert re.search(r"\| data wait \| \d+% \| \d+% \|", markdown), "a share in per cent, as the console says it"


def test_the_headline_says_default_for_a_knob_the_baseline_leaves_unset():
    rest = headline(summarise(results_with(trial("0", 150.0, num_threads=1, channels_last=True)))).rest
    assert "by changing num_threads default → 1, channels_last False → True." in rest, rest


def test_keeping_the_baseline_says_why_in_each_case():
    def why(*trials):
        return headline(summarise(results_with(*trials))).rest

    assert why() == "No configuration other than the baseline (100.0 samples/s) was measured."
    assert (
        why(failed("1"))
        == "No configuration other than the baseline (100.0 samples/s) was measured to the end (see below)."
    )
    assert (
        why(trial("0", 90.0, num_workers=1)) == "No configuration measured faster than the baseline (100.0 samples/s)."
    )
    assert why(trial("0", 103.0, num_workers=1)) == (
        "The fastest configuration measured (103.0 samples/s) is within 3% of the baseline (100.0 samples/s): "
        "a tie within noise, which is no reason to change anything."
    )
    over_budget = TrialRecord(
        "4",
        replace(
            trial("4", 150.0, batch_size=64).result,
            failure=Failure(FailureKind.OUT_OF_MEMORY, "over study.memory_budget_mb"),
        ),
    )
    assert why(trial("0", 90.0, num_workers=1), over_budget).endswith(
        "1 faster configuration could not be recommended: infeasible or stopped (below)."
    )
    assert why(over_budget) == (
        "No configuration other than the baseline (100.0 samples/s) was measured to the end and feasible (see "
        "below). 1 faster configuration could not be recommended: infeasible or stopped (below)."
    )


def test_keeping_the_baseline_because_the_race_failed_says_so():
    failed_race = Confirmation([], [Finalist("0", {}, 1, 100.0)], failure="confirm-1-baseline: timeout after 300 s")
    results = StudyResults(**{**sample_results().__dict__, "confirmation": failed_race})
    summary = summarise(results)
    assert summary.is_baseline
    assert headline(summary).rest == (
        "The fastest trials could not be re-measured against the baseline (confirm-1-baseline: timeout after "
        "300 s), so none is recommended."
    )


def test_the_machine_section_names_the_thread_variables_the_trials_ran_under():
    machine = {**describe_machine(), "torch_threads": 1, "thread_env": {"OMP_NUM_THREADS": "1"}}
    assert any(line.endswith("1 torch threads (by OMP_NUM_THREADS=1)") for line in machine_lines(machine, "cpu"))
    assert any(line.endswith("1 torch threads") for line in machine_lines({**machine, "thread_env": {}}, "cpu"))


def test_a_run_stopped_after_its_baseline_alone_has_no_recommendation_yet_not_a_verdict():
    stopped = replace(results_with(), tuner_time=TunerTime([RunTime(0.0, 30.0, {"baseline": 9.0}, {}, finished=False)]))
    line = headline(summarise(stopped))
    assert line.lead == "No recommendation yet." and "run the same command again to resume" in line.rest
    finished = replace(stopped, tuner_time=TunerTime([RunTime(0.0, 30.0, {}, {}, finished=True)]))
    assert headline(summarise(finished)).lead == "Keep your current settings.", "n_trials=0: the baseline is all"


def test_a_search_the_budget_cut_short_with_nothing_faster_yet_says_what_it_left_out():
    cut = RunTime(0.0, 30.0, {}, {}, True, 30.0, ["search trials 3 to 8 (~40 s needed, 9 s left)", "the profiles (x)"])
    results = replace(results_with(trial("0", 90.0, batch_size=32)), tuner_time=TunerTime([cut]))
    line = headline(summarise(results))
    assert line.lead == "Keep your current settings." and line.rest.endswith(
        "study.budget_s left out search trials 3 to 8 (~40 s needed, 9 s left): a larger budget may find a faster one."
    ), line.rest
    whole = replace(results, tuner_time=TunerTime([replace(cut, left_out=["the profiles (x)"])]))
    assert "study.budget_s" not in headline(summarise(whole)).rest, "the search ran to its end"


def test_a_run_stopped_before_its_race_says_its_recommendation_is_not_raced_yet():
    stopped = replace(
        results_with(trial("0", 200.0, num_workers=1), baseline_throughput=100.0),
        tuner_time=TunerTime([RunTime(0.0, 30.0, {"search": 9.0}, {}, finished=False)]),
    )
    line = headline(summarise(stopped))
    assert line.lead.startswith("Recommended (trial 0)") and "single runs" in line.rest
    assert "No race has proven it against the baseline yet" in line.rest
    finished = replace(stopped, tuner_time=TunerTime([RunTime(0.0, 30.0, {}, {}, finished=True)]))
    assert "No race has proven" not in headline(summarise(finished)).rest, "confirm_rounds=0 ran to its end"
    in_race = replace(stopped, tuner_time=TunerTime([RunTime(0.0, 30.0, {"race": 9.0}, {}, finished=False)]))
    assert "No race has proven it against the baseline yet" in headline(summarise(in_race)).rest
    profiles = {"race": 0.0, "trim": 0.0, "profiles": 9.0}  # confirm_rounds=0: no race to run again
    after = replace(stopped, tuner_time=TunerTime([RunTime(0.0, 30.0, profiles, {}, finished=False)]))
    assert "No race has proven" not in headline(summarise(after)).rest, "stopped after its race ended"


def test_a_run_that_left_the_studys_end_to_another_tuner_leaves_the_race_to_that_tuners_run():
    """A tuner past its budget leaves the race to another of its machine (``LEFT_TO_OTHERS_STEP``), which may have
    started before it: the race is undecided while that one has not ended it, and that one's verdict stands after."""
    left = RunTime(50.0, 30.0, {"search": 9.0}, {}, True, 30.0, [LEFT_TO_OTHERS_STEP])
    searching = RunTime(0.0, 20.0, {"search": 9.0}, {}, finished=False)
    ended = RunTime(0.0, 90.0, {"search": 9.0, "race": 9.0, "trim": 9.0}, {}, True, 200.0, ["trim round 2 (~9 s…)"])
    base = results_with(trial("0", 200.0, num_workers=1), baseline_throughput=100.0)
    alone = summarise(replace(base, tuner_time=TunerTime([left])))
    assert alone.stopped_before_race_end and "No race has proven" in headline(alone).rest
    assert summarise(replace(base, tuner_time=TunerTime([searching, left]))).stopped_before_race_end
    assert not summarise(replace(base, tuner_time=TunerTime([ended, left]))).stopped_before_race_end


def test_the_ranked_table_marks_the_recommendation_and_says_the_race_chose_it_not_the_rank(tmp_path):
    """Trial 3's single run ranks below trial 0's, but the race proved trial 3 alone: the row the user looks for is
    marked, and the table says its rank is not what chose it."""
    base = results_with(trial("0", 130.0, num_workers=1), trial("3", 120.0, batch_size=32))
    finalists = [
        Finalist("3", {}, 1, 100.0, [121.0, 119.0, 122.0]),
        Finalist("0", {}, 1, 100.0, [101.0], dropped="its median fell 10 % behind the leader's"),
    ]
    confirmation = Confirmation([100.0, 98.0, 102.0], finalists, trials=["0", "3"])
    results = StudyResults(**{**base.__dict__, "machine": MACHINE, "measure": MEASURE, "confirmation": confirmation})
    summary = summarise(results)
    assert [r.label for r in summary.ranked][:2] == ["3", "0"] and summary.recommended.label == "3"
    report = write_reports(results, summary, tmp_path)["report.md"].read_text()
    ranked = report.split("## All configurations, ranked")[1].split("\n## ")[0]
    assert "| 1 | 3 (recommended) |" in ranked and "(recommended)" not in ranked.replace("3 (recommended)", "")
    assert "Ranked first the configurations a race measured, the recommendation first" in ranked
    out = io.StringIO()
    print_summary(summary, {}, "done", out)  # the terminal's table alike
    assert re.search(r"^ +1 +3 \(recommended\) ", out.getvalue(), re.M) and out.getvalue().count("(recommended)") == 1
    assert "(busy)" not in report + out.getvalue(), "no run was slowed"


def test_the_ranked_table_marks_a_configuration_other_processes_slowed_and_says_what_that_means(tmp_path):
    slowed = trial("0", 130.0, num_workers=1)
    busy = SystemReport(100.0, [100.0, 100.0], 1.0)  # both cores busy, the run's tree on one of them
    slowed = TrialRecord("0", replace(slowed.result, measurement=replace(slowed.result.measurement, system=busy)))
    assert slowed.result.measurement.system.disturbed
    results = replace(results_with(slowed, trial("3", 120.0, batch_size=32)), machine=MACHINE, measure=MEASURE)
    summary = summarise(results)
    report = write_reports(results, summary, tmp_path)["report.md"].read_text()
    ranked = report.split("## All configurations, ranked")[1].split("\n## ")[0]
    assert "| 1 | 0 (recommended) (busy) |" in ranked and "| 2 | 3 |" in ranked
    assert "(busy): something slowed the configuration's own run (other processes on its cores or its GPU" in ranked
    out = io.StringIO()
    print_summary(summary, {}, "done", out)
    assert (
        re.search(r"^ +1 +0 \(recommended\) \(busy\) ", out.getvalue(), re.M)
        and "so that run may read low" in out.getvalue()
    )


def test_a_winner_that_lost_a_trim_round_to_the_baseline_in_more_rounds_than_it_won_is_not_recommended():
    # Its two rounds of the trim's race, one lost, outweigh the one round of the race it won: the baseline is kept
    # until a later run races the trim again.
    winner = trial("0", 200.0, batch_size=32, num_threads=1)
    knobs = winner.result.knobs
    decided = Confirmation([100.0], [Finalist("0", knobs, 2, 100.0, [200.0])], None, 3)  # one round decided it
    lost = Finalist("0", knobs, 2, 100.0, [150.0, 95.0], "slower than the baseline in round 2")
    variant = Finalist("0 without num_threads", knobs, 1, 90.0, [120.0, 90.0])
    trim = Confirmation([100.0, 100.0], [lost, variant], None, 3)
    line = headline(summarise(replace(results_with(winner), confirmation=decided, trim=[trim])))
    assert line.lead == "Keep your current settings."
    assert (
        "trim race 1 re-measured it against the baseline in more (2 rounds, 1.23x by medians) and did not prove "
        "it: it left the race (slower than the baseline in round 2)." in line.rest
    )
    assert "That race did not end: the same command again goes on with it." in line.rest


def test_a_gain_whose_interval_spans_one_says_what_more_rounds_would_come_from():
    confirmation = Confirmation([100.0, 100.0], [Finalist("0", {}, 1, 100.0, [150.0, 101.0])])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    text = headline(summarise(results)).lead
    assert (
        "over 2 paired rounds (it spans 1x: the recommendation ran faster in 2 of them (1.50x and 1.01x), and two "
        "rounds are too few to bound the gain; more study.confirm_rounds would tell)" in text
    ), text
    ended_early = replace(confirmation, planned_rounds=3)
    text = headline(summarise(StudyResults(**{**results.__dict__, "confirmation": ended_early}))).lead
    assert (
        "two rounds are too few to bound the gain; the race ended early on its verdict; mode=benchmark measures the "
        "gain over more rounds)" in text
    ), "more planned rounds would end there too"


def test_a_gain_of_rounds_far_apart_says_so_and_one_of_a_cut_race_says_it_was_cut():
    spread = Confirmation([100.0] * 3, [Finalist("0", {}, 1, 100.0, [160.0, 103.0, 104.0])])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": spread})
    text = headline(summarise(results)).lead
    assert (
        "over 3 paired rounds (it spans 1x: the recommendation ran faster in 3 of them, by amounts too far apart to "
        "bound the gain; more study.confirm_rounds would tell)" in text
    ), text
    # Two rounds decided it (both clear of the baseline), and study.budget_s or a stop cut the third.
    cut = Confirmation(
        [100.0, 100.0], [Finalist("0", {}, 1, 100.0, [166.0, 186.0])], None, 3, cut=True, decided_after=2
    )
    text = headline(summarise(StudyResults(**{**results.__dict__, "confirmation": cut}))).lead
    assert (
        "(it spans 1x: the recommendation ran faster in 2 of them (1.66x and 1.86x), and two rounds are too few to "
        "bound the gain; the race was cut after 2 of its 3 rounds (study.budget_s, or the run stopped))" in text
    ), text


def test_a_gpu_studys_peak_memory_is_named_the_gpus_and_the_method_states_the_screening_window(tmp_path):
    results = sample_results()
    base = results.baseline
    on_gpu = replace(base, result=replace(base.result, measurement=replace(base.result.measurement, device="cuda")))
    gpu_results = replace(
        results,
        device="cuda",
        baseline=on_gpu,
        measure={**MEASURE, "screen": {**MEASURE, "min_steps": 10, "min_time_s": 1.5}},
    )
    markdown = write_reports(gpu_results, summarise(gpu_results), tmp_path)["report.md"].read_text()
    assert "Peak GPU memory" in markdown and "Peak memory is the GPU's" in markdown
    assert "screening one: at least 10 steps and 1.5 s" in markdown
    cpu = write_reports(results, summarise(results), tmp_path / "cpu")["report.md"].read_text()
    assert "Peak GPU memory" not in cpu and "Peak memory is the GPU's" not in cpu


def test_the_method_says_how_many_windows_ended_on_whole_epochs_where_any_did(tmp_path):
    results = sample_results()
    trial = results.trials[0]
    measurement = trial.result.measurement
    whole = replace(measurement, timing=replace(measurement.timing, epochs=2))
    first = replace(trial, result=replace(trial.result, measurement=whole))
    epochs = replace(results, trials=[first, *results.trials[1:]])
    markdown = write_reports(epochs, summarise(epochs), tmp_path)["report.md"].read_text()
    measured = sum(r.result.timing is not None for r in [results.baseline, *results.trials])
    assert f"1 of the {measured} windows of the baseline and the search ended on whole epochs" in markdown
    plain = write_reports(results, summarise(results), tmp_path / "none")["report.md"].read_text()
    assert "whole epochs" not in plain, "a study none of whose windows did (one stored before the rule) says nothing"


@pytest.mark.parametrize(
    ("value", "cell"), [(2.076, "2.08"), (0.0, "0"), (13.24, "13.2"), (757.49, "757.5"), (0.2471, "0.247"), (None, "")]
)
def test_a_table_cell_gives_a_number_to_about_three_significant_digits_and_samples_per_second_to_a_tenth(value, cell):
    assert format_cell(value) == cell


def test_shares_of_a_whole_add_up_to_it_in_the_report_and_on_the_terminal():
    assert percents({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}) == {"a": 34, "b": 33, "c": 33}, "not 33 + 33 + 33 = 99"
    thirds = TunerTime([RunTime(0.0, 30.0, {"baseline": 10.0, "search": 10.0}, {}, finished=True)])  # and outside
    results = replace(sample_results(), tuner_time=thirds)
    (section,) = [s for s in build_document(results, summarise(results)).sections if s.heading.startswith("Where the")]
    stages = {row[0]: row[2] for row in section.table.rows}
    assert stages == {"baseline": "34%", "search": "33%", "outside the stages": "33%", "all": "100%"}
    line = tuner_time_line(thirds)
    assert line.endswith("by stage: baseline 34 %, search 33 %, outside the stages 33 %"), line
    sliver = TunerTime([RunTime(0.0, 100.0, {"baseline": 49.7, "search": 49.7, "race": 0.6}, {}, finished=True)])
    assert tuner_time_line(sliver).endswith("by stage: baseline 50 %, search 50 %"), "no stage said to be 0 %"


def test_the_method_says_which_figures_are_single_runs_and_which_medians_of_rounds():
    confirmation = Confirmation([100.0] * 3, [Finalist("0", {}, 1, 100.0, [120.0] * 3)])
    raced = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    (method,) = [s for s in build_document(raced, summarise(raced)).sections if s.heading == "How it was measured"]
    assert method.paragraphs[0].endswith(
        "Each figure of a trial's own run (the tables of trials; the ranking's search runs) is one measurement: "
        "differences of a few percent can be run-to-run noise. The races' figures and the headline's throughputs are "
        "medians of their "
        "interleaved rounds, its gain the geometric mean of the rounds' paired ratios."
    )
    plain = sample_results()
    (unraced,) = [s for s in build_document(plain, summarise(plain)).sections if s.heading == "How it was measured"]
    assert "run-to-run noise." in unraced.paragraphs[0] and "races' figures" not in unraced.paragraphs[0]


def test_the_before_after_table_marks_an_option_that_comes_with_another_change():
    workers = trial("0", 120.0, num_workers=1, prefetch_factor=2, persistent_workers=False)
    results = StudyResults(**{**results_with(workers).__dict__, "machine": MACHINE, "measure": MEASURE})
    rows = {row[0]: row[1:] for row in before_after_table(summarise(results)).rows}
    assert rows["num_workers"] == ["0", "1"], "a change of its own"
    assert rows["prefetch_factor"][1] == "2 (comes with another change)"
    assert rows["persistent_workers"][1] == "False (comes with another change)"
    assert rows["amp"][1] == rows["amp"][0], "unchanged"
