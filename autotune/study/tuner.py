"""The Optuna study: the baseline first, then proposed trials; every result is stored in the study.

The study is the record of truth: reports are rendered from what is stored here, and running
the same command again resumes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.study import StudyDirection
from optuna.trial import TrialState

from autotune.config.settings import STALE_BEATS, StudySettings
from autotune.errors import StudyMismatchError
from autotune.measure.environment import describe_machine, machine_id, this_machine_id
from autotune.records import (
    ALIVE_ATTR,
    BASELINE_ATTR,
    BASELINE_LABEL,
    CLAIM_ATTR,
    CONFIG_ATTR,
    DUPLICATE_ATTR,
    INTERRUPTED_ATTR,
    MACHINE_ATTR,
    META_ATTR,
    NOT_MEASURED_ATTR,
    PREDICTED_ATTR,
    PROBE_ATTR,
    RESULT_ATTR,
    TUNER_ATTR,
    OutOfMemory,
    ProbeRecord,
    config_key,
    measured_trials,
    metric_attrs,
    on_machine,
)
from autotune.study.proposing import ProposingSampler, proposing
from autotune.study.pruner import SlowerThanBestPruner
from autotune.study.space import SearchSpace, out_of_memory_bound
from autotune.study.storage import create_study, is_shared, opening
from autotune.trial.result import Failure, FailureKind, TrialResult
from autotune.trial.runner import INTERRUPT, ProgressFn

_DIRECTIONS = {"throughput": "maximize", "peak_memory": "minimize"}

# The trials that measured a configuration on a machine, with their results (``records.measured_trials``).
Measured = list[tuple[optuna.trial.FrozenTrial, TrialResult]]
# Knob values, a trial name and an optional progress callback (for pruning) in, a result out.
RunFn = Callable[[dict[str, Any], str, ProgressFn | None], TrialResult]
# The number of trials measured in, whether the next one fits in study.budget_s (``RunClock.affords``) out.
AffordsFn = Callable[[int], bool]
# Proposals of already measured configurations in a row after which the sampler is taken to have converged.
_MAX_REPEATED_PROPOSALS = 100
# Proposals of already measured configurations in a row after which an untried one is drawn instead: each repeat
# is a trial in the storage (tens of milliseconds), and on a small space the sampler repeats itself dozens of times.
_REPEATS_BEFORE_UNTRIED = 3
# Random draws tried for an untried configuration before they are listed: a draw takes ~15 µs, a list walks the
# whole space, which multiplies with every knob searched (tenths of a second for 70,000 configurations).
_UNTRIED_DRAWS = 200
# How often a tuner whose search is done looks whether the others' trials on its machine have ended.
_AWAIT_POLL_S = 2.0
# When this process first saw each running trial (by study name, trial number and recorded start, which tell
# apart the trials of studies of one name in other storages): what a trial's silence counts from before its first
# heartbeat. Not the recorded start itself: Optuna writes the writer's local time, without its zone, and a tuner in
# another zone would read it hours off and fail a live trial.
_FIRST_SEEN: dict[tuple[str, int, object], float] = {}


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
    """The next configuration to measure, and its predicted throughput (None where unknown)."""

    knobs: dict[str, Any]
    predicted: float | None = None


# What was measured so far, the keys of every configuration tried and what ran out of memory in; the next proposal
# out, or None when nothing left is worth measuring.
ProposeFn = Callable[[list[Observation], set[str], list[OutOfMemory]], Proposal | None]


@dataclass(frozen=True)
class TrialEvent:
    """A finished tuning trial, for progress display. ``index`` counts from 1 to ``total``."""

    number: int
    index: int
    total: int
    result: TrialResult


def open_study(settings: StudySettings, meta: dict[str, Any], machine: dict[str, Any] | None = None) -> optuna.Study:
    """Create the study, or load it if it exists with the same settings (a resume, or another tuner joining it).

    ``meta`` describes what is tuned (pipeline, baseline, space, measurement); a stored study
    with a different description is refused rather than mixed with this one. ``machine`` (``describe_machine``) is
    stored under its ``machine_id`` (None: this machine): each machine's results are its own. The sampler is
    multivariate TPE with conditional groups, since knobs interact and some apply only given others.
    A storage that cannot be opened, or fails before this returns, is a ConfigError naming study.storage and the
    cause (``autotune/study/storage.py``); a fault later raises StorageFaultError.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # "group" is experimental
        sampler = ProposingSampler(
            optuna.samplers.TPESampler(
                seed=settings.seed, n_startup_trials=_startup_trials(settings.n_trials), multivariate=True, group=True
            )
        )
    with opening(settings.storage):  # a storage fault before the run starts refuses it
        study = create_study(
            settings.storage,
            study_name=settings.name,
            sampler=sampler,
            directions=[_DIRECTIONS[objective] for objective in settings.objectives],
            load_if_exists=True,
        )
        _adopt(study, meta, settings)
        machine = describe_machine() if machine is None else machine
        machine_attr = on_machine(MACHINE_ATTR, machine_id(machine))
        if machine_attr not in study.user_attrs:
            study.set_user_attr(machine_attr, machine)
    return study


