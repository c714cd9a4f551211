"""The terminal's lines: one per run as it finishes, and the summary."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest

from autotune import app
from autotune.config.load import load_settings
from autotune.measure.core_speed import CoreSpeed
from autotune.measure.measurement import SystemReport
from autotune.records import ProbeRecord, TrialRecord
from autotune.report import write_reports
from autotune.report.console import format_not_measured, format_probe, format_result, print_summary
from autotune.results.advice import batch_advice
from autotune.results.finalist import round_of, run_name
from autotune.results.model import StudyResults
from autotune.results.summary import summarise
from autotune.trial.result import ProbeFailure, ProbePlan, ProbeResult
from tests.conftest import NEUTRAL_KNOBS, tiny_config
from tests.report.test_reports import sample_results
from tests.results.test_summary import results_with, trial


def test_a_run_says_its_multiple_of_the_baseline_but_the_baseline_run_again_does_not():
    results = sample_results()
    baseline = results.baseline.result
    faster = results.trials[0].result
    assert "120.0 samples/s (1.20x)" in format_result(faster, baseline)
    again = format_result(baseline, baseline)
    assert again.startswith("the baseline's settings -> 100.0 samples/s,") and "x)" not in again


def test_a_configuration_ruled_out_says_what_it_changes_and_why_it_was_not_measured():
    baseline = sample_results().baseline.result
    line = format_not_measured({**baseline.knobs, "batch_size": 128}, baseline, "it needs no less memory than trial 2")
    assert line == "batch_size=128 -> not measured: it needs no less memory than trial 2"


def test_the_summary_names_the_state_of_an_unranked_row_in_place_of_its_rank():
    results = sample_results()
    out = io.StringIO()
    print_summary(summarise(results), {}, "done", out)
    table = out.getvalue()
    assert "<NA>" not in table
    failed_row = next(line for line in table.splitlines() if line.split()[1:2] == ["1"])
    assert failed_row.split()[0] == "failed"
    assert "Ranked by each configuration's own run" in table, "its speedup column is a single run's, said so"


def test_the_summary_shows_a_knob_that_varies_between_unset_and_a_value():
    results = results_with(trial("0", 120.0, num_threads=1), trial("1", 110.0))
    out = io.StringIO()
    print_summary(summarise(results), {}, "done", out)
    header = out.getvalue().splitlines()[2].split()
    assert "num_threads" in header and "batch_size" not in header, "None against 1 is a difference; 16 twice is none"


def busy(record: TrialRecord) -> TrialRecord:
    """``record`` as if other processes had used 0.8 of the machine's 2 cores during its window."""
    measurement = replace(record.result.measurement, system=SystemReport(100.0, [100.0, 100.0], 1.2))
    return TrialRecord(record.label, replace(record.result, measurement=measurement))


def test_a_run_slowed_by_other_processes_says_so_on_the_terminal_and_in_the_report(tmp_path):
    results = sample_results()
    disturbed = busy(results.trials[0])
    assert "other processes busy (0.8 cores): may read low" in format_result(disturbed.result)
    assert "other processes" not in format_result(results.trials[2].result)
    busy_study = StudyResults(**{**results.__dict__, "trials": [disturbed, *results.trials[1:]]})
    markdown = write_reports(busy_study, summarise(busy_study), tmp_path)["report.md"].read_text()
    assert "## Measured on a busy machine" in markdown
    assert "1 of the 3 measured configurations was measured while other processes competed for its cores" in markdown
    assert ": trial 0: other processes busy (0.8 cores)." in markdown
    quiet = write_reports(results, summarise(results), tmp_path / "quiet")["report.md"].read_text()
    assert "busy machine" not in quiet


def test_many_runs_slowed_by_other_processes_are_counted_and_marked_in_the_ranking_not_each_named(tmp_path):
    records = [busy(trial(str(i), 100.0 + i, batch_size=2**i)) for i in range(6)]
    busy_study = StudyResults(**{**sample_results().__dict__, "trials": records})
    markdown = write_reports(busy_study, summarise(busy_study), tmp_path)["report.md"].read_text()
    assert ("6 of the 7 measured configurations were measured while other processes competed for its cores") in markdown
    assert ": other processes busy (0.8 cores) in 6 of them, each marked (busy) in the ranking." in markdown
    assert "trial 3: other processes" not in markdown


def test_a_run_around_which_the_cores_ran_slow_says_so_on_the_terminal_and_in_the_report(tmp_path):
    results = sample_results()
    record = results.trials[0]
    read = lambda slowest: CoreSpeed([0, 1], [7.0, slowest], [7.1, 7.0], [7.0, 7.0])  # noqa: E731
    slow = TrialRecord(record.label, replace(record.result, core_speed=read(9.8)))
    kept = TrialRecord(record.label, replace(record.result, core_speed=read(8.4)))
    assert ", the cores ran 1.4x slow: may read low (" in format_result(slow.result)
    assert "may read low" not in format_result(kept.result), "1.2x: within what a quiet host's readings vary"
    slowed = StudyResults(**{**results.__dict__, "trials": [slow, *results.trials[1:]]})
    markdown = write_reports(slowed, summarise(slowed), tmp_path)["report.md"].read_text()
    assert ": trial 0: the cores ran 1.4x slow." in markdown and " (busy) |" in markdown


