"""The search: the baseline first, then proposed trials; every result is stored in the study.

The study is the record of truth: reports are rendered from what is stored here, and running the same command again
resumes it. Opening it is ``autotune/study/start.py``; tuners sharing it coordinate through
``autotune/study/sharing.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from autotune.config.settings import STALE_BEATS, StudySettings
from autotune.knobs import changed
from autotune.measure.environment import this_machine_id
from autotune.records import (
    BASELINE_ATTR,
    BASELINE_LABEL,
    CAPPED_ATTR,
    CONFIG_ATTR,
    DUPLICATE_ATTR,
    INTERRUPTED_ATTR,
    MACHINE_ATTR,
    NOT_MEASURED_ATTR,
    PREDICTED_ATTR,
    PROBE_ATTR,
    RESULT_ATTR,
    TUNER_ATTR,
    OutOfMemory,
    ProbeRecord,
    WorkerFailure,
    config_key,
    interrupted,
    measured_trials,
    metric_attrs,
    on_machine,
    workers_ran,
)
from autotune.study.clock import ended_by_budget
from autotune.study.proposing import proposing
from autotune.study.pruner import SlowerThanBestPruner
from autotune.study.sharing import always, await_others, beat, claimed, heartbeat, measuring_now, searching
from autotune.study.space import KnownFailure, SearchSpace, ruled_out, why_ruled_out
from autotune.study.storage import is_shared
from autotune.trial.result import Failure, FailureKind, TrialResult
from autotune.trial.runner import INTERRUPT, ProgressFn
from autotune.words import counted

# The trials that measured a configuration on a machine, with their results (``records.measured_trials``).
Measured = list[tuple[optuna.trial.FrozenTrial, TrialResult]]
# Knob values, a trial name and an optional progress callback (for pruning) in, a result out.
RunFn = Callable[[dict[str, Any], str, ProgressFn | None], TrialResult]
# Proposals of already measured configurations in a row after which the sampler is taken to have converged.
_MAX_REPEATED_PROPOSALS = 100
# Proposals of already measured configurations in a row after which an untried one is drawn instead: each repeat
# is a trial in the storage (tens of milliseconds), and on a small space the sampler repeats itself dozens of times.
_REPEATS_BEFORE_UNTRIED = 3
# Random draws tried for an untried configuration before they are listed: a draw takes ~15 µs, a list walks the
# whole space, which multiplies with every knob searched (tenths of a second for 70,000 configurations).
_UNTRIED_DRAWS = 200


@dataclass(frozen=True)
class Observation:
    """A measured configuration, for model the search: its knobs and throughput (a pruned trial's reading
    when it was stopped); ``feasible`` is False when it cannot be recommended (over the memory budget, wrong
    loss) though its speed is real."""

    knobs: dict[str, Any]
    throughput: float
    feasible: bool = True


@dataclass(frozen=True)
class Proposal:
    """The next configuration to measure, and its predicted throughput (None where unknown). ``capped_s``: where
    every run of it the machine stored was ended by study.budget_s's cap (owed: ``_owed``), the longest of them, in
    seconds: it needs more (``RunClock.affords``); None otherwise."""

    knobs: dict[str, Any]
    predicted: float | None = None
    capped_s: float | None = None


# Whether the next trial fits in study.budget_s (``RunClock.affords``): the number of trials measured, and what it is
# to measure where known before Optuna is asked (a proposal, or the sampler's draw), else None.
AffordsFn = Callable[[int, Proposal | None], bool]


# What was measured so far, the keys of every configuration tried and what ran out of memory in; the next proposal
# out, or None when nothing left is worth measuring.
ProposeFn = Callable[[list[Observation], set[str], list[KnownFailure]], Proposal | None]


@dataclass(frozen=True)
class TrialEvent:
    """A finished tuning trial, for progress display. ``index`` counts from 1 to ``total``. ``result`` is None where
    the trial was dropped, unmeasured or its result lost, and ``dropped`` says why; or where its configuration
    (``knobs``) was ruled out unmeasured or left for a later run, and ``not_measured`` says why."""

    number: int
    index: int
    total: int
    result: TrialResult | None
    dropped: str | None = None
    knobs: dict[str, Any] | None = None
    not_measured: str | None = None


def ensure_baseline(
    study: optuna.Study, knobs: dict[str, Any], run: RunFn, machine: str | None = None
) -> tuple[TrialResult, bool]:
    """The baseline's result on ``machine`` (a ``machine_id``; None: this one) as stored, or a new measurement of it.
    Returns (result, reused). Where another tuner of the same machine stored one while this one measured, the stored
    one is used by both."""
    attr = on_machine(BASELINE_ATTR, machine or this_machine_id())
    stored = study.user_attrs.get(attr)
    if stored is not None:
        return TrialResult.from_dict(stored), True
    result = run(knobs, BASELINE_LABEL, None)
    if result.ok:
        stored = study.user_attrs.get(attr)
        if stored is not None:
            return TrialResult.from_dict(stored), True
        study.set_user_attr(attr, result.to_dict())
    return result, False


@dataclass(frozen=True)
class StopReason:
    """Why tuning stopped; ``aborted`` when it stopped because something is wrong; ``left_to_others`` when another
    tuner took this one's search for dead (``sharing.searching``) and may be ending the study without its trials:
    this tuner then does not race, leaving the study's end to the others."""

    message: str
    aborted: bool = False
    left_to_others: bool = False


