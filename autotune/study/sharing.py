"""Tuners sharing one study (``storage.is_shared``): the claim a tuner holds on a configuration while it measures it,
the heartbeats that tell the others it is alive, the failing of the trials of a tuner no longer heard, which tuner
describes a study several make at once, and which tuner of a machine finishes the study (its race, trim and
profiles)."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.study import StudyDirection
from optuna.trial import TrialState

from autotune.config.settings import STALE_BEATS, StudySettings
from autotune.records import (
    ALIVE_ATTR,
    CLAIM_ATTR,
    CONFIG_ATTR,
    DUPLICATE_ATTR,
    INTERRUPTED_ATTR,
    MACHINE_ATTR,
    META_ATTR,
    interrupted,
)
from autotune.study.storage import JOURNAL_LOCK_GRACE_S, is_shared, journal_lock
from autotune.trial.runner import INTERRUPT

if TYPE_CHECKING:  # what ``get_all_studies`` returns, which Optuna does not export
    from optuna.study._frozen import FrozenStudy

# How often a tuner whose search is done looks whether the others' trials on its machine have ended.
_AWAIT_POLL_S = 2.0
# How often a tuner making a study looks whether the claim of the tuner describing it ended (its write takes ms).
_DESCRIBED_POLL_S = 0.05
# What this process read of a heartbeat (None: none yet) and since when, on its own monotonic clock, it reads it
# unchanged (``_watched``): a silence no other machine's clock can shorten or stretch (``_unheard``). The clock is
# read after the storage read that saw the beat: a slow read is slow waiting (on a lock, the network, the disk) before
# its data comes, and a clock read before it would count that wait as silence of a beat written meanwhile.
_Watch = tuple[Any, float]
# The watches of each study's running trials, by trial id: forgotten with the study (held weakly), and kept only for
# the trials running at the last look (``_watches``). Before a trial's first heartbeat its silence counts from there,
# not from its recorded start: Optuna writes the writer's local time, without its zone, and a tuner in another zone
# would read it hours off and fail a live trial.
_WATCHED: WeakKeyDictionary[optuna.Study, dict[int, _Watch]] = WeakKeyDictionary()
# The watches of each study's claims held with a heartbeat (a search's, a description's), by claim id, kept as its
# trials' are, for the claims there at the last look (``_claims``): whichever look of this process finds one, its
# silence counts from the first that saw its last beat.
_CLAIMS_WATCHED: WeakKeyDictionary[optuna.Study, dict[int, _Watch]] = WeakKeyDictionary()
# Until when, by what this process saw, the writes to each journal file were blocked by a stuck lock (by the lock's
# path: ``storage.journal_lock``): a tuner's silence counts from then at the earliest, as its heartbeats waited too.
_BLOCKED: dict[str, float] = {}


def always() -> bool:
    """A tuner's ``waits`` without study.budget_s: it waits for the others as long as they take."""
    return True


def await_others(
    study: optuna.Study,
    settings: StudySettings,
    machine: str,
    deadline: float,
    waits: Callable[[], bool] = always,
) -> bool:
    """Wait while other tuners of the study search on ``machine`` (``searching``) or measure configurations there
    (the race must see every one), failing the trials and ending the searches of tuners that died, and as long as
    ``waits()`` (study.budget_s still affords the race after them: past it, ending the study is left to them).
    Returns whether the search must go on: a trial waited for ended interrupted (failed here, by another tuner, or
    by its own on Ctrl-C), and its configuration is owed (``search_state._owed``)."""
    if not is_shared(settings.storage):
        return False
    awaited: set[int] = set()
    while True:
        measuring = measuring_now(running := running_trials(study), machine)
        if not measuring and not _searching_others(study, machine):
            break
        if not waits():
            return False
        awaited |= {trial.number for trial in measuring}
        if fail_stale_trials(study, running):
            continue
        if INTERRUPT.wait(min(settings.heartbeat_s, _AWAIT_POLL_S)):
            raise KeyboardInterrupt
    ended = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    return any(t.number in awaited and interrupted(t) for t in ended) and time.monotonic() < deadline


