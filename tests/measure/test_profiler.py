"""The public profiling API around a real (small) training loop, in this process."""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
import warnings
from functools import partial

import pytest
import torch

import autotune
from autotune.errors import AutotuneError
from autotune.measure import core_speed, recorder
from autotune.measure.gpu import DeviceTimeline
from autotune.measure.measurement import Measurement
from autotune.measure.memory import ProcessTree
from autotune.measure.profiler import Profiler, batch_len, prepared_ahead
from autotune.measure.recorder import DONE, WARMUP, WINDOW, WindowPlan
from autotune.measure.warmup import WarmupPolicy
from tests.fixtures.tiny import TinyCNN, TinyImages
from tests.measure.conftest import tree_tasks

QUICK = WarmupPolicy(min_steps=2, max_steps=4)


def train(prof, steps=30, count_flops=True):
    model, loss_fn = TinyCNN(), torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(TinyImages(512), batch_size=16)

    def step(inputs, targets):
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    for index, (inputs, targets) in enumerate(prof.wrap(loader)):
        step(inputs, targets)
        prof.step()
        if index + 1 == steps or prof.done:
            break
    if count_flops:
        prof.count_flops(partial(step, inputs, targets), samples=len(inputs))


def test_profile_measures_a_users_loop_and_saves_json(tmp_path):
    with autotune.profile("train", plan=WindowPlan.unbounded(QUICK), memory_interval_s=0.05) as prof:
        train(prof)
    result = prof.result
    assert result.name == "train" and result.device == "cpu"
    assert result.timing.warmup_steps + result.timing.steps == 30
    assert result.timing.samples == 16 * result.timing.steps
    assert result.timing.throughput == pytest.approx(result.timing.samples / result.timing.window_s)
    assert result.memory.metric in ("pss", "rss") and result.memory.peak_mb > 50
    assert result.memory.window_start_mb > 0 and result.memory.window_end_mb > 0
    assert result.compute.flops_per_sample > 0
    assert result.compute.achieved_flops_per_s == pytest.approx(
        result.compute.flops_per_sample * result.timing.throughput
    )
    assert len(result.system.cpu_per_core_percent) >= 1 and result.system.process_tree_cores >= 0
    assert result.system.gpu_utilization_percent is None and "NVML" in result.system.gpu_note
    assert result.environment["cpu_count"] >= 1

    path = result.save(tmp_path / "profile.json")
    assert set(json.loads(path.read_text())) == {
        "name",
        "device",
        "timing",
        "memory",
        "compute",
        "system",
        "environment",
    }
    assert Measurement.load(path) == result


def test_a_bounded_plan_says_when_the_window_is_done(monkeypatch):
    monkeypatch.setattr(recorder, "STALL", math.inf)  # no batch read as a stall on a busy host: it ends at 5 steps
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)
    with autotune.profile(plan=plan) as prof:
        train(prof, steps=1000, count_flops=False)
    assert prof.done and prof.result.timing.steps == 5
    assert prof.result.compute.flops_per_sample is None and "not counted" in prof.result.compute.note


def test_a_flop_counting_step_that_runs_out_of_memory_leaves_the_loops_figures_and_says_why(monkeypatch):
    # The step counted is eager and runs beside the loop's memory: a batch that trained compiled may not fit it.
    monkeypatch.setattr(recorder, "STALL", math.inf)
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)

    def eager_step():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore lines")

    with autotune.profile(plan=plan) as prof:
        train(prof, steps=1000, count_flops=False)
        prof.count_flops(eager_step, samples=16)
    assert prof.result.timing.steps == 5 and prof.result.timing.throughput > 0
    assert prof.result.compute.flops_per_sample is None
    assert prof.result.compute.note == (
        "FLOPs not counted: the eager step run to count them raised OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB"
    )


def test_a_loop_that_ends_before_a_bounded_window_is_complete_warns():
    plan = WindowPlan(min_steps=50, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)
    with pytest.warns(
        UserWarning,
        match=r"ended before the timed window was complete \(\d+ steps in [\d.]+ s; the plan asks for 50 steps",
    ):
        with autotune.profile(plan=plan) as prof:
            train(prof, steps=20, count_flops=False)
    assert not prof.done and 0 < prof.result.timing.steps < 50


def test_an_unbounded_window_ends_with_the_loop_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with autotune.profile(plan=WindowPlan.unbounded(QUICK)) as prof:
            train(prof, steps=20, count_flops=False)
    assert prof.result.timing.steps > 0
    assert WindowPlan.unbounded().bounded is False and WindowPlan().bounded is True


