"""A record whose rounds did not all run decides nothing: the benchmark's, the check's and the self-check's verdict
is the one STOPPED (``unless_stopped``), and the benchmark's picture keys its colour on it."""

from __future__ import annotations

from dataclasses import replace

from autotune.results import benchmark as results_benchmark
from autotune.results.benchmark import STOPPED, Benchmark, Entry
from autotune.results.check import Check
from autotune.results.selfcheck import ConfigurationCheck, SelfCheck
from tests.conftest import NEUTRAL_KNOBS


def stopped_records() -> tuple[Benchmark, Check, SelfCheck]:
    entries = [
        Entry("baseline", "baseline", None, {**NEUTRAL_KNOBS, "batch_size": 16}, [100.0, 104.0]),
        Entry("recommended", "recommended", None, {**NEUTRAL_KNOBS, "batch_size": 32}, [150.0, 156.0]),
    ]
    benchmark = Benchmark("p", "cpu", 3, "recommended.yaml", {}, entries, stopped=True)
    configuration = ConfigurationCheck("baseline", {"batch_size": 16}, [100.0, 100.2], [100.0, 100.0])
    selfcheck = SelfCheck("p", "cpu", 3, "the baseline only", {}, [configuration], stopped=True)
    return benchmark, Check(1.5, 0.1, benchmark), selfcheck


def verdicts(benchmark: Benchmark, check: Check, selfcheck: SelfCheck) -> list[str]:
    recommended = benchmark.entries[1]
    return [benchmark.recorded_verdict(recommended), check.verdict, selfcheck.verdict(selfcheck.configurations[0])]


def test_every_stopped_record_states_the_one_stopped_verdict(monkeypatch):
    assert verdicts(*stopped_records()) == [STOPPED] * 3
    monkeypatch.setattr(results_benchmark, "STOPPED", "halted")
    assert verdicts(*stopped_records()) == ["halted"] * 3, "each reads the one rule"
    benchmark, check, selfcheck = stopped_records()
    finished = (replace(benchmark, stopped=False), replace(check, benchmark=replace(benchmark, stopped=False)))
    assert [finished[0].recorded_verdict(benchmark.entries[1]), finished[1].verdict] == ["gain", "holds"]
    assert replace(selfcheck, stopped=False).verdict(selfcheck.configurations[0]) == "agree"


def test_the_benchmarks_picture_colours_a_stopped_verdict():
    from autotune.report.plots import OTHER, VERDICT_COLOUR

    assert VERDICT_COLOUR[STOPPED] == OTHER
