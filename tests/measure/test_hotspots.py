"""The data pipeline's hot functions: cProfile where loading runs, in the training process or in each worker."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from autotune.measure.hotspots import Hotspots, collect_hotspots
from autotune.measure.loading import InstrumentedData
from autotune.results.remedies import HOT_FUNCTION_SHARE
from tests.fixtures.profiled import ResizedPictures, SlowTransformFeatures


def _hotspots(dataset, workers: int, batches: int = 4) -> Hotspots:
    data = InstrumentedData(dataset, None, profile=True)
    loader = DataLoader(data, batch_size=4, num_workers=workers, collate_fn=data.collate)
    return collect_hotspots(iter(loader), batches, workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_deliberately_slow_function_of_the_dataset_is_the_hottest(workers):
    hotspots = _hotspots(SlowTransformFeatures(rounds=80), workers)
    hottest = hotspots.functions[0]
    assert "slow_transform" in hottest.name and hottest.own, [f.name for f in hotspots.functions]
    assert hotspots.share(hottest) >= HOT_FUNCTION_SHARE
    assert hotspots.processes == (2 if workers else 1) and hotspots.batches == 4 and hotspots.samples == 16
    assert "SlowTransformFeatures" not in hottest.name and hotspots.own[0].name.endswith("__getitem__")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_librarys_hot_function_is_named_with_the_line_of_the_users_code_that_calls_it(workers):
    hotspots = _hotspots(ResizedPictures(), workers)
    hottest = hotspots.functions[0]
    assert "resize" in hottest.name and not hottest.own, [f.name for f in hotspots.functions]
    assert hotspots.share(hottest) >= HOT_FUNCTION_SHARE
    source = ResizedPictures.__getitem__.__code__
    line = next(n for n, text in enumerate(open(source.co_filename), 1) if ".resize(" in text)
    assert hottest.call_site == f"tests/fixtures/profiled.py:{line}" and hottest.caller == "__getitem__"


def test_the_profilers_own_switching_is_not_a_hot_function():
    hotspots = _hotspots(SlowTransformFeatures(rounds=2), workers=0)
    assert not [f for f in hotspots.functions if "lsprof" in f.name]
    assert Hotspots.from_dict(hotspots.to_dict()) == hotspots
