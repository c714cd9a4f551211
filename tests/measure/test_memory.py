"""Process-tree memory, on real processes that allocate known amounts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from autotune.measure.memory import MIB, best_metric, tree_memory_bytes, tree_memory_reader
from autotune.measure.sampler import PeriodicSampler

ALLOCATE = """
import sys, time
block = bytearray({mb} * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
time.sleep(30)
"""

FORK_SHARING = """
import os, time
block = bytearray(200 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
if os.fork() == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(0.5)
print("ready", flush=True)
time.sleep(30)
"""


def _start(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_the_sampled_peak_includes_a_child_that_allocates_a_known_amount():
    read, metric = tree_memory_reader(os.getpid())
    before = read()
    with PeriodicSampler(read, interval_s=0.05) as sampler:
        child = _start(ALLOCATE.format(mb=200))
        time.sleep(0.3)
        child.kill()
        child.wait()
    peak = max(value for _, value in sampler.samples)
    assert metric == best_metric(psutil.Process())
    assert len(sampler.samples) >= 3
    assert 200 <= (peak - before) / MIB <= 200 + 60, "the child's 200 MiB, plus its interpreter"


def test_pages_shared_with_a_forked_worker_are_counted_once_with_pss():
    root = _start(FORK_SHARING)
    try:
        proc = psutil.Process(root.pid)
        if best_metric(proc) != "pss":
            pytest.skip("this OS reports no PSS")
        rss_mb = tree_memory_bytes(proc, "rss") / MIB
        pss_mb = tree_memory_bytes(proc, "pss") / MIB
        assert rss_mb >= 400, "RSS counts the shared 200 MiB in both processes"
        assert 200 <= pss_mb <= 260, "PSS splits it between them"
    finally:
        for child in psutil.Process(root.pid).children():
            child.kill()
        root.kill()
        root.wait()


def test_the_reader_returns_none_once_the_process_is_gone():
    child = _start(ALLOCATE.format(mb=1))
    read, _ = tree_memory_reader(child.pid)
    assert read() > 0
    child.kill()
    child.wait()
    assert read() is None
