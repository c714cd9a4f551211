"""A run that something beside it disturbed, where one run decides (the baseline, a race's rounds), is run again."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from autotune import app
from autotune.app import _RunLines
from autotune.benchmark import both_ends, measure_rounds
from autotune.config.load import load_settings
from autotune.measure.core_speed import CoreSpeed
from autotune.measure.measurement import SystemReport
from autotune.report.races import _why_left
from autotune.results.benchmark import Benchmark
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.trim_rules import alone
from autotune.runner import TrialRunner
from autotune.study.disturbed import FIRST_STANDS, again_if_disturbed
from autotune.study.run_race import race
from autotune.trial.result import Disturbance, Failure, FailureKind, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
# Both cores busy, the run's tree on one of them: other processes took a whole core.
BUSY = SystemReport(100.0, [100.0, 100.0], 1.0)


def run_of(throughput: float | None, disturbed: bool = False) -> TrialResult:
    if throughput is None:
        return TrialResult(knobs=BASELINE, failure=Failure(FailureKind.EXCEPTION, "boom"))
    measurement = fake_measurement(throughput)
    return TrialResult(knobs=BASELINE, measurement=replace(measurement, system=BUSY) if disturbed else measurement)


class Runs:
    """The result of each run by its name, and the names run, in order."""

    def __init__(self, by_name: dict[str, TrialResult]):
        self.by_name, self.names = by_name, []

    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        return replace(self.by_name[name], knobs=knobs)


def measured_by(runs: Runs) -> tuple:
    """``runs`` measured again where disturbed, and the names of the runs it was told were disturbed."""
    told = []
    return again_if_disturbed(runs, lambda name, result: told.append(name)), told


@pytest.mark.parametrize(
    ("second", "stands"),
    [
        (run_of(100.0), 100.0),
        (run_of(40.0), 40.0),
        (run_of(60.0, disturbed=True), 60.0),
        (run_of(30.0, disturbed=True), 50.0),
        (run_of(None), 50.0),
    ],
    ids=["quiet", "quiet and slower", "disturbed too", "disturbed too and slower: the first", "failed: the first"],
)
def test_a_disturbed_run_is_measured_once_more_and_the_second_stands_unless_it_was_slowed_more(second, stands):
    # A load only slows a run: of two slowed runs the faster was slowed less; a quiet second run stands however it
    # reads.
    runs = Runs({"baseline": run_of(50.0, disturbed=True), "baseline-again": second})
    measured, told = measured_by(runs)
    assert measured(BASELINE, "baseline").timing.throughput == stands
    assert runs.names == ["baseline", "baseline-again"] and told == ["baseline"]


def test_a_run_around_which_the_cores_ran_slow_is_measured_once_more_as_a_busy_one_is():
    slowed = replace(run_of(50.0), core_speed=CoreSpeed([0, 1], [9.8, 7.0], [7.0, 7.0], [7.0, 7.0]))
    runs = Runs({"baseline": slowed, "baseline-again": run_of(100.0)})
    measured, told = measured_by(runs)
    assert measured(BASELINE, "baseline").timing.throughput == 100.0 and told == ["baseline"]


def cores_slow(throughput: float) -> TrialResult:
    """A run around which the cores read 1.4x slow, nothing else beside it."""
    return replace(run_of(throughput), core_speed=CoreSpeed([0, 1], [9.8, 7.0], [7.0, 7.0], [7.0, 7.0]))


def test_the_cores_reading_alone_stops_having_runs_measured_again_once_it_foretold_no_slow_run_twice_in_a_row():
    # Each second run reads under NOT_SLOWED times its first: the flag found nothing beyond single runs' noise.
    runs = Runs({"a": cores_slow(100.0), "a-again": run_of(105.0), "b": cores_slow(100.0), "b-again": run_of(95.0)})
    runs.by_name |= {"c": cores_slow(100.0), "d": replace(run_of(100.0, disturbed=True)), "d-again": run_of(100.0)}
    notes = []
    measured = again_if_disturbed(runs, lambda name, result: None, notes.append)
    for name in "abcd":
        measured(BASELINE, name)
    assert runs.names == ["a", "a-again", "b", "b-again", "c", "d", "d-again"], "other processes still count"
    assert len(notes) == 1 and notes[0].startswith("[cores] the cores' readings foretold no slow run here")


def test_a_second_run_the_cores_reading_flags_too_is_no_evidence_against_it():
    # A slowdown lasting through both runs reads alike in both: the reading may have been right.
    runs = Runs({name: cores_slow(100.0) for name in ("a", "a-again", "b", "b-again", "c", "c-again")})
    runs.by_name |= {"q": run_of(100.0), "r": run_of(100.0)}  # quiet runs between end each lasting load
    notes = []
    measured = again_if_disturbed(runs, lambda name, result: None, notes.append)
    for name in "aqbrc":
        measured(BASELINE, name)
    assert runs.names == ["a", "a-again", "q", "b", "b-again", "r", "c", "c-again"] and notes == []


def test_a_run_measured_again_that_reads_faster_beyond_noise_keeps_the_cores_reading_heeded():
    second = {"a-again": run_of(100.0), "b-again": run_of(150.0), "c-again": run_of(100.0)}  # b's alarm was true
    runs = Runs({name: cores_slow(100.0) for name in "abcd"} | second | {"d-again": run_of(100.0)})
    notes = []
    measured = again_if_disturbed(runs, lambda name, result: None, notes.append)
    for name in "abcd":
        measured(BASELINE, name)
    assert runs.names == ["a", "a-again", "b", "b-again", "c", "c-again", "d", "d-again"]
    assert len(notes) == 1, "told after d: c and d foretold nothing, in a row"


@pytest.mark.parametrize("first", [run_of(100.0), run_of(None)], ids=["quiet", "failed"])
def test_a_quiet_run_or_a_failed_one_is_measured_once(first):
    runs = Runs({"baseline": first})
    measured, told = measured_by(runs)
    assert measured(BASELINE, "baseline") == first
    assert runs.names == ["baseline"] and told == []


def test_once_a_second_run_is_disturbed_too_the_load_is_taken_to_last_and_nothing_is_measured_again():
    busy = run_of(60.0, disturbed=True)
    runs = Runs({"a": busy, "a-again": busy, "b": busy})
    measured, told = measured_by(runs)
    measured(BASELINE, "a")
    assert measured(BASELINE, "b") == busy
    assert runs.names == ["a", "a-again", "b"] and told == ["a"]


def test_a_failed_run_does_not_end_a_lasting_load():
    busy = run_of(60.0, disturbed=True)
    runs = Runs({"a": busy, "a-again": busy, "b": run_of(None), "c": busy})
    measured, told = measured_by(runs)
    for name in "abc":
        measured(BASELINE, name)
    assert runs.names == ["a", "a-again", "b", "c"] and told == ["a"]


def test_the_load_is_taken_to_last_only_until_a_run_is_undisturbed():
    busy = run_of(60.0, disturbed=True)
    runs = Runs({"a": busy, "a-again": busy, "b": run_of(100.0), "c": busy, "c-again": run_of(100.0)})
    measured, told = measured_by(runs)
    for name in "abc":
        measured(BASELINE, name)
    assert runs.names == ["a", "a-again", "b", "c", "c-again"] and told == ["a", "c"]


def test_a_race_names_the_runs_it_counted_though_they_were_disturbed():
    finalist = Finalist("1", {**BASELINE, "batch_size": 32}, 1, 100.0)
    busy = run_of(50.0, disturbed=True)
    runs = Runs({"confirm-1-baseline": busy, "confirm-1-baseline-again": busy, "confirm-1-trial-1": run_of(130.0)})
    measured, _ = measured_by(runs)
    confirmation = race([finalist], BASELINE, {}, 1, "confirm", measured, lambda name, result: None)
    counted = {"confirm-1-baseline": Disturbance(others_cores=1.0)}
    assert confirmation.disturbed == counted, "the run counted: the second"
    assert Confirmation.from_dict(confirmation.to_dict()) == confirmation


def test_a_race_is_not_decided_on_a_round_other_processes_slowed():
    finalist = Finalist("1", {**BASELINE, "batch_size": 32}, 1, 100.0)
    second = Finalist("2", {**BASELINE, "batch_size": 64}, 1, 100.0)
    slowed_baseline = {f"confirm-{i}-baseline": run_of(40.0, disturbed=i == 1) for i in (1, 2, 3)}
    leader = {f"confirm-{i}-trial-1": run_of(130.0) for i in (1, 2, 3)}
    runs = Runs({**slowed_baseline, **leader, **{f"confirm-{i}-trial-2": run_of(120.0) for i in (1, 2)}})
    before = {"1": 130.0, "2": 120.0, "baseline": 40.0}  # decided after round 1, were round 1 quiet
    confirmation = race([finalist, second], BASELINE, before, 3, "confirm", runs, lambda name, result: None)
    assert confirmation.rounds == 3 and confirmation.winner is finalist
    assert second.dropped == "the race was decided for trial 1 after round 2 (the fastest by median of those proven)"


def test_a_race_stopped_after_its_verdict_goes_on_with_its_winner_alone():
    winner = Finalist("1", {**BASELINE, "batch_size": 32}, 1, 100.0, [130.0])
    left = "the race was decided for trial 1 after round 1"
    second = Finalist("2", {**BASELINE, "batch_size": 64}, 1, 100.0, [120.0], dropped=left)
    stopped = Confirmation([40.0], [winner, second], planned_rounds=3, cut=True, decided_after=1)
    rounds = {
        f"confirm-{i}-{who}": run_of(value) for i in (2, 3) for who, value in (("baseline", 40.0), ("trial-1", 50.0))
    }
    runs = Runs(rounds)
    confirmation = race([winner, second], BASELINE, {}, 3, "confirm", runs, print, start=stopped)
    assert sorted(runs.names) == sorted(rounds), "rounds 2 and 3 of the winner and the baseline, nothing else"
    assert confirmation.decided_after == 1 and confirmation.winner.label == "1", "its verdict stands"


def test_a_trim_race_every_variant_left_ends_though_its_round_was_slowed():
    reference = Finalist("1", {**BASELINE, "batch_size": 32}, 2, 100.0)
    variant = Finalist("1 without amp", {**BASELINE, "batch_size": 32, "amp": "off"}, 1, None)
    runs = Runs(
        {
            "trim-1-1-baseline": run_of(40.0, disturbed=True),
            "trim-1-1-trial-1": run_of(130.0),
            "trim-1-1-trial-1-without-amp": run_of(60.0),  # over 25 % behind the reference: it leaves
        }
    )
    race([reference, variant], BASELINE, {}, 3, "trim-1", runs, print, alone, reference, runs_out=lambda winner: False)
    assert len(runs.names) == 3, "no round 2: more rounds of the reference alone could not change the trim"


def test_a_variant_whose_own_run_was_slowed_does_not_leave_for_lagging_on_that_round():
    reference = Finalist("1", {**BASELINE, "batch_size": 32}, 2, 100.0)
    variant = Finalist("1 without amp", {**BASELINE, "batch_size": 32, "amp": "off"}, 1, None)
    runs = Runs(
        {
            **{f"trim-1-{i}-baseline": run_of(40.0) for i in (1, 2, 3)},
            **{f"trim-1-{i}-trial-1": run_of(130.0) for i in (1, 2, 3)},
            "trim-1-1-trial-1-without-amp": run_of(60.0, disturbed=True),  # slowed: over 25 % behind, it stays
            **{f"trim-1-{i}-trial-1-without-amp": run_of(130.0) for i in (2, 3)},
        }
    )
    trim = race([reference, variant], BASELINE, {}, 3, "trim-1", runs, lambda name, result: None, alone, reference)
    assert variant.dropped is None and trim.rounds == 3, "its quiet rounds tell: it ties"
    assert trim.disturbed == {"trim-1-1-trial-1-without-amp": Disturbance(others_cores=1.0)}


def test_a_variant_behind_the_slowed_run_of_the_configuration_it_came_from_leaves_for_lagging():
    """A slowed run reads low: a variant 25 % behind the reference's slowed run, its own quiet, is behind it for real.
    One whose own run was slowed too stays."""
    reference = Finalist("1", {**BASELINE, "batch_size": 32}, 3, 100.0)
    behind = Finalist("1 without amp", {**BASELINE, "batch_size": 32, "amp": "off"}, 2, None)
    slowed = Finalist("1 without num_threads", {**BASELINE, "batch_size": 32, "num_threads": 1}, 2, None)
    runs = Runs(
        {
            **{f"trim-1-{i}-baseline": run_of(40.0) for i in (1, 2, 3)},
            "trim-1-1-trial-1": run_of(100.0, disturbed=True),
            **{f"trim-1-{i}-trial-1": run_of(130.0) for i in (2, 3)},
            "trim-1-1-trial-1-without-amp": run_of(75.0),
            "trim-1-1-trial-1-without-num_threads": run_of(75.0, disturbed=True),
            **{f"trim-1-{i}-trial-1-without-num_threads": run_of(130.0) for i in (2, 3)},
        }
    )
    racing = [reference, behind, slowed]
    trim = race(racing, BASELINE, {}, 3, "trim-1", runs, lambda name, result: None, alone, reference)
    assert behind.throughputs == [75.0] and "more than 15% behind trial 1 after round 1" in behind.dropped
    assert slowed.dropped is None and len(slowed.throughputs) == 3
    why, figures = _why_left(trim, behind, "undoing it")
    assert why.endswith("against the slowest of that trial's runs, each slowed") and figures == "after round 1: 0.75x"


def test_in_a_race_a_disturbed_run_of_the_baseline_is_measured_again_and_the_round_compares_the_second():
    finalist = Finalist("1", {**BASELINE, "batch_size": 32}, 1, 100.0)
    runs = Runs(
        {
            "confirm-1-baseline": run_of(50.0, disturbed=True),  # would have made the finalist 2.6x
            "confirm-1-baseline-again": run_of(100.0),
            "confirm-1-trial-1": run_of(130.0),
        }
    )
    measured, told = measured_by(runs)
    shown = []
    show = lambda name, result: shown.append((name, result.timing.throughput))  # noqa: E731
    confirmation = race([finalist], BASELINE, {"1": 130.0, "baseline": 100.0}, 1, "confirm", measured, show)
    assert confirmation.baseline_throughputs == [100.0] and finalist.throughputs == [130.0]
    assert runs.names == ["confirm-1-baseline", "confirm-1-baseline-again", "confirm-1-trial-1"]
    assert told == ["confirm-1-baseline"] and shown == [("confirm-1-baseline", 100.0), ("confirm-1-trial-1", 130.0)]


@pytest.mark.parametrize("remeasure", [True, False])
def test_a_tuning_run_measures_its_disturbed_baseline_again_and_says_so_unless_told_not_to(
    tmp_path, monkeypatch, remeasure
):
    monkeypatch.setattr(SystemReport, "cores_taken", property(lambda self: True))  # every run, as on a busy machine
    study = {"n_trials": 0, "storage": f"sqlite:///{tmp_path}/s.db", "remeasure_disturbed": remeasure}
    out = io.StringIO()
    app.run(load_settings(tiny_config(study=study), "tiny"), tmp_path / "out", out=out)
    again = [line for line in out.getvalue().splitlines() if line.startswith("[baseline] ") and "again" in line]
    assert len(again) == remeasure, out.getvalue()
    assert (tmp_path / "out" / "trials" / "baseline-again.result.json").exists() == remeasure


def test_a_benchmark_or_check_round_measures_its_disturbed_runs_again_once(tmp_path, monkeypatch):
    monkeypatch.setattr(SystemReport, "cores_taken", property(lambda self: True))
    settings = load_settings(tiny_config(study={"remeasure_disturbed": True}), "tiny")
    entries = both_ends(settings.baseline, {**settings.baseline, "batch_size": 32})
    benchmark = Benchmark("tiny", "cpu", 2, "recommended.yaml", {}, entries)
    out, draws = io.StringIO(), []
    monkeypatch.setattr(TrialRunner, "new_draw", lambda runner: draws.append(1))
    measure_rounds(settings, benchmark, tmp_path, out)
    assert [len(entry.throughputs) for entry in entries] == [2, 2], "a run a round each, the second's kept"
    assert len(draws) == 2, "each round a new draw of the process layout"
    again = sorted(path.name for path in tmp_path.glob("*-again.result.json"))
    assert again == ["round1-baseline-again.result.json"], "the load lasted: nothing more is measured again"
    said = out.getvalue().splitlines()[2:]  # after each configuration's changes, said once
    # Where the second run read slower, slowed too, the first stands, and the second's figure is said.
    stands = [line for line in said if line.endswith(FIRST_STANDS)]
    assert all(line.startswith("[round 1 baseline, again] ") for line in stands), stands
    said = [line for line in said if line not in stands]
    assert said[0].startswith("[round 1 baseline] ") and said[0].endswith("measured again")
    if not stands:  # the second stands: said once, as the run measured again
        assert said[1].startswith("[round 1 baseline, again] ") and said[1].endswith("may read low")
    assert [len(entry.disturbed) for entry in entries] == [2, 2], "each run counted though slowed, named"
    counted = [line for line in said if line.startswith("[round ") and not line.endswith("measured again")]
    assert len(counted) + len(stands) == 4, "each run that stands said once"
    assert all("other processes busy" in line for line in counted + stands), out.getvalue()
    foretold = [index for index, line in enumerate(said) if line.startswith("[time] round 1 took ")]
    last_of_first = max(index for index, line in enumerate(said) if line.startswith("[round 1 "))
    assert foretold == [last_of_first + 1], f"the rest foretold once, after round 1:\n{out.getvalue()}"
    assert said[foretold[0]].endswith(" more for the 1 round left")
    alone = Benchmark("tiny", "cpu", 1, "recommended.yaml", {}, both_ends(settings.baseline, settings.baseline))
    single = io.StringIO()
    measure_rounds(settings, alone, tmp_path / "single", single)
    assert "[round 1 " in single.getvalue() and "[time]" not in single.getvalue(), "one round: nothing left to foretell"


def test_a_second_run_slower_and_slowed_too_is_said_where_the_first_stands():
    runs = Runs({"baseline": run_of(50.0, disturbed=True), "baseline-again": run_of(30.0, disturbed=True)})
    told = []
    measured = again_if_disturbed(runs, lambda name, result: None, on_first_stands=lambda n, r: told.append((n, r)))
    assert measured(BASELINE, "baseline").timing.throughput == 50.0
    assert [(name, result.timing.throughput) for name, result in told] == [("baseline-again", 30.0)]
    quiet = Runs({"baseline": run_of(50.0, disturbed=True), "baseline-again": run_of(40.0)})
    told.clear()
    again_if_disturbed(quiet, lambda name, result: None, on_first_stands=lambda n, r: told.append(n))(
        BASELINE, "baseline"
    )
    assert not told, "a quiet second run stands: nothing to say"


def test_a_tuning_runs_terminal_says_the_second_runs_figure_where_the_first_stands():
    out = io.StringIO()
    lines = _RunLines(out)
    lines.baseline = run_of(100.0)
    lines.first_stands("confirm-1-trial-0-again", run_of(30.0, disturbed=True))
    said = out.getvalue().strip()
    assert said.startswith("[confirm-1-trial-0-again] ") and "30.0 samples/s" in said, said
    assert said.endswith(f"; {FIRST_STANDS}")


def _said_through(runs: dict[str, TrialResult], names: list[str]) -> list[str]:
    """What a tuning run's terminal says of race runs ``names``, each measured through ``again_if_disturbed``."""
    out = io.StringIO()
    lines = _RunLines(out)
    lines.baseline = run_of(100.0)
    measured = again_if_disturbed(Runs(runs), lines.measured_again, None, None, lines.first_stands)
    for name in names:
        lines.race_run(name, measured(BASELINE, name))
    return out.getvalue().splitlines()


