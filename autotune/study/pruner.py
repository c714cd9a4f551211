"""Stop a trial early when its running throughput is clearly below the best measured so far."""

from __future__ import annotations

from collections.abc import Callable


class SlowerThanBestPruner:
    """Prunes a trial whose last reported throughput is more than ``margin`` (a fraction) below
    ``best()``, the best throughput measured so far (the baseline included).

    Trials report only from their timed window, which starts after warm-up, so a torch.compile
    trial is never judged by its compile time. ``min_steps`` timed steps are needed before a trial
    can be pruned, so a single slow step cannot end it.
    """

    def __init__(self, margin: float, best: Callable[[], float | None], min_steps: int = 10) -> None:
        self.margin = margin
        self.best = best
        self.min_steps = min_steps

    def slower(self, steps: int, throughput: float) -> bool:
        """Whether a trial reading ``throughput`` after ``steps`` timed steps is to be stopped."""
        best = self.best()
        return steps >= self.min_steps and best is not None and throughput < (1 - self.margin) * best

    def reason(self, throughput: float) -> str:
        """Why a trial at ``throughput`` was pruned, for the record."""
        best = self.best() or 0.0
        return (
            f"{throughput:.1f} samples/s after warm-up, more than {self.margin:.0%} below the best so far "
            f"({best:.1f}); stopped early (study.prune_margin)"
        )
