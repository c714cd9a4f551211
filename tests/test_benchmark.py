"""mode=benchmark's configurations: the two ends, and each change alone and left out."""

from __future__ import annotations

from autotune.benchmark import configurations
from tests.conftest import NEUTRAL_KNOBS


def test_each_change_alone_and_left_out_once_each():
    recommended = {**NEUTRAL_KNOBS, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "amp": "bf16"}
    entries = configurations(NEUTRAL_KNOBS, recommended)
    assert [(e.kind, e.knob) for e in entries] == [
        ("baseline", None),
        ("recommended", None),
        ("alone", "num_workers"),
        ("without", "num_workers"),
        ("without", "persistent_workers"),
        ("alone", "amp"),
        ("without", "amp"),
    ], "persistent_workers alone, without workers, is the baseline: not measured twice"
    alone = entries[2].knobs
    assert (alone["num_workers"], alone["prefetch_factor"], alone["persistent_workers"]) == (2, 2, False)
    assert entries[3].knobs == entries[5].knobs == {**NEUTRAL_KNOBS, "amp": "bf16"}, "no worker options without workers"


def test_one_change_is_the_recommendation_alone():
    entries = configurations(NEUTRAL_KNOBS, {**NEUTRAL_KNOBS, "amp": "bf16"})
    assert [e.label for e in entries] == ["baseline", "recommended"]
