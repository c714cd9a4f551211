"""The data pipeline's stages timed where they run: each batch carries its fetch and collate time and its maker."""

from __future__ import annotations

import os

from torch.utils.data import DataLoader
from torch.utils.data._utils.pin_memory import pin_memory

from autotune.measure.loading import Instrumented, InstrumentedData
from tests.fixtures.profiled import SlowTransformFeatures
from tests.fixtures.tiny import TinyImages


def _batches(data: InstrumentedData, workers: int, count: int) -> list[Instrumented]:
    loader = DataLoader(data, batch_size=4, num_workers=workers, collate_fn=data.collate)
    return [item for item, _ in zip(loader, range(count), strict=False)]


def test_each_batch_carries_its_fetch_and_collate_time_made_in_the_training_process():
    # ~10 ms of fetching a sample against microseconds of collating, summed over the batches: one collate preempted
    # on a busy machine (by tens of ms) may outlast one batch's fetch, not the three.
    items = _batches(InstrumentedData(SlowTransformFeatures(rounds=400), None), workers=0, count=3)
    assert all(isinstance(item, Instrumented) and item.samples == 4 for item in items)
    assert all(item.fetch_s > 0 and item.collate_s > 0 and item.pid == os.getpid() for item in items)
    assert sum(item.fetch_s for item in items) > sum(item.collate_s for item in items)
    assert items[0].batch[0].shape == (4, 64) and items[0].stats is None, "timed, not profiled"


def test_with_workers_each_batch_is_timed_in_the_worker_that_made_it():
    items = _batches(InstrumentedData(SlowTransformFeatures(rounds=20), None), workers=2, count=4)
    assert {item.pid for item in items} - {os.getpid()} == {item.pid for item in items}
    assert len({item.pid for item in items}) == 2 and all(item.fetch_s > 0 for item in items)


def test_profiled_batches_carry_cprofile_statistics_of_their_own_work():
    data = InstrumentedData(TinyImages(32), None, profile=True)
    first, second = _batches(data, workers=0, count=2)
    calls = {key[2]: value[1] for key, value in first.stats.items()}
    assert calls["__getitem__"] == 4, "each batch's statistics are its own, not accumulated"
    assert second.stats is not first.stats


def test_a_dataset_with_getitems_is_fetched_a_batch_at_once():
    class Batched(TinyImages):
        def __getitems__(self, indices):
            return [self[i] for i in indices]

    assert InstrumentedData(TinyImages(8), None).__getitems__ is None
    data = InstrumentedData(Batched(32), None)
    assert data.__getitems__ is not None
    (item,) = _batches(data, workers=0, count=1)
    assert item.samples == 4 and item.fetch_s > 0


def test_the_dataloaders_pinning_pins_the_batch_inside():
    class Pinnable:
        def pin_memory(self):
            return "pinned"

    pinned = pin_memory(Instrumented(Pinnable(), 1, 0.0, 0.0, 0))
    assert isinstance(pinned, Instrumented) and pinned.batch == "pinned"
