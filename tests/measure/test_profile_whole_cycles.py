"""Under gradient accumulation the profiling run's steps are whole cycles of micro-batches (its warm-up, the stage-timed
and traced steps, memory's and the allocations' steps), so that they hold the optimizer steps training does for as
many micro-batches."""

from __future__ import annotations

import functools

import pytest
import torch

from autotune.measure.loading import InstrumentedData
from autotune.measure.profiling import MemoryTrend, ProfilePlan
from autotune.measure.stages import time_stages
from autotune.measure.trace import trace_steps
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer
from autotune.trial import profiling
from tests.conftest import NEUTRAL_KNOBS
from tests.fixtures.tiny import TinyCNN, TinyImages

CPU = torch.device("cpu")
BATCH, CYCLE = 8, 4  # micro-batches of 8 accumulated to 32: the optimizer steps every fourth
KNOBS = {**NEUTRAL_KNOBS, "batch_size": BATCH, "num_workers": 0, "num_threads": 1}  # set_to_none, PyTorch's default


def _pipeline(data) -> Pipeline:
    collate = data.collate if isinstance(data, InstrumentedData) else None
    return Pipeline(
        TinyCNN(), data, torch.nn.CrossEntropyLoss(), functools.partial(torch.optim.SGD, lr=0.01), collate, None
    )


def _accumulating_trainer(phase: int) -> tuple[Trainer, object]:
    """A trainer of micro-batches ``CYCLE`` to a cycle and its batches, ``phase`` steps into a cycle."""
    trainer = Trainer(_pipeline(InstrumentedData(TinyImages(64), None)), KNOBS, CPU, effective_batch_size=BATCH * CYCLE)
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


def _gradient_bytes(model: torch.nn.Module) -> int:
    return sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("phase", [0, 1])
def test_memory_is_read_once_a_cycle_at_the_same_point_of_each(phase, monkeypatch):
    # The gradients live from a cycle's first backward pass to its optimizer step: read after each micro-batch, memory
    # would rise and fall by their size.
    trainer, batches = _accumulating_trainer(phase)
    readings = []

    class Recorder:  # what each reading finds held, in place of the process tree's memory
        def __init__(self, device):
            pass

        def read(self):
            readings.append((trainer.optimizer_steps, _gradient_bytes(trainer.model)))

        def trend(self):
            return MemoryTrend([0.0] * len(readings))

    monkeypatch.setattr(profiling, "MemoryTrendRecorder", Recorder)
    trend = profiling._memory_trend(trainer, batches, 5, CPU)
    assert trend.steps_apart == trainer.accumulation_steps == 4, "the readings say they are a cycle apart"
    batches.close()
    steps, held = zip(*readings, strict=True)
    assert len(readings) == 5
    assert list(steps) == list(range(steps[0], steps[0] + 5)), "one optimizer step between readings"
    assert len(set(held)) == 1, "as many gradients held at every reading"


def test_the_warm_up_runs_whole_cycles_so_that_the_optimizers_first_step_is_not_timed(tmp_path, monkeypatch):
    seen = {}

    def spied_time_stages(trainer, *args, **kwargs):
        seen["optimizer_steps"] = trainer.optimizer_steps
        return time_stages(trainer, *args, **kwargs)

    monkeypatch.setattr(profiling, "time_stages", spied_time_stages)
    plan = ProfilePlan(
        str(tmp_path / "t.pt.trace.json"), steps=CYCLE, min_time_s=0.0, trace_steps=1, hot_batches=1, warmup_steps=3
    )
    result = profiling.run_profile(_pipeline(TinyImages(64)), KNOBS, CPU, plan, BATCH * CYCLE)
    assert seen["optimizer_steps"] == 1, "3 warm-up micro-batches rounded up to a cycle, its optimizer step in it"
    stepped = [index for index, seconds in enumerate(result.stages.optimizer_s) if seconds > 0]
    assert stepped == list(range(CYCLE - 1, result.stages.steps, CYCLE)), "the timed cycles start where cycles start"


@pytest.mark.parametrize("phase", [0, 1])
def test_the_steps_with_cuda_allocations_recorded_are_a_whole_cycle_with_its_optimizer_step(phase):
    # As run_profile records them on a GPU (none here): the micro-batches run, from wherever in a cycle they start.
    trainer, batches = _accumulating_trainer(phase)
    before, loaded = trainer.optimizer_steps, []

    def counted():
        for item in batches:
            loaded.append(item)
            yield item

    profiling._train(trainer, counted(), profiling._ALLOCATION_STEPS)
    batches.close()
    assert len(loaded) == CYCLE, "2 micro-batches rounded up to a cycle of 4"
    assert trainer.optimizer_steps - before == 1
