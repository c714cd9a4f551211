"""On a GPU the trace times the training step's closing wait for the device apart (``profiling.DEVICE_WAIT``): the
step's time holds it, the host's time outside any operator does not, and what ran while the host waited is that
wait. No GPU here: the device is one that says it is CUDA, its synchronize a sleep that runs an operator."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from autotune.measure import trace
from autotune.measure.profiling import DEVICE_WAIT
from autotune.results.diagnosis import figures
from tests.results.profile_records import profile_result

WAIT_S = 0.02
ACTIVE = 3


class Parts:
    """A training step of one small linear layer, on batches already on the device."""

    accumulation_steps = 1

    def __init__(self) -> None:
        self.model = torch.nn.Linear(4, 4)

    def to_device(self, batch):
        return batch

    def train_step(self, batch):
        return self.model(batch).sum()


def batches():
    while True:
        yield SimpleNamespace(batch=torch.randn(8, 4))


def slow_synchronize(device) -> None:
    """The host waiting ``WAIT_S`` for the device, a runtime call recorded as it waits (``aten::zeros``)."""
    torch.zeros(3)
    time.sleep(WAIT_S)


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_the_hosts_wait_for_the_gpu_is_timed_apart_from_its_time_outside_operators(monkeypatch, tmp_path):
    monkeypatch.setattr(trace, "synchronize", slow_synchronize)
    cuda = SimpleNamespace(type="cuda")
    ops = trace.trace_steps(Parts(), batches(), cuda, ACTIVE, tmp_path / "t.pt.trace.json")
    (wait,) = [op for op in ops.step_operators if op.name == DEVICE_WAIT]
    assert wait.calls == ACTIVE and wait.self_cpu_s >= ACTIVE * WAIT_S and ops.step_s >= wait.self_cpu_s
    assert ops.outside_operators_s < WAIT_S, "the host's time outside operators holds none of the wait"
    assert "aten::zeros" not in [op.name for op in ops.step_operators], "what ran in the wait is the wait"
    assert DEVICE_WAIT not in [op.name for op in ops.top], "a mark, not an operator"
    profiled = replace(profile_result(device_busy=0.0), operators=ops)
    assert figures(profiled).overhead_share < 0.5, "the wait read as no overhead of the host's"


def test_off_a_gpu_the_step_has_no_device_wait(tmp_path):
    ops = trace.trace_steps(Parts(), batches(), torch.device("cpu"), ACTIVE, tmp_path / "t.pt.trace.json")
    assert DEVICE_WAIT not in [op.name for op in ops.step_operators]