def test_a_tuning_runs_terminal_says_each_run_once_the_one_that_stands_as_what_it_is():
    first_stands = {"confirm-1-trial-0": run_of(50.0, disturbed=True), "confirm-1-trial-0-again": run_of(30.0, True)}
    said = _said_through(first_stands, ["confirm-1-trial-0"])
    assert [line.split("]")[0] for line in said] == ["[confirm-1-trial-0", "[confirm-1-trial-0-again"]
    assert said[1].endswith(FIRST_STANDS), "no third line repeats the first run"
    second_stands = {"confirm-1-trial-0": run_of(50.0, disturbed=True), "confirm-1-trial-0-again": run_of(70.0)}
    said = _said_through(second_stands, ["confirm-1-trial-0"])
    assert [line.split("]")[0] for line in said] == ["[confirm-1-trial-0", "[confirm-1-trial-0-again"]
    assert "70.0 samples/s" in said[1] and not said[1].endswith(FIRST_STANDS), "the run that stands, as measured again"
    second_failed = {"confirm-1-trial-0": run_of(50.0, disturbed=True), "confirm-1-trial-0-again": run_of(None)}
    said = _said_through(second_failed, ["confirm-1-trial-0"])
    assert [line.split("]")[0] for line in said] == ["[confirm-1-trial-0", "[confirm-1-trial-0-again"]
    assert "FAILED" in said[1] and said[1].endswith("; the first run stands"), said[1]


