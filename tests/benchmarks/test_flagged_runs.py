"""The flagged-runs benchmark sets each run the cores' reading flagged against the same configuration's others."""

from __future__ import annotations

import pytest

from autotune.results.benchmark import Benchmark, Entry
from autotune.trial.result import Disturbance
from benchmarks.flagged_runs import against_unflagged, thin_comparisons


def entry(label: str, runs: list[float | None], disturbed: dict[int, Disturbance]) -> Entry:
    return Entry(label, "baseline" if label == "baseline" else "recommended", None, {}, runs, disturbed=disturbed)


def test_a_flagged_run_is_set_against_the_unflagged_median_and_one_other_processes_slowed_counts_for_neither():
    runs = [100.0, 60.0, 104.0, 30.0, None]
    disturbed = {2: Disturbance(cores_slowdown=1.6), 4: Disturbance(others_cores=1.0, cores_slowdown=1.4)}
    slow, rest = against_unflagged(entry("recommended", runs, disturbed))
    assert slow == pytest.approx([60 / 102])
    assert rest == pytest.approx([100 / 104, 104 / 100]), "each unflagged run against the others' median"
    assert against_unflagged(entry("x", [100.0, 50.0], {2: Disturbance(cores_slowdown=2.0)})) == ([], [])


def test_a_comparison_keeps_its_slowed_rounds_where_fewer_than_half_stayed_quiet():
    baseline = entry("baseline", [100.0] * 5, {1: Disturbance(cores_slowdown=1.5)})
    thin = entry("recommended", [150.0] * 5, {2: Disturbance(cores_slowdown=1.5), 3: Disturbance(cores_slowdown=1.5)})
    assert thin_comparisons(Benchmark("p", "cpu", 5, "r.yaml", {}, [baseline, thin])) == (1, 1)
    thin.disturbed.pop(3)
    assert thin_comparisons(Benchmark("p", "cpu", 5, "r.yaml", {}, [baseline, thin])) == (0, 1)
