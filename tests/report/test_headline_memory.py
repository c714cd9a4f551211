"""A race keeps each run's peak memory beside its throughput, and the headline's peak memories are the medians of the
race that gave the gain, as its throughputs are; a race stored before races kept them falls back to single runs."""

from __future__ import annotations

import json
from dataclasses import replace

from autotune.report.headline import before_after_table, headline
from autotune.report.json_report import report_data
from autotune.report.recommended import recommendation
from autotune.results.finalist import Finalist, median_memory
from autotune.results.model import StudyResults, load_results
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.study.run_race import race
from autotune.study.trim import run_trim
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import fake_measurement
from tests.report.test_reports import sample_results
from tests.study.test_trim import Pipeline, tuned

BASELINE_RUNS, WINNER_RUNS = [100.0, 96.0, 104.0], [118.0, 121.0, 119.0]


def proving_race(winner_memories: list[float | None], baseline_memories: list[float | None]) -> Confirmation:
    """A race of three rounds proving trial 0 of ``sample_results`` (whose own runs read 100 MiB each)."""
    winner = Finalist("0", {}, 1, 100.0, list(WINNER_RUNS), peak_memories=winner_memories)
    return Confirmation(list(BASELINE_RUNS), [winner], baseline_peak_memories=baseline_memories)


def headline_with(confirmation: Confirmation) -> str:
    results = StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})
    return headline(summarise(results)).rest


def test_a_race_with_its_runs_peak_memories_round_trips():
    confirmation = proving_race([310.0, None, 350.0], [250.0, 270.0, 260.0])
    again = Confirmation.from_dict(json.loads(json.dumps(confirmation.to_dict())))
    assert again == confirmation
    assert again.finalists[0].peak_memories == [310.0, None, 350.0]
    assert again.baseline_peak_memories == [250.0, 270.0, 260.0]


def test_a_race_stored_before_peak_memories_were_kept_reads_none_for_each_run():
    stored = proving_race([310.0, 290.0, 350.0], [250.0, 270.0, 260.0]).to_dict()
    del stored["baseline_peak_memories"], stored["finalists"][0]["peak_memories"]
    old = Confirmation.from_dict(stored)
    assert old.baseline_peak_memories == [None] * 3 and old.finalists[0].peak_memories == [None] * 3
    assert median_memory(old.baseline_peak_memories) is None and median_memory(old.finalists[0].peak_memories) is None


def test_the_headlines_peak_memories_are_the_medians_of_the_race_that_gave_the_gain():
    said = headline_with(proving_race([310.0, 290.0, 350.0], [250.0, 270.0, 260.0]))
    assert "Peak memory 260 → 310 MiB (medians of 3 race runs each)." in said, said


def test_the_headline_takes_its_peak_memories_from_the_proof_not_the_shorter_finalists_race():
    summary = summarise(sample_results())
    knobs = summary.recommended.result.knobs
    finalists_race = Confirmation(
        [100.0, 98.0],
        [Finalist("0", knobs, 1, 100.0, [118.0, 121.0], peak_memories=[900.0] * 2)],
        baseline_peak_memories=[800.0] * 2,
    )
    trim_race = Confirmation(
        list(BASELINE_RUNS),
        [Finalist("0", knobs, 1, 100.0, list(WINNER_RUNS), peak_memories=[300.0] * 3)],
        planned_rounds=3,
        baseline_peak_memories=[200.0] * 3,
    )
    summary = replace(summary, confirmation=finalists_race, trim=[trim_race])
    assert summary.proof is trim_race
    assert "Peak memory 200 → 300 MiB (medians of 3 race runs each)." in headline(summary).rest


def test_a_race_stored_before_peak_memories_were_kept_falls_back_to_one_run_of_each():
    stored = proving_race([310.0, 290.0, 350.0], [250.0, 270.0, 260.0]).to_dict()
    del stored["baseline_peak_memories"], stored["finalists"][0]["peak_memories"]
    said = headline_with(Confirmation.from_dict(stored))
    assert "Peak memory 100 → 100 MiB (one run of each)." in said, said


