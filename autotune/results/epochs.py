"""The waits for data at epochs' starts, as a long run pays them: once an epoch, not as often as a profile's timed
steps happened to hold them (30 steps holding one start of a 1000-step epoch would pay it once in 30).

A DataLoader with workers begins each epoch with no batch loaded ahead: workers that do not persist start again, and
workers that persist refill their queue from empty (``docs/measurement.md``); either way the step whose batch began
the epoch (``StageTiming.epoch_starts``) waits longer than the rest. Without workers an epoch's first batch loads as
every other does. A long run's step is the other steps' (their steady wait, the mean of theirs) plus, once an epoch,
what an epoch's start waited beyond that steady wait: a start that waited no longer adds nothing. What the verdict
(``diagnosis.figures``) and the advice (``remedies.advise``) read, both: one rule.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from autotune.measure.profiling import ProfileResult, StageTiming

# A long run's step within 0.1 % of the timed steps' reads as theirs: no figure shown (a share to a tenth of a per
# cent) tells them apart, and naming the long run would only add words.
SAME_STEP = 1e-3
# What a figure of the long run's step is said to be of, wherever it differs from the timed steps' (one wording),
# and what names the line that gives that step beside a table of the timed steps (``diagnosis.long_run_said``).
LONG_RUN = "a long run"
LONG_RUN_STEP = f"{LONG_RUN}'s step"


@dataclass(frozen=True)
class EpochStarts:
    """The timed steps (``at``, their indices) that began an epoch of a DataLoader with workers (``epoch_starts``)
    and their waits for data (``waits``), among ``steps`` timed steps whose others waited ``steady_s`` on average;
    epochs of ``epoch`` steps (None: unknown, ``_epoch``)."""

    at: list[int]
    waits: list[float]
    steps: int
    steady_s: float
    epoch: int | None = None

    @property
    def waited(self) -> str:
        """How long those steps waited, in words: "250 ms", or "120 to 130 ms"."""
        least, most = f"{min(self.waits) * 1e3:.0f}", f"{max(self.waits) * 1e3:.0f}"
        return f"{least} ms" if least == most else f"{least} to {most} ms"

    @property
    def how_often(self) -> str:
        """How often a long run pays an epoch's start, in words."""
        return f"once an epoch of {self.epoch} steps" if self.epoch else "as often as the timed steps held them"

    def per_step_s(self, saved_s: float = 0.0, steady_s: float | None = None) -> float:
        """What those waits add to a long run's mean step beyond the other steps' wait (``steady_s``; the timed
        steps' ``self.steady_s`` by default), had loading a batch cost ``saved_s`` less (each waits for its batch's
        loading too): each one's excess over that wait, none where it waited no longer; once an epoch where its
        length is known, else as often as the timed steps held them."""
        steady = self.steady_s if steady_s is None else steady_s
        excess = [max(0.0, wait - saved_s - steady) for wait in self.waits]
        if excess and self.epoch:
            return statistics.fmean(excess) / self.epoch
        return sum(excess) / max(self.steps, 1)

    def step_s(self, steady_step_s: float, rest_s: float, saved_s: float = 0.0) -> float:
        """A long run's mean step whose other steps take ``steady_step_s`` each, ``rest_s`` of it not waiting for
        data: theirs, and the epochs' starts' excess over their wait (``per_step_s``), had loading a batch cost
        ``saved_s`` less."""
        return steady_step_s + self.per_step_s(saved_s, steady_step_s - rest_s)

    def kept_s(self, loading_s: float) -> float:
        """What workers kept across epochs save a long run's step: an epoch's start then waits for its batch's
        loading (``loading_s``) alone, no longer than it waited."""
        alone = replace(self, waits=[min(wait, loading_s) for wait in self.waits])
        return self.per_step_s() - alone.per_step_s()


def epoch_starts(result: ProfileResult) -> EpochStarts:
    """The waits of the timed steps that began an epoch (``StageTiming.epoch_starts``) of a DataLoader with workers
    (``num_workers`` > 0): nothing was loaded ahead of such a batch; epochs as long as ``_epoch`` says; the other
    steps' mean wait beside them (all steps' where none began an epoch). A long wait at another step is a steady wait
    that varies (a stream opening its next file), however regular; a profile stored before the epochs' starts were
    recorded has none known, and reads as its timed steps held its waits."""
    stages = result.stages
    at = (stages.epoch_starts or []) if stages.num_workers > 0 else []
    others = [wait for step, wait in enumerate(stages.wait_s) if step not in at]
    steady = statistics.fmean(others) if others else 0.0
    return EpochStarts(at, [stages.wait_s[step] for step in at], stages.steps, steady, _epoch(result))


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


@dataclass(frozen=True)
class LongRun:
    """A profile's mean step and its wait for data (seconds), and that wait's share of it, as a long run reads them
    (``long_run``); ``differs``: from the timed steps' own figures (by ``SAME_STEP`` or more)."""

    loop_s: float
    wait_s: float
    wait_share: float
    differs: bool


def long_run(stages: StageTiming, starts: EpochStarts) -> LongRun:
    """The mean step of ``stages`` and its wait for data as a long run reads them: the other steps' steady wait, and
    the waits at epochs' starts (``starts``) beyond it once an epoch, not as often as the timed steps held them. The
    timed steps' own figures where there are no such waits, or where the long run's step is theirs within
    ``SAME_STEP``."""
    timed = LongRun(stages.loop_s, stages.mean("wait_s"), stages.wait_share, differs=False)
    if not starts.waits:
        return timed
    wait = starts.steady_s + starts.per_step_s()
    loop = stages.loop_s - timed.wait_s + wait
    if math.isclose(loop, stages.loop_s, rel_tol=SAME_STEP):
        return timed
    return LongRun(loop, wait, wait / loop, differs=True)
