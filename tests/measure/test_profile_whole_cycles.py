"""Under gradient accumulation the profiling run's stage-timed and traced steps are whole cycles of micro-batches, so
that they hold the optimizer steps training does for as many micro-batches."""

from __future__ import annotations

import functools

import pytest
import torch

from autotune.measure.loading import InstrumentedData
from autotune.measure.stages import time_stages
from autotune.measure.trace import trace_steps
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer
from tests.conftest import NEUTRAL_KNOBS
from tests.fixtures.tiny import TinyCNN, TinyImages

CPU = torch.device("cpu")
BATCH, CYCLE = 8, 4  # micro-batches of 8 accumulated to 32: the optimizer steps every fourth


def _accumulating_trainer(phase: int) -> tuple[Trainer, object]:
    """A trainer of micro-batches ``CYCLE`` to a cycle and its batches, ``phase`` steps into a cycle."""
    data = InstrumentedData(TinyImages(64), None)
    pipeline = Pipeline(
        TinyCNN(), data, torch.nn.CrossEntropyLoss(), functools.partial(torch.optim.SGD, lr=0.01), data.collate, None
    )
    knobs = {**NEUTRAL_KNOBS, "batch_size": BATCH, "num_workers": 0, "num_threads": 1}
    trainer = Trainer(pipeline, knobs, CPU, effective_batch_size=BATCH * CYCLE)
    batches = trainer.batches()
    for _ in range(phase):
        trainer.train_step(trainer.to_device(next(batches).batch))
    return trainer, batches


@pytest.fixture(autouse=True)
def _threads_restored():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the num_threads knob is process-wide


@pytest.mark.parametrize("phase", [0, 1, 3])
def test_stage_timing_holds_whole_cycles_and_an_optimizer_step_in_each_wherever_it_starts(phase):
    trainer, batches = _accumulating_trainer(phase)
    stages = time_stages(trainer, batches, 15, CPU, 0)
    batches.close()
    assert stages.steps == 16, "15 micro-batches rounded up to 4 cycles of 4"
    assert sum(o > 0 for o in stages.optimizer_s) == 4, "one optimizer step a cycle, whatever the phase"


def test_stage_timing_filling_its_least_time_or_at_its_most_steps_still_ends_on_a_cycle():
    trainer, batches = _accumulating_trainer(phase=1)
    filled = time_stages(trainer, batches, 2, CPU, 0, min_time_s=0.2, max_steps=10_000)
    capped = time_stages(trainer, batches, 2, CPU, 0, min_time_s=60, max_steps=5)
    batches.close()
    assert filled.steps > CYCLE and filled.steps % CYCLE == 0 and filled.wall_s >= 0.2
    assert sum(o > 0 for o in filled.optimizer_s) == filled.steps // CYCLE
    assert capped.steps == 8, "max_steps 5 rounded up to 2 cycles"


def test_the_traced_steps_are_whole_cycles_with_their_optimizer_step(tmp_path):
    # two steps into a cycle: the skipped and warm-up steps end it at its fourth, so 3 traced steps would hold none
    trainer, batches = _accumulating_trainer(phase=2)
    ops = trace_steps(trainer, batches, CPU, 3, tmp_path / "accumulating.pt.trace.json")
    batches.close()
    assert ops.active_steps == CYCLE, "3 traced micro-batches rounded up to a cycle"
    calls = {op.name: op.calls for op in ops.step_operators}
    assert calls["aten::convolution_backward"] == CYCLE
    assert calls["Optimizer.step#SGD.step"] == 1, "the cycle's optimizer step is traced"
