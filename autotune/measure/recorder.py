"""Step-by-step timing: warm-up until step times settle, then a timed window, summarised robustly."""

from __future__ import annotations

import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from autotune.errors import AutotuneError
from autotune.measure.stats import block_throughput_ci, quartiles
from autotune.measure.warmup import WarmupPolicy, excess_time
from autotune.words import counted

WARMUP, DRAIN, WINDOW, DONE = "warmup", "drain", "window", "done"
# A step whose wait for its batch is over STALL times the warm-up's settled step, and at least half the longest such
# wait of the window, stalled for its loader: an epoch boundary, or workers whose batches come in bursts. Where a
# window holds two stalls or more, taking STALL_SHARE of its time or more (less cannot move its figure by more, where
# the OS's hiccups would pass for stalls), its edges fall just after stalls (``StepRecorder._end_on_stalls``), and it
# waits for the next stall up to STALL_PATIENCE times the longest gap between its stalls.
STALL = 3.0
STALL_SHARE = 0.05
STALL_PATIENCE = 1.5


@dataclass(frozen=True)
class WindowPlan:
    """When the timed window ends: once it has ``min_steps`` steps and ``min_time_s`` seconds, or at
    ``max_time_s`` whatever the step count; in either case on a multiple of ``step_multiple`` steps (the
    micro-batches of one optimizer step under gradient accumulation: the window then holds whole optimizer steps,
    whichever micro-batch it starts at). ``warmup`` decides when it starts. ``epoch_steps``: the steps of an epoch of
    a loader whose workers may stall it at an epoch's start; where ``whole_epochs`` says so, the window then ends
    on a whole number of epochs' steps, the first past its minimum steps and time (by half of ``max_time_s``: after
    that, as any other window)."""

    min_steps: int = 15
    min_time_s: float = 2.0
    max_time_s: float = 30.0
    warmup: WarmupPolicy = field(default_factory=WarmupPolicy)
    step_multiple: int = 1
    epoch_steps: int | None = None

    def whole_epochs(self, step_times: Sequence[float]) -> int:
        """How many whole epochs of ``epoch_steps`` steps a window holds at the pace of ``step_times`` (the warm-up's
        after its first step, which waited for the loader to start: their mean over the last epoch's worth, and at
        least the warm-up's ``compared`` steps, waits for data included, as a loader whose workers deliver in waves is
        paced by its waits): the fewest that make ``min_steps`` and ``min_time_s``, where they take at most half of
        ``max_time_s`` (room for the pace to halve); 0 where they take longer, where micro-batches accumulate, or
        where the epoch's length is unknown: the window then ends by its steps and time alone. (With ``min_time_s``
        over half of ``max_time_s``, never.)

        An epoch's start can stall the loop (workers start again, or refill their queue from empty), and a window
        shorter than an epoch mostly holds no start: one of whole epochs' steps, wherever it starts, holds as many
        starts as epochs, as training does (``docs/measurement.md``)."""
        finite = math.isfinite(self.min_time_s) and math.isfinite(self.max_time_s)
        epoch_steps = self.epoch_steps
        if not epoch_steps or not step_times or self.step_multiple > 1 or not finite:
            return 0
        step_s = statistics.fmean(step_times[-max(epoch_steps, self.warmup.compared) :])
        if step_s <= 0:
            return 0
        epoch_s = epoch_steps * step_s
        epochs = max(1, math.ceil(self.min_steps / epoch_steps), math.ceil(self.min_time_s / epoch_s))
        return epochs if epochs * epoch_s <= self.max_time_s / 2 else 0

    @classmethod
    def unbounded(cls, warmup: WarmupPolicy | None = None) -> WindowPlan:
        """A window that lasts as long as the caller keeps stepping."""
        return cls(min_steps=sys.maxsize, min_time_s=math.inf, max_time_s=math.inf, warmup=warmup or WarmupPolicy())

    @property
    def bounded(self) -> bool:
        """Whether the window can end by itself."""
        return math.isfinite(self.max_time_s) or (self.min_steps < sys.maxsize and math.isfinite(self.min_time_s))


