"""What a measurement says about itself: other processes busy during its window."""

from __future__ import annotations

import pytest

from autotune.measure.measurement import SystemReport


def test_cores_other_processes_used_are_the_machine_busy_less_the_measured_tree():
    quiet = SystemReport(99.7, [99.5, 99.9], 1.98)
    assert quiet.other_processes_cores == pytest.approx(0.014) and not quiet.disturbed
    shared = SystemReport(100.0, [100.0, 100.0], 1.2)  # the tree got 1.2 of the 2 busy cores
    assert shared.other_processes_cores == pytest.approx(0.8) and shared.disturbed
    assert SystemReport(50.0, [50.0, 50.0], 1.05).other_processes_cores == 0.0, "sampling jitter is not negative"
    many_cores = SystemReport(25.0, [25.0] * 16, 2.0)  # 2 cores for the run, 2 more busy elsewhere, 12 idle
    assert many_cores.other_processes_cores == pytest.approx(2.0) and not many_cores.disturbed
