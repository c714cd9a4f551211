"""A run that other processes disturbed, where one run decides (the baseline, a race's rounds), is measured again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.measurement import SystemReport
from autotune.results.race import Finalist
from autotune.study.disturbed import again_if_disturbed
from autotune.study.run_race import race
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement

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


@pytest.mark.parametrize("second", [run_of(100.0), run_of(60.0, disturbed=True)], ids=["quiet", "disturbed"])
def test_a_disturbed_run_is_measured_once_more_and_the_second_stands_disturbed_or_not(second):
    runs, told = Runs({"baseline": run_of(50.0, disturbed=True), "baseline-again": second}), []
    result = again_if_disturbed(runs, lambda name, result: told.append(name))(BASELINE, "baseline")
    assert result.timing.throughput == second.timing.throughput
    assert runs.names == told == ["baseline", "baseline-again"]


@pytest.mark.parametrize("first", [run_of(100.0), run_of(None)], ids=["quiet", "failed"])
def test_a_quiet_run_or_a_failed_one_is_measured_once(first):
    runs, told = Runs({"baseline": first}), []
    assert again_if_disturbed(runs, lambda name, result: told.append(name))(BASELINE, "baseline") == first
    assert runs.names == told == ["baseline"]


def test_in_a_race_a_disturbed_run_of_the_baseline_is_measured_again_and_the_round_compares_the_second():
    finalist = Finalist("1", {**BASELINE, "batch_size": 32}, 1, 100.0)
    runs = Runs(
        {
            "confirm-1-baseline": run_of(50.0, disturbed=True),  # would have made the finalist 2.6x
            "confirm-1-baseline-again": run_of(100.0),
            "confirm-1-trial-1": run_of(130.0),
        }
    )
    told = []
    shown = lambda name, result: told.append(name)  # noqa: E731
    confirmation = race([finalist], BASELINE, {"1": 130.0, "baseline": 100.0}, 1, "confirm", runs, shown)
    assert confirmation.baseline_throughputs == [100.0] and finalist.throughputs == [130.0]
    assert runs.names == ["confirm-1-baseline", "confirm-1-baseline-again", "confirm-1-trial-1"]
    assert told == runs.names, "every run is shown, the disturbed one too"