@dataclass(frozen=True)
class Timing:
    """What the timed window saw. Times in seconds, throughput in samples per second.

    ``throughput_ci95_*`` bound throughput within this run (batch means; None where the window is too short to
    say, or for the high end, where it has no upper bound); run-to-run variation is larger and only repeated runs
    show it. ``transfer_s`` is host-to-device copy and input layout conversion; ``data_stall_fraction`` is the
    share of the window spent waiting for data. ``warmup_steps`` and ``warmup_s`` count every untimed step before
    the window: the warm-up's and those drained after it (``StepRecorder.drain``). ``epochs``: the whole epochs'
    steps the window held (``WindowPlan.whole_epochs``; 0: it ended by its steps and time).
    """

    steps: int
    samples: int
    window_s: float
    throughput: float
    throughput_ci95_low: float | None
    throughput_ci95_high: float | None
    steps_per_s: float
    mean_step_s: float
    median_step_s: float
    step_iqr_s: float
    data_wait_s: float
    transfer_s: float
    compute_s: float
    data_stall_fraction: float
    warmup_steps: int
    warmup_s: float
    warmup_settled: bool
    compile_s: float
    epochs: int = 0


@dataclass(frozen=True)
class Progress:
    """The timed window so far: ``steps`` timed steps over ``elapsed_s`` seconds at ``throughput`` samples/s, after
    a warm-up that spent ``compile_s`` compiling (0.0 when not compiling)."""

    steps: int
    elapsed_s: float
    throughput: float
    compile_s: float = 0.0