@contextmanager
def claimed(study: optuna.Study, trial: optuna.Trial, machine: str, key: str, take_over: bool) -> Iterator[bool]:
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
    """Claim ``name`` for ``trial``, which names it first (``claimed``): the claim's id, or None where another
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


def description(study: optuna.Study, meta: dict[str, Any], settings: StudySettings) -> dict[str, Any]:
    """The description of what ``study`` tunes (META): the one stored, else ``meta``, stored here where this tuner is
    the first to describe the study. Of tuners making it at once, exactly one describes it: each stores it only
    while it holds the study's description (``describing``), and only where no tuner before it did."""
    if (stored := study.user_attrs.get(META_ATTR)) is not None:
        return stored
    with describing(study, settings):
        if (stored := study.user_attrs.get(META_ATTR)) is None:  # else stored by a tuner that held it meanwhile
            study.set_user_attr(META_ATTR, meta)
            stored = meta
    return stored


@contextmanager
def describing(study: optuna.Study, settings: StudySettings) -> Iterator[None]:
    """Hold, while inside, the right to write ``study``'s description (META), which a tuner reads, changes and writes
    back: of two tuners changing it at once, the second reads what the first wrote, rather than writing over it. The
    right is a claim (``_claim``) held with a heartbeat and ended however the holder ends; a tuner waits for the
    claim of another to end (``_await_claim``: a holder no longer heard died, and its claim is ended)."""
    name = f"{study.study_name}{_DESCRIBING}{study._study_id}"
    while (claim := _claim(study, name)) is None:
        _await_claim(study, name, poll_s=_DESCRIBED_POLL_S)
    with _holding(study, claim, settings.heartbeat_s):
        yield


# The claims this process holds (``_holding``) and the trials it beats (``heartbeat``): alive whatever their last
# beat reads, as a suspended machine's wall clock jumps past the beat its heartbeat thread has not written yet; a
# slot never ends a sibling slot's claim, nor fails its trial. By storage and id: an id is its storage's own, and a
# claim or trial of another storage this process opens may have the same.
_HELD: set[tuple[optuna.storages.BaseStorage, int]] = set()
_BEATING: set[tuple[optuna.storages.BaseStorage, int]] = set()


def _end_claim(study: optuna.Study, claim: int) -> None:
    try:
        study._storage.delete_study(claim)
    except KeyError:  # ended already, by a tuner that took this one's trial for dead
        pass


def _end_orphan_claims(study: optuna.Study) -> None:
    """End every orphaned claim of the study (``_orphaned``), and the search and description claims of tuners no
    longer heard (``_ended_if_unheard``)."""
    measuring, now = f"{study.study_name}{_MEASURING}", time.time()
    claims, watched = _claims(study)
    running, blocked = running_trials(study), _blocked_until(study, now)
    for summary in claims:
        if summary.study_name.startswith(measuring):
            if _orphaned(summary.study_name, summary.user_attrs.get("trial"), running):
                _end_claim(study, summary._study_id)
        elif summary._study_id in watched:
            _ended_if_unheard(study, summary, watched[summary._study_id], now, blocked)


def _claims(study: optuna.Study) -> tuple[list[FrozenStudy], dict[int, float]]:
    """The claims of ``study`` (every study of its storage, read now), and how long this process has watched the
    heartbeat of each held with one (a search's, a description's) unchanged, by claim id (``_watched``)."""
    claims = study._storage.get_all_studies()
    heard = (f"{study.study_name}{_SEARCHING}", f"{study.study_name}{_DESCRIBING}")
    beats = {s._study_id: s.user_attrs.get(ALIVE_ATTR) for s in claims if s.study_name.startswith(heard)}
    return claims, _watches(_CLAIMS_WATCHED, study, beats, time.monotonic())


def _ended_if_unheard(study: optuna.Study, claim: FrozenStudy, watched_s: float, now: float, blocked: float) -> bool:
    """End ``claim``, held with a heartbeat, where its tuner is no longer heard (``_unheard``: by its last beat's
    time, or ``watched_s`` unchanged), unless this process holds it (a sibling slot's). Whether it was ended."""
    mine = (study._storage, claim._study_id) in _HELD
    if mine or not _unheard(claim.user_attrs.get(ALIVE_ATTR), watched_s, now, blocked):
        return False
    _end_claim(study, claim._study_id)
    return True


