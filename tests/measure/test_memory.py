"""The process-tree memory sampler, on real processes that allocate known amounts."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from autotune.measure.memory import TreeMemorySampler, best_metric, tree_memory_bytes

ALLOCATE = """
import sys, time
block = bytearray({mb} * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
time.sleep(30)
"""


def _child(mb: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", ALLOCATE.format(mb=mb)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_the_peak_includes_a_child_that_allocates_a_known_amount():
    parent = psutil.Process()
    metric = best_metric(parent)
    before = tree_memory_bytes(parent, metric)
    with TreeMemorySampler(parent.pid, interval_s=0.05) as sampler:
        child = _child(200)
        time.sleep(0.3)
        child.kill()
        child.wait()
    peak_mb = sampler.result().peak_mb
    assert sampler.result().metric == metric
    assert sampler.result().samples >= 3
    assert 200 <= peak_mb - before / 2**20 <= 200 + 60, "the child's 200 MiB, plus its interpreter"


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


def test_pages_shared_with_a_forked_worker_are_counted_once_with_pss():
    root = subprocess.Popen([sys.executable, "-c", FORK_SHARING], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout.readline().strip() == "ready"
        proc = psutil.Process(root.pid)
        if best_metric(proc) != "pss":
            pytest.skip("this OS reports no PSS")
        rss_mb = tree_memory_bytes(proc, "rss") / 2**20
        pss_mb = tree_memory_bytes(proc, "pss") / 2**20
        assert rss_mb >= 400, "RSS counts the shared 200 MiB in both processes"
        assert 200 <= pss_mb <= 260, "PSS splits it between them"
    finally:
        for child in psutil.Process(root.pid).children():
            child.kill()
        root.kill()
        root.wait()
