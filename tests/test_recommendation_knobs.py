"""Stored knobs read by one rule (``parse_knobs``) wherever autotune reads them back: recommended.yaml
(``load_recommended``) and the report.json or check.json mode=check gates against (``load_tuned``), each error named
as its entry point names it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune import check as check_mode
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from tests.conftest import NEUTRAL_KNOBS
from tests.test_check import _entry, check
from tests.test_recommendation import recommendation, written

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
RECOMMENDED = {**BASELINE, "batch_size": 32, "num_workers": 2, "prefetch_factor": 4, "amp": "bf16"}


@dataclass(frozen=True)
class Stored:
    """A file holding recommended and baseline knobs, as one entry point reads it: ``read`` the file at ``path``,
    whose recommended knobs lie at ``section``; its errors named as ``against`` (mode=check) or as the file's key."""

    path: Path
    section: str
    baseline_section: str
    read: Callable[[str], Any]
    against: bool

    def message(self, key: str) -> str:
        """How an error of the file's ``key`` begins."""
        return f"{'against: ' if self.against else ''}{self.path}: {key}: "


def report_json(tmp_path: Path, recommended: Any, baseline: Any) -> Stored:
    """A tuning run's report.json, as mode=check reads it."""
    path = tmp_path / "report.json"
    data = {"pipeline": "tiny", "machine": {}, "speedup": 1.5}
    path.write_text(json.dumps(data | {"recommended": {"knobs": recommended}, "baseline": {"knobs": baseline}}))
    return Stored(path, "recommended.knobs", "baseline.knobs", check_mode.load_tuned, against=True)


def check_json(tmp_path: Path, recommended: Any, baseline: Any) -> Stored:
    """A check.json that held, as mode=check reads it as its reference (``checked``)."""
    held = check(1.5, [150.0, 157.0, 146.0])
    record = json.loads(json.dumps(replace(held, benchmark=replace(held.benchmark, batch_policy="free")).to_dict()))
    record = _entry(_entry(record, 0, knobs=baseline), 1, knobs=recommended)
    path = tmp_path / "check.json"
    path.write_text(json.dumps(record))
    return Stored(path, "benchmark.entries[1].knobs", "benchmark.entries[0].knobs", check_mode.load_tuned, True)


def recommended_yaml(tmp_path: Path, recommended: Any, baseline: Any) -> Stored:
    """A recommended.yaml that names no machine (nothing to warn of), as ``load_recommended`` reads it."""
    document = recommendation(machine={}).to_document() | {"knobs": recommended, "baseline": baseline}
    return Stored(Path(written(tmp_path, document)), "knobs", "baseline", autotune.load_recommended, against=False)


ENTRY_POINTS = [report_json, check_json, recommended_yaml]
WITHOUT_BATCH_SIZE = {name: value for name, value in RECOMMENDED.items() if name != "batch_size"}


def refused(stored: Stored) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        stored.read(str(stored.path))
    return raised.value


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("knobs", "key", "problem"),
    [
        (  # another autotune's file: every knob this one lacks named, before its values and gaps, which are that one's
            {**WITHOUT_BATCH_SIZE, "amp": "fp8", "flash": True, "batch": 32},
            "",
            "written by another autotune (knobs this one lacks: flash, batch; it has "
            f"{', '.join(KNOBS)}); tune again with this one",
        ),
        (
            {**RECOMMENDED, "amp": "fp8"},
            ".amp",
            "expected one of off, bf16, fp16, got 'fp8'; use the file as autotune wrote it",
        ),
        (  # a null where the knob applies and takes none
            {**RECOMMENDED, "amp": None},
            ".amp",
            "expected one of off, bf16, fp16, got None; use the file as autotune wrote it",
        ),
        (
            WITHOUT_BATCH_SIZE,
            ".batch_size",
            "missing, though autotune always writes it; use the file as autotune wrote it",
        ),
        ([1], "", "expected a mapping of knob values, got [1]; use the file as autotune wrote it"),
    ],
)
def test_stored_knobs_that_cannot_be_used_are_refused_naming_the_key_and_what_to_do(
    tmp_path, entry_point, knobs, key, problem
):
    stored = entry_point(tmp_path, knobs, BASELINE)
    error = refused(stored)
    assert str(error) == stored.message(stored.section + key) + problem
    assert error.key == ("against" if stored.against else f"{stored.path}: {stored.section}{key}")


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_the_baselines_knobs_are_read_by_the_same_rule_naming_their_own_section(tmp_path, entry_point):
    stored = entry_point(tmp_path, RECOMMENDED, WITHOUT_BATCH_SIZE)
    assert str(refused(stored)).startswith(stored.message(f"{stored.baseline_section}.batch_size") + "missing")


def test_every_entry_point_reads_a_valid_file_to_the_same_knobs(tmp_path):
    # From before malloc existed, with num_threads' null (torch's default) and the worker options of a worker-less
    # baseline: every knob given, each as a trial runs it.
    older = {name: value for name, value in RECOMMENDED.items() if name != "malloc"} | {"num_threads": None}
    read = []
    for entry_point in ENTRY_POINTS:
        folder = tmp_path / entry_point.__name__
        folder.mkdir()
        stored = entry_point(folder, older, BASELINE)
        read.append(stored.read(str(stored.path)))
    expected = older | {"malloc": KNOBS["malloc"].baseline_default}
    assert [(each.knobs, each.baseline) for each in read] == [(expected, BASELINE)] * len(ENTRY_POINTS)