def _end_if_orphaned(study: optuna.Study, name: str) -> bool:
    """End claim ``name`` if it is orphaned (``_orphaned``). Whether it is gone."""
    storage = study._storage
    try:
        claim = storage.get_study_id_from_name(name)
        owner = storage.get_study_user_attrs(claim).get("trial")
    except KeyError:
        return True
    if not _orphaned(name, owner, running_trials(study)):
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
_SEARCHING = "#searching@"  # a search's claim: the study's name, this, then the machine and a token of the tuner's
# A description's claim: the study's name, this, then its id (a study deleted and made again is described anew).
_DESCRIBING = "#describing@"


def measuring_now(trials: list[optuna.trial.FrozenTrial], machine: str) -> list[optuna.trial.FrozenTrial]:
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
    by a trial's last heartbeat, or by how long this process has watched it unchanged, none included), and end their
    claims: their configurations are then owed (``search_state._owed``); returns their numbers."""
    now = time.time()
    running = running_trials(study) if running is None else running
    blocked = _blocked_until(study, now)
    beats = {t._trial_id: t.user_attrs.get(ALIVE_ATTR) for t in running}
    watched = _watches(_WATCHED, study, beats, time.monotonic())
    stale = [
        t
        for t in running
        if (study._storage, t._trial_id) not in _BEATING
        and _unheard(t.user_attrs.get(ALIVE_ATTR), watched[t._trial_id], now, blocked)
    ]
    return fail_interrupted_trials(study, stale)


def _watches(
    kept: WeakKeyDictionary[optuna.Study, dict[int, _Watch]], study: optuna.Study, beats: dict[int, Any], clock: float
) -> dict[int, float]:
    """How long this process has watched each heartbeat of ``study`` in ``beats`` (what was read of it, by id)
    unchanged (``_watched``), at its monotonic ``clock``, by what ``kept`` holds of ``study``'s, which this updates:
    the watches of heartbeats no longer among ``beats`` are forgotten."""
    before = kept.get(study, {})
    watches = {key: before[key] for key in beats if key in before}
    kept[study] = watches
    return {key: _watched(watches, key, beat, clock) for key, beat in beats.items()}


def _watched(watches: dict[int, _Watch], key: int, beat: Any, clock: float) -> float:
    """How long, at this process's monotonic ``clock``, the heartbeat ``key`` has read ``beat`` unchanged, by what
    ``watches`` holds of it, which this updates: 0 where ``beat`` is not what was read there before."""
    seen = watches.get(key)
    if seen is None or seen[0] != beat:
        watches[key] = seen = (beat, clock)
    return clock - seen[1]


def running_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def _unheard(beat: list[float] | None, watched_s: float, now: float, blocked: float) -> bool:
    """The rule of a dead tuner: it missed ``STALE_BEATS`` of its heartbeats (``beat``: the last one's time, by the
    beating tuner's clock, and its interval; None: none yet, at the default interval), by either of two counts, each
    from ``blocked`` at the earliest, until when the study's writes were blocked (``_blocked_until``): by this
    process's clock ``now`` against the beat's time (a tuner that starts after a crash takes an old trial at once),
    or by the ``watched_s`` this process has watched the beat unchanged on its monotonic clock (``_watched``), which
    no other clock moves: a dead tuner whose clock was ahead left a beat in the future here, and is unheard all the
    same. A live tuner whose clock is behind is taken for dead by the first count: keep the clocks in sync (NTP)."""
    every = beat[1] if beat else StudySettings.heartbeat_s
    unblocked_s = now - blocked
    by_its_time = beat is not None and min(now - beat[0], unblocked_s) > STALE_BEATS * every
    return by_its_time or min(watched_s, unblocked_s) > STALE_BEATS * every


def _blocked_until(study: optuna.Study, now: float) -> float:
    """Until when ``study``'s writes were blocked, by what this process saw: while a stuck lock is seen, now; no
    later than when Optuna breaks that lock, however long it is seen (a file system may show a lock already gone)."""
    lock = journal_lock(study)
    if lock is None:
        return 0.0
    path, stuck_since = lock
    if stuck_since is not None:
        _BLOCKED[path] = max(_BLOCKED.get(path, 0.0), min(now, stuck_since + JOURNAL_LOCK_GRACE_S))
    return _BLOCKED.get(path, 0.0)


@contextmanager
def heartbeat(trial: optuna.Trial, interval_s: float | None) -> Iterator[None]:
    """Tell the study every ``interval_s`` that ``trial`` is alive, while it runs (None: never)."""
    if interval_s is None:
        yield
        return
    beating = (trial.storage, trial._trial_id)
    _BEATING.add(beating)
    try:
        with _beating(lambda: beat(trial, interval_s), interval_s):
            yield
    finally:
        _BEATING.discard(beating)


def beat(trial: optuna.Trial, interval_s: float) -> None:
    """One heartbeat of ``trial``, which a tuner beats every ``interval_s``: from its first, any tuner judges it by
    the beats' own times, and by how long it has watched the last unchanged (``_unheard``)."""
    trial.set_user_attr(ALIVE_ATTR, [time.time(), interval_s])


class Turn(Enum):
    """A tuner's turn at ending the study on its machine (``finishing``)."""

    FIRST = "first"  # no other tuner held it before
    AFTER_ANOTHER = "after another"  # another held it first: what it stored is reused
    LEFT = "left to another"  # another still searches, measures or holds it, and study.budget_s left no time to wait


@contextmanager
def finishing(
    study: optuna.Study, settings: StudySettings, machine: str, waits: Callable[[], bool] = always
) -> Iterator[tuple[Turn, Callable[[], bool]]]:
    """Hold, while inside, the right to end the study on ``machine`` (its race, trim and profiles, run where its
    finalists were measured), unless the turn is ``Turn.LEFT``: the turn, and whether it was lost (``_holding``:
    another tuner took this one for dead and took the turn; the study's end is then left to it). On a shared study
    the tuners of a machine hold it in turn, a claim (``claimed``) with a heartbeat, each waiting for the one before
    to end, however it ended (done, stopped, or no longer heard), as long as ``waits()``: each does what the ones
    before left undone, and reuses what they stored. Alone on its study, a tuner holds it at once, and for good."""
    if not is_shared(settings.storage):
        yield Turn.FIRST, never
        return
    claim, turn = _turn(study, f"{study.study_name}#finishing@{machine}", machine, waits)
    if claim is None:
        yield turn, never
        return
    with _holding(study, claim, settings.heartbeat_s) as lost:
        yield turn, lost


def _turn(study: optuna.Study, name: str, machine: str, waits: Callable[[], bool]) -> tuple[int | None, Turn]:
    """The claim ``name`` on ending the study and the turn it is. Once ``waits()`` no longer holds, a tuner leaves
    the study's end (``Turn.LEFT``, no claim) to another of ``machine`` still searching, measuring or holding it: the
    race must see every configuration, and run alone."""
    turn = Turn.FIRST
    while waits() or not _others_at_it(study, machine):
        if (claim := _claim(study, name)) is not None:
            return claim, turn
        if not waits():
            break
        _await_claim(study, name, waits)
        turn = Turn.AFTER_ANOTHER
    return None, Turn.LEFT


def _others_at_it(study: optuna.Study, machine: str) -> bool:
    """Whether another tuner searches on ``machine`` or measures a configuration there (a dead one's trial failed
    first)."""
    running = running_trials(study)
    if fail_stale_trials(study, running):
        running = running_trials(study)
    return bool(measuring_now(running, machine)) or _searching_others(study, machine)


def never() -> bool:
    """Whether a claim nobody can take was lost (``_holding``): never. A tuner alone on its study, or one holding
    none, has such a claim."""
    return False


@contextmanager
def _holding(study: optuna.Study, claim: int, interval_s: float) -> Iterator[Callable[[], bool]]:
    """Hold ``claim`` while inside, with a heartbeat every ``interval_s`` (the others end a claim no longer heard),
    and end it however the holder ends. Yields whether the claim was lost, looked up at each call: another tuner,
    not hearing of this one for ``STALE_BEATS`` heartbeats (it was paused or suspended, or its clock is behind), took
    it for dead and ended the claim (``_await_claim``, ``_searching_others``), and may be doing its work now. A
    heartbeat to a claim gone fails unsaid (``_beating``); the holder learns it at its next step by asking."""
    storage = study._storage
    _HELD.add((storage, claim))
    try:
        with _beating(lambda: storage.set_study_user_attr(claim, ALIVE_ATTR, [time.time(), interval_s]), interval_s):
            yield partial(_gone, storage, claim)
    finally:
        _HELD.discard((storage, claim))
        _end_claim(study, claim)


def _gone(storage: optuna.storages.BaseStorage, claim: int) -> bool:
    """Whether ``claim`` was ended: a shared storage never gives its id to another claim. A lookup the storage fails
    for another reason (a fault, passing or not) says nothing of the claim: not gone; a lasting fault is met by the
    tuner's next write, and said, as a heartbeat's is (``_beating``)."""
    try:
        storage.get_study_user_attrs(claim)
    except KeyError:
        return True
    except Exception:  # noqa: BLE001  (any fault of the storage: the claim's fate is unknown)
        return False
    return False


@contextmanager
def searching(study: optuna.Study, settings: StudySettings, machine: str) -> Iterator[Callable[[], bool]]:
    """While inside, tell the other tuners of the study on ``machine`` that this one is searching (a claim of its
    own, with a heartbeat): they wait for its search to end before one of them races (``await_others``), whatever
    each one's own limits stopped its search. Yields whether the claim was lost (``_holding``: the others may race
    without this one's trials). Alone on its study, there is no one to tell."""
    if not is_shared(settings.storage):
        yield never
        return
    claim = _claim(study, f"{study.study_name}{_SEARCHING}{machine}:{uuid.uuid4().hex}")
    with _holding(study, claim, settings.heartbeat_s) as lost:
        yield lost


def _searching_others(study: optuna.Study, machine: str) -> bool:
    """Whether another tuner, or a sibling slot of this one, searches on ``machine`` (``searching``), ending the
    claims of those no longer heard (``_ended_if_unheard``)."""
    prefix, now = f"{study.study_name}{_SEARCHING}{machine}:", time.time()
    claims, watched = _claims(study)
    blocked = _blocked_until(study, now)
    searches = [s for s in claims if s.study_name.startswith(prefix)]
    heard = [s for s in searches if not _ended_if_unheard(study, s, watched[s._study_id], now, blocked)]
    return bool(heard)


def _await_claim(
    study: optuna.Study, name: str, waits: Callable[[], bool] = always, poll_s: float = _AWAIT_POLL_S
) -> None:
    """Wait for the claim ``name`` to end, looking every ``poll_s``, as long as ``waits()``: its holder ends it, or
    is not heard of for ``STALE_BEATS`` heartbeats (the claim is then ended here)."""
    storage, seen = study._storage, {}  # what was watched of each claim, by id: a claim made meanwhile is another's
    while True:
        try:
            claim = storage.get_study_id_from_name(name)
            beat = storage.get_study_user_attrs(claim).get(ALIVE_ATTR)
        except KeyError:
            return
        now, clock = time.time(), time.monotonic()
        if _unheard(beat, _watched(seen, claim, beat, clock), now, _blocked_until(study, now)):
            _end_claim(study, claim)
            return
        if not waits():
            return
        if INTERRUPT.wait(poll_s):
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


def fail_interrupted_trials(study: optuna.Study, stale: list[optuna.trial.FrozenTrial]) -> list[int]:
    """Trials left running by a tuner that was killed: mark them failed and interrupted (their configurations are then
    owed: ``search_state._owed``), and end the claims no running trial holds any longer (``_end_orphan_claims``:
    theirs among them). Returns the numbers of those this tuner failed (another tuner of a shared study may fail one
    first)."""
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
