"""The PSS estimate of a cheap read takes each process's shared excess from a full read of the same process layout:
a process's excess changes as workers fork from it or exit, whatever the time between the reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.measure.memory import MIB, ProcessTree, TreeReading, peak_estimate, pss_estimate

ROOT = 1
# A trial's full reads: before the loop, before the DataLoader forks its 2 workers (pids 2 and 3); then at the
# window's start, once they share the root's pages (the root's excess grows from 48 to 409).
BEFORE_FORK = TreeReading(0.0, rss={ROOT: 624}, pss={ROOT: 576})
AFTER_FORK = TreeReading(0.6, rss={ROOT: 627, 2: 571, 3: 571}, pss={ROOT: 218, 2: 194, 3: 194})
TRUE_WITH_WORKERS = 218 + 194 + 194

FORK_ON_DEMAND = """
import os, sys, time
block = bytearray(200 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
sys.stdin.readline()
if os.fork() == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(0.3)
print("forked", flush=True)
time.sleep(30)
"""


def test_a_cheap_read_with_workers_takes_the_excess_of_a_full_read_with_them_not_the_nearest_one():
    cheap = TreeReading(0.2, rss={ROOT: 627, 2: 571, 3: 571})  # nearer the read before the fork
    assert pss_estimate(cheap, [BEFORE_FORK, AFTER_FORK], ROOT) == pytest.approx(TRUE_WITH_WORKERS, rel=0.05)


def test_a_cheap_read_before_the_fork_takes_the_excess_of_the_full_read_before_it():
    cheap = TreeReading(0.5, rss={ROOT: 630})  # the workers not yet forked; nearer the read after the fork
    assert pss_estimate(cheap, [BEFORE_FORK, AFTER_FORK], ROOT) == 630 - 48


def test_workers_no_full_read_saw_take_the_excess_of_siblings_from_a_full_read_with_workers():
    cheap = TreeReading(0.2, rss={ROOT: 627, 4: 571, 5: 571})  # workers restarted, nearer the read without any
    assert pss_estimate(cheap, [BEFORE_FORK, AFTER_FORK], ROOT) == pytest.approx(TRUE_WITH_WORKERS, rel=0.05)


def test_the_full_read_of_the_same_processes_outranks_a_nearer_one_of_other_workers():
    first_epoch = TreeReading(1.0, rss={ROOT: 600, 2: 500, 3: 500}, pss={ROOT: 400, 2: 300, 3: 300})
    third_epoch = TreeReading(10.0, rss={ROOT: 600, 6: 500, 7: 500}, pss={ROOT: 200, 6: 200, 7: 200})
    cheap = TreeReading(2.0, rss={ROOT: 600, 6: 500, 7: 500})
    assert pss_estimate(cheap, [BEFORE_FORK, first_epoch, third_epoch], ROOT) == 200 + 200 + 200


def test_a_full_read_that_saw_every_process_outranks_a_nearer_one_that_saw_fewer():
    more_workers = TreeReading(5.0, rss={ROOT: 627, 2: 571, 3: 571}, pss={ROOT: 218, 2: 194, 3: 194})
    cheap = TreeReading(0.1, rss={ROOT: 627, 2: 571})  # worker 3 not yet started
    assert pss_estimate(cheap, [BEFORE_FORK, more_workers], ROOT) == 218 + 194


def test_the_peak_of_a_warm_up_with_workers_is_not_counted_twice():
    warm_up = [TreeReading(t, rss={ROOT: 627, 2: 571, 3: 571}) for t in (0.1, 0.2, 0.3, 0.4, 0.5)]
    window_end = TreeReading(3.0, rss={ROOT: 627, 2: 571, 3: 571}, pss={ROOT: 218, 2: 194, 3: 194})
    peak = peak_estimate(warm_up, [BEFORE_FORK, AFTER_FORK, window_end], ROOT, None)
    assert peak == pytest.approx(max(BEFORE_FORK.total, TRUE_WITH_WORKERS), rel=0.05)


def test_a_real_fork_between_two_full_reads_is_estimated_from_the_read_after_it():
    times = iter([0.0, 0.2, 0.6])  # the cheap read nearer the full read before the fork
    proc = subprocess.Popen(
        [sys.executable, "-c", FORK_ON_DEMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        tree = ProcessTree(proc.pid, clock=lambda: next(times))
        before = tree.read_full()
        if before.pss is None:
            pytest.skip("this OS reports no PSS")
        proc.stdin.write("fork\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "forked"
        cheap, after = tree.read_cheap(), tree.read_full()
        assert len(cheap.rss) == len(after.rss) == 2
        assert sum(cheap.rss.values()) / MIB >= 400, "RSS counts the shared 200 MiB in both processes"
        estimate = pss_estimate(cheap, [before, after], tree.root)
        assert abs(estimate - after.total) / MIB < 10, "not the root's excess before the fork beside the child's after"
    finally:
        for pid in ProcessTree(proc.pid).pids()[1:]:
            os.kill(pid, 9)
        proc.kill()
        proc.wait()
