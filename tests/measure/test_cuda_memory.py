"""The largest CUDA allocations of a few steps and the user's line that made each (the GPU test skips without one)."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.cuda_memory import _where, largest_cuda_allocations


def test_an_allocation_is_placed_at_the_users_line_not_the_librarys():
    frames = [
        {"filename": "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
        {"filename": __file__, "line": 7, "name": "step"},
    ]
    assert _where(frames) == "tests/measure/test_cuda_memory.py:7 step"
    assert _where(frames[:1]).endswith("linear.py:125 forward"), "no user frame: the innermost recorded"
    assert _where([]) == "?:0 ?"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_largest_allocation_of_the_steps_comes_first_with_its_line():
    device = torch.device("cuda")
    kept = []

    def steps() -> None:
        kept.append(torch.empty(64 * 2**20, dtype=torch.uint8, device=device))  # 64 MiB
        kept.append(torch.empty(2**20, dtype=torch.uint8, device=device))

    largest = largest_cuda_allocations(steps, device)
    assert largest[0].size_mb == pytest.approx(64) and "test_cuda_memory.py" in largest[0].where