def test_the_probe_line_says_how_many_of_its_settings_raised_and_the_first_error():
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}], [{"batch_size": 8}, {"batch_size": 8}])
    failed = [ProbeFailure("compute", 1, "RuntimeError: required rank 4 tensor to use channels_last format")]
    record = ProbeRecord(3.0, plan, ProbeResult([900.0], [500.0, None], [], failed), 900.0, 500.0)
    line = format_probe(record)
    assert "; 1 of its settings raised (first: RuntimeError: required rank 4 tensor" in line
    assert "raised" not in format_probe(replace(record, result=ProbeResult([900.0], [500.0, 510.0])))


def test_the_probe_line_says_how_much_one_model_step_timing_varies_where_the_probe_read_it():
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}], [{"batch_size": 8}])
    record = ProbeRecord(3.0, plan, ProbeResult([900.0], [500.0]), 900.0, 500.0)
    assert "varies" not in format_probe(record)
    line = format_probe(replace(record, timing_noise=0.1))
    assert "model step alone 500.0 samples/s; one model step timing varies by up to 22% here; trials follow" in line
    moved = format_probe(replace(record, timing_noise=0.01, timing_move=0.5))
    assert "varies by up to 2% here, the machine's speed moved by up to 50% while it ran; trials follow" in moved
    assert "moved" not in format_probe(replace(record, timing_noise=0.1, timing_move=0.2)), "within the noise"
    assert "one model step timing varies by under 1% here;" in format_probe(replace(record, timing_noise=0.001))


@pytest.mark.slow
def test_a_race_runs_speedup_is_against_its_own_rounds_baseline_run_where_that_ran_before_it(tmp_path):
    fixed = {name: [value] for name, value in NEUTRAL_KNOBS.items() if value is not None}
    config = tiny_config(
        study={"n_trials": 2, "confirm_rounds": 2, "probe": False}, search={**fixed, "batch_size": [32, 64]}
    )
    config["pipeline"]["model"] = {"_target_": "tests.fixtures.tiny.StepBoundCNN"}
    config["pipeline"]["baseline"] = {"batch_size": 2}  # slower than either trial however busy the machine: a race
    settings = load_settings(config, "tiny")
    settings = replace(settings, study=replace(settings.study, storage=f"sqlite:///{tmp_path}/study.db"))
    out = io.StringIO()
    app.run(settings, tmp_path / "tuned", out)
    runs = dict(
        re.findall(r"^\[((?:confirm|trim)-[^\]]+)\] .*?-> ([\d.]+ samples/s(?: \([\d.]+x\))?)", out.getvalue(), re.M)
    )
    console = out.getvalue()
    assert "confirm-1-baseline" in runs, console
    lines = console.splitlines()
    first = next(i for i, line in enumerate(lines) if re.match(r"\[trial .*-> [\d.]+ samples/s", line))
    foretold = [i for i, line in enumerate(lines) if line.startswith("[time] up to about ")]
    assert foretold == [first + 1], f"the rest foretold once, after the first measured trial:\n{console}"
    for name, said in runs.items():
        prefix = round_of(name)
        ratio = re.search(r"\(([\d.]+)x\)", said)
        order = list(runs)
        before = run_name(prefix, None) in order[: order.index(name)]
        assert (ratio is not None) == (before and name != run_name(prefix, None)), (name, said, console)
        if ratio:
            run, base = float(said.split()[0]), float(runs[run_name(prefix, None)].split()[0])
            own = run / base
            # Both throughputs are printed to 0.05 and the ratio to 0.005: the ratio of the printed figures may differ
            # from the printed ratio by that much.
            rounding = 0.005 + own * (0.05 / run + 0.05 / base)
            assert float(ratio.group(1)) == pytest.approx(own, rel=0, abs=rounding + 1e-9), (name, console)


def test_the_summary_marks_only_the_run_that_was_busy_not_the_clean_rows_beside_it():
    results = sample_results()
    busy_study = StudyResults(**{**results.__dict__, "trials": [busy(results.trials[0]), *results.trials[1:]]})
    out = io.StringIO()
    print_summary(summarise(busy_study), {}, "done", out)
    table = out.getvalue().split("Ranked by")[0]
    marked_rows = [line for line in table.splitlines() if "(busy)" in line]
    assert len(marked_rows) == 1 and " 0 (recommended) (busy) " in marked_rows[0], out.getvalue()


def test_the_summary_table_names_its_figures_as_the_report_does_and_says_the_data_wait_in_per_cent():
    out = io.StringIO()
    print_summary(summarise(sample_results()), {}, "done", out)
    header = next(line for line in out.getvalue().splitlines() if line.lstrip().startswith("rank"))
    assert all(title in header for title in ("samples/s", "vs baseline", "data wait", "peak MiB")), header
    assert "throughput_sps" not in out.getvalue() and re.search(r" \d+% ", out.getvalue()), out.getvalue()


def test_the_summary_says_what_a_changed_batch_size_means_for_training_after_the_headline():
    results = replace(
        results_with(trial("0", 150.0, batch_size=64)), optimizer={"_target_": "torch.optim.SGD", "lr": 0.1}
    )
    summary = summarise(results)
    out = io.StringIO()
    print_summary(summary, {}, "done", out, training=batch_advice(results, summary))
    said = out.getvalue().splitlines()
    training = next(index for index, line in enumerate(said) if line.startswith("Training: "))
    assert said[training - 1].startswith("Recommended (trial 0)"), "right after the headline"
    assert "changes from 16 to 64" in said[training] and "learning rate 0.1 → 0.4" in said[training]
    same = results_with(trial("0", 150.0, num_threads=1))
    out = io.StringIO()
    print_summary(summarise(same), {}, "done", out, training=batch_advice(same, summarise(same)))
    assert "Training: " not in out.getvalue(), "the batch size unchanged: nothing to say"
