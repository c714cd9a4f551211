"""The stage-timed steps that began an epoch are marked (``StageTiming.epoch_starts``), as the loop's pass over the
DataLoader begins one: the fact the persistent_workers advice reads, where workers that do not persist start again."""

from __future__ import annotations

import functools

import pytest
import torch

from autotune.measure.loading import InstrumentedData
from autotune.measure.profiling import ProfilePlan, StageTiming
from autotune.measure.stages import EpochCounter, time_stages
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer
from autotune.trial import profiling
from tests.conftest import NEUTRAL_KNOBS
from tests.fixtures.tiny import TinyCNN, TinyImages

CPU = torch.device("cpu")
BATCH, SAMPLES = 8, 64  # an epoch of 8 steps


def _pipeline(data) -> Pipeline:
    collate = data.collate if isinstance(data, InstrumentedData) else None
    return Pipeline(
        TinyCNN(), data, torch.nn.CrossEntropyLoss(), functools.partial(torch.optim.SGD, lr=0.01), collate, None
    )


def _knobs(workers: int) -> dict:
    return {**NEUTRAL_KNOBS, "batch_size": BATCH, "num_workers": workers, "num_threads": 1}


@pytest.fixture(autouse=True)
def _threads_restored():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the num_threads knob is process-wide


@pytest.mark.parametrize("workers", [0, 2])
def test_the_timed_steps_that_began_an_epoch_are_marked_wherever_the_warm_up_left_the_loader(workers):
    trainer = Trainer(_pipeline(InstrumentedData(TinyImages(SAMPLES), None)), _knobs(workers), CPU)
    epochs = EpochCounter(trainer.loader())
    batches = trainer.batches(epochs)
    for _ in range(3):  # a warm-up: the first epoch's first 3 steps
        next(batches)
    stages = time_stages(trainer, batches, 14, CPU, workers, epochs=epochs)
    batches.close()
    assert stages.epoch_starts == [5, 13], "the 9th and 17th batches of the loader: 8 steps an epoch"
    assert epochs.begun == 3


def test_without_the_loaders_epochs_counted_their_starts_are_unknown_and_a_stored_profile_without_them_loads():
    trainer = Trainer(_pipeline(InstrumentedData(TinyImages(SAMPLES), None)), _knobs(0), CPU)
    batches = trainer.batches()
    stages = time_stages(trainer, batches, 10, CPU, 0)
    batches.close()
    assert stages.epoch_starts is None, "not []: no epoch began is a reading, this is none"
    stored = {key: value for key, value in stages.to_dict().items() if key != "epoch_starts"}
    assert StageTiming.from_dict(stored).epoch_starts is None


def test_a_profiling_run_marks_the_epochs_begun_in_its_timed_steps(tmp_path):
    plan = ProfilePlan(
        str(tmp_path / "t.pt.trace.json"), steps=12, min_time_s=0.0, trace_steps=1, hot_batches=1, warmup_steps=3
    )
    result = profiling.run_profile(_pipeline(TinyImages(SAMPLES)), _knobs(0), CPU, plan)
    assert result.stages.epoch_starts == [5], "3 warm-up steps, then the loader's 9th batch begins its second epoch"
