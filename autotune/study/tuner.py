"""The search: the baseline first, then proposed trials; every result is stored in the study.

The study is the record of truth: reports are rendered from what is stored here, and running the same command again
resumes it. Opening it is ``autotune/study/start.py``; tuners sharing it coordinate through
``autotune/study/sharing.py``. What the search reads of the study for a machine is ``autotune/study/search_state.py``;
how a trial ends, measured or not, and what Optuna is told of it, ``autotune/study/trial_outcome.py``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable
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
    CONFIG_ATTR,
    DUPLICATE_ATTR,
    MACHINE_ATTR,
    PREDICTED_ATTR,
    TUNER_ATTR,
    baseline_record,
    config_key,
    on_machine,
)
from autotune.study.proposing import proposing
from autotune.study.pruner import SlowerThanBestPruner
from autotune.study.search_state import Observation, Proposal, Seen, as_owed, draw_untried, exhausted, look
from autotune.study.sharing import always, await_others, beat, claimed, heartbeat, searching
from autotune.study.space import KnownFailure, SearchSpace, ruled_out, why_ruled_out
from autotune.study.storage import is_shared
from autotune.study.trial_outcome import (
    EndedByBudget,
    Outcome,
    RunFn,
    TrialEvent,
    left_for_later,
    measure_trial,
    not_measured,
    tell,
    told,
)
from autotune.trial.result import TrialResult
from autotune.trial.runner import INTERRUPT
from autotune.words import counted

# Proposals of already measured configurations in a row after which the sampler is taken to have converged.
_MAX_REPEATED_PROPOSALS = 100
# Proposals of already measured configurations in a row after which an untried one is drawn instead: each repeat
# is a trial in the storage (tens of milliseconds), and on a small space the sampler repeats itself dozens of times.
_REPEATS_BEFORE_UNTRIED = 3


# Whether the next trial fits in study.budget_s (``RunClock.affords``): the number of trials measured, and what it is
# to measure where known before Optuna is asked (a proposal, or the sampler's draw), else None.
AffordsFn = Callable[[int, Proposal | None], bool]


# What was measured so far, the keys of every configuration tried and what ran out of memory in; the next proposal
# out, or None when nothing left is worth measuring.
ProposeFn = Callable[[list[Observation], set[str], list[KnownFailure]], Proposal | None]


def ensure_baseline(
    study: optuna.Study, knobs: dict[str, Any], run: RunFn, machine: str | None = None
) -> tuple[TrialResult, bool]:
    """The baseline's result on ``machine`` (a ``machine_id``; None: this one) as stored, or a new measurement of it.
    Returns (result, reused). Where another tuner of the same machine stored one while this one measured, the stored
    one is used by both."""
    machine = machine or this_machine_id()
    stored = baseline_record(study.user_attrs, machine)
    if stored is not None:
        return stored, True
    result = run(knobs, BASELINE_LABEL, None)
    if result.ok:
        stored = baseline_record(study.user_attrs, machine)
        if stored is not None:
            return stored, True
        study.set_user_attr(on_machine(BASELINE_ATTR, machine), result.to_dict())
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
    while (seen := look(study, settings, machine)).counted + len(seen.running) < settings.n_trials:
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
    process the budget ended (``measure_trial``); the search goes on without them. ``repeats``: proposals in a row
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
    known: dict[str, Outcome] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    repeats: int = 0
    failures_in_a_row: int = 0
    dropped_in_a_row: int = 0

    def __post_init__(self) -> None:
        self.pruner = _pruner(self.settings, self.known)
        self.draw = random.Random(f"{self.settings.seed}:{threading.current_thread().name}")  # each slot its own

    def step(self, seen: Seen) -> None:
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
        except EndedByBudget:
            self._ended_by_budget(trial, knobs, key, seen.counted)
            return
        if measured is None:
            self.repeats += 1
            return
        self.dropped_in_a_row = 0
        result, self.known[key] = measured
        self._counted(trial, result, seen.counted)

    def _check_ends(self, seen: Seen, taken: set[str]) -> None:
        """``_Stop`` where the space is exhausted, study.timeout_s is reached or the sampler keeps repeating itself
        (where the budget passed proposals over, the stop is the budget's)."""
        if exhausted(self.space, taken, seen.failed):
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

    def _proposal(self, seen: Seen, taken: set[str]) -> Proposal | None:
        """What to measure next. Trials already waiting (enqueued by the user) go first (None), then what this machine
        owes (``Seen.owed``), then the guide's proposal (``_Stop`` where it has none: converged); without a guide,
        the sampler proposes (None), or, once it keeps repeating itself, a configuration drawn from those untried. A
        trial the user enqueued since ``look`` is asked for first all the same, the proposal filling in what it
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
            proposal = Proposal(draw_untried(self.space, taken, seen.failed, self.draw))
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
        self, trial: optuna.Trial, knobs: dict[str, Any], key: str, seen: Seen, proposal: Proposal | None
    ) -> bool:
        """Whether ``trial``, of ``knobs``, is answered without a measurement: a configuration measured before (told
        its stored outcome), one a failure rules out (pruned), or one too dear for study.budget_s (left for a later
        run; ``_Stop`` where no plain trial fits either)."""
        if key in self.known:
            trial.set_user_attr(DUPLICATE_ATTR, self.known[key].label)
            tell(self.study, trial, self.known[key])
            return True
        done, n_trials = seen.counted, self.settings.n_trials
        if (found := ruled_out(knobs, seen.failed)) is not None:
            not_measured(self.study, trial, key, found)  # known from then on: proposed again, a duplicate
            self.on_trial(
                TrialEvent(trial.number, done, n_trials, None, knobs=knobs, not_measured=why_ruled_out(found))
            )
            return True
        if key in self.skipped or (
            proposal is None and self.affords is not None and not self.affords(done, as_owed(seen, key, knobs))
        ):
            left_for_later(self.study, trial, key)
            if not self.affords(done, None):
                raise _Stop(_out_of_budget(self.settings))
            if key not in self.skipped:
                later = f"left for a later run: it does not fit study.budget_s={self.settings.budget_s:g}"
                self.on_trial(TrialEvent(trial.number, done, n_trials, None, knobs=knobs, not_measured=later))
            self.skipped.add(key)
            return True
        return False

    def _measure(self, trial: optuna.Trial, knobs: dict[str, Any], key: str) -> tuple[TrialResult, Outcome] | None:
        """Measure ``knobs`` as ``trial``, its heartbeat first (a trial in flight is always heard of at its tuner's
        own interval); None where it gives way (``_given_way``: pruned, a duplicate); EndedByBudget where the budget
        ended its process (``measure_trial``)."""
        shared = is_shared(self.settings.storage)
        with heartbeat(trial, self.settings.heartbeat_s if shared else None):
            trial.set_user_attr(CONFIG_ATTR, key)  # measuring it: other tuners of the study see it in flight
            with claimed(self.study, trial, self.machine, key, take_over=shared) as mine:
                given_way = (
                    _given_way(self.study, self.settings, self.machine, trial.number, key) if mine else "another tuner"
                )
                if given_way:
                    trial.set_user_attr(DUPLICATE_ATTR, given_way)
                    told(self.study, trial, state=TrialState.PRUNED)
                    return None
                self.repeats = 0
                return measure_trial(self.study, trial, knobs, self.run, self.settings, self.pruner)

    def _ended_by_budget(self, trial: optuna.Trial, knobs: dict[str, Any], key: str, done: int) -> None:
        """Report ``trial``, of ``knobs``, whose process what study.budget_s had left ended: left for a later run that
        can give it more (``left_for_later``, ``Proposal.capped_s``), and no fault (study.max_consecutive_failures
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


def _unconverged(seen: Seen, propose: ProposeFn | None, skipped: set[str]) -> str:
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


def _next_in_words(proposal: Proposal, known: dict[str, Outcome]) -> str:
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
    seen = look(study, settings, machine)
    if key in seen.known:
        return "another tuner"
    if seen.counted + sum(t.number < number for t in seen.running) >= settings.n_trials:
        return f"not measured: study.n_trials={settings.n_trials} reached by other tuners' trials"
    return None


def _out_of_budget(settings: StudySettings) -> StopReason:
    return StopReason(
        f"study.budget_s={settings.budget_s:g}: the next search trial does not fit in what is left (the reports list "
        "what it needed)"
    )


def _observations(known: dict[str, Outcome]) -> list[Observation]:
    """The throughput seen of every configuration measured (a pruned one's last reading) for the guide."""
    observations = []
    for key, outcome in known.items():
        seen = outcome.values[0] if outcome.values else outcome.pruned_at
        if seen is not None:
            observations.append(Observation(json.loads(key), seen, outcome.feasible_throughput is not None))
    return observations


def _pruner(settings: StudySettings, known: dict[str, Outcome]) -> SlowerThanBestPruner | None:
    """Pruning compares one throughput against the best; it is off for multi-objective studies."""
    if settings.prune_margin is None or settings.multi_objective:
        return None

    def best() -> float | None:
        return max((o.feasible_throughput for o in known.values() if o.feasible_throughput), default=None)

    return SlowerThanBestPruner(settings.prune_margin, best)