def test_a_rounds_baseline_run_after_its_other_runs_gives_their_ratios_to_it():
    faster = {**BASELINE, "batch_size": 2 * BASELINE["batch_size"]}
    out = io.StringIO()
    lines = _RunLines(out)
    lines.baseline = run_of(100.0)
    lines.race_run("confirm-2-trial-6", replace(run_of(300.0), knobs=faster))
    lines.race_run("confirm-2-trial-2", replace(run_of(250.0), knobs=faster))
    lines.race_run("confirm-2-baseline", run_of(100.0))
    lines.race_run("confirm-3-baseline", run_of(100.0))
    lines.race_run("confirm-3-trial-6", replace(run_of(200.0), knobs=faster))
    said = out.getvalue().splitlines()
    assert "x)" not in said[0], "no ratio before its round's baseline ran"
    assert said[2].endswith("; against it, this round's runs before it: trial-6 3.00x, trial-2 2.50x"), said[2]
    assert "against it" not in said[3] and "(2.00x)" in said[4], "after its round's baseline, each run's own ratio"


def test_a_rounds_baseline_run_measured_again_whose_first_stands_still_gives_the_ratios_before_it():
    faster = {**BASELINE, "batch_size": 2 * BASELINE["batch_size"]}
    out = io.StringIO()
    lines = _RunLines(out)
    lines.baseline = run_of(100.0)
    runs = Runs({"confirm-2-baseline": run_of(100.0, disturbed=True), "confirm-2-baseline-again": run_of(80.0, True)})
    measured = again_if_disturbed(runs, lines.measured_again, None, None, lines.first_stands)
    lines.race_run("confirm-2-trial-6", replace(run_of(300.0), knobs=faster))
    lines.race_run("confirm-2-baseline", measured(BASELINE, "confirm-2-baseline"))
    said = out.getvalue().splitlines()
    assert said[-2].endswith(FIRST_STANDS) and said[-1] == (
        "[confirm-2-baseline] the first run stands; against it, this round's runs before it: trial-6 3.00x"
    )