class StepRecorder:
    """Receives the marks of a training loop and times each step.

    Per step: ``batch_ready()`` when the batch arrives, optionally ``batch_transferred()`` when
    it is on the device, and ``step_done(samples)`` when the step is complete. The data wait of
    a step runs from the end of the previous step (or ``start()``) to ``batch_ready()``.
    """

    def __init__(self, plan: WindowPlan, clock: Callable[[], float] = time.perf_counter) -> None:
        self.plan = plan
        self.clock = clock
        self.phase = WARMUP
        self.warmup_times: list[float] = []
        self.warmup_settled = False
        self.window_start: float | None = None
        self.window_end: float | None = None
        self._waits: list[float] = []
        self._transfers: list[float] = []
        self._computes: list[float] = []
        self._samples: list[int] = []
        self._step_start: float | None = None
        self._ready: float | None = None
        self._transferred: float | None = None
        self._window_samples = 0
        self._warmup_compile_s = 0.0
        self._drain_left = 0
        self._drain_times: list[float] = []
        self._waited: list[tuple[int, float, float]] = []  # long waits: (the step's place, the wait, the step's end)
        self._long_wait_s = math.inf  # STALL settled steps, once warm-up has settled
        self._trimmed = 0  # the window's first steps left out, to start it just after a stall
        self._ends_on_epochs = False  # whether the window is to end on whole epochs' steps
        self._epochs = 0  # the whole epochs' steps it ended on (0: it ended otherwise)
        self._judged_every = 1  # the steps of the window's whole parts: an epoch's, an optimizer step's, or one
        self._at_last_whole: tuple[int, int, float] | None = None  # (steps, samples, seconds) at its last one's end

    @property
    def done(self) -> bool:
        return self.phase == DONE

    @property
    def settled_step_s(self) -> float:
        """The warm-up's typical step as it ended: the median of its last ``compared`` steps (0.0 before any)."""
        recent = self.warmup_times[-self.plan.warmup.compared :]
        return statistics.median(recent) if recent else 0.0

    @property
    def before_window(self) -> bool:
        """Whether the steps are not timed yet (warming up, or draining what the loader prepared meanwhile)."""
        return self.phase in (WARMUP, DRAIN)

    def start(self) -> None:
        self._step_start = self.clock()

    def restart_window(self) -> None:
        """Start the window's clock now: what ran since the last warm-up step (reads that must not be timed,
        such as a full memory read) is left out of the window."""
        self.window_start = self._step_start = self.clock()

    def drain(self, steps: int) -> None:
        """Run ``steps`` more steps untimed before the window: the batches a DataLoader's workers prepared while
        the loop paused for the untimed reads at the window's start would otherwise come free inside it."""
        if steps > 0 and self.phase == WINDOW and not self._samples:
            self.phase, self._drain_left = DRAIN, steps

    def end_window_at(self, now: float) -> None:
        """End the window at ``now`` rather than at its last step's mark: on a GPU, once the device has
        finished the work the last step queued."""
        self.window_end = now

    def batch_ready(self) -> None:
        self._ready = self.clock()

    def batch_transferred(self) -> None:
        self._transferred = self.clock()

    def step_done(self, samples: int) -> None:
        now = self.clock()
        if self._step_start is None:
            raise RuntimeError("StepRecorder.start() must be called before the first step")
        if self.phase == WARMUP:
            self._end_warmup_step(now)
        elif self.phase == DRAIN:
            self._end_drain_step(now)
        elif self.phase == WINDOW:
            self._end_window_step(now, samples)
        self._step_start, self._ready, self._transferred = now, None, None

    def _end_warmup_step(self, now: float) -> None:
        self.warmup_times.append(now - self._step_start)
        policy = self.plan.warmup
        if policy.is_stable(self.warmup_times) or policy.gives_up(self.warmup_times):
            self.warmup_settled = policy.is_stable(self.warmup_times)
            self.phase, self.window_start = WINDOW, now
            self._warmup_compile_s = excess_time(self.warmup_times, self.settled_step_s)
            self._long_wait_s = STALL * self.settled_step_s if self.settled_step_s > 0 else math.inf
            self._ends_on_epochs = self.plan.whole_epochs(self.warmup_times[1:]) > 0
            self._judged_every = self.plan.epoch_steps if self._ends_on_epochs else self.plan.step_multiple

    def _end_drain_step(self, now: float) -> None:
        self._drain_times.append(now - self._step_start)
        self._drain_left -= 1
        if self._drain_left == 0:
            self.phase, self.window_start = WINDOW, now

    def _end_window_step(self, now: float, samples: int) -> None:
        ready = self._ready if self._ready is not None else self._step_start
        transferred = self._transferred if self._transferred is not None else ready
        self._waits.append(ready - self._step_start)
        self._transfers.append(transferred - ready)
        self._computes.append(now - transferred)
        self._samples.append(samples)
        self._window_samples += samples
        self.window_end = now
        if ready - self._step_start > self._long_wait_s:
            self._waited.append((len(self._samples) - 1, ready - self._step_start, now))
        elapsed, steps, plan = now - self.window_start, len(self._samples), self.plan
        if steps % self._judged_every == 0:  # kept cheap: it runs inside the window
            self._at_last_whole = (steps, self._window_samples, elapsed)
        if steps % plan.step_multiple:
            return
        if elapsed >= plan.max_time_s:
            self.phase = DONE
        elif steps >= plan.min_steps and elapsed >= plan.min_time_s:
            if not self._ends_on_epochs or elapsed >= plan.max_time_s / 2:  # whole epochs took longer than foreseen
                self._end_on_stalls(now)
            elif steps % plan.epoch_steps == 0:
                self.phase, self._epochs = DONE, steps // plan.epoch_steps

    def _end_on_stalls(self, now: float) -> None:
        """End the window, which is long enough, where its edges fall just after stalls for the loader.

        A loop that stalls now and then (at epoch boundaries; where workers' batches come in bursts) runs in cycles
        of stall and burst, and a window ended at the first step past its minimum time mostly ends just after a
        stall, which takes most of the time: its figure then depends on where in the cycle it started (0.89x and
        1.03x a plain loop's in two series of rounds, for 16 workers that prefetch a whole epoch). So where the
        window holds two stalls or more that take STALL_SHARE of it, it runs from the end of its first stalled step
        to the end of a later one at least ``min_time_s`` and ``min_steps`` apart: whole cycles. It waits for that
        stall no longer than STALL_PATIENCE times the longest gap between its stalls so far; then, and under
        gradient accumulation, it ends here.
        """
        plan, longest = self.plan, max((wait for _, wait, _ in self._waited), default=0.0)
        stalls = [(step, wait, ended) for step, wait, ended in self._waited if wait >= longest / 2]
        stalled_s = sum(wait for _, wait, _ in stalls)
        if plan.step_multiple > 1 or len(stalls) < 2 or stalled_s < STALL_SHARE * (now - self.window_start):
            self.phase = DONE
            return
        (first, _, started), last = stalls[0], len(self._samples) - 1
        if stalls[-1][0] == last and now - started >= plan.min_time_s and last - first >= plan.min_steps:
            self._start_after_step(first, started)
            self.phase = DONE
        elif now - stalls[-1][2] > STALL_PATIENCE * max(b[2] - a[2] for a, b in itertools.pairwise(stalls)):
            self.phase = DONE

    def _start_after_step(self, step: int, ended: float) -> None:
        """Leave the window's steps up to ``step``, which ended at ``ended``, out of it (untimed, as drained): the
        window starts then. (On a GPU its work may still run then: at most a step's, where the loop stalled.)"""
        kept = step + 1
        self._drain_times += StepSplit(self._waits, self._transfers, self._computes, self._samples).durations()[:kept]
        for steps in (self._waits, self._transfers, self._computes, self._samples):
            del steps[:kept]
        self._window_samples = sum(self._samples)
        self.window_start, self._trimmed = ended, kept
        self._at_last_whole = (len(self._samples), self._window_samples, self.window_end - ended)

    @property
    def trimmed_steps(self) -> int:
        """How many of the window's first steps were left out of it once it ended, to start it just after a stall
        (``_end_on_stalls``): untimed, as drained. Whole optimizer steps: a window of accumulated micro-batches is
        never trimmed."""
        return self._trimmed

    def progress(self, compiling: bool = False) -> Progress | None:
        """The timed window so far, or None before it has a step. Constant time: it runs inside the window.
        With ``compiling``, the compile time is the warm-up's excess over its settled steps (the final timing
        measures it against the window's median step instead)."""
        if not self._samples:
            return None
        return self._with_compile(
            _progress(len(self._samples), self._window_samples, self.window_end - self.window_start), compiling
        )

    def progress_to_judge(self, compiling: bool = False) -> Progress | None:
        """``progress`` over the part of the window so far that can be judged (pruning): up to the end of its last
        whole part (None before the first), of an epoch's steps in a window of whole epochs, of an optimizer step's
        micro-batches under gradient accumulation, else of one step. Whole epochs' steps, wherever they start, hold
        one epoch start an epoch, as the finished window does; the steps past them hold such a start (a stall) or not
        by where the window began, so a figure over them too reads high or low by chance: one just past a stall, a
        fraction of the loop's speed. Likewise micro-batches past the last whole optimizer step hold no optimizer
        step, and read fast."""
        if self._at_last_whole is None:
            return None
        return self._with_compile(_progress(*self._at_last_whole), compiling)

    def _with_compile(self, progress: Progress, compiling: bool) -> Progress:
        """``progress`` with the warm-up's compile time where ``compiling``."""
        return replace(progress, compile_s=self._warmup_compile_s) if compiling else progress

    def timing(self, compiling: bool = False, device: StepSplit | None = None) -> Timing:
        """Summarise the window; with ``compiling``, warm-up time beyond a typical step is compile time.

        Throughput is always the window's samples over its wall time. Step times and the split between data
        wait, transfer and compute come from the host's marks, or where the host does not wait for the device
        (CUDA) from ``device``'s timings of a sample of the window's steps: step times from the sample, the split
        from the host's marks of every step corrected by the sample (``sampled_total``). The throughput's interval
        comes from the host's marks.
        """
        if not self._samples and self.phase == DRAIN:
            raise AutotuneError(
                f"no timed step: the loop ended {counted(self._drain_left, 'step')} before its window, still using up "
                "the batches the DataLoader's workers loaded while the window's start was read; loop over more epochs"
            )
        if not self._samples:
            raise AutotuneError(
                f"no timed step: the loop ended during warm-up after {len(self.warmup_times)} steps "
                f"(warm-up needs at least {self.plan.warmup.min_steps} steps and step times that settle)"
            )
        host = StepSplit(self._waits, self._transfers, self._computes, self._samples)
        host_durations = host.durations()
        device = device.from_step(self._trimmed) if device is not None and self._trimmed else device
        durations = device.durations() if device is not None else host_durations
        window_s = self.window_end - self.window_start
        samples = sum(self._samples)
        q1, median, q3 = quartiles(durations)
        # The interval rests on the host's marks of every step, in order: blocks of consecutive steps (whole
        # optimizer steps) whose times add up to the window's. A device's sample of steps has no such order, and
        # mostly misses a loop's rare long steps: its interval could lie wholly above the window's throughput.
        low, high = block_throughput_ci(host_durations, host.samples, step_multiple=self.plan.step_multiple)
        data_wait_s, transfer_s = _split_of_window(host, sum(host_durations), device, window_s)
        return Timing(
            steps=len(self._samples),
            samples=samples,
            window_s=window_s,
            throughput=samples / window_s,
            throughput_ci95_low=low,
            throughput_ci95_high=high,
            steps_per_s=len(self._samples) / window_s,
            mean_step_s=window_s / len(self._samples),
            median_step_s=median,
            step_iqr_s=q3 - q1,
            data_wait_s=data_wait_s,
            transfer_s=transfer_s,
            compute_s=window_s - data_wait_s - transfer_s,
            data_stall_fraction=data_wait_s / window_s,
            warmup_steps=len(self.warmup_times) + len(self._drain_times),
            warmup_s=sum(self.warmup_times) + sum(self._drain_times),
            warmup_settled=self.warmup_settled,
            compile_s=excess_time(self.warmup_times, median) if compiling else 0.0,
            epochs=self._epochs,
        )