def _adopt(study: optuna.Study, meta: dict[str, Any], settings: StudySettings) -> None:
    """Store ``meta`` in a new study; refuse a stored one made with other settings; fail what a killed run left (on
    a shared storage, what a dead tuner left: the others' trials run on)."""
    fingerprint = _fingerprint(meta)
    stored = study.user_attrs.get(META_ATTR)
    if BASELINE_ATTR in study.user_attrs:  # records of one machine, not kept per machine: an earlier autotune's
        raise StudyMismatchError(
            f"study.name: study '{study.study_name}' was made by an earlier autotune, whose records this one does not "
            "read; pass study.name=NEW_NAME to start another study (mode=report of an earlier autotune renders it)"
        )
    if stored is None:
        study.set_user_attr(META_ATTR, {**meta, "fingerprint": fingerprint})
    elif stored.get("fingerprint") != fingerprint:
        differences = _differences(stored, json.loads(json.dumps(meta, default=str))) or ["how it was described"]
        derived = " (a search space not given is derived from the machine)" if "space." in " ".join(differences) else ""
        raise StudyMismatchError(
            f"study.name: study '{study.study_name}' in the storage was created with other settings: "
            f"{'; '.join(differences[:4])}{'; …' if len(differences) > 4 else ''}{derived}; set them back, or pass "
            "study.name=NEW_NAME to start another study"
        )
    if is_shared(settings.storage):
        fail_stale_trials(study)
    else:
        _fail_interrupted_trials(study, _running(study))


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
    """Why tuning stopped; ``aborted`` when it stopped because something is wrong."""

    message: str
    aborted: bool = False