def test_a_loop_too_short_to_warm_up_is_an_error():
    with pytest.raises(AutotuneError, match="ended during warm-up"):
        with autotune.profile(plan=WindowPlan.unbounded(WarmupPolicy(min_steps=8))) as prof:
            train(prof, steps=3)


def test_an_exception_in_the_loop_propagates_without_a_result():
    with pytest.raises(ZeroDivisionError):
        with autotune.profile() as prof:
            raise ZeroDivisionError
    assert prof.result is None


def test_batch_len():
    assert batch_len(torch.zeros(5, 3)) == 5
    assert batch_len((torch.zeros(4, 3), torch.zeros(4))) == 4
    assert batch_len({"x": torch.zeros(6, 2)}) == 6
    with pytest.raises(AutotuneError, match="pass step"):
        batch_len("text")


# What one read of the process tree's memory may cost inside a timed window, in the sampler thread's CPU time (the
# core and the interpreter it takes from the loop; its wall time also counts the waits of a busy machine): it runs
# every measure.memory_interval_s (0.5 s), so 0.5 ms, and 30 µs a thread of the tree (listing the tree reads a file
# for each), is 0.1 % of the window for a tree of a few threads. A PSS read costs several ms a process here.
# The lower quartile of the reads is what a read costs: thread time too grows while the suite's other processes
# share this core's caches. The figures are a Xeon's, whose core counts to core_speed.LOOP in ~5 ms: a slower host's
# reads cost more in proportion (an AMD EPYC taking ~23 ms read 1.3 ms a read), a PSS read still several times more.
IN_WINDOW_READ_BUDGET_S = 0.0005
IN_WINDOW_READ_BUDGET_PER_TASK_S = 0.00003
BUDGET_HOST_LOOP_S = 0.005


def host_slowness() -> float:
    """How many times slower than the budget's host this one runs Python (at least 1)."""
    return max(1.0, statistics.median(core_speed.loop_s() for _ in range(5)) / BUDGET_HOST_LOOP_S)


def test_inside_the_window_every_memory_read_is_cheap_and_the_costly_ones_run_at_its_edges(monkeypatch):
    reads = []

    def timed(method):
        def read(tree):
            start, cpu = time.perf_counter(), time.thread_time()
            reading = method(tree)
            reads.append((method.__name__, start, time.thread_time() - cpu, tree_tasks(tree.root)))
            return reading

        return read

    for name in ("read_cheap", "read_full"):
        monkeypatch.setattr(ProcessTree, name, timed(getattr(ProcessTree, name)))
    plan = WindowPlan(min_steps=10, min_time_s=0.6, max_time_s=60.0, warmup=QUICK)
    with autotune.profile(plan=plan, memory_interval_s=0.01) as prof:
        loader = torch.utils.data.DataLoader(TinyImages(4096), batch_size=16, num_workers=2)
        for _ in prof.wrap(loader):
            time.sleep(0.002)
            prof.step()
            if prof.done:
                break
    start, end = prof.recorder.window_start, prof.recorder.window_end
    inside = [(name, cost, tasks) for name, at, cost, tasks in reads if start <= at <= end]
    assert len(inside) >= 20, "the sampler kept reading through the window"
    assert {name for name, _, _ in inside} == {"read_cheap"}, "no PSS read inside the window"
    tasks = max(tasks for _, _, tasks in inside)
    budget = (IN_WINDOW_READ_BUDGET_S + IN_WINDOW_READ_BUDGET_PER_TASK_S * tasks) * host_slowness()
    assert statistics.quantiles([cost for _, cost, _ in inside], n=4)[0] <= budget, f"a tree of {tasks} threads"
    assert sum(name == "read_full" for name, *_ in reads) == 3, "before the loop and at the window's two edges"
    assert prof.result.memory.peak_mb >= prof.result.memory.window_end_mb > 0


class FakeCudaEvent:
    """torch.cuda.Event's timing API, on ``clock`` (the host's by default)."""

    def __init__(self, enable_timing: bool = False, clock=time.perf_counter) -> None:
        self.at, self.clock = None, clock

    def record(self, stream=None) -> None:
        self.at = self.clock()

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        return (end.at - self.at) * 1000


