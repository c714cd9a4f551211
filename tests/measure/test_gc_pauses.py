"""Garbage-collection pauses counted and timed through gc.callbacks."""

from __future__ import annotations

import gc

from autotune.measure.gc_pauses import GcPauses, GcWatch


def test_every_collection_in_the_block_is_counted_by_generation_and_timed():
    with GcWatch() as watch:
        for _ in range(3):
            gc.collect(0)
        gc.collect()
    pauses = watch.pauses
    assert pauses.collections[0] >= 3 and pauses.collections[2] >= 1
    assert 0 < pauses.longest_s <= pauses.total_s < pauses.wall_s
    assert watch._callback not in gc.callbacks, "the callback is removed after the block"
    assert GcPauses.from_dict(pauses.to_dict()) == pauses


def test_no_collection_no_pause():
    assert GcPauses(wall_s=1.0).share == 0.0
