"""The self-check's record and the rule it reports by."""

from __future__ import annotations

import pytest

from autotune.results.selfcheck import ConfigurationCheck, SelfCheck


def check(harness, plain) -> ConfigurationCheck:
    return ConfigurationCheck("baseline", {"batch_size": 32}, harness, plain, [1] * len(plain), [])


def test_ratios_pair_the_rounds_where_both_loops_ran():
    c = check([100.0, None, 99.0], [100.0, 98.0, 100.0])
    assert c.ratios == pytest.approx([1.0, 0.99])
    stopped = check([100.0, 99.0], [100.0])  # Ctrl-C during round 2's plain run: its record is still written
    assert stopped.ratios == pytest.approx([1.0]) and SelfCheck.from_dict(stopped_record(stopped).to_dict())


def stopped_record(configuration: ConfigurationCheck) -> SelfCheck:
    return SelfCheck("p", "cpu", 3, "the baseline only", {"cpu_model": "x"}, [configuration])


@pytest.mark.parametrize(
    ("harness", "verdict"),
    [
        ([100.0, 100.5, 99.5, 100.2, 99.8], "agree"),  # within 1 % every round
        ([90.0, 91.0, 89.5, 90.5, 90.2], "disagree"),  # 10 % low every round
        ([100.0, 80.0, 120.0, 95.0, 105.0], "unresolved"),  # too noisy to tell
        ([100.0], "unresolved"),  # one round: no interval
    ],
)
def test_the_verdict_follows_the_interval(harness, verdict):
    assert check(harness, [100.0] * len(harness)).verdict == verdict


def test_the_record_round_trips_through_its_dict_with_the_derived_figures():
    record = SelfCheck("p", "cpu", 2, "the baseline only", {"cpu_model": "x"}, [check([100.0, 100.2], [100.0, 100.0])])
    data = record.to_dict()
    assert data["configurations"][0]["verdict"] == "agree" and data["configurations"][0]["interval"]["n"] == 2
    assert SelfCheck.from_dict(data) == record
