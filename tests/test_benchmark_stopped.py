"""mode=benchmark and mode=selfcheck stopped before their last round: the record says so, the pages and the terminal
say the verdicts decide nothing, as mode=check's does; a record written before it was kept reads as not stopped."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from autotune import benchmark as benchmark_mode
from autotune import selfcheck
from autotune.config.load import load_settings
from autotune.errors import HarnessDisagreesError
from autotune.measure.environment import describe_machine
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.results.benchmark import Benchmark
from autotune.results.selfcheck import SelfCheck
from autotune.trial.result import TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config
from tests.test_benchmark import _recommended_yaml

FACTS = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=describe_machine())


def ctrl_c_at(call: int, read):
    """A stand-in for each run that reads ``read(knobs, plain)`` and is interrupted (Ctrl-C) as run ``call`` starts."""
    calls = []

    def run(knobs, plain):
        calls.append(knobs)
        if len(calls) == call:
            raise KeyboardInterrupt
        return read(knobs, plain)

    return run


@pytest.mark.parametrize(
    ("call", "headline"),
    [
        (4, "The benchmark stopped in round 2 of 5: no verdict. 1 of 5 rounds measured both"),  # in round 2
        (
            5,  # as round 3 starts
            "The benchmark stopped in round 3 of 5: no verdict. The rounds that ran read the recommendation at "
            "1.50x the baseline, 95 % interval 1.50-1.50 over 2 paired rounds on cpu: provisional, as are the "
            "figures below.",
        ),
    ],
)
def test_a_benchmark_stopped_by_ctrl_c_keeps_its_rounds_and_says_on_every_page_that_they_decide_nothing(
    tmp_path, monkeypatch, call, headline
):
    # One change: each round runs the baseline and the recommendation, so run 4 is round 2's second, run 5 round 3's
    # first.
    read = ctrl_c_at(call, lambda knobs, plain: fake_measurement(150.0 if knobs["batch_size"] == 32 else 100.0))
    monkeypatch.setattr(benchmark_mode, "inspect_run", lambda settings, output_dir: FACTS)
    monkeypatch.setattr(
        "autotune.runner.run_trial",
        lambda request, *args, **kwargs: TrialResult(request.knobs, read(request.knobs, False)),
    )
    config = {**tiny_config(), "mode": "benchmark", "recommended": str(_recommended_yaml(tmp_path, {"batch_size": 32}))}
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        benchmark_mode.run(load_settings(config, "tiny"), tmp_path / "out", out)
    stored = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert stored["stopped"] is True and Benchmark.from_dict(stored).stopped
    assert [entry["verdict"] for entry in stored["entries"]] == [None, "stopped"]
    for page in ("benchmark.md", "benchmark.html"):
        said = " ".join((tmp_path / "out" / page).read_text().split())
        assert "The benchmark stopped in round" in said and "The recommendation:" not in said, page
    assert headline in " ".join(out.getvalue().split())


def test_a_selfcheck_stopped_by_ctrl_c_decides_nothing_and_its_record_and_terminal_say_so(tmp_path, monkeypatch):
    # The harness reads 10 % below the plain loop in every round: complete, that is a disagreement (exit 1).
    def read(knobs, plain):
        return SimpleNamespace(
            ok=True,
            plain=SimpleNamespace(throughput=100.0, epoch_boundaries=0),
            timing=SimpleNamespace(throughput=90.0),
        )

    run = ctrl_c_at(9, read)  # two configurations, two loops: run 9 starts round 3
    runner = SimpleNamespace(new_draw=lambda: None, check=lambda knobs, name, plain: run(knobs, plain))
    monkeypatch.setattr(selfcheck, "inspect_run", lambda settings, output_dir: FACTS)
    monkeypatch.setattr(selfcheck, "study_runner", lambda settings, facts, workdir: runner)
    config = {**tiny_config(), "mode": "selfcheck", "recommended": str(_recommended_yaml(tmp_path, {"batch_size": 32}))}
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):  # exits 130, as a stopped mode=check does, not HarnessDisagreesError's 1
        selfcheck.run(load_settings({**config, "selfcheck": {"rounds": 3}}, "tiny"), tmp_path / "out", out)
    stored = json.loads((tmp_path / "out" / "selfcheck.json").read_text())
    assert stored["stopped"] is True and [c["verdict"] for c in stored["configurations"]] == ["stopped"] * 2
    record = SelfCheck.from_dict(stored)
    assert [c.verdict for c in record.configurations] == ["disagree"] * 2, "what the two rounds that ran read"
    selfcheck.fail_if_disagreeing(record)  # stopped: decides nothing
    with pytest.raises(HarnessDisagreesError):
        selfcheck.fail_if_disagreeing(replace(record, stopped=False))
    said = out.getvalue()
    assert "The self-check stopped in round 3 of 3: no verdict; the figures above are provisional" in said
    assert "2 rounds): stopped\n" in said and "disagree" not in said


def test_a_record_written_before_stopped_was_kept_reads_as_not_stopped():
    base = {**NEUTRAL_KNOBS, "batch_size": 16}
    entries = benchmark_mode.both_ends(base, {**base, "batch_size": 32})
    for entry, runs in zip(entries, ([100.0, 101.0], [150.0, 152.0]), strict=True):
        entry.throughputs.extend(runs)
    benchmark = Benchmark("p", "cpu", 2, "recommended.yaml", {}, entries)
    written = benchmark.to_dict()
    del written["stopped"]
    assert Benchmark.from_dict(written) == benchmark and not Benchmark.from_dict(written).stopped
    check = SelfCheck("p", "cpu", 2, "the baseline only", {}, [])
    written = check.to_dict()
    del written["stopped"]
    assert SelfCheck.from_dict(written) == check and not SelfCheck.from_dict(written).stopped


def test_a_stop_keeps_its_own_exit_where_its_report_fails_too_and_says_so(capsys):
    told: list[bool] = []

    def stopped() -> None:
        raise KeyboardInterrupt

    def failing(was_stopped: bool) -> None:
        told.append(was_stopped)
        raise OSError(28, "No space left on device")

    with pytest.raises(KeyboardInterrupt):
        benchmark_mode.measure_then_report(stopped, failing)
    assert told == [True]
    assert "could not all be reported: [Errno 28] No space left on device" in capsys.readouterr().err
    assert benchmark_mode.measure_then_report(lambda: None, lambda was_stopped: was_stopped) is False
