"""The waits for data at epochs' starts, as a long run pays them: once an epoch, not as often as a profile's timed
steps happened to hold them (30 steps holding one start of a 1000-step epoch would pay it once in 30).

A DataLoader with workers begins each epoch with no batch loaded ahead: workers that do not persist start again, and
workers that persist refill their queue from empty (``docs/measurement.md``); either way the step whose batch began
the epoch (``StageTiming.epoch_starts``) waits longer than the rest. Without workers an epoch's first batch loads as
every other does. What the verdict (``diagnosis.figures``) and the advice (``remedies.advise``) read, both: one rule.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from autotune.measure.profiling import ProfileResult, StageTiming


@dataclass(frozen=True)
class EpochStarts:
    """The waits for data of the timed steps that began an epoch of a DataLoader with workers (``waits``:
    ``epoch_starts``), among ``steps`` timed steps; epochs of ``epoch`` steps (None: unknown, ``_epoch``)."""

    waits: list[float]
    steps: int
    epoch: int | None = None

    def per_step_s(self, saved_s: float = 0.0) -> float:
        """Those waits a step of a long run, had loading a batch cost ``saved_s`` less (each waits for its batch's
        loading too): one an epoch where its length is known; else as often as the timed steps held them."""
        lost = [max(0.0, wait - saved_s) for wait in self.waits]
        if lost and self.epoch:
            return statistics.fmean(lost) / self.epoch
        return sum(lost) / max(self.steps, 1)

    def in_window_s(self) -> float:
        """Those waits a step of the timed steps, as their mean step holds them."""
        return sum(self.waits) / max(self.steps, 1)


def epoch_starts(result: ProfileResult) -> EpochStarts:
    """The waits of the timed steps that began an epoch (``StageTiming.epoch_starts``) of a DataLoader with workers
    (``num_workers`` > 0): nothing was loaded ahead of such a batch; epochs as long as ``_epoch`` says. A long wait
    at another step is a steady wait that varies (a stream opening its next file), however regular; a profile stored
    before the epochs' starts were recorded has none known, and reads as its timed steps held its waits."""
    stages = result.stages
    starts = (stages.epoch_starts or []) if stages.num_workers > 0 else []
    return EpochStarts([stages.wait_s[step] for step in starts], stages.steps, _epoch(result))


def _epoch(result: ProfileResult) -> int | None:
    """The steps of an epoch of the profiled DataLoader: as measured, the spacing of the timed steps that began one
    (``StageTiming.epoch_starts``) where two or more did; else, of a dataset with a length, its full batches (the
    loader drops the last part-batch, so that its len() is ``dataset_len // batch_size``), but for a stream every
    worker reads whole (``ProfileResult.repeats_in_workers``), whose epochs are as many times longer as it has
    workers; else unknown (None)."""
    starts = result.stages.epoch_starts or []
    if len(starts) >= 2:
        return (starts[-1] - starts[0]) // (len(starts) - 1)
    if not result.dataset_len or result.repeats_in_workers:
        return None
    return result.dataset_len // result.stages.batch_size or None


def long_run(stages: StageTiming, starts: EpochStarts) -> tuple[float, float, float]:
    """The mean step of ``stages``, its wait for data (seconds) and that wait's share of it, as a long run reads
    them: the waits at epochs' starts (``starts``) once an epoch, not as often as the timed steps held them. Without
    such waits, the timed steps' own figures."""
    if not starts.waits:
        return stages.loop_s, stages.mean("wait_s"), stages.wait_share
    wait = stages.mean("wait_s") - starts.in_window_s() + starts.per_step_s()
    loop = stages.loop_s - stages.mean("wait_s") + wait
    return loop, wait, wait / loop