class VirtualClock:
    """A clock that moves only as told: a fake device's steps take what they are said to, however busy the host."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeCuda:
    """The CUDA calls the profiler makes, without a GPU: the phase of ``profiler`` at each torch.cuda.synchronize(),
    and events on ``clock`` (the host's, or the virtual one of ``loop``)."""

    def __init__(self) -> None:
        self.profiler: Profiler | None = None
        self.sync_phases: list[str] = []
        self.clock = time.perf_counter

    def synchronize(self, device=None) -> None:
        self.sync_phases.append(self.profiler.recorder.phase)

    def event(self, enable_timing: bool = False) -> FakeCudaEvent:
        return FakeCudaEvent(enable_timing, lambda: self.clock())

    def loop(self, steps: int, load_s: float | list[float], compute_s: float | list[float]) -> Profiler:
        """A loop on 'cuda' whose batches take ``load_s`` to arrive and whose steps take ``compute_s`` (each a list:
        the times in turn, over and over), on a virtual clock: the profiler's own marks take no time (the steps
        sampled on the device are drawn by ``DeviceTimeline``'s seeded generator)."""
        computes = itertools.cycle(compute_s if isinstance(compute_s, list) else [compute_s])
        loads = itertools.cycle(load_s if isinstance(load_s, list) else [load_s])
        self.clock = clock = VirtualClock()

        def batches():
            while True:
                clock.advance(next(loads))
                yield torch.zeros(4, 2)

        self.sync_phases.clear()
        plan = WindowPlan(min_steps=steps, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)
        self.profiler = Profiler(device="cuda", plan=plan, clock=clock)
        with self.profiler as prof:
            for _ in prof.wrap(batches()):
                prof.transferred()
                clock.advance(next(computes))
                prof.step()
                if prof.done:
                    break
        return prof


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeCuda:
    cuda = FakeCuda()
    monkeypatch.setattr(torch.cuda, "synchronize", cuda.synchronize)
    monkeypatch.setattr(torch.cuda, "Event", cuda.event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 0)
    return cuda


def test_on_cuda_the_window_waits_for_the_device_once_whatever_its_length(fake_cuda):
    for steps in (10, 100):
        prof = fake_cuda.loop(steps, 0.0, 0.001)
        phases = fake_cuda.sync_phases
        assert prof.result.timing.steps >= steps, "a window that aligns to stalls (the OS's, here) may run longer"
        assert phases.count(WINDOW) == 0, "no synchronisation while the window runs"
        assert phases.count(DONE) == 1, "one, when it ends"
        assert phases.count(WARMUP) == prof.result.timing.warmup_steps, "warm-up is not timed"


def test_on_cuda_the_steps_sampled_follow_the_warm_ups_step_time(fake_cuda, monkeypatch):
    # Each sampled step creates and records four events on the host, inside the window: DeviceTimeline's rule
    # (tests/measure/test_gpu.py, without clocks) keeps their share small from the warm-up's settled step time. Here,
    # that the profiler feeds it that time, and samples the window's steps by it, whatever the machine's load made of
    # the steps' lengths.
    fed = []
    start = DeviceTimeline.start
    monkeypatch.setattr(DeviceTimeline, "start", lambda self, step_s: fed.append(step_s) or start(self, step_s))
    prof = fake_cuda.loop(400, 0.0, 0.0005)
    assert fed == [prof.recorder.settled_step_s] and 0 < fed[0] < DeviceTimeline.spacing_s
    steps, probability = prof.result.timing.steps, fed[0] / DeviceTimeline.spacing_s
    sampled, expected = len(prof._timeline.steps), 1 + (steps - 1) * probability
    spread = 5 * math.sqrt(steps * probability * (1 - probability)) + 1
    assert abs(sampled - expected) <= spread, f"{sampled} of {steps} steps sampled, {expected:.0f} expected"


def test_on_cuda_steps_that_repeat_a_pattern_are_sampled_in_each_of_its_phases(fake_cuda):
    # Three short steps and a long one (gradient accumulation's optimizer step every fourth): sampled by the clock,
    # the sampled steps were the same phase each time, and the interval missed the throughput.
    prof = fake_cuda.loop(400, 0.0, [0.004, 0.004, 0.004, 0.016])
    sampled, timing = prof._timeline.split().durations(), prof.result.timing
    assert statistics.fmean(sampled) == pytest.approx(timing.window_s / timing.steps, rel=0.25), sorted(sampled)


def test_on_cuda_rare_long_waits_for_data_count_though_few_steps_are_sampled(fake_cuda):
    # Workers that fall behind now and then, or an epoch boundary: one batch in ten is 40 ms late, and the steps take
    # 1 ms. The events sample about one step in twenty, so most windows' samples held no late batch, and the
    # split read the loop as computing (0.6 % data wait, seen on an H200, where the loop waited 80 % of the time).
    timing = fake_cuda.loop(200, [0.0] * 9 + [0.04], 0.001).result.timing
    late = timing.steps // 10 * 0.04
    assert timing.data_wait_s == pytest.approx(late, rel=0.15), timing
    assert timing.data_stall_fraction > 0.6
    assert timing.throughput_ci95_low <= timing.throughput <= timing.throughput_ci95_high  # equal: a loop that repeats


def test_on_cuda_data_wait_and_compute_come_from_device_events(fake_cuda):
    timing = fake_cuda.loop(40, 0.003, 0.003).result.timing
    assert 0.35 < timing.data_stall_fraction < 0.65
    assert timing.compute_s == pytest.approx(timing.window_s - timing.data_wait_s - timing.transfer_s, rel=0.05)
    assert timing.median_step_s == pytest.approx(0.006, rel=0.5)


class SlowLoadingImages(TinyImages):
    """TinyImages that take 2 ms a sample to load: a batch of 16, ~32 ms in a worker."""

    def __getitem__(self, index: int):
        time.sleep(0.002)
        return super().__getitem__(index)


def test_the_batches_loaded_during_the_window_start_readings_are_used_up_before_its_clock_starts(monkeypatch):
    # The readings pause the loop, not the workers: the batches they load meanwhile would come free in the window.
    read_full = ProcessTree.read_full
    monkeypatch.setattr(ProcessTree, "read_full", lambda tree: time.sleep(0.4) or read_full(tree))
    # The window ends at its 8th step: the rule that stretches a window to whole cycles of stall and burst (the
    # workers' pairs) would, where a busy machine makes the waits read as stalls, move its start past these steps.
    monkeypatch.setattr(recorder, "STALL", math.inf)
    loader = torch.utils.data.DataLoader(SlowLoadingImages(4096), batch_size=16, num_workers=2, prefetch_factor=2)
    assert prepared_ahead(loader) == 4
    plan = WindowPlan(min_steps=8, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)
    with autotune.profile(plan=plan) as prof:
        for _ in prof.wrap(loader):
            prof.step()
            if prof.done:
                break
    waits = prof.recorder._waits  # two workers deliver their batches in pairs: ~32 ms, then ~0
    assert len(waits) == 8
    assert sum(waits[:4]) > 0.5 * sum(waits[4:]), f"the window's first batches came free: {waits}"


def test_only_a_dataloader_with_workers_loads_batches_ahead():
    images = TinyImages(64)
    assert prepared_ahead(torch.utils.data.DataLoader(images, num_workers=3, prefetch_factor=5)) == 15
    assert prepared_ahead(torch.utils.data.DataLoader(images, num_workers=2)) == 4, "torch's default of 2 a worker"
    assert prepared_ahead(torch.utils.data.DataLoader(images)) == 0
    assert prepared_ahead([images[0]]) == 0


def test_the_drain_is_what_the_workers_may_have_loaded_during_the_pause_at_most_what_they_load_ahead():
    prof = Profiler(plan=WindowPlan(warmup=QUICK))
    prof.recorder.warmup_times = [0.1] * 4  # settled at 0.1 s a step
    prof._prepared = 8
    assert prof._loaded_meanwhile(0.05) == 2, "about one batch a step, and one more"
    assert prof._loaded_meanwhile(5.0) == 8, "no more than the workers load ahead"
    prof._prepared = 0
    assert prof._loaded_meanwhile(5.0) == 0


def test_a_loop_that_ends_while_draining_says_so(monkeypatch):
    read_full = ProcessTree.read_full
    monkeypatch.setattr(ProcessTree, "read_full", lambda tree: time.sleep(0.3) or read_full(tree))  # a long pause
    loader = torch.utils.data.DataLoader(TinyImages(16 * 7), batch_size=16, num_workers=2, prefetch_factor=4)
    with pytest.raises(AutotuneError, match=r"ended \d+ steps? before its window, still using up the batches"):
        with Profiler(plan=WindowPlan(min_steps=4, min_time_s=0.0, warmup=QUICK)) as prof:
            for _ in prof.wrap(loader, 100):
                prof.step()
