"""Floating-point operations of a training step, counted by torch.utils.flop_counter."""

from __future__ import annotations

from collections.abc import Callable

from torch.utils.flop_counter import FlopCounterMode


def count_flops(run_step: Callable[[], object]) -> int:
    """FLOPs that ``run_step()`` performs (matrix multiplies and convolutions, forward and backward)."""
    counter = FlopCounterMode(display=False)
    with counter:
        run_step()
    return counter.get_total_flops()