def tune(
    study: optuna.Study,
    space: SearchSpace,
    settings: StudySettings,
    run: RunFn,
    on_trial: Callable[[TrialEvent], None],
    propose: ProposeFn | None = None,
    machine: str | None = None,
    affords: AffordsFn | None = None,
) -> StopReason:
    """Run trials on ``machine`` (a ``machine_id``; None: this one) until the study holds ``settings.n_trials``
    configurations measured there.

    With ``propose`` (the probe's guide), each trial measures the configuration it proposes and tuning stops
    once it proposes none; without, Optuna's sampler proposes. A configuration measured before (the baseline
    included) is not measured again: the proposal is answered from the stored result and does not count as a
    trial. Tuning also stops at ``settings.timeout_s``, where ``affords(trials measured)`` says the next trial does
    not fit in study.budget_s, when the space is exhausted, and, aborted, after
    ``settings.max_consecutive_failures`` failed trials in a row (pruned, out-of-memory and incorrect trials are
    verdicts on their configuration, not failures: ``FailureKind.is_fault``). A configuration that needs no less
    memory than one that ran out (in the probe or a trial: ``space.needs_no_less_memory``) is not measured: Optuna
    is told it is pruned, with the reason, and it does not count as a trial either.

    Other tuners may share the study (``storage.is_shared``): what they measured on the same machine counts here, a
    configuration one of them is measuring is not measured again, and tuning ends once theirs are done too (a trial
    of a tuner that died is failed by its missing heartbeats and its configuration measured again).
    """
    deadline = time.monotonic() + settings.timeout_s if settings.timeout_s is not None else float("inf")
    machine = machine or this_machine_id()
    while True:
        stop = _search(study, space, settings, run, on_trial, machine, propose, deadline, affords)
        if stop.aborted or not _await_others(study, settings, machine, deadline):
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
) -> StopReason:
    """``tune`` with a trial at a time in each slot of ``runs`` (``study.parallel``: each runs its trials on its own
    GPU or cores), the slots sharing the study as tuners of a shared study do. The outcome is the first stop that
    aborted, else the first slot's. Ctrl-C, or a slot's error, stops every slot's trial (``runner.INTERRUPT``)."""
    if len(runs) == 1:
        return tune(study, space, settings, runs[0], on_trial, propose, machine, affords)
    INTERRUPT.clear()
    try:
        with ThreadPoolExecutor(len(runs), thread_name_prefix="autotune-slot") as pool:
            futures = [
                pool.submit(tune, study, space, settings, run, on_trial, propose, machine, affords) for run in runs
            ]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
                stops = [future.result() for future in futures]
            except BaseException:
                INTERRUPT.set()
                raise
    finally:
        INTERRUPT.clear()
    return next((stop for stop in stops if stop.aborted), stops[0])


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
    n_trials, timeout_s = settings.n_trials, settings.timeout_s
    known: dict[str, _Outcome] = {}
    pruner = _pruner(settings, known)  # this thread's: a slot's trials are judged on what its own thread read
    repeats = failures_in_a_row = 0
    draw = random.Random(f"{settings.seed}:{threading.current_thread().name}")  # each slot draws its own
    while (seen := _look(study, settings, machine)).counted + len(seen.running) < n_trials:
        if INTERRUPT.is_set():
            raise KeyboardInterrupt
        known.clear()  # in place: the pruner reads it; other tuners of the study add to it
        known.update(seen.known)
        ran_out, done = seen.ran_out, seen.counted
        taken = set(known) | seen.in_flight
        if _exhausted(space, taken, ran_out):
            too_big = " or need no less memory than one that ran out" if ran_out else ""
            return StopReason(f"all {space.size} configurations of the search space are measured{too_big}")
        if time.monotonic() >= deadline:
            return StopReason(f"study.timeout_s={timeout_s:g} reached")
        if affords is not None and not affords(done):
            return StopReason(f"study.budget_s={settings.budget_s:g}: the time left is kept for what follows")
        if repeats >= _MAX_REPEATED_PROPOSALS:
            return StopReason("the sampler keeps proposing measured configurations")
        # Trials already waiting (enqueued by the user) go first, then what this machine owes (``_Seen.owed``),
        # then the guide's proposal; without a guide, the sampler proposes, or, once it keeps repeating itself, a
        # configuration drawn from those untried. A trial the user enqueued since ``_look`` is asked for first all
        # the same, the proposal filling in what it leaves open; the proposal comes again next time.
        proposal = None
        if not seen.waiting:
            proposal = seen.owed[0] if seen.owed else None
            if proposal is None and propose is not None:
                proposal = propose(_observations(known), taken, ran_out)
                if proposal is None:
                    return StopReason(
                        f"converged: corrected by the {len(known)} configurations measured (the baseline included), "
                        "the probe predicts none of the others faster than the best"
                    )
            if proposal is None and repeats >= _REPEATS_BEFORE_UNTRIED:
                proposal = Proposal(_draw_untried(space, taken, ran_out, draw))
        with proposing(study, proposal.knobs if proposal is not None else None):
            trial = study.ask()
            knobs = space.sample(trial)
        key = config_key(knobs)
        trial.set_user_attr(MACHINE_ATTR, machine)
        trial.set_user_attr(TUNER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
        if proposal is not None and proposal.predicted is not None and knobs == proposal.knobs:
            trial.set_user_attr(PREDICTED_ATTR, proposal.predicted)
        if key in known:
            trial.set_user_attr(DUPLICATE_ATTR, known[key].label)
            _tell(study, trial, known[key])
            repeats += 1
            continue
        if (bound := out_of_memory_bound(knobs, ran_out)) is not None:
            _not_measured(study, trial, key, bound)
            repeats += 1
            continue
        # Its heartbeat first: a trial in flight is always heard of at its tuner's own interval.
        with _heartbeat(trial, settings.heartbeat_s if is_shared(settings.storage) else None):
            trial.set_user_attr(CONFIG_ATTR, key)  # measuring it: other tuners of the study see it in flight
            with _claimed(study, trial, machine, key, take_over=is_shared(settings.storage)) as mine:
                given_way = _given_way(study, settings, machine, trial.number, key) if mine else "another tuner"
                if given_way:
                    trial.set_user_attr(DUPLICATE_ATTR, given_way)
                    study.tell(trial, state=TrialState.PRUNED)
                    repeats += 1
                    continue
                repeats = 0
                result, outcome = _measure_trial(study, trial, knobs, run, settings, pruner)
        if outcome is not None:
            known[key] = outcome
        on_trial(TrialEvent(trial.number, done + 1, n_trials, result))
        broken = result.failure is not None and result.failure.kind.is_fault
        failures_in_a_row = failures_in_a_row + 1 if broken else 0
        if failures_in_a_row >= settings.max_consecutive_failures:
            return StopReason(
                f"the last {failures_in_a_row} trials all failed (the last with {result.failure}); "
                f"stopped rather than spend the budget (study.max_consecutive_failures)",
                aborted=True,
            )
    return StopReason(f"study.n_trials={n_trials} trials measured")


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
    ran_out: list[OutOfMemory]
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
    running = _measuring_now(trials, machine)
    known = _known_outcomes(attrs, trials, measured, settings, machine)
    owed = _owed(trials, machine, set(known) | {t.user_attrs[CONFIG_ATTR] for t in running})
    waiting = any(t.state is TrialState.WAITING for t in trials)
    return _Seen(known, len(measured), _out_of_memory(attrs, measured, machine), running, owed, waiting)


def _owed(trials: list[optuna.trial.FrozenTrial], machine: str, taken: set[str]) -> list[Proposal]:
    """The configurations ``machine`` owes, oldest first: those its trials were measuring when their tuner died or was
    stopped (failed, marked interrupted), neither measured there since nor ``taken`` (measured, or in flight). Any
    tuner of the machine proposes them before anything new, tuners of other machines do not, and a tuner that dies
    failing a trial loses nothing, as what is owed is read from the trials, not queued."""
    owed: dict[str, Proposal] = {}
    for trial in trials:
        kept = trial.user_attrs
        if (
            trial.state is TrialState.FAIL
            and kept.get(INTERRUPTED_ATTR)
            and kept.get(MACHINE_ATTR) == machine
            and kept.get(CONFIG_ATTR) not in taken | {None}
            and DUPLICATE_ATTR not in kept
        ):
            owed.setdefault(kept[CONFIG_ATTR], Proposal(json.loads(kept[CONFIG_ATTR]), kept.get(PREDICTED_ATTR)))
    return list(owed.values())


def _await_others(study: optuna.Study, settings: StudySettings, machine: str, deadline: float) -> bool:
    """Wait while other tuners of the study measure configurations on ``machine`` (the race must see them), failing
    those of tuners that died. Returns whether the search must go on: a trial waited for ended interrupted (failed
    here, by another tuner, or by its own on Ctrl-C), and its configuration is owed (``_owed``)."""
    if not is_shared(settings.storage):
        return False
    awaited: set[int] = set()
    while measuring := _measuring_now(running := _running(study), machine):
        awaited |= {trial.number for trial in measuring}
        if fail_stale_trials(study, running):
            break
        if INTERRUPT.wait(min(settings.heartbeat_s, _AWAIT_POLL_S)):
            raise KeyboardInterrupt
    ended = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    interrupted = any(t.number in awaited and t.user_attrs.get(INTERRUPTED_ATTR) for t in ended)
    return interrupted and time.monotonic() < deadline


def counted_trials(study: optuna.Study, machine: str | None = None) -> int:
    """Trials that measured a new configuration on ``machine`` (None: this one; complete, failed or pruned; not
    repeats, not interrupted, not those left unmeasured as out of memory): ``measured_trials``."""
    return len(measured_trials(study, machine or this_machine_id()))


@contextmanager
def _claimed(study: optuna.Study, trial: optuna.Trial, machine: str, key: str, take_over: bool) -> Iterator[bool]:
    """Hold, for ``trial``, the right to measure configuration ``key`` on ``machine`` while inside (True), or find
    another tuner holding it (False). A claim is an empty study of its own name in the study's storage: a storage
    creates a name once (a unique constraint in a database, the order of the journal in a file), so of two tuners
    claiming one configuration at once exactly one gets it. The trial names the claim before making it, and the claim
    its trial once made, so that, whenever the trial's tuner dies, the claim is an orphan once the trial is failed
    (``_orphaned``), ended by the tuner that fails it or, where ``take_over`` (a shared study: a SQLite file's ids
    are reused, and its orphans are ended when it is opened), by the next to find it in its way; it ends with the
    trial otherwise."""
    name = _claim_name(study, machine, key)
    claim = _take(study, trial, name)
    if claim is None and take_over and _end_if_orphaned(study, name):
        claim = _take(study, trial, name)
    if claim is None:
        yield False
        return
    try:
        study._storage.set_study_user_attr(claim, "trial", trial.number)
        yield True
    finally:
        _end_claim(study, claim)


def _take(study: optuna.Study, trial: optuna.Trial, name: str) -> int | None:
    """Claim ``name`` for ``trial``, which names it first (``_claimed``): the claim's id, or None where another
    holds it (the trial then names it no more: it must not keep another's orphan from ending)."""
    trial.set_user_attr(CLAIM_ATTR, name)
    claim = _claim(study, name)
    if claim is None:
        trial.set_user_attr(CLAIM_ATTR, None)
    return claim


def _claim(study: optuna.Study, name: str) -> int | None:
    """Claim ``name``: the id of a new empty study of that name in the study's storage, or None where it exists (a
    storage creates a name once: of two tuners claiming at once, exactly one gets it)."""
    try:  # Optuna has no public accessor of the storage; a claim must live where the study does
        return study._storage.create_new_study([StudyDirection.MAXIMIZE], name)
    except DuplicatedStudyError:
        return None


def _end_claim(study: optuna.Study, claim: int) -> None:
    try:
        study._storage.delete_study(claim)
    except KeyError:  # ended already, by a tuner that took this one's trial for dead
        pass


def _end_orphan_claims(study: optuna.Study) -> None:
    """End every orphaned claim of the study (``_orphaned``)."""
    prefix = f"{study.study_name}{_MEASURING}"
    claims = study._storage.get_all_studies()
    running = _running(study)
    for summary in claims:
        if summary.study_name.startswith(prefix):
            if _orphaned(summary.study_name, summary.user_attrs.get("trial"), running):
                _end_claim(study, summary._study_id)


def _end_if_orphaned(study: optuna.Study, name: str) -> bool:
    """End claim ``name`` if it is orphaned (``_orphaned``). Whether it is gone."""
    storage = study._storage
    try:
        claim = storage.get_study_id_from_name(name)
        owner = storage.get_study_user_attrs(claim).get("trial")
    except KeyError:
        return True
    if not _orphaned(name, owner, _running(study)):
        return False
    _end_claim(study, claim)
    return True


def _orphaned(name: str, owner: int | None, running: list[optuna.trial.FrozenTrial]) -> bool:
    """Whether claim ``name``, recording trial ``owner`` (None: none yet), outlived its trial: the trial it records is
    not running (its tuner died between its result and the claim's end, or was failed as dead), or it records none
    and no running trial names it (its tuner died making it). ``running`` must be read after the claim: a trial names
    its claim before making it, so a claim made meanwhile is named by a trial among them."""
    if owner is not None:
        return owner not in {t.number for t in running}
    return not any(t.user_attrs.get(CLAIM_ATTR) == name for t in running)


def _claim_name(study: optuna.Study, machine: str, key: str) -> str:
    return f"{study.study_name}{_MEASURING}{machine}:{hashlib.sha256(key.encode()).hexdigest()[:16]}"


_MEASURING = "#measuring@"  # a claim's name: the study's, this, then the machine and the configuration's hash


def _measuring_now(trials: list[optuna.trial.FrozenTrial], machine: str) -> list[optuna.trial.FrozenTrial]:
    """The trials of ``trials`` measuring a configuration on ``machine`` now."""
    return [
        t
        for t in trials
        if t.state is TrialState.RUNNING
        and t.user_attrs.get(MACHINE_ATTR) == machine
        and CONFIG_ATTR in t.user_attrs
        and DUPLICATE_ATTR not in t.user_attrs
    ]


def fail_stale_trials(study: optuna.Study, running: list[optuna.trial.FrozenTrial] | None = None) -> list[int]:
    """Fail the ``running`` trials (None: read them) of a shared study whose tuner is no longer heard (``_unheard``:
    a trial's heartbeats, or before its first, from when this process first saw it), and end their claims: their
    configurations are then owed (``_owed``); returns their numbers. Tuners' clocks are compared: keep them in sync
    (NTP), as a stale trial is unheard of for a minute by default, far beyond any skew that matters."""
    now = time.time()
    running = _running(study) if running is None else running
    stale = [t for t in running if _unheard(t.user_attrs.get(ALIVE_ATTR), _first_seen(study, t, now), now)]
    return _fail_interrupted_trials(study, stale)


def _first_seen(study: optuna.Study, trial: optuna.trial.FrozenTrial, now: float) -> float:
    return _FIRST_SEEN.setdefault((study.study_name, trial.number, trial.datetime_start), now)


def _running(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def _unheard(beat: list[float] | None, since: float, now: float) -> bool:
    """The rule of a dead tuner: by ``now``, it missed ``STALE_BEATS`` of its heartbeats (``beat``: the last one's
    time and the tuner's interval; None: none yet, counted from ``since`` at the default interval)."""
    heard, every = beat or (since, StudySettings.heartbeat_s)
    return now - heard > STALE_BEATS * every


@contextmanager
def _heartbeat(trial: optuna.Trial, interval_s: float | None) -> Iterator[None]:
    """Tell the study every ``interval_s`` that ``trial`` is alive, while it runs (None: never)."""
    if interval_s is None:
        yield
        return
    with _beating(lambda: trial.set_user_attr(ALIVE_ATTR, [time.time(), interval_s]), interval_s):
        yield


@contextmanager
def finishing(study: optuna.Study, settings: StudySettings, machine: str) -> Iterator[bool]:
    """Whether this tuner is the one to end the study on ``machine`` (its race, trim and profiles, run where its
    finalists were measured). On a shared study one tuner of a machine does, holding a claim (``_claimed``) with a
    heartbeat; the others wait for it to end, then report what it stored (True where it died: this one takes over).
    Alone on its study, a tuner always does."""
    if not is_shared(settings.storage):
        yield True
        return
    name = f"{study.study_name}#finishing@{machine}"
    while (claim := _claim(study, name)) is None:
        if _await_claim(study, name):
            yield False
            return
    try:
        beat, storage = settings.heartbeat_s, study._storage
        with _beating(lambda: storage.set_study_user_attr(claim, ALIVE_ATTR, [time.time(), beat]), beat):
            yield True
    finally:
        _end_claim(study, claim)


def _await_claim(study: optuna.Study, name: str) -> bool:
    """Wait for the claim ``name`` to end: True when its holder ended it, False when the holder was not heard of for
    ``STALE_BEATS`` heartbeats (the claim is ended here)."""
    storage, seen = study._storage, {}  # claim id -> when first seen: a claim made meanwhile is another's
    while True:
        try:
            claim = storage.get_study_id_from_name(name)
            beat = storage.get_study_user_attrs(claim).get(ALIVE_ATTR)
        except KeyError:
            return True
        if _unheard(beat, seen.setdefault(claim, time.time()), time.time()):
            _end_claim(study, claim)
            return False
        if INTERRUPT.wait(_AWAIT_POLL_S):
            raise KeyboardInterrupt


@contextmanager
def _beating(write: Callable[[], None], interval_s: float) -> Iterator[None]:
    """``write`` a heartbeat now, before going on, and every ``interval_s`` while inside. A beat that fails (the
    storage busy or away) is tried again at the next one: a lasting fault is met by the tuner's next write, and said."""
    stop = threading.Event()

    def beat() -> None:
        with contextlib.suppress(Exception):
            write()

    def beating() -> None:
        while not stop.wait(interval_s):
            beat()

    beat()

    thread = threading.Thread(target=beating, name="autotune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _exhausted(space: SearchSpace, taken: set[str], ran_out: list[OutOfMemory]) -> bool:
    """Whether no configuration of ``space`` is left untried (``_untried``)."""
    return next(_untried(space, taken, ran_out), None) is None


def _draw_untried(
    space: SearchSpace, taken: set[str], ran_out: list[OutOfMemory], rng: random.Random
) -> dict[str, Any]:
    """A configuration drawn at random from ``_untried`` (there must be one): drawn from the whole space until one
    is untried, or, where nearly all are tried, chosen from the list of those that are not."""
    for _ in range(_UNTRIED_DRAWS):
        knobs = space.draw(rng)
        if knobs is not None and _is_untried(knobs, taken, ran_out):
            return knobs
    return rng.choice(list(_untried(space, taken, ran_out)))


def _untried(space: SearchSpace, taken: set[str], ran_out: list[OutOfMemory]) -> Iterator[dict[str, Any]]:
    """The configurations of ``space`` neither ``taken`` (measured, or being measured) nor needing no less memory than
    one of ``ran_out``."""
    return (knobs for knobs in space.configurations() if _is_untried(knobs, taken, ran_out))


def _is_untried(knobs: dict[str, Any], taken: set[str], ran_out: list[OutOfMemory]) -> bool:
    return config_key(knobs) not in taken and not out_of_memory_bound(knobs, ran_out)


def _not_measured(study: optuna.Study, trial: optuna.Trial, key: str, bound: OutOfMemory) -> None:
    """Tell Optuna that ``trial`` of configuration ``key`` is pruned without a measurement, as it needs no less memory
    than ``bound``, which ran out; the reason is kept on the trial."""
    trial.set_user_attr(CONFIG_ATTR, key)
    trial.set_user_attr(
        NOT_MEASURED_ATTR,
        f"not measured: it needs no less memory than {bound.shown_by}, which ran out ({bound.message})",
    )
    study.tell(trial, state=TrialState.PRUNED)


def _out_of_memory(attrs: dict[str, Any], measured: Measured, machine: str) -> list[OutOfMemory]:
    """What ran out of memory on ``machine``: the probe's settings (in the study's ``attrs``), then the trials'
    (of ``measured``)."""
    probe = attrs.get(on_machine(PROBE_ATTR, machine))
    found = ProbeRecord.from_dict(probe).out_of_memory if probe is not None else []
    shown = (OutOfMemory.of_trial(trial.number, result) for trial, result in measured)
    return [*found, *(entry for entry in shown if entry is not None)]


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
) -> tuple[TrialResult, _Outcome | None]:
    """Measure ``knobs`` as ``trial``, store the result on it and tell Optuna; a trial stopped by an exception
    (Ctrl-C) is marked interrupted. The outcome is None where another tuner took the trial for dead and failed it
    meanwhile: its result is lost, and its configuration is measured again."""
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
            study.tell(trial, state=TrialState.FAIL)
        raise
    result = within_budget(result, settings)
    outcome = _outcome(trial.number, result, settings, last_reading[0] if last_reading else None)
    try:
        trial.set_user_attr(RESULT_ATTR, result.to_dict())
        for key, value in metric_attrs(result).items():
            trial.set_user_attr(key, value)
        _tell(study, trial, outcome)
    except UpdateFinishedTrialError:
        return result, None
    return result, outcome


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: _Outcome) -> None:
    if outcome.values is None:
        study.tell(trial, state=outcome.state)
        return
    for name, value in outcome.constraints.items():
        trial.set_constraint(name, value)
    study.tell(trial, outcome.values)


def _fail_interrupted_trials(study: optuna.Study, stale: list[optuna.trial.FrozenTrial]) -> list[int]:
    """Trials left running by a tuner that was killed: mark them failed and interrupted (their configurations are then
    owed: ``_owed``), and end the claims no running trial holds any longer (``_end_orphan_claims``: theirs among
    them). Returns the numbers of those this tuner failed (another tuner of a shared study may fail one first)."""
    failed = []
    for trial in stale:
        try:  # marked on the trial itself before it is failed: a result it stored is then never counted
            study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED_ATTR, True)
            study.tell(trial.number, state=TrialState.FAIL)
        except (ValueError, RuntimeError):  # told already, by another tuner (UpdateFinishedTrialError is both)
            continue
        failed.append(trial.number)
    _end_orphan_claims(study)
    return failed


