"""Times one tuning run as it goes, stage by stage and trial process by trial process, and stores what it measured
in the study (``RunTime``, ``autotune/results/tuner_time.py``) after every process it counts, at the end of every
stage and of the run, so that a run killed midway (``kill -9``, the OOM killer, a reboot) still says where its time
went up to its last process. It also holds the run to ``study.budget_s`` (``RunClock.affords``: the budget's one
rule), each step expected to take what this run measured of the configurations it runs (``RunClock.round_s``), and
no process given longer than the budget has left (``RunClock.timeout_s``)."""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import NamedTuple

import optuna

from autotune.knobs import costly
from autotune.measure.recorder import WindowPlan
from autotune.records import config_key
from autotune.results.tuner_time import IDLE, TUNER, WAITING, Foretold, RunTime, process_phases, run_attr
from autotune.study.storage import StorageFaultError
from autotune.trial.result import FailureKind, TrialResult

SEARCH = "search"  # the stage whose trials screen (a shorter window than the baseline's and the races')
# Said after a timeout's reason where what study.budget_s had left, not measure.trial_timeout_s, set the timeout
# (``RunClock.as_ended_by_budget``): words for the user; the tuner reads ``Failure.budget_cut`` (``ended_by_budget``).
BUDGET_CUT = "all that study.budget_s had left"
# A run the budget's cap ended (``ended_by_budget``) needs more than it ran, how much more unknown: one that runs it
# again is expected to take this much of that at least (``RunClock.affords``), so that it gets clearly more, not a
# second more that a run capped again would have spent for nothing.
BEYOND_CAP = 1.25


class Kept(NamedTuple):
    """Time a step must leave in study.budget_s for what has to follow it (``RunClock.affords``): ``seconds``, for
    ``what`` (in words: the race's planned rounds after a search trial, the rest of the round a run measured again is
    in)."""

    seconds: float
    what: str