def tune(
    study: optuna.Study,
    space: SearchSpace,
    settings: StudySettings,
    run: RunFn,
    on_trial: Callable[[TrialEvent], None],
    propose: ProposeFn | None = None,
    machine: str | None = None,
    affords: AffordsFn | None = None,
    waits: Callable[[], bool] = always,
) -> StopReason:
    """Run trials on ``machine`` (a ``machine_id``; None: this one) until the study holds ``settings.n_trials``
    configurations measured there.

    With ``propose`` (the probe's guide), each trial measures the configuration it proposes and tuning stops once it
    proposes none; without, Optuna's sampler proposes. A configuration measured before (the baseline included) is
    not measured again: the proposal is answered from the stored result and does not count as a trial. Tuning also
    stops at ``settings.timeout_s``, where ``affords`` says the next trial does not fit in study.budget_s (a
    proposal or a draw of the sampler that does not fit where a plain trial still does is passed over, the draw left
    to a later run, which measures it first; so is a trial whose process what study.budget_s had left ended, and it
    needs more than it ran: ``Proposal.capped_s``, so only a run that can give it more measures it), when the space is
    exhausted, and, aborted, after ``settings.max_consecutive_failures`` failed trials in a row (pruned,
    out-of-memory and incorrect trials are verdicts on their configuration, not failures: ``FailureKind.is_fault``;
    nor is a trial the budget ended, which says nothing of its configuration), or as many dropped in a row
    because another tuner took this one for dead (``_taken_for_dead``). A configuration that needs
    no less memory than one that ran out (in the probe or a trial: ``space.needs_no_less_memory``) is not measured:
    Optuna is told it is pruned, with the reason, and it does not count as a trial either.

    Other tuners may share the study (``storage.is_shared``): what they measured on the same machine counts here, a
    configuration one of them is measuring is not measured again, and tuning ends once theirs are done too (a trial
    of a tuner that died is failed by its missing heartbeats and its configuration measured again), or once
    ``waits()`` no longer holds (study.budget_s: ending the study is then left to them), or, left to them too
    (``StopReason.left_to_others``), once this one finds that another took it for dead and ended its search's claim.
    """
    deadline = time.monotonic() + settings.timeout_s if settings.timeout_s is not None else float("inf")
    machine = machine or this_machine_id()
    while True:
        with searching(study, settings, machine) as lost:
            stop = _search(study, space, settings, run, on_trial, machine, propose, deadline, affords)
            taken_for_dead = lost()  # looked up while the claim is held: once out, it is ended
        if taken_for_dead:
            return replace(stop, left_to_others=True)
        if stop.aborted or not await_others(study, settings, machine, deadline, waits):
            return stop


def tune_in_slots(
    study: optuna.Study,
    space: SearchSpace,
    settings: StudySettings,
    runs: list[RunFn],
    on_trial: Callable[[TrialEvent], None],
    propose: ProposeFn | None = None,
    machine: str | None = None,
    affords: AffordsFn | None = None,
    waits: Callable[[], bool] = always,
) -> StopReason:
    """``tune`` with a trial at a time in each slot of ``runs`` (``study.parallel``: each runs its trials on its own
    GPU or cores), the slots sharing the study as tuners of a shared study do. The outcome is the first stop that
    aborted, else the first slot's. Ctrl-C, or a slot's error, stops every slot's trial (``runner.INTERRUPT``) as it
    comes, the error raised: not once the slots still searching end their search."""
    if len(runs) == 1:
        return tune(study, space, settings, runs[0], on_trial, propose, machine, affords, waits)
    INTERRUPT.clear()
    try:
        with ThreadPoolExecutor(len(runs), thread_name_prefix="autotune-slot") as pool:
            futures = [
                pool.submit(tune, study, space, settings, run, on_trial, propose, machine, affords, waits)
                for run in runs
            ]
            try:
                ended, _ = wait(futures, return_when=FIRST_EXCEPTION)
                if failed := next((future for future in ended if future.exception() is not None), None):
                    failed.result()  # raises its error now, not once the other slots end their search
                stops = [future.result() for future in futures]
            except BaseException:
                INTERRUPT.set()
                raise
    finally:
        INTERRUPT.clear()
    stop = next((stop for stop in stops if stop.aborted), stops[0])
    return replace(stop, left_to_others=any(each.left_to_others for each in stops))


def _search(
    study: optuna.Study,
    space: SearchSpace,
    settings: StudySettings,
    run: RunFn,
    on_trial: Callable[[TrialEvent], None],
    machine: str,
    propose: ProposeFn | None,
    deadline: float,
    affords: AffordsFn | None = None,
) -> StopReason:
    """``tune``'s trials, until one of its ends (the others' trials still running aside)."""
    slot = _Slot(study, space, settings, run, on_trial, machine, propose, deadline, affords)
    while (seen := _look(study, settings, machine)).counted + len(seen.running) < settings.n_trials:
        if INTERRUPT.is_set():
            raise KeyboardInterrupt
        try:
            slot.step(seen)
        except _Stop as stop:
            return stop.reason
    measured = f"study.n_trials={settings.n_trials}: {counted(settings.n_trials, 'trial')} measured"
    return StopReason(measured + _unconverged(seen, propose, slot.skipped))