def _known_outcomes(
    attrs: dict[str, Any],
    trials: list[optuna.trial.FrozenTrial],
    measured: Measured,
    settings: StudySettings,
    machine: str,
) -> dict[str, _Outcome]:
    """Configurations measured on ``machine`` (the baseline, in the study's ``attrs``, and ``measured``), and those of
    ``trials`` not measured for needing no less memory than one that ran out → what Optuna was told about them."""
    known: dict[str, _Outcome] = {}
    baseline = attrs.get(on_machine(BASELINE_ATTR, machine))
    if baseline is not None:
        result = TrialResult.from_dict(baseline)
        known[config_key(result.knobs)] = _outcome(BASELINE_LABEL, result, settings)
    for trial, result in measured:
        readings = trial.intermediate_values
        pruned_at = readings[max(readings)] if readings else None
        known.setdefault(config_key(result.knobs), _outcome(trial.number, result, settings, pruned_at))
    for trial in trials:
        kept = trial.user_attrs
        if trial.state is TrialState.PRUNED and NOT_MEASURED_ATTR in kept and kept.get(MACHINE_ATTR) == machine:
            known.setdefault(kept[CONFIG_ATTR], _Outcome(trial.number, TrialState.PRUNED))
    return known


def _differences(stored: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """Where a stored study's description differs from this run's: each key by its dotted path, with both values
    where they are short."""
    found = []
    for key in sorted((set(stored) | set(now)) - {"fingerprint"}):
        before, after, path = stored.get(key), now.get(key), f"{prefix}{key}"
        if isinstance(before, dict) and isinstance(after, dict):
            found += _differences(before, after, f"{path}.")
        elif json.dumps(before, sort_keys=True) != json.dumps(after, sort_keys=True):  # as the fingerprint reads them
            values = f"{json.dumps(before)} → {json.dumps(after)}"
            found.append(f"{path} {values}" if len(values) <= 60 else path)
    return found


def _fingerprint(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _startup_trials(n_trials: int) -> int:
    """Random proposals before TPE models the results: Optuna's 10, fewer on small budgets."""
    return max(3, min(10, n_trials // 2))
