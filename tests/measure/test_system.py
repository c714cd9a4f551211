"""CPU accounting of a process tree, with children that come and go."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.measure.system import CpuUsageMeter, _usable, tree_cpu_seconds

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def test_a_child_that_exits_during_the_interval_is_still_counted():
    ticks = iter([0.0, 2.0])  # the interval's wall time, 2 s however loaded the machine
    meter = CpuUsageMeter(os.getpid(), clock=lambda: next(ticks))
    meter.start()
    before = tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BURN.format(seconds=0.5)], check=True)  # spawned, burns, is reaped
    burned = tree_cpu_seconds(os.getpid()) - before
    assert burned == pytest.approx(0.5, abs=0.25)
    usage = meter.stop()
    assert usage.tree_cores == pytest.approx(burned / 2.0, abs=0.05), "the child's CPU seconds over the interval"
    assert len(usage.per_core_percent) == len(os.sched_getaffinity(0)), "the cores this process may run on"
    assert 0 <= usage.total_percent <= 100


def test_the_tree_never_reads_busier_than_the_cores_it_may_run_on():
    ticks = iter([0.0, 1e-6])  # an interval far shorter than the CPU time spent in it, as a clock tick can make it
    meter = CpuUsageMeter(os.getpid(), clock=lambda: next(ticks))
    meter.start()
    subprocess.run([sys.executable, "-c", BURN.format(seconds=0.2)], check=True)
    usage = meter.stop()
    assert usage.tree_cores == len(os.sched_getaffinity(0)), "0.2 CPU-s over a microsecond: every core, no more"


def test_only_the_cores_this_process_may_run_on_are_counted(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1, 3})  # a container pinned to CPUs 1 and 3
    assert _usable([10.0, 20.0, 30.0, 40.0]) == [20.0, 40.0]
