"""When has training warmed up? When step times stop changing, not after a guessed number of steps."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

# A GPU raises its clocks from idle over a fraction of a second once work arrives, and millisecond steps can pass the
# step-count rules in well under 0.1 s: on CUDA, warm-up lasts at least this long unless the setting says otherwise.
CUDA_WARMUP_MIN_TIME_S = 1.0


@dataclass(frozen=True)
class WarmupPolicy:
    """Warm-up ends at the first step where the median of the last ``span`` step times is within
    ``tolerance`` of the median of the ``span`` before them, after at least ``min_steps`` steps and
    ``min_time_s`` seconds; it ends anyway after ``max_steps`` steps once ``min_time_s`` has passed (and is then
    marked as not settled). ``span`` None: half of ``min_steps`` (at least 1), so that the fewest steps warm-up takes
    are the two spans compared.

    ``min_time_s`` None means: decided by the device (``on``): ``CUDA_WARMUP_MIN_TIME_S`` on CUDA, whose clocks
    ramp up while millisecond steps already look settled; 0 on a CPU, whose frequency follows load within
    milliseconds, so settled step times already show it, and where a minimum would only lengthen every trial.
    """

    min_steps: int = 8
    max_steps: int = 60
    span: int | None = None
    tolerance: float = 0.15
    min_time_s: float | None = None

    def on(self, device_type: str) -> WarmupPolicy:
        """This policy with ``min_time_s`` decided for a device of ``device_type`` ("cpu", "cuda") where it is None."""
        if self.min_time_s is not None:
            return self
        return replace(self, min_time_s=CUDA_WARMUP_MIN_TIME_S if device_type == "cuda" else 0.0)

    def is_stable(self, step_times: Sequence[float]) -> bool:
        """Whether the most recent step times have settled (and warm-up has lasted ``min_time_s``)."""
        span = self.compared
        if len(step_times) < max(self.min_steps, 2 * span) or not self._long_enough(step_times):
            return False
        recent = statistics.median(step_times[-span:])
        before = statistics.median(step_times[-2 * span : -span])
        return abs(recent - before) <= self.tolerance * before

    @property
    def compared(self) -> int:
        """How many step times each median of ``is_stable`` takes: ``span``, or half of ``min_steps``."""
        return self.span or max(1, self.min_steps // 2)

    def gives_up(self, step_times: Sequence[float]) -> bool:
        """Whether warm-up must end without having settled."""
        return len(step_times) >= self.max_steps and self._long_enough(step_times)

    def _long_enough(self, step_times: Sequence[float]) -> bool:
        # Warm-up steps follow one another, so their times add up to the warm-up's duration. A policy no device has
        # decided (``on``) asks for no minimum.
        return sum(step_times) >= (self.min_time_s or 0.0)


def excess_time(step_times: Sequence[float], typical_step_s: float) -> float:
    """Time spent beyond ``typical_step_s`` per step: one-off work such as compilation."""
    return sum(max(0.0, t - typical_step_s) for t in step_times)
