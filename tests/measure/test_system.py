"""CPU accounting of a process tree, with children that come and go."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from autotune.measure.system import CpuUsageMeter, tree_cpu_seconds

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def test_a_child_that_exits_during_the_interval_is_still_counted():
    meter = CpuUsageMeter(os.getpid())
    meter.start()
    before = tree_cpu_seconds(psutil.Process())
    subprocess.run([sys.executable, "-c", BURN.format(seconds=0.5)], check=True)  # spawned, burns, is reaped
    assert tree_cpu_seconds(psutil.Process()) - before == pytest.approx(0.5, abs=0.25)
    usage = meter.stop()
    assert usage.tree_cores > 0.3, "half a second of CPU in well under two seconds of wall time"
    assert len(usage.per_core_percent) == psutil.cpu_count()
    assert 0 <= usage.total_percent <= 100