def test_a_race_keeps_each_runs_peak_memory_beside_its_throughput_and_takes_back_a_round_the_budget_ended():
    memory = {"confirm-1-baseline": 250.0, "confirm-1-trial-0": 310.0, "confirm-2-trial-0": 290.0}

    def run(knobs, name, on_progress=None):
        if name == "confirm-2-baseline":  # run after the finalist's in round 2 (the order rotates), and budget-ended
            return TrialResult(knobs=knobs, failure=Failure(FailureKind.TIMEOUT, "budget", budget_cut=True))
        throughput = 100.0 if name.endswith("baseline") else 120.0
        return TrialResult(knobs=knobs, measurement=fake_measurement(throughput, peak_mb=memory[name]))

    finalist = Finalist("0", {"num_workers": 1}, 1, 100.0)
    raced = race([finalist], {"num_workers": 0}, {}, 5, "confirm", run, lambda name, result: None)
    assert raced.cut and raced.rounds == 1
    assert raced.baseline_peak_memories == [250.0]
    assert raced.finalists[0].throughputs == [120.0] and raced.finalists[0].peak_memories == [310.0]


class RaceMemory(Pipeline):
    """``Pipeline``'s throughputs, with a peak memory of 100 MiB at batch 16 and 200 MiB at batch 64, and 50 MiB more in
    a race's runs (named confirm-… or trim-…) than in the search's."""

    def __call__(self, knobs, name, on_progress=None):
        result = super().__call__(knobs, name, on_progress)
        peak = (200.0 if knobs["batch_size"] == 64 else 100.0) + (50.0 if name.startswith(("confirm", "trim")) else 0)
        return replace(result, measurement=fake_measurement(result.timing.throughput, peak_mb=peak))


def test_the_trims_races_store_each_runs_peak_memory_and_the_headline_reads_the_one_that_proved_it(tmp_path):
    study, confirmation, _ = tuned(tmp_path)
    pipeline = RaceMemory()
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    stored = load_results(study)
    assert stored.trim, "the trim raced"
    for trim_race in stored.trim:
        assert trim_race.baseline_peak_memories == [150.0] * trim_race.rounds
        for finalist in trim_race.finalists:
            expected = 250.0 if finalist.knobs["batch_size"] == 64 else 150.0
            assert finalist.peak_memories == [expected] * len(finalist.throughputs)
    summary = summarise(stored)
    assert summary.proof is stored.trim[-1]
    rounds = len(summary.proof.winner.throughputs)
    assert f"Peak memory 150 → 250 MiB (medians of {rounds} race runs each)." in headline(summary).rest


def test_report_json_and_recommended_yaml_give_the_headlines_peak_memories():
    results = StudyResults(
        **{**sample_results().__dict__, "confirmation": proving_race([310.0, 290.0, 350.0], [250.0, 270.0, 260.0])}
    )
    summary = summarise(results)
    data = report_data(results, summary)
    assert data["recommended"]["peak_memory_mb"] == 310.0 and data["baseline"]["peak_memory_mb"] == 260.0
    assert data["memory_change"] == 310.0 / 260.0
    measured = recommendation(results, summary).measured
    assert (measured.peak_memory_mb, measured.baseline_peak_memory_mb) == (310.0, 260.0)


def test_the_before_after_tables_peak_memory_is_the_headlines_and_says_so():
    results = StudyResults(
        **{**sample_results().__dict__, "confirmation": proving_race([310.0, 290.0, 350.0], [250.0, 270.0, 260.0])}
    )
    rows = {row[0]: row[1:] for row in before_after_table(summarise(results)).rows}
    assert rows["peak memory (MiB; the GPU's on CUDA) (medians of 3 race runs each)"] == ["260.0", "310.0"]
    old = proving_race([None] * 3, [None] * 3)  # a race stored before races kept them: each one's own run
    rows = {row[0]: row[1:] for row in before_after_table(summarise(replace(results, confirmation=old))).rows}
    assert rows["peak memory (MiB; the GPU's on CUDA)"] == ["100.0", "100.0"]
