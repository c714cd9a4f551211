"""The data pipeline's hot functions: cProfile where loading runs, in the training process or in each worker."""

from __future__ import annotations

import cProfile
import json
import os
import sys
import time
from functools import partial

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from autotune.measure import loading
from autotune.measure.hotspots import Hotspots, _call_line, _definition, collect_hotspots, is_own_code
from autotune.measure.loading import InstrumentedData
from autotune.results.loading_remedies import HOT_FUNCTION_SHARE, called_from
from tests.fixtures.profiled import ResizedPictures, SlowTransformFeatures


class TwoResizes(Dataset):
    """One picture resized twice a sample by PIL, from two lines: to 256x256 (costly) and to 8x8 (cheap; ~1/30th of
    the other, so that a busy machine's pauses, which cProfile's wall clock counts, cannot reverse them)."""

    def __init__(self, length: int = 64) -> None:
        self.length = length
        self.picture = Image.fromarray(np.random.default_rng(0).integers(0, 256, (384, 384, 3), dtype=np.uint8))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self._costly(), self._cheap(), torch.tensor(index % 4)

    def _costly(self) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.picture.resize((256, 256), Image.Resampling.LANCZOS)).copy())

    def _cheap(self) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.picture.resize((8, 8), Image.Resampling.NEAREST)).copy())


@pytest.fixture
def cpu_timed(monkeypatch):
    """Profiles timed by each thread's CPU, not the wall clock: a pause of a busy host inside a cheap function must
    not make it hot (a worker, forked, profiles so too)."""
    monkeypatch.setattr(loading.cProfile, "Profile", partial(cProfile.Profile, time.thread_time))


def _hotspots(dataset, workers: int, batches: int = 4) -> Hotspots:
    data = InstrumentedData(dataset, None, profile=True)
    loader = DataLoader(data, batch_size=4, num_workers=workers, collate_fn=data.collate)
    return collect_hotspots(iter(loader), batches, workers)


@pytest.mark.usefixtures("cpu_timed")
@pytest.mark.parametrize("workers", [0, 2])
def test_the_deliberately_slow_function_of_the_dataset_is_the_hottest(workers):
    # ~2 ms a sample: far above what a fresh worker's first torch calls take on a busy machine (1.4 ms each, once)
    hotspots = _hotspots(SlowTransformFeatures(rounds=400), workers)
    hottest = hotspots.functions[0]
    assert "slow_transform" in hottest.name and hottest.own, [f.name for f in hotspots.functions]
    assert hotspots.share(hottest) >= HOT_FUNCTION_SHARE
    assert hotspots.processes == (2 if workers else 1) and hotspots.batches == 4 and hotspots.samples == 16
    assert "SlowTransformFeatures" not in hottest.name and hotspots.own[0].name.endswith("__getitem__")


@pytest.mark.usefixtures("cpu_timed")
@pytest.mark.parametrize("workers", [0, 2])
def test_a_librarys_hot_function_is_named_with_the_line_of_the_users_code_that_calls_it(workers):
    hotspots = _hotspots(ResizedPictures(), workers)
    hottest = hotspots.functions[0]
    assert "resize" in hottest.name and not hottest.own, [f.name for f in hotspots.functions]
    assert hotspots.share(hottest) >= HOT_FUNCTION_SHARE
    source = ResizedPictures.__getitem__.__code__
    line = next(n for n, text in enumerate(open(source.co_filename), 1) if ".resize(" in text)
    assert hottest.call_site == f"tests/fixtures/profiled.py:{line}" and hottest.caller == "__getitem__"


@pytest.mark.usefixtures("cpu_timed")
@pytest.mark.parametrize("workers", [0, 2])
def test_a_library_function_called_from_two_lines_is_split_between_them_by_the_time_each_spends(workers):
    hotspots = _hotspots(TwoResizes(), workers, batches=8)
    resize = next(f for f in hotspots.functions if "resize" in f.name and not f.own)
    lines = {name: _line_of(getattr(TwoResizes, name), ".resize(") for name in ("_costly", "_cheap")}
    sites = {site.caller: site for site in resize.call_sites}
    assert set(sites) == {"_costly", "_cheap"}, resize.call_sites
    assert [sites[name].site for name in lines] == [f"tests/measure/test_hotspots.py:{n}" for n in lines.values()]
    assert sites["_costly"].self_s > 3 * sites["_cheap"].self_s, "the costly line spends most of it"
    assert sum(site.self_s for site in resize.call_sites) == pytest.approx(resize.self_s, rel=0.01)
    assert (resize.call_site, resize.caller) == (sites["_costly"].site, "_costly")
    named = called_from(resize, callers=False)
    assert named.startswith(f"{sites['_costly'].site} (") and f"%), {sites['_cheap'].site} (" in named, named
    assert Hotspots.from_dict(hotspots.to_dict()) == hotspots


def _line_of(function, text: str) -> int:
    code = function.__code__
    source = open(code.co_filename).read().splitlines()
    return next(n for n in range(code.co_firstlineno, len(source) + 1) if text in source[n - 1])


def test_the_profilers_own_switching_is_not_a_hot_function():
    hotspots = _hotspots(SlowTransformFeatures(rounds=2), workers=0)
    assert not [f for f in hotspots.functions if "lsprof" in f.name]
    assert Hotspots.from_dict(hotspots.to_dict()) == hotspots


def test_the_users_code_under_a_system_pythons_prefix_is_theirs_and_the_standard_library_is_not(monkeypatch):
    """A system Python's sys.base_prefix is /usr, under which an app may live (/usr/src/app in many images)."""
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    assert is_own_code("/usr/src/app/data.py")
    assert not any(is_own_code(module.__file__) for module in (os, json, json.decoder, np, torch))


def test_a_call_inside_a_generator_expression_is_placed_on_its_own_line(tmp_path):
    # A generator that is a call's sole argument starts its code object at that call's line, not the line of the
    # call inside it (examples/mymodel.py's interpolate, inside sum(...)).
    path = tmp_path / "rendering.py"
    path.write_text("def render(xs):\n    return sum(\n        lib(x)\n        for x in xs\n    )\n")
    generator = next(
        const
        for const in compile(path.read_text(), str(path), "exec").co_consts[0].co_consts
        if hasattr(const, "co_firstlineno")
    )
    assert (generator.co_name, generator.co_firstlineno) == ("<genexpr>", 2)
    assert _call_line((str(path), 2, "<genexpr>"), ("elsewhere.py", 1, "lib")) == 3
    # each code object's own calls: a lambda on the generator's line is not it, and the function's own call is not
    # the generator's, whose first iterable the function evaluates
    path.write_text(
        "def render(xs):\n    total = map(lambda v: v, (\n        lib(x) for x in load(xs)))\n    return lib(total)\n"
    )
    _definition.cache_clear()
    assert _call_line((str(path), 2, "<genexpr>"), ("elsewhere.py", 1, "lib")) == 3
    assert _call_line((str(path), 1, "render"), ("elsewhere.py", 1, "lib")) == 4
    assert _call_line((str(path), 1, "render"), ("elsewhere.py", 1, "load")) == 3
