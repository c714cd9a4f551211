"""The records of mode=benchmark, check and selfcheck read back what their ``to_dict`` wrote: each drops the keys its
``to_dict`` computes beyond its fields, whichever they are, and still refuses a key it does not know."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from autotune.results.benchmark import Benchmark, Entry
from autotune.results.check import Check
from autotune.results.selfcheck import ConfigurationCheck, SelfCheck
from tests.conftest import NEUTRAL_KNOBS

BASE = {**NEUTRAL_KNOBS, "batch_size": 16}
BIGGER = {**BASE, "batch_size": 32, "amp": "bf16"}


def benchmark() -> Benchmark:
    entries = [
        Entry("baseline", "baseline", None, BASE, [100.0, 104.0, 98.0], [400.0] * 3),
        Entry("recommended", "recommended", None, BIGGER, [150.0, 156.0, 147.0], [500.0] * 3),
        Entry("recommended - amp", "without", "amp", {**BASE, "batch_size": 32}, [120.0, 125.0, 118.0], [450.0] * 3),
    ]
    return Benchmark("p", "cpu", 3, "recommended.yaml", {"cpu_model": "x"}, entries)


def check() -> Check:
    record = benchmark()
    return Check(1.5, 0.1, replace(record, entries=record.entries[:2]))


def selfcheck() -> SelfCheck:
    configuration = ConfigurationCheck("baseline", BASE, [100.0, 100.2], [100.0, 100.0], [1, 1], [])
    return SelfCheck("p", "cpu", 2, "the baseline only", {"cpu_model": "x"}, [configuration])


def with_rows(data: dict[str, Any], rows: str, **keys: Any) -> dict[str, Any]:
    """``data`` with ``keys`` added to each of its ``rows``."""
    return {**data, rows: [{**row, **keys} for row in data[rows]]}


def in_benchmark(data: dict[str, Any], **keys: Any) -> dict[str, Any]:
    """check.json ``data`` with ``keys`` added to each of its benchmark's entries."""
    return {**data, "benchmark": with_rows(data["benchmark"], "entries", **keys)}


def computing_more(monkeypatch, record_type: type, rows: str | None) -> None:
    """Have ``record_type.to_dict`` compute a new key, as a later version may: at its top, and in each of its
    ``rows`` where given."""
    write = record_type.to_dict

    def to_dict(self) -> dict[str, Any]:
        data = {**write(self), "new_figure": 1.0}
        return with_rows(data, rows, new_row_figure=2.0) if rows else data

    monkeypatch.setattr(record_type, "to_dict", to_dict)


@pytest.mark.parametrize(
    ("make", "computing"),
    [
        (benchmark, {Benchmark: "entries"}),
        (check, {Check: None, Benchmark: "entries"}),
        (selfcheck, {SelfCheck: "configurations"}),
    ],
)
def test_a_key_to_dict_computes_is_dropped_without_being_listed(monkeypatch, make, computing):
    record = make()
    for record_type, rows in computing.items():
        computing_more(monkeypatch, record_type, rows)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["new_figure"] == 1.0
    assert type(record).from_dict(data) == record


@pytest.mark.parametrize(
    ("make", "in_rows"),
    [
        (benchmark, lambda data: with_rows(data, "entries", newfield=1)),
        (check, lambda data: in_benchmark(data, newfield=1)),
        (selfcheck, lambda data: with_rows(data, "configurations", newfield=1)),
    ],
)
def test_a_key_it_does_not_know_is_still_refused(make, in_rows):
    record = make()
    data = json.loads(json.dumps(record.to_dict()))
    assert type(record).from_dict(data) == record
    for unknown in ({**data, "newfield": 1}, in_rows(data)):
        with pytest.raises(TypeError, match="unexpected keyword argument 'newfield'"):
            type(record).from_dict(unknown)