@dataclass(frozen=True)
class StepSplit:
    """Where each of a set of steps spent its time, in seconds: waiting for its batch, copying it to the device
    (and converting its layout), and computing; and its samples. ``indices``: where the steps are a sample of a
    window's, their places among them."""

    waits: list[float]
    transfers: list[float]
    computes: list[float]
    samples: list[int]
    indices: list[int] | None = None

    def durations(self) -> list[float]:
        return [w + t + c for w, t, c in zip(self.waits, self.transfers, self.computes, strict=True)]

    def from_step(self, first: int) -> StepSplit | None:
        """The sample of a window that starts at step ``first`` (None where none of it is left)."""
        kept = [k for k, index in enumerate(self.indices) if index >= first]
        if not kept:
            return None
        waits, transfers, computes, samples = (
            [values[k] for k in kept] for values in (self.waits, self.transfers, self.computes, self.samples)
        )
        return StepSplit(waits, transfers, computes, samples, [self.indices[k] - first for k in kept])


def _progress(steps: int, samples: int, elapsed_s: float) -> Progress:
    """``steps`` timed steps of ``samples`` samples in all over ``elapsed_s`` seconds."""
    return Progress(steps, elapsed_s, samples / elapsed_s if elapsed_s > 0 else 0.0)


def _split_of_window(host: StepSplit, host_s: float, device: StepSplit | None, window_s: float) -> tuple[float, float]:
    """The window's data wait and transfer time, each within the window: the host's marks of its steps (``host_s``
    in all), scaled to the window, or with ``device``'s sample of them, ``sampled_total`` of each."""
    if device is None:
        share = window_s / host_s if host_s > 0 else 0.0
        return sum(host.waits) * share, sum(host.transfers) * share
    wait = min(max(sampled_total(host.waits, device.waits, device.indices), 0.0), window_s)
    transfer = min(max(sampled_total(host.transfers, device.transfers, device.indices), 0.0), window_s - wait)
    return wait, transfer


def sampled_total(every: list[float], sampled: list[float], indices: list[int]) -> float:
    """The total of a quantity over all steps, known for the steps at ``indices`` only (``sampled``), from
    ``every`` step's reading of a quantity close to it: ``every``'s total less the sample's mean difference per
    step. On CUDA the host's wait for a batch reads the device's idle time plus the device's work still queued
    when the wait began: the difference is bounded by a step's device time, so the estimate stays close wherever
    the waits themselves are rare and long (epoch boundaries, workers that fall behind), which a sample alone
    mostly misses (a difference estimator: unbiased under random sampling)."""
    differences = [every[index] - value for index, value in zip(indices, sampled, strict=True)]
    return sum(every) - len(every) * statistics.fmean(differences)


def window_plan_from_dict(data: dict) -> WindowPlan:
    """The inverse of ``dataclasses.asdict`` for a WindowPlan."""
    return WindowPlan(**{**data, "warmup": WarmupPolicy(**data["warmup"])})
