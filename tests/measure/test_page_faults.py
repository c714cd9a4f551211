"""Fresh pages faulted in, and CPU time in the kernel, over a block of steps."""

from __future__ import annotations

import mmap

import pytest

from autotune.measure.page_faults import FaultWatch, PageFaults

MiB = 2**20


def touch_fresh_pages(megabytes: int) -> None:
    """Map ``megabytes`` of new anonymous memory and write one byte on each of its pages: one fault a page."""
    with mmap.mmap(-1, megabytes * MiB) as block:
        block.madvise(mmap.MADV_NOHUGEPAGE)  # where huge pages are always on, one fault would map 2 MiB
        for offset in range(0, megabytes * MiB, mmap.PAGESIZE):
            block[offset] = 1


def test_pages_touched_in_the_block_are_counted():
    touch_fresh_pages(64)  # before it: not counted
    with FaultWatch() as watch:
        touch_fresh_pages(32)
    faults = watch.over(steps=2)
    pages = 32 * MiB // mmap.PAGESIZE
    assert pages <= faults.minor_faults < 1.5 * pages, "the 32 MiB touched in it, not the 64 before"
    assert faults.mb_per_step == pytest.approx(16, rel=0.5) and faults.page_bytes == mmap.PAGESIZE
    assert faults.system_s > 0 and 0 < faults.kernel_share <= 1
    assert PageFaults.from_dict(faults.to_dict()) == faults


def test_no_cpu_time_no_kernel_share():
    assert PageFaults(steps=1, minor_faults=0, user_s=0.0, system_s=0.0, page_bytes=4096).kernel_share == 0.0


def test_the_faults_are_read_after_the_block_only():
    watch = FaultWatch()
    with pytest.raises(RuntimeError, match="after its with-block"):
        watch.over(steps=1)
