"""Process-tree memory, on real processes that allocate known amounts, and the PSS estimate from cheap reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autotune.measure import memory
from autotune.measure.memory import MIB, ProcessTree, TreeReading, peak_estimate, pss_estimate
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
mine = bytearray({private_mb} * 1024 * 1024)  # the parent's alone
for i in range(0, len(mine), 4096):
    mine[i] = 1
time.sleep(0.5)
print("ready", flush=True)
time.sleep(30)
"""

FORK_WITH_FILE = """
import mmap, os, time
with open({path!r}, "rb") as file:
    pages = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
for i in range(0, len(pages), 4096):
    pages[i]
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


def _stop(proc: subprocess.Popen) -> None:
    for pid in ProcessTree(proc.pid).pids()[1:]:
        os.kill(pid, 9)
    proc.kill()
    proc.wait()


@pytest.fixture
def forked():
    """A process holding 200 MiB and a forked child sharing all of it."""
    root = _start(FORK_SHARING.format(private_mb=0))
    yield ProcessTree(root.pid)
    _stop(root)


@pytest.fixture
def lender():
    """A process holding 200 MiB that a forked child shares, and 100 MiB of its own."""
    root = _start(FORK_SHARING.format(private_mb=100))
    yield ProcessTree(root.pid)
    _stop(root)


def test_the_sampled_peak_includes_a_child_that_allocates_a_known_amount():
    tree = ProcessTree(os.getpid())
    before = tree.read_full()
    with PeriodicSampler(tree.read_cheap, interval_s=0.05) as sampler:
        child = _start(ALLOCATE.format(mb=200))
        time.sleep(0.3)
        _stop(child)
    cheap = [reading for _, reading in sampler.samples]
    peak = peak_estimate(cheap, [before], tree.root, None)
    assert len(cheap) >= 3
    assert 200 <= (peak - before.total) / MIB <= 200 + 60, "the child's 200 MiB, plus its interpreter"


def test_pages_shared_with_a_forked_worker_are_counted_once(forked):
    full = forked.read_full()
    if full.pss is None:
        pytest.skip("this OS reports no PSS")
    assert len(full.rss) == 2
    assert sum(full.rss.values()) / MIB >= 400, "RSS counts the shared 200 MiB in both processes"
    assert 200 <= full.total / MIB <= 260, "PSS splits it between them"
    cheap = forked.read_cheap()
    assert cheap.pss is None and sum(cheap.rss.values()) / MIB >= 400
    estimate = pss_estimate(cheap, [full], forked.root)
    assert abs(estimate - full.total) / MIB < 10, "a cheap read less the shared excess of the full read"


@pytest.mark.parametrize("read_by", ["smaps_rollup", "the anonymous mappings of smaps"])
def test_a_forked_tree_counts_the_share_its_lender_holds_of_their_common_pages(lender, read_by, monkeypatch):
    if lender.read_full().pss is None:
        pytest.skip("this OS reports no PSS")
    if read_by != "smaps_rollup":
        monkeypatch.setattr(memory, "_rollup", lambda pid: {})  # a kernel before 5.8: no Pss_Anon
    elif "Pss_Anon" not in memory._rollup(lender.root):
        pytest.skip("this kernel's smaps_rollup has no Pss_Anon")
    child = lender.pids()[1]
    lent = ProcessTree(child, lender=lender.root)._lent()
    assert 100 <= lent / MIB <= 125, "half of the 200 MiB both hold, and of the interpreter's heap; not its own 100"
    assert ProcessTree(child, lender=2**22 + 1)._lent() == 0, "a lender that is gone lends nothing"


def test_a_files_pages_count_in_no_reading_so_another_process_mapping_them_changes_none(tmp_path):
    # The kernel shares a file's pages (a library's code) with every process mapping it, and PSS splits them between
    # those: counted, a trial would read lower whenever another process maps the same torch.
    library = tmp_path / "library.so"
    library.write_bytes(b"\1" * 50 * MIB)
    lender = _start(FORK_WITH_FILE.format(path=str(library)))
    try:
        tree = ProcessTree(lender.pid)
        if tree.read_full().pss is None or "Pss_File" not in memory._rollup(lender.pid):
            pytest.skip("this kernel's smaps_rollup has no Pss_File")
        if memory._rollup(lender.pid)["Pss_File"] < 50 * MIB:
            pytest.skip("the file's pages are not file pages here (a tmpfs)")
        alone = tree.read_full().total
        assert alone < 50 * MIB, "the file's 50 MiB are not the process's own"
        other = _start(FORK_WITH_FILE.format(path=str(library)))  # another process maps the file and touches it all
        try:
            assert abs(tree.read_full().total - alone) < 2 * MIB, "the other process changes nothing"
        finally:
            _stop(other)
        child = tree.pids()[1]
        assert ProcessTree(child, lender=lender.pid)._lent() < 25 * MIB, "nor does the file count as lent"
    finally:
        _stop(lender)


def test_a_process_no_full_read_saw_counts_the_shared_excess_of_its_siblings():
    root, old_worker, new_worker = 1, 2, 3
    full = TreeReading(0.0, rss={root: 500, old_worker: 300}, pss={root: 300, old_worker: 100})
    later = TreeReading(5.0, rss={root: 520, new_worker: 310})  # a worker restarted at an epoch boundary
    assert pss_estimate(later, [full], root) == (520 - 200) + (310 - 200)
    no_workers_then = TreeReading(0.0, rss={root: 500}, pss={root: 300})
    assert pss_estimate(later, [no_workers_then], root) == (520 - 200) + 310, "nothing to go by: its whole RSS"


def test_the_nearest_full_read_in_time_gives_the_excess():
    early = TreeReading(0.0, rss={1: 500}, pss={1: 100})
    late = TreeReading(10.0, rss={1: 500}, pss={1: 400})
    assert pss_estimate(TreeReading(9.0, rss={1: 600}), [early, late], 1) == 500
    assert pss_estimate(TreeReading(1.0, rss={1: 600}), [early, late], 1) == 200


def test_the_root_high_water_mark_catches_a_peak_between_readings():
    full = TreeReading(0.0, rss={1: 500, 2: 300}, pss={1: 400, 2: 200})
    cheap = [TreeReading(1.0, rss={1: 550, 2: 300})]
    assert peak_estimate(cheap, [full], 1, None) == 450 + 200
    assert peak_estimate(cheap, [full], 1, root_peak_rss=900) == (900 - 100) + 200


def test_without_pss_the_estimate_is_the_resident_total():
    rss_only = TreeReading(0.0, rss={1: 500, 2: 300})
    assert pss_estimate(TreeReading(1.0, rss={1: 600, 2: 300}), [rss_only], 1) == 900


def test_the_tree_of_a_process_that_is_gone_is_empty():
    child = _start(ALLOCATE.format(mb=1))
    tree = ProcessTree(child.pid)
    assert tree.read_cheap().total > 0
    _stop(child)
    assert tree.pids() == [] and tree.read_cheap().total == 0


def test_pss_is_read_where_the_kernel_gives_it_found_out_without_a_read(monkeypatch):
    # A read walks the process's page tables (~20 ms for a torch process): whether PSS is readable is known by
    # opening the file, as every trial's tree is made.
    def no_read(self):
        raise AssertionError("read to find out whether PSS is readable")

    monkeypatch.setattr(memory.psutil.Process, "memory_full_info", no_read)
    assert ProcessTree(os.getpid()).metric == "pss"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert ProcessTree(gone.pid).metric == "rss"


def test_a_tree_whose_smaps_cannot_be_opened_is_read_by_its_rss(monkeypatch):
    real_open = open

    def denied(path, *args, **kwargs):
        if str(path).startswith("/proc/") and "smaps" in str(path):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", denied)
    tree = ProcessTree(os.getpid())
    assert tree.metric == "rss" and tree.read_full().pss is None and tree.read_full().total > 0
