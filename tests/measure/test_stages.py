"""A training step taken apart stage by stage, and the profiler's trace of a few steps."""

from __future__ import annotations

import functools
import json

import pytest
import torch

from autotune.measure.loading import InstrumentedData
from autotune.measure.profiling import OperatorProfile, StageTiming
from autotune.measure.stages import time_stages
from autotune.measure.trace import STEP, trace_steps
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer
from tests.conftest import NEUTRAL_KNOBS
from tests.fixtures.profiled import SlowTransformFeatures
from tests.fixtures.tiny import TinyCNN, TinyImages

CPU = torch.device("cpu")


def _trainer(dataset, model, workers: int = 0) -> Trainer:
    data = InstrumentedData(dataset, None)
    pipeline = Pipeline(
        model, data, torch.nn.CrossEntropyLoss(), functools.partial(torch.optim.SGD, lr=0.01), data.collate, None
    )
    knobs = {**NEUTRAL_KNOBS, "batch_size": 8, "num_workers": workers, "num_threads": 1}  # no wait on a busy core
    return Trainer(pipeline, knobs, CPU)


@pytest.fixture(autouse=True)
def _threads_restored():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the num_threads knob is process-wide


def test_each_stage_is_timed_every_step_and_they_add_up_to_the_loop():
    # four times the default transform's work: loading outweighs the instrumented step on a fast CPU too
    trainer = _trainer(SlowTransformFeatures(rounds=160), torch.nn.Linear(64, 4))
    batches = trainer.batches()
    # Some 0.3 s of loop, a few per cent of it in the steps: a busy host's pause there cannot turn the shares.
    steps = 60
    stages = time_stages(trainer, batches, steps, CPU, 0)
    batches.close()
    assert stages.steps == steps and stages.batch_size == 8 and stages.num_workers == 0
    for name in ("wait_s", "transfer_s", "forward_s", "optimizer_s", "step_s", "fetch_s", "collate_s"):
        assert len(getattr(stages, name)) == steps and all(value >= 0 for value in getattr(stages, name)), name
    assert all(f > 0 and o > 0 for f, o in zip(stages.forward_s, stages.optimizer_s, strict=True))
    assert all(s >= f + o for s, f, o in zip(stages.step_s, stages.forward_s, stages.optimizer_s, strict=True))
    assert stages.mean("fetch_s") <= stages.mean("wait_s"), "without workers, fetching happens while the loop waits"
    assert stages.wait_share > 0.5, "the slow transform makes the loop wait"
    accounted = sum(stages.wait_s) + sum(stages.transfer_s) + sum(stages.step_s)
    assert accounted <= stages.wall_s < accounted * 1.5
    assert StageTiming.from_dict(stages.to_dict()) == stages
    assert not trainer.model._forward_hooks and not trainer.optimizer._optimizer_step_post_hooks, "hooks removed"


def test_steps_go_on_past_their_number_until_they_took_the_least_time():
    trainer = _trainer(TinyImages(64), TinyCNN())
    batches = trainer.batches()
    stages = time_stages(trainer, batches, 2, CPU, 0, min_time_s=0.3, max_steps=10_000)
    assert stages.steps > 2 and stages.wall_s >= 0.3, "tiny steps: more than 2 to fill 0.3 s"
    assert len(stages.step_s) == len(stages.fetch_s) == stages.steps
    assert time_stages(trainer, batches, 2, CPU, 0, min_time_s=60, max_steps=5).steps == 5, "at most max_steps"
    batches.close()


def test_with_workers_fetching_is_timed_in_the_workers():
    trainer = _trainer(SlowTransformFeatures(rounds=20), torch.nn.Linear(64, 4), workers=2)
    batches = trainer.batches()
    stages = time_stages(trainer, batches, 4, CPU, 2)
    batches.close()
    assert stages.num_workers == 2 and all(fetch > 0 for fetch in stages.fetch_s)


def test_the_trace_is_a_file_perfetto_and_tensorboard_open_with_the_steps_operators(tmp_path):
    trainer = _trainer(TinyImages(64), TinyCNN())
    batches = trainer.batches()
    path = tmp_path / "trace" / "tiny.pt.trace.json"
    ops = trace_steps(trainer, batches, CPU, 2, path)
    batches.close()
    events = json.loads(path.read_text())["traceEvents"]
    names = {event.get("name") for event in events}
    assert len(events) > 50 and STEP in names and "aten::convolution_backward" in names
    assert sum(name.startswith("ProfilerStep#") for name in names if name) == 2, "wait 1, warm-up 1, active 2"
    assert ops.active_steps == 2 and ops.trace_file == str(path) and ops.device == "cpu"
    assert ops.top and not [op for op in ops.top if op.name.startswith(("ProfilerStep", "autotune:", "enumerate"))]
    calls = {op.name: op.calls for op in ops.step_operators}
    assert calls["aten::convolution_backward"] == 2 and "aten::stack" not in calls, "collating is not the step's"
    assert 0 < ops.outside_operators_s < ops.step_s
    assert OperatorProfile.from_dict(json.loads(json.dumps(ops.to_dict()))) == ops