class _Stop(Exception):
    """Raised by a step of ``_Slot``: the search ends, for ``reason``."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason.message)
        self.reason = reason


@dataclass
class _Slot:
    """One thread's search (a slot of study.parallel, or the only one): what ``_search`` was given, and what it
    counts from step to step. ``known`` is what the study holds, read afresh each step and updated in place, as the
    pruner reads it: a slot's trials are judged on what its own thread read. ``skipped``: configurations this run
    leaves to a later one because they do not fit study.budget_s where a plain trial still does (a compile trial,
    whose time no measurement foretells, or one that needs more than the budget's cap gave it before), or whose
    process the budget ended (``_measure_trial``); the search goes on without them. ``repeats``: proposals in a row
    of configurations measured or not to measure."""

    study: optuna.Study
    space: SearchSpace
    settings: StudySettings
    run: RunFn
    on_trial: Callable[[TrialEvent], None]
    machine: str
    propose: ProposeFn | None
    deadline: float
    affords: AffordsFn | None
    known: dict[str, _Outcome] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    repeats: int = 0
    failures_in_a_row: int = 0
    dropped_in_a_row: int = 0

    def __post_init__(self) -> None:
        self.pruner = _pruner(self.settings, self.known)
        self.draw = random.Random(f"{self.settings.seed}:{threading.current_thread().name}")  # each slot its own

    def step(self, seen: _Seen) -> None:
        """One trial, or one proposal passed over, from what the study holds now (``seen``); ``_Stop`` to end."""
        self.known.clear()
        self.known.update(seen.known)
        taken = set(self.known) | seen.in_flight | self.skipped
        self._check_ends(seen, taken)
        proposal = self._proposal(seen, taken)
        if not self._fits(seen.counted, proposal):
            return
        try:
            with proposing(self.study, proposal.knobs if proposal is not None else None):
                trial = self.study.ask()
                if is_shared(self.settings.storage):  # heard of from its start: a tuner stopped before its
                    beat(trial, self.settings.heartbeat_s)  # measurement leaves a trial the next to open fails
                knobs = self.space.sample(trial)
            key = config_key(knobs)
            self._mark(trial, proposal, knobs)
            if self._answered(trial, knobs, key, seen, proposal):
                self.repeats += 1
                return
            measured = self._measure(trial, knobs, key)
        except UpdateFinishedTrialError:  # another tuner took this one for dead and failed the trial: it is dropped
            self._dropped(trial, seen.counted)
            return
        except _EndedByBudget:
            self._ended_by_budget(trial, knobs, key, seen.counted)
            return
        if measured is None:
            self.repeats += 1
            return
        self.dropped_in_a_row = 0
        result, self.known[key] = measured
        self._counted(trial, result, seen.counted)

    def _check_ends(self, seen: _Seen, taken: set[str]) -> None:
        """``_Stop`` where the space is exhausted, study.timeout_s is reached or the sampler keeps repeating itself
        (where the budget passed proposals over, the stop is the budget's)."""
        if _exhausted(self.space, taken, seen.failed):
            if self.skipped:
                raise _Stop(_out_of_budget(self.settings))
            ruled = " or ruled out by a failure (out of memory, or in a DataLoader worker)" if seen.failed else ""
            raise _Stop(StopReason(f"all {self.space.size} configurations of the search space are measured{ruled}"))
        if time.monotonic() >= self.deadline:
            raise _Stop(StopReason(f"study.timeout_s={self.settings.timeout_s:g} reached"))
        if self.repeats >= _MAX_REPEATED_PROPOSALS:
            if self.skipped:
                raise _Stop(_out_of_budget(self.settings))
            raise _Stop(StopReason("the sampler keeps proposing measured configurations"))

    def _proposal(self, seen: _Seen, taken: set[str]) -> Proposal | None:
        """What to measure next. Trials already waiting (enqueued by the user) go first (None), then what this machine
        owes (``_Seen.owed``), then the guide's proposal (``_Stop`` where it has none: converged); without a guide,
        the sampler proposes (None), or, once it keeps repeating itself, a configuration drawn from those untried. A
        trial the user enqueued since ``_look`` is asked for first all the same, the proposal filling in what it
        leaves open; the proposal comes again next time."""
        if seen.waiting:
            return None
        proposal = next((owed for owed in seen.owed if config_key(owed.knobs) not in self.skipped), None)
        if proposal is None and self.propose is not None:
            observations = _observations(self.known)
            proposal = self.propose(observations, taken, seen.failed)
            if proposal is None and self.skipped:
                raise _Stop(_out_of_budget(self.settings))
            if proposal is None:
                # Only a configuration measured corrects the predictions: not one that failed, nor one ruled out
                # unmeasured by another's failure (known, so that it is not proposed again).
                raise _Stop(
                    StopReason(
                        "converged: with the probe's predictions corrected by the "
                        f"{counted(len(observations), 'configuration')} measured (the baseline included), none of the "
                        "others is predicted faster than the best"
                    )
                )
        if proposal is None and self.repeats >= _REPEATS_BEFORE_UNTRIED:
            proposal = Proposal(_draw_untried(self.space, taken, seen.failed, self.draw))
        return proposal

    def _fits(self, done: int, proposal: Proposal | None) -> bool:
        """Whether ``proposal`` fits in study.budget_s after ``done`` trials; one that does not (a compile?) where a
        plain trial still does is passed over (False); ``_Stop`` where no plain trial does, the proposal not asked
        for (``RunClock.trial_s``: a plain one takes no less; a compile one, as long as the longest compile trial,
        no less in practice), so that the budget's list names the trials left out once. Asked after the guide had
        its say: a search it ended is converged, whatever time is left."""
        if self.affords is None:
            return True
        if not self.affords(done, None):
            raise _Stop(_out_of_budget(self.settings))
        if proposal is None or self.affords(done, proposal):
            return True
        self.skipped.add(config_key(proposal.knobs))
        self.repeats += 1
        return False

    def _mark(self, trial: optuna.Trial, proposal: Proposal | None, knobs: dict[str, Any]) -> None:
        """Keep on ``trial`` its machine, its tuner and, where it measures ``proposal``, the probe's prediction."""
        trial.set_user_attr(MACHINE_ATTR, self.machine)
        trial.set_user_attr(TUNER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
        if proposal is not None and proposal.predicted is not None and knobs == proposal.knobs:
            trial.set_user_attr(PREDICTED_ATTR, proposal.predicted)

    def _answered(
        self, trial: optuna.Trial, knobs: dict[str, Any], key: str, seen: _Seen, proposal: Proposal | None
    ) -> bool:
        """Whether ``trial``, of ``knobs``, is answered without a measurement: a configuration measured before (told
        its stored outcome), one a failure rules out (pruned), or one too dear for study.budget_s (left for a later
        run; ``_Stop`` where no plain trial fits either)."""
        if key in self.known:
            trial.set_user_attr(DUPLICATE_ATTR, self.known[key].label)
            _tell(self.study, trial, self.known[key])
            return True
        done, n_trials = seen.counted, self.settings.n_trials
        if (found := ruled_out(knobs, seen.failed)) is not None:
            _not_measured(self.study, trial, key, found)  # known from then on: proposed again, a duplicate
            self.on_trial(
                TrialEvent(trial.number, done, n_trials, None, knobs=knobs, not_measured=why_ruled_out(found))
            )
            return True
        if key in self.skipped or (
            proposal is None and self.affords is not None and not self.affords(done, _as_owed(seen, key, knobs))
        ):
            _left_for_later(self.study, trial, key)
            if not self.affords(done, None):
                raise _Stop(_out_of_budget(self.settings))
            if key not in self.skipped:
                later = f"left for a later run: it does not fit study.budget_s={self.settings.budget_s:g}"
                self.on_trial(TrialEvent(trial.number, done, n_trials, None, knobs=knobs, not_measured=later))
            self.skipped.add(key)
            return True
        return False

    def _measure(self, trial: optuna.Trial, knobs: dict[str, Any], key: str) -> tuple[TrialResult, _Outcome] | None:
        """Measure ``knobs`` as ``trial``, its heartbeat first (a trial in flight is always heard of at its tuner's
        own interval); None where it gives way (``_given_way``: pruned, a duplicate); _EndedByBudget where the budget
        ended its process (``_measure_trial``)."""
        shared = is_shared(self.settings.storage)
        with heartbeat(trial, self.settings.heartbeat_s if shared else None):
            trial.set_user_attr(CONFIG_ATTR, key)  # measuring it: other tuners of the study see it in flight
            with claimed(self.study, trial, self.machine, key, take_over=shared) as mine:
                given_way = (
                    _given_way(self.study, self.settings, self.machine, trial.number, key) if mine else "another tuner"
                )
                if given_way:
                    trial.set_user_attr(DUPLICATE_ATTR, given_way)
                    _told(self.study, trial, state=TrialState.PRUNED)
                    return None
                self.repeats = 0
                return _measure_trial(self.study, trial, knobs, self.run, self.settings, self.pruner)

    def _ended_by_budget(self, trial: optuna.Trial, knobs: dict[str, Any], key: str, done: int) -> None:
        """Report ``trial``, of ``knobs``, whose process what study.budget_s had left ended: left for a later run that
        can give it more (``_left_for_later``, ``Proposal.capped_s``), and no fault (study.max_consecutive_failures
        counts none): the budget ran out, not the configuration. The next step finds no time left (``_fits``)."""
        self.skipped.add(key)
        later = (
            f"left for a later run with more time for it: study.budget_s={self.settings.budget_s:g} ran out while it "
            "ran"
        )
        self.on_trial(TrialEvent(trial.number, done, self.settings.n_trials, None, knobs=knobs, not_measured=later))

    def _dropped(self, trial: optuna.Trial, done: int) -> None:
        """Count ``trial``, dropped; ``_Stop`` after study.max_consecutive_failures in a row: a cause that lasts
        (clocks apart) drops each trial again, its configuration owed and measured anew, for ever."""
        self.dropped_in_a_row += 1
        self.on_trial(
            TrialEvent(trial.number, done + 1, self.settings.n_trials, None, _taken_for_dead(self.settings, "it"))
        )
        if self.dropped_in_a_row >= self.settings.max_consecutive_failures:
            raise _Stop(
                StopReason(
                    f"the last {self.dropped_in_a_row} trials were dropped: {_taken_for_dead(self.settings, 'each')} "
                    "(study.max_consecutive_failures)",
                    aborted=True,
                )
            )

    def _counted(self, trial: optuna.Trial, result: TrialResult, done: int) -> None:
        """Report ``trial``, measured: ``result``; ``_Stop`` after study.max_consecutive_failures faults in a row."""
        self.on_trial(TrialEvent(trial.number, done + 1, self.settings.n_trials, result))
        broken = result.failure is not None and result.failure.kind.is_fault
        self.failures_in_a_row = self.failures_in_a_row + 1 if broken else 0
        if self.failures_in_a_row >= self.settings.max_consecutive_failures:
            raise _Stop(
                StopReason(
                    f"the last {self.failures_in_a_row} trials all failed (the last with {result.failure}); "
                    f"stopped rather than spend the budget (study.max_consecutive_failures)",
                    aborted=True,
                )
            )


def _unconverged(seen: _Seen, propose: ProposeFn | None, skipped: set[str]) -> str:
    """Where the guided search stopped at study.n_trials with more to measure in what it has ``seen`` last
    (``skipped`` aside: left to a later run by study.budget_s), what to do, as a clause."""
    taken = set(seen.known) | seen.in_flight | skipped
    proposal = propose(_observations(seen.known), taken, seen.failed) if propose is not None else None
    if proposal is None:
        return ""
    return (
        f", before the guided search converged: next it would measure {_next_in_words(proposal, seen.known)}; a "
        "larger study.n_trials goes on from here"
    )


def _next_in_words(proposal: Proposal, known: dict[str, _Outcome]) -> str:
    """The configuration ``proposal`` would measure, as the fastest feasible one measured (of ``known``) changed,
    and how fast it is predicted against that one's run, so that the user can judge whether to go on."""
    measured = [(outcome.feasible_throughput, key, outcome) for key, outcome in known.items()]
    fastest = max((entry for entry in measured if entry[0] is not None), key=lambda entry: entry[0], default=None)
    if fastest is None:
        return "another configuration"
    throughput, key, best = fastest
    named = "the baseline" if best.label == BASELINE_LABEL else f"trial {best.label}"
    named_as = f"{named}'s configuration"
    changes = ", ".join(f"{name}={after}" for name, (_, after) in changed(proposal.knobs, json.loads(key)).items())
    if proposal.predicted is None:
        return f"{named_as} with {changes} (a check: the probe does not time that change)"
    ratio = proposal.predicted / throughput
    return f"{named_as} with {changes} (predicted at {ratio:.2f}x {named}'s {throughput:.1f} samples/s)"


def _taken_for_dead(settings: StudySettings, trials: str) -> str:
    """Why a trial is dropped: another tuner, by its clock not hearing this one, failed ``trials`` ("it", "each")."""
    return (
        f"another tuner took this one for dead (no heartbeat for {STALE_BEATS} x study.heartbeat_s="
        f"{settings.heartbeat_s:g}s by its clock) and failed {trials}; check that the machines' clocks agree (NTP) "
        "and that this machine does not stall that long (suspended), else raise study.heartbeat_s"
    )


def _given_way(study: optuna.Study, settings: StudySettings, machine: str, number: int, key: str) -> str | None:
    """Why trial ``number``, holding the claim on configuration ``key``, is not to measure it after all: another
    tuner measured it while this one asked (its claim ends after its result is stored), or the study's trials
    measured and in flight before this one reach study.n_trials. None: measure it."""
    seen = _look(study, settings, machine)
    if key in seen.known:
        return "another tuner"
    if seen.counted + sum(t.number < number for t in seen.running) >= settings.n_trials:
        return f"not measured: study.n_trials={settings.n_trials} reached by other tuners' trials"
    return None


@dataclass(frozen=True)
class _Seen:
    """What the study holds for one machine, read at once: what was told of each configuration measured there
    (``known``: the baseline's included, and those not measured for needing no less memory than one that ran out),
    how many trials measured one (``counted``), what ran out of memory, the trials measuring one now, what the
    machine owes (``owed``: ``_owed``), and whether trials wait in Optuna's queue (``waiting``: the user's)."""

    known: dict[str, _Outcome]
    counted: int
    failed: list[KnownFailure]
    running: list[optuna.trial.FrozenTrial]
    owed: list[Proposal]
    waiting: bool

    @property
    def in_flight(self) -> set[str]:
        """The configurations being measured now (by another tuner of a shared study, or another slot)."""
        return {t.user_attrs[CONFIG_ATTR] for t in self.running}


def _look(study: optuna.Study, settings: StudySettings, machine: str) -> _Seen:
    """``_Seen`` of ``machine`` now: the study's trials and attributes read once."""
    trials, attrs = study.get_trials(deepcopy=False), study.user_attrs
    measured = measured_trials(study, machine, trials)
    running = measuring_now(trials, machine)
    stored = attrs.get(on_machine(BASELINE_ATTR, machine))
    baseline = TrialResult.from_dict(stored) if stored is not None else None
    failed = _known_failures(attrs, baseline, measured, machine)
    known = _known_outcomes(baseline, trials, measured, settings, machine, failed)
    owed = _owed(trials, machine, set(known) | {t.user_attrs[CONFIG_ATTR] for t in running})
    waiting = any(t.state is TrialState.WAITING for t in trials)
    return _Seen(known, len(measured), failed, running, owed, waiting)


def _owed(trials: list[optuna.trial.FrozenTrial], machine: str, taken: set[str]) -> list[Proposal]:
    """The configurations ``machine`` owes, oldest first: those its trials were measuring when their tuner died or was
    stopped, or that study.budget_s left for a later run (failed, marked interrupted), neither measured there since
    nor ``taken`` (measured, or in flight). Any tuner of the machine proposes them before anything new (where they
    fit its budget: one whose runs the budget's cap ended, ``Proposal.capped_s``, needs more than the longest), tuners
    of other machines do not, and a tuner that dies failing a trial loses nothing, as what is owed is read from the
    trials, not queued."""
    owed: dict[str, Proposal] = {}
    for trial in trials:
        kept = trial.user_attrs
        if (
            interrupted(trial)
            and kept.get(MACHINE_ATTR) == machine
            and kept.get(CONFIG_ATTR) not in taken | {None}
            and DUPLICATE_ATTR not in kept
        ):
            key = kept[CONFIG_ATTR]
            first = owed.setdefault(key, Proposal(json.loads(key), kept.get(PREDICTED_ATTR)))
            capped = [seconds for seconds in (first.capped_s, kept.get(CAPPED_ATTR)) if seconds is not None]
            owed[key] = replace(first, capped_s=max(capped, default=None))
    return list(owed.values())


def counted_trials(study: optuna.Study, machine: str | None = None) -> int:
    """Trials that measured a new configuration on ``machine`` (None: this one; complete, failed or pruned; not
    repeats, not interrupted, not those left unmeasured as out of memory): ``measured_trials``."""
    return len(measured_trials(study, machine or this_machine_id()))


def _exhausted(space: SearchSpace, taken: set[str], failed: list[KnownFailure]) -> bool:
    """Whether no configuration of ``space`` is left untried (``_untried``)."""
    return next(_untried(space, taken, failed), None) is None


def _draw_untried(
    space: SearchSpace, taken: set[str], failed: list[KnownFailure], rng: random.Random
) -> dict[str, Any]:
    """A configuration drawn at random from ``_untried`` (there must be one): drawn from the whole space until one
    is untried, or, where nearly all are tried, chosen from the list of those that are not."""
    for _ in range(_UNTRIED_DRAWS):
        knobs = space.draw(rng)
        if knobs is not None and _is_untried(knobs, taken, failed):
            return knobs
    return rng.choice(list(_untried(space, taken, failed)))


def search_left(study: optuna.Study, settings: StudySettings, space: SearchSpace, machine: str) -> bool:
    """Whether ``tune`` would start a trial on ``machine``: the study's trials measured and running there are fewer
    than study.n_trials, and a configuration of ``space`` is left untried (as its loop reads them)."""
    seen = _look(study, settings, machine)
    if seen.counted + len(seen.running) >= settings.n_trials:
        return False
    return not _exhausted(space, set(seen.known) | seen.in_flight, seen.failed)


def _untried(space: SearchSpace, taken: set[str], failed: list[KnownFailure]) -> Iterator[dict[str, Any]]:
    """The configurations of ``space`` neither ``taken`` (measured, or being measured) nor ruled out by one of
    ``failed`` (``ruled_out``)."""
    return (knobs for knobs in space.configurations() if _is_untried(knobs, taken, failed))


def _is_untried(knobs: dict[str, Any], taken: set[str], failed: list[KnownFailure]) -> bool:
    return config_key(knobs) not in taken and not ruled_out(knobs, failed)


def _not_measured(study: optuna.Study, trial: optuna.Trial, key: str, found: KnownFailure) -> None:
    """Tell Optuna that ``trial`` of configuration ``key`` is pruned without a measurement, as ``found`` shows it
    would fail (``ruled_out``); the reason is kept on the trial."""
    trial.set_user_attr(CONFIG_ATTR, key)
    trial.set_user_attr(NOT_MEASURED_ATTR, why_ruled_out(found))
    _told(study, trial, state=TrialState.PRUNED)


def _as_owed(seen: _Seen, key: str, knobs: dict[str, Any]) -> Proposal:
    """The sampler's draw ``knobs`` (configuration ``key``) as the machine owes it, with the time a capped run of it
    took (``Proposal.capped_s``), or a plain proposal where it owes none."""
    return next((owed for owed in seen.owed if config_key(owed.knobs) == key), Proposal(knobs))


def _out_of_budget(settings: StudySettings) -> StopReason:
    return StopReason(
        f"study.budget_s={settings.budget_s:g}: the next search trial does not fit in what is left (the reports list "
        "what it needed)"
    )


class _EndedByBudget(Exception):
    """Raised by ``_measure_trial`` where what study.budget_s had left ended the trial's process
    (``clock.ended_by_budget``): the trial is left for a later run (``_left_for_later``)."""


def _left_for_later(study: optuna.Study, trial: optuna.Trial, key: str) -> None:
    """Fail ``trial`` of configuration ``key`` unmeasured, as interrupted: the machine owes it (``_owed``), and a
    later run of the study, with the time for it, measures it first."""
    trial.set_user_attr(CONFIG_ATTR, key)
    trial.set_user_attr(INTERRUPTED_ATTR, True)
    _told(study, trial, state=TrialState.FAIL)


def _known_failures(
    attrs: dict[str, Any], baseline: TrialResult | None, measured: Measured, machine: str
) -> list[KnownFailure]:
    """What failed on ``machine`` in a way that rules out configurations unmeasured (``ruled_out``): what ran out of
    memory, the probe's settings (in the study's ``attrs``) then the trials' (of ``measured``); and, from two trials'
    exceptions raised in DataLoader workers on, the second, while no configuration with workers loaded a batch: not
    the baseline, not the probe's DataLoader alone, not a trial (``workers_ran``)."""
    stored = attrs.get(on_machine(PROBE_ATTR, machine))
    probe = ProbeRecord.from_dict(stored) if stored is not None else None
    found: list[KnownFailure] = [*(probe.out_of_memory if probe else [])]
    found += [entry for trial, result in measured if (entry := OutOfMemory.of_trial(trial.number, result))]
    results = [result for _, result in measured] + ([baseline] if baseline is not None else [])
    if (probe is not None and probe.workers_ran) or any(map(workers_ran, results)):
        return found
    in_workers = [entry for trial, result in measured if (entry := WorkerFailure.of_trial(trial.number, result))]
    return found + in_workers[1:2]  # the second: one may be a sample the others never reach, or a passing fault


def within_budget(result: TrialResult, settings: StudySettings) -> TrialResult:
    """``result``, marked infeasible (keeping its measurement) if a peak of its memory is over its budget."""
    over = [said for said, excess in _budget_excesses(result, settings) if excess > 0] if result.ok else []
    if not over:
        return result
    return replace(result, failure=Failure(FailureKind.OUT_OF_MEMORY, "; ".join(over) + ": infeasible"))


_MEMORY_NAMES = {"gpu": "GPU memory (CUDA reserved)", "host": "host memory (process tree)"}


def _budget_excesses(result: TrialResult, settings: StudySettings) -> list[tuple[str, float]]:
    """(what it says, MB over) for each memory budget set, of a measured ``result``: study.memory_budget_mb bounds the
    limiting memory (the GPU's on CUDA, the host process tree's on CPU), study.host_memory_budget_mb the host tree.
    A negative excess is room left."""
    memory = result.measurement.memory
    checks = [
        ("study.memory_budget_mb", settings.memory_budget_mb, memory.limiting, memory.limiting_peak_mb),
        ("study.host_memory_budget_mb", settings.host_memory_budget_mb, "host", memory.peak_mb),
    ]
    return [
        (f"peak {peak:.0f} MB of {_MEMORY_NAMES[which]} is over {key}={budget:g}", peak - budget)
        for key, budget, which, peak in checks
        if budget is not None
    ]


@dataclass(frozen=True)
class _Outcome:
    """What Optuna is told about a measured configuration: its state, objective values and constraints
    (a constraint above zero makes the trial infeasible: over the memory budget, or a wrong loss)."""

    label: int | str
    state: TrialState
    values: list[float] | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    pruned_at: float | None = None  # a pruned trial's last throughput reading

    @property
    def feasible_throughput(self) -> float | None:
        if self.values is None or any(c > 0 for c in self.constraints.values()):
            return None
        return self.values[0]


def _outcome(
    label: int | str, result: TrialResult, settings: StudySettings, pruned_at: float | None = None
) -> _Outcome:
    if result.measurement is None:
        pruned = result.failure.kind is FailureKind.PRUNED
        return _Outcome(label, TrialState.PRUNED, pruned_at=pruned_at) if pruned else _Outcome(label, TrialState.FAIL)
    values = [result.timing.throughput]
    if settings.multi_objective:
        values.append(result.peak_memory_mb)
    constraints = {
        "memory_over_budget_mb": max((excess for _, excess in _budget_excesses(result, settings)), default=0.0),
        "loss_incorrect": 1.0 if result.failure is not None and result.failure.kind is FailureKind.INCORRECT else 0.0,
    }
    return _Outcome(label, TrialState.COMPLETE, values, constraints)


def _observations(known: dict[str, _Outcome]) -> list[Observation]:
    """The throughput seen of every configuration measured (a pruned one's last reading) for the guide."""
    observations = []
    for key, outcome in known.items():
        seen = outcome.values[0] if outcome.values else outcome.pruned_at
        if seen is not None:
            observations.append(Observation(json.loads(key), seen, outcome.feasible_throughput is not None))
    return observations


def _pruner(settings: StudySettings, known: dict[str, _Outcome]) -> SlowerThanBestPruner | None:
    """Pruning compares one throughput against the best; it is off for multi-objective studies."""
    if settings.prune_margin is None or settings.multi_objective:
        return None

    def best() -> float | None:
        return max((o.feasible_throughput for o in known.values() if o.feasible_throughput), default=None)

    return SlowerThanBestPruner(settings.prune_margin, best)


def _measure_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    knobs: dict[str, Any],
    run: RunFn,
    settings: StudySettings,
    pruner: SlowerThanBestPruner | None,
) -> tuple[TrialResult, _Outcome]:
    """Measure ``knobs`` as ``trial``, store the result on it and tell Optuna; a trial stopped by an exception
    (Ctrl-C; PlacementRefusedError, its process refusing its slot's cores: the run's, not the configuration's) is
    marked interrupted, so that a later run measures it first (``_owed``). UpdateFinishedTrialError where another
    tuner took the trial for dead and failed it meanwhile: its result is lost, and its configuration is measured
    again. _EndedByBudget where what study.budget_s had left ended its process: no timeout of the configuration's, so
    it is left for a later run (``_left_for_later``), how long it ran kept on the trial (CAPPED_ATTR), rather than
    stored as failed, never measured again. Only a run that can give it more than it ran measures it again
    (``Proposal.capped_s``): each run of it gets more time than the last, until one ends it, measured or at
    measure.trial_timeout_s (a timeout of its own, a fault)."""
    last_reading: list[float] = []

    def on_progress(steps: int, throughput: float) -> str | None:
        trial.report(throughput, steps)
        last_reading[:] = [throughput]
        return pruner.reason(throughput) if pruner.slower(steps, throughput) else None

    try:
        result = run(knobs, f"trial-{trial.number}", on_progress if pruner else None)
    except BaseException:
        with contextlib.suppress(UpdateFinishedTrialError):
            trial.set_user_attr(INTERRUPTED_ATTR, True)
            _told(study, trial, state=TrialState.FAIL)
        raise
    if ended_by_budget(result):
        trial.set_user_attr(CAPPED_ATTR, result.wall_s)  # all the budget had left as it started: its processes' time
        _left_for_later(study, trial, config_key(knobs))
        raise _EndedByBudget
    result = within_budget(result, settings)
    outcome = _outcome(trial.number, result, settings, last_reading[0] if last_reading else None)
    trial.set_user_attr(RESULT_ATTR, result.to_dict())
    for key, value in metric_attrs(result).items():
        trial.set_user_attr(key, value)
    _tell(study, trial, outcome)
    return result, outcome


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: _Outcome) -> None:
    if outcome.values is None:
        _told(study, trial, state=outcome.state)
        return
    for name, value in outcome.constraints.items():
        trial.set_constraint(name, value)
    _told(study, trial, outcome.values)


def _told(
    study: optuna.Study, trial: optuna.Trial, values: list[float] | None = None, state: TrialState | None = None
) -> None:
    """``study.tell``, raising UpdateFinishedTrialError, as a write to it does, where ``trial`` is finished already:
    another tuner took it for dead and failed it (Optuna's tell raises ValueError then, as for a wrong value)."""
    try:
        study.tell(trial, values, state=state)
    except ValueError:
        if not study._storage.get_trial(trial._trial_id).state.is_finished():
            raise
        raise UpdateFinishedTrialError(f"trial {trial.number} was failed by another tuner") from None


def _known_outcomes(
    baseline: TrialResult | None,
    trials: list[optuna.trial.FrozenTrial],
    measured: Measured,
    settings: StudySettings,
    machine: str,
    failed: list[KnownFailure],
) -> dict[str, _Outcome]:
    """Configurations measured on ``machine`` (its ``baseline``, where stored, and ``measured``), and those of
    ``trials`` not measured as what ``failed`` still rules out (``ruled_out``) → what Optuna was told about them."""
    known: dict[str, _Outcome] = {}
    if baseline is not None:
        known[config_key(baseline.knobs)] = _outcome(BASELINE_LABEL, baseline, settings)
    for trial, result in measured:
        readings = trial.intermediate_values
        pruned_at = readings[max(readings)] if readings else None
        known.setdefault(config_key(result.knobs), _outcome(trial.number, result, settings, pruned_at))
    for trial in trials:
        kept = trial.user_attrs
        if trial.state is TrialState.PRUNED and NOT_MEASURED_ATTR in kept and kept.get(MACHINE_ATTR) == machine:
            if ruled_out(json.loads(kept[CONFIG_ATTR]), failed):  # a failure in a worker no longer rules out once
                known.setdefault(kept[CONFIG_ATTR], _Outcome(trial.number, TrialState.PRUNED))  # workers ran
    return known