class RunClock:
    """The clock of one run, started when it is made. ``stage`` times a stage; ``count`` adds a trial process's
    phases to the stage running it; once ``attach``ed to the study, every stage's end stores the record.
    ``budget_s`` (study.budget_s; None: unbounded) bounds the run: see ``affords``; a run of a configuration is
    ``repeats`` processes (measure.repeats) with the full window ``plan`` (measure.plan), a search trial's with
    ``screen_plan`` (measure.screen_plan; None: a search trial is expected as long as those measured, whatever its
    batch), none longer than ``trial_timeout_s`` (measure.trial_timeout_s)."""

    def __init__(
        self,
        budget_s: float | None = None,
        repeats: int = 1,
        plan: WindowPlan | None = None,
        trial_timeout_s: float | None = None,
        screen_plan: WindowPlan | None = None,
    ) -> None:
        self.started_at, self._start = time.time(), time.monotonic()
        self.budget_s, self.repeats, self._plan = budget_s, repeats, plan or WindowPlan()
        self._screen_plan = screen_plan
        self._trial_timeout_s = trial_timeout_s
        self._costly: list[float] = []  # the wall times of this run's search trials that turned on a costly knob
        self.left_out: list[str] = []  # the steps the budget left out, or left to another tuner, in words
        # The wall time of each measuring process of this run, by whether it screened (a search trial's shorter
        # window) or ran the full window (the baseline's and the races').
        self._runs: dict[bool, list[float]] = {True: [], False: []}
        # By configuration: its full-window processes' wall times less their start-up, and its search trial (one
        # that ran without a fault or a wrong loss: a finalist-to-be).
        self._full: dict[str, list[float]] = {}
        self._screened: dict[str, TrialResult] = {}
        # The start-up of each process: of those that started a fork server first (a new draw), and of the others.
        self._startups: dict[bool, list[float]] = {True: [], False: []}
        self.run = f"{self.started_at:.3f}-{os.getpid()}"
        self._stages: dict[str, float] = {}
        self._processes: dict[str, dict[str, float]] = {}
        self._current, self._slots, self._began = TUNER, 1, 0.0
        # In the running stage, by the thread of each slot: when its last counted process ended, and since when it has
        # been waiting for other tuners (``awaited``), where it is (``_slot_phases``).
        self._slot_ends: dict[int, float] = {}
        self._waiting_since: dict[int, float] = {}
        self._lock = threading.Lock()  # the slots of study.parallel count their trials from threads of their own
        self._saving = threading.Lock()  # one record stored at a time, each newer than the last
        self._study: optuna.Study | None = None
        self._machine = ""
        self._foretold: Foretold | None = None
        # The configurations of the round ``affords_round`` last let start that no process has run yet (``count``).
        self._round: list[dict] = []

    def attach(self, study: optuna.Study, machine: str) -> None:
        """Store the record in ``study``, of ``machine``, from now on."""
        self._study, self._machine = study, machine

    @contextmanager
    def stage(self, name: str, slots: int = 1) -> Iterator[None]:
        """Time the stage ``name``, whose trial processes run ``slots`` at a time; store the record at its end."""
        with self._lock:
            self._current, self._slots, self._began = name, slots, time.monotonic()
            self._slot_ends, self._waiting_since = {}, {}
        try:
            yield
        finally:
            with self._lock:
                ended = time.monotonic()
                self._stages[name] = self._stages.get(name, 0.0) + ended - self._began
                self._add(name, self._slot_phases(ended))
                self._current, self._slots = TUNER, 1
            self.save()

    def count(self, result: TrialResult, drew: bool = False) -> None:
        """Add one trial process's phases to the running stage: with several at once, each its share of the stage's
        wall time (its seconds over the slots), so that the stage's phases still add up to its wall time; then store
        the record (``save``), so that a run killed in the stage keeps what its processes took. A wait for other
        tuners before it (``awaited``) ends as it started. ``drew``: the process started a fork server first
        (``Launcher.servers_started``), whose start is in its start-up."""
        with self._lock:
            ended, slot = time.monotonic(), threading.get_ident()
            phases = process_phases(result)
            if (since := self._waiting_since.pop(slot, None)) is not None and ended - result.wall_s > since:
                phases[WAITING] = ended - result.wall_s - since
            self._add(self._current, {phase: seconds / self._slots for phase, seconds in phases.items()})
            self._slot_ends[slot] = ended
            self._ran_in_round(result.knobs)
            if result.startup_s is not None:
                self._startups[drew].append(result.startup_s)
            if self._current == SEARCH and costly(result.knobs):
                self._costly.append(result.wall_s)
            if result.timing is not None:
                self._take(result, result.wall_s, self._current == SEARCH)
        self.save()

    def awaited(self) -> None:
        """Say that the slot calling waits for other tuners of the study (their trials, their searches:
        ``sharing.await_others`` asks its ``waits`` each time it looks): from the first such call on, until its next
        process starts or the stage ends, its time is waiting, not the tuner's own work (``_slot_phases``)."""
        with self._lock:
            self._waiting_since.setdefault(threading.get_ident(), time.monotonic())

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time a wait for other tuners (``sharing.finishing``: their turn at ending the study) as waiting, in the
        running stage (outside any: the run's own)."""
        began = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._add(self._current, {WAITING: (time.monotonic() - began) / self._slots})

    def _add(self, stage: str, phases: dict[str, float]) -> None:
        """Add ``phases`` (phase → seconds) to ``stage``'s (the lock held); a stage given none gets no entry."""
        if not phases:
            return
        parts = self._processes.setdefault(stage, {})
        for phase, seconds in phases.items():
            parts[phase] = parts.get(phase, 0.0) + seconds

    def _slot_phases(self, ended: float) -> dict[str, float]:
        """What the running stage's slots spent neither in processes nor in the tuner's own work between them, up to
        ``ended`` (the lock held), each slot's share over the slots: idle, a slot with nothing left to run while
        another's process still ran (from its last process's end, or the stage's start, to the end of the stage's
        last process); waiting, after that and to the stage's end, for other tuners (``awaited``). One slot is
        never idle: the stage waits on what it runs."""
        last = max(self._slot_ends.values(), default=self._began)
        seen = self._slot_ends.keys() | self._waiting_since.keys()
        unseen = max(0, self._slots - len(seen))  # slots that neither ran a process nor waited: idle throughout
        idle = sum(last - self._slot_ends.get(slot, self._began) for slot in seen) + unseen * (last - self._began)
        waiting = sum(max(0.0, ended - max(since, last)) for since in self._waiting_since.values())
        spent = {IDLE: idle if self._slots > 1 else 0.0, WAITING: waiting}
        return {phase: seconds / self._slots for phase, seconds in spent.items() if seconds > 0}

    def expect(self, result: TrialResult, screened: bool = False) -> None:
        """Take a stored run (its wall time over its ``repeats`` processes) as this run's own: a resumed run reuses
        its stored baseline and, ``screened``, its stored search trials. One stored without a wall time says
        nothing."""
        if result.wall_s > 0 and result.timing is not None:
            with self._lock:
                self._take(result, result.wall_s / self.repeats, screened)
                if screened and costly(result.knobs):
                    self._costly.append(result.wall_s / self.repeats)

    def _take(self, result: TrialResult, wall_s: float, screened: bool) -> None:
        if not (screened and costly(result.knobs)):  # a search trial that compiled prices others of its kind only
            self._runs[screened].append(wall_s)
        if not screened:
            self._full.setdefault(config_key(result.knobs), []).append(wall_s - (result.startup_s or 0.0))
        elif result.ok:
            self._screened[config_key(result.knobs)] = replace(result, wall_s=wall_s)

    def run_s(self, screen: bool = False) -> float:
        """The median wall time of this run's measuring processes of one kind so far, full windows or (``screen``)
        search trials, the other kind's until one of this kind ran; 0.0 before the first: the unit in which a
        step is expected to take time."""
        with self._lock:
            runs = self._runs[screen] or self._runs[not screen]
            return statistics.median(runs) if runs else 0.0

    def affords(
        self, seconds: float, step: str, kept: Kept | None = None, per: str = "", capped_s: float | None = None
    ) -> bool:
        """The budget's rule: a step starts only where the time it is expected to take, ``seconds`` (``round_s``,
        ``screen_s``), and what it must leave for what has to follow it (``kept``), fit in what is left of
        ``budget_s``; one that does not is left out, and said so in the reports (``left_out``), its own time (that of
        one of the steps it names: ``per``, as "a trial") and what is kept back said apart. A configuration or probe
        whose every stored run the budget's cap ended (``ended_by_budget``), the longest after ``capped_s``, is
        expected to take more than that (``_beyond``), never less than ``seconds``: a run runs it again only where
        it can give it more, so each run of it gets more time than the last, until one ends it (measured, or at
        measure.trial_timeout_s, the user's timeout). Without a budget, and before the first measuring process (the
        baseline always runs), every step fits. A step that takes longer than expected ends the run past the budget by
        its overrun."""
        if capped_s is not None:
            seconds = max(seconds, self._beyond(capped_s))
        kept_s = kept.seconds if kept else 0.0
        if self.fits(seconds + kept_s):
            return True
        left = self.left_s()
        if capped_s is None:
            own, alone = f"~{seconds:.0f} s" + (f" {per}" if per else ""), " needed,"
        else:
            own, alone = f"it ran {capped_s:.0f} s, all the budget had left, and needs ~{seconds:.0f} s", ";"
        needed = f"{own}, and ~{kept_s:.0f} s kept back for {kept.what};" if kept_s else own + alone
        with self._lock:
            if not any(said.startswith(f"{step} (") for said in self.left_out):  # each step said once
                self.left_out.append(f"{step} ({needed} {max(left, 0.0):.0f} s left)")
        return False

    def _beyond(self, capped_s: float) -> float:
        """What a run the budget's cap ended after ``capped_s`` must be given to run again: ``BEYOND_CAP`` times that,
        but no more than its processes may take (``repeats`` of measure.trial_timeout_s), where the user's timeout
        settles it either way."""
        beyond = BEYOND_CAP * capped_s
        if self._trial_timeout_s is None:
            return beyond
        return min(beyond, max(capped_s, self.repeats * self._trial_timeout_s))

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` fit in what is left of ``budget_s`` (``affords``'s rule, nothing said)."""
        if self.budget_s is None or not self.run_s():
            return True
        return seconds <= self.left_s()

    def left_s(self) -> float | None:
        """What is left of ``budget_s`` (negative past it); None without a budget."""
        return None if self.budget_s is None else self.budget_s - (time.monotonic() - self._start)

    def timeout_s(self, trial_timeout_s: float) -> float:
        """How long a trial process starting now may run: ``trial_timeout_s`` (measure.trial_timeout_s), or what is
        left of ``budget_s`` where less (to a tenth of a second, down), so that no process runs the run past its
        budget (a batch job's time limit ends the whole run, reports and all). Before the first measuring process, as
        ``fits`` says: the inspection and the baseline always run."""
        left = self.left_s()
        if left is None or not self.run_s():
            return trial_timeout_s
        return min(trial_timeout_s, max(0.0, math.floor(left * 10) / 10))

    def as_ended_by_budget(self, result: TrialResult, timeout_s: float, trial_timeout_s: float) -> TrialResult:
        """``result``, of a process given ``timeout_s`` (``timeout_s``), marked ended by the budget
        (``Failure.budget_cut``: ``ended_by_budget``), its reason saying so, where that timeout, what the budget had
        left, below ``trial_timeout_s``, ended it: not the user's timeout."""
        failure = result.failure
        if failure is None or failure.kind is not FailureKind.TIMEOUT or timeout_s >= trial_timeout_s:
            return result
        said = f"{BUDGET_CUT} of its {self.budget_s:g} s, not measure.trial_timeout_s={trial_timeout_s:g}"
        return replace(result, failure=replace(failure, message=f"{failure.message}: {said}", budget_cut=True))

    def foretell(self, rest_s: float) -> None:
        """Keep, in the run's record, that the run said now its rest would take ``rest_s`` (``forecast``)."""
        with self._lock:
            self._foretold = Foretold(time.monotonic() - self._start, rest_s)

    def leave_out(self, step: str) -> None:
        """Say that the budget, or another tuner, left out ``step`` (words of its own, no time:
        ``tuner_time.LEFT_TO_OTHERS_STEP``, ``tuner_time.TAKEN_OVER_STEP``)."""
        with self._lock:
            if step not in self.left_out:
                self.left_out.append(step)

    def run_of_s(self, knobs: dict) -> float:
        """What one full-window process of the configuration ``knobs`` is expected to take: its own such processes'
        median; else its search trial's, its window as long as the full window's rule (``WindowPlan``) makes it at
        that trial's step time; each with the usual start-up. A configuration not measured: ``run_s``."""
        measured = self._measured_s(config_key(knobs))
        return self.run_s() if measured is None else measured

    def _measured_s(self, key: str) -> float | None:
        with self._lock:
            own, screened = list(self._full.get(key, ())), self._screened.get(key)
            startup = statistics.median(self._startups[False]) if self._startups[False] else 0.0
        if own:
            return statistics.median(own) + startup
        timing = screened.timing if screened is not None else None
        if timing is None or not timing.steps:
            return None
        plan, step_s = self._plan, timing.window_s / timing.steps
        window_s = min(plan.max_time_s, max(plan.min_time_s, plan.min_steps * step_s))
        if timing.epochs:  # a full window ends on whole epochs too, as many as its minimum time takes
            epoch = timing.steps // timing.epochs
            window_s = max(window_s, replace(plan, epoch_steps=epoch).whole_epochs([step_s]) * epoch * step_s)
        return screened.wall_s - (screened.startup_s or 0.0) - timing.window_s + window_s + startup

    def draw_s(self) -> float:
        """What a new draw of the process layout (``Launcher.new_draw``) adds to the process after it: the median
        start-up of the processes that started a fork server, beyond the others'; 0 where none did (fresh trials)."""
        with self._lock:
            drew, others = list(self._startups[True]), list(self._startups[False])
        if not drew:
            return 0.0
        return max(0.0, statistics.median(drew) - (statistics.median(others) if others else 0.0))

    def round_s(self, configurations: list[dict], unknown: int = 0, faster_than: float | None = None) -> float:
        """The seconds one round of an interleaved comparison of ``configurations`` is expected to take: a new draw,
        then each configuration's ``repeats`` processes, each after the first a new draw too. One not measured (a
        variant of the trim) is expected to take as long as the slowest measured one of the round; ``unknown`` more,
        not known yet (the finalists a search may still find), each as long as the slowest measured so far, or, with
        ``faster_than`` (the baseline's samples/s), of those whose search run read faster (only such a run makes a
        finalist: ``race_rules.finalist_choice``) and the round's own: a trial that cannot race prices no round."""
        measured = [self._measured_s(config_key(knobs)) for knobs in configurations]
        known = [seconds for seconds in measured if seconds is not None]
        alike = max(known) if known else self.run_s()
        runs = [alike if seconds is None else seconds for seconds in measured]
        pace = self.slowest_s() if faster_than is None else max(alike, self._slowest_faster_s(faster_than))
        runs += [pace] * unknown if unknown else []
        draws = 1 + len(runs) * (self.repeats - 1)
        return self.repeats * sum(runs) + draws * self.draw_s()

    def affords_round(self, configurations: list[dict], step: str) -> bool:
        """``affords`` for a round of ``configurations`` (``round_s``). A round it lets start is under way until each
        of them ran (``count``): what its runs left are expected to take is kept back from a run measured again in it
        (``affords_again``)."""
        fits = self.affords(self.round_s(configurations), step)
        with self._lock:
            self._round = list(configurations) if fits else []
        return fits

    def _ran_in_round(self, knobs: dict) -> None:
        """Take a process of ``knobs`` off the runs left of the round under way (the lock held): its configuration
        ran (a run of several processes, measure.repeats, from its first)."""
        key = config_key(knobs)
        self._round = [left for left in self._round if config_key(left) != key]

    def rest_of_round_s(self) -> float:
        """What the runs left of the round under way (``affords_round``) are expected to take: a round of them
        (``round_s``) but its first draw, made as the round started; 0.0 outside a round."""
        with self._lock:
            left = list(self._round)
        return self.round_s(left) - self.draw_s() if left else 0.0

    def affords_again(self, knobs: dict, step: str) -> bool:
        """``affords`` for measuring the configuration ``knobs`` once more (``again_s``: a disturbed run,
        ``study/disturbed.py``) as ``step``, in a round under way only with the rest of the round kept back
        (``rest_of_round_s``): a run measured again that left the round's next run no time would have the budget
        end that run, and with it the round (``run_race.race``), its proof cut short for one run's second look."""
        rest_s = self.rest_of_round_s()
        return self.affords(self.again_s(knobs), step, Kept(rest_s, "the rest of its round") if rest_s else None)

    def profiles_s(self, profiles: int = 2) -> float:
        """What ``profiles`` profiles (study.diagnose: the baseline's and the recommendation's) are expected to take:
        a process of the median full-window run's length each."""
        return profiles * self.run_s()

    def again_s(self, knobs: dict) -> float:
        """What measuring the configuration ``knobs`` once more is expected to take (a disturbed run measured again:
        ``study/disturbed.py``): its ``repeats`` processes (``run_of_s``)."""
        return self.repeats * self.run_of_s(knobs)

    def _slowest_faster_s(self, faster_than: float) -> float:
        """The longest full-window process expected of a configuration whose search run read more than
        ``faster_than`` samples/s; 0 where none did."""
        with self._lock:
            keys = [key for key, r in self._screened.items() if r.timing and r.timing.throughput > faster_than]
        return self._slowest_of(keys, default=0.0)

    def slowest_s(self) -> float:
        """The longest full-window process expected of a configuration measured so far (``run_of_s``)."""
        with self._lock:
            keys = set(self._full) | set(self._screened)
        return self._slowest_of(keys, default=self.run_s())

    def _slowest_of(self, keys: Iterable[str], default: float) -> float:
        """The longest full-window process expected of the configurations ``keys`` (``_measured_s``), ``default``
        where none is known."""
        return max((seconds for key in keys if (seconds := self._measured_s(key)) is not None), default=default)

    def unmeasured_s(self, result: TrialResult) -> float:
        """The seconds of a process of ``result``'s pipeline outside any warm-up and window (its start, build and
        end), as ``result``'s took: what a probe process adds to its own timings; ``run_s`` where unknown."""
        timing = result.timing
        seconds = result.wall_s / self.repeats - (timing.warmup_s + timing.window_s if timing else 0.0)
        return seconds if result.wall_s > 0 and seconds > 0 else self.run_s()

    def screen_s(self) -> float:
        """The seconds a search trial not proposed yet is expected to take: ``repeats`` processes of ``run_s``."""
        return self.repeats * self.run_s(screen=True)

    def trial_s(self, knobs: dict) -> float:
        """The seconds the search trial of ``knobs`` is expected to take: ``screen_s``, or longer where its batch
        steps longer than those measured (``_screened_at_batch_s``); where it turns on a costly knob
        (torch.compile, whose compile time no measurement foretells), as long as the longest such trial so far, or,
        before one, as long as a trial may take (``trial_timeout_s``)."""
        if not costly(knobs):
            batch = knobs.get("batch_size")
            return max(self.screen_s(), self.repeats * self._screened_at_batch_s(batch) if batch else 0.0)
        with self._lock:
            longest = max(self._costly, default=self._trial_timeout_s)
        return self.screen_s() if longest is None else self.repeats * longest

    def _screened_at_batch_s(self, batch_size: int) -> float:
        """What a search trial of batch ``batch_size`` is expected to take where search trials ran: the median one's
        time outside its warm-up and window, then a warm-up and a window as the median ones, or as ``screen_plan``
        makes them at the step time the median sample time measured gives this batch where longer (a batch 16 times
        larger steps 16 times longer: its warm-up's least steps, and its window's, each take longer); 0.0 before one
        ran, or without a ``screen_plan``. A trial that compiled (its compile in its warm-up) prices none of them."""
        with self._lock:
            screened = [
                r for r in self._screened.values() if r.timing is not None and r.timing.steps and not costly(r.knobs)
            ]
        plan = self._screen_plan
        if not screened or plan is None:
            return 0.0

        def median(of: Callable[[TrialResult], float]) -> float:
            return statistics.median(map(of, screened))

        step_s = batch_size * median(lambda r: r.timing.window_s / r.timing.steps / r.knobs["batch_size"])
        warmup_s = max(median(lambda r: r.timing.warmup_s), plan.warmup.min_steps * step_s)
        window_s = max(
            median(lambda r: r.timing.window_s), min(plan.max_time_s, max(plan.min_time_s, plan.min_steps * step_s))
        )
        return median(lambda r: r.wall_s - r.timing.warmup_s - r.timing.window_s) + warmup_s + window_s

    def record(self, finished: bool = False) -> RunTime:
        """What was measured so far, the running stage's time up to now included; ``finished``: the run reached its
        end."""
        with self._lock:
            now = time.monotonic()
            stages = dict(self._stages)
            if self._current != TUNER:
                stages[self._current] = stages.get(self._current, 0.0) + now - self._began
            processes = {stage: dict(parts) for stage, parts in self._processes.items()}
            left_out, foretold = list(self.left_out), self._foretold
        return RunTime(
            self.started_at, now - self._start, stages, processes, finished, self.budget_s, left_out, foretold
        )

    def save(self, finished: bool = False) -> None:
        """Store the record in the attached study (nothing before ``attach``): after every counted process, at every
        stage's end and at the run's. A write (a few milliseconds: SQLite, a journal file) is small beside a process
        (a fork and a timed window: a second or more), and each one stored is what a killed run keeps. Called as an
        error propagates (a ``finally``: a stage's, the run's; a process stopped with the run), it is best effort: a
        storage fault it meets is dropped, as the error propagating (a storage fault itself, often the same) says why
        the run stopped, and the reports follow it."""
        if self._study is None:
            return
        stopping = sys.exc_info()[1] is not None
        try:
            with self._saving:  # the slots' threads save too: a record taken earlier is never stored over a later one
                self._study.set_user_attr(run_attr(self._machine, self.run), self.record(finished).to_dict())
        except StorageFaultError:
            if not stopping:
                raise


def ended_by_budget(result: TrialResult) -> bool:
    """Whether what study.budget_s had left, not measure.trial_timeout_s, ended ``result``'s process
    (``RunClock.as_ended_by_budget``): its failure's ``budget_cut``, whatever its message says."""
    return result.failure is not None and result.failure.budget_cut


def span(step: str, first: int, last: int) -> str:
    """Steps ``first`` to ``last`` named for the reports' list of what was left out: "search trial 3", or "search
    trials 3 to 8"."""
    return f"{step} {first}" if first == last else f"{step}s {first} to {last}"
