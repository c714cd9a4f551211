"""When has training warmed up? When step times stop changing, not after a guessed number of steps."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WarmupPolicy:
    """Warm-up ends at the first step where the median of the last ``span`` step times is within
    ``tolerance`` of the median of the ``span`` before them, after at least ``min_steps`` steps;
    it ends anyway after ``max_steps`` steps (and is then marked as not settled).
    """

    min_steps: int = 8
    max_steps: int = 60
    span: int = 4
    tolerance: float = 0.15

    def is_stable(self, step_times: Sequence[float]) -> bool:
        """Whether the most recent step times have settled."""
        if len(step_times) < max(self.min_steps, 2 * self.span):
            return False
        recent = statistics.median(step_times[-self.span :])
        before = statistics.median(step_times[-2 * self.span : -self.span])
        return abs(recent - before) <= self.tolerance * before

    def gives_up(self, step_times: Sequence[float]) -> bool:
        """Whether warm-up must end without having settled."""
        return len(step_times) >= self.max_steps


def excess_time(step_times: Sequence[float], typical_step_s: float) -> float:
    """Time spent beyond ``typical_step_s`` per step: one-off work such as compilation."""
    return sum(max(0.0, t - typical_step_s) for t in step_times)
