"""check.json records what the verdict line says: a gate loose by the tuning run's own noise apart from a speedup too
close to the floor for the rounds to tell."""

from __future__ import annotations

import json
from dataclasses import replace

from autotune.measure.stats import RatioInterval
from autotune.report.check import verdict_line
from autotune.results.benchmark import Benchmark, Entry
from autotune.results.check import Check
from tests.conftest import NEUTRAL_KNOBS


def check(before: float, interval: RatioInterval, recommended_runs: list[float], base_runs: list[float]) -> Check:
    """A check of ``before``, recorded with ``interval``, whose rounds ran the two at these samples/s."""
    entries = [
        Entry("baseline", "baseline", None, {**NEUTRAL_KNOBS, "batch_size": 16}, list(base_runs)),
        Entry("recommended", "recommended", None, {**NEUTRAL_KNOBS, "batch_size": 32}, list(recommended_runs)),
    ]
    return Check(before, 0.10, Benchmark("tiny", "cpu", len(base_runs), "report.json", {}, entries), interval)


# 1.55x now against 1.82x recorded over 3 loose rounds: no number of rounds now tells the fall from that noise.
LOOSE = check(1.82, RatioInterval(1.82, 1.32, 2.51, 3), [150.0, 160.0, 155.0], [100.0] * 3)
# 1.31x now against 1.50x recorded tightly: within 30 rounds' noise of the floor, though more would tell.
TOO_CLOSE = check(1.5, RatioInterval(1.5, 1.49, 1.51, 5), [120.0, 151.0, 127.0], [100.0, 104.0, 98.0])


def written(record: Check) -> dict:
    return json.loads(json.dumps(record.to_dict()))


def test_check_json_tells_a_loose_gate_from_a_speedup_too_close_to_the_floor():
    assert "a gate on it is loose" in verdict_line(LOOSE)
    assert "too close to the floor for 30 rounds to tell" in verdict_line(TOO_CLOSE)
    said = ("verdict", "within_noise", "rounds_to_tell", "loose_gate")
    loose, too_close = written(LOOSE), written(TOO_CLOSE)
    assert [loose[key] for key in said] == ["holds", True, None, True]
    assert [too_close[key] for key in said] == ["holds", True, None, False]


def test_loose_gate_is_written_only_where_it_holds_within_the_noise():
    stopped = replace(LOOSE, benchmark=replace(LOOSE.benchmark, stopped=True))
    assert stopped.loose_gate, "its rounds read a fall within the recorded noise"
    data = written(stopped)
    assert (data["verdict"], data["loose_gate"]) == ("stopped", False)


def test_a_check_json_written_before_loose_gate_was_kept_reads_back():
    for record in (LOOSE, TOO_CLOSE):
        data = written(record)
        assert Check.from_dict(data) == record
        assert Check.from_dict({key: value for key, value in data.items() if key != "loose_gate"}) == record
