"""A tuner's silence is counted on the watching tuner's own monotonic clock too: a dead tuner whose clock was ahead
wrote beats in the future, which the beats' own times would keep alive for as long as the clocks are apart."""

from __future__ import annotations

import gc
import os
import time
import weakref

from optuna.study import StudyDirection

from autotune.config.settings import STALE_BEATS
from autotune.records import ALIVE_ATTR
from autotune.study import sharing
from autotune.study.storage import create_study

HEARTBEAT_S = 0.1
STALE_S = STALE_BEATS * HEARTBEAT_S
AHEAD = 3600.0  # the dead tuner's clock, an hour ahead of this one's


class Clocks:
    """This tuner's clocks, as ``sharing`` reads them (``time.time``, ``time.monotonic``), moved by hand."""

    def __init__(self) -> None:
        self.wall, self.mono = time.time(), 0.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _study(tmp_path, monkeypatch):
    clocks = Clocks()
    monkeypatch.setattr(sharing, "time", clocks)
    return create_study(f"journal://{tmp_path}/study.log", study_name="s", directions=["maximize"]), clocks


def _beat(study, trial, at: float) -> None:
    study._storage.set_trial_user_attr(trial._trial_id, ALIVE_ATTR, [at, HEARTBEAT_S])


def test_a_dead_tuners_trial_beaten_by_a_clock_ahead_is_failed_once_watched_silent_and_a_live_ones_is_not(
    tmp_path, monkeypatch
):
    study, clocks = _study(tmp_path, monkeypatch)
    dead, live = study.ask(), study.ask()
    _beat(study, dead, clocks.time() + AHEAD)  # its last beat, then it died
    _beat(study, live, clocks.time() + AHEAD)
    assert sharing.fail_stale_trials(study) == [], "first watched now"
    clocks.advance(STALE_S * 0.6)
    _beat(study, live, clocks.time() + AHEAD)  # the live one beats on, by its clock an hour ahead
    assert sharing.fail_stale_trials(study) == [], "watched silent for less than STALE_BEATS beats"
    clocks.advance(STALE_S * 0.6)
    _beat(study, live, clocks.time() + AHEAD)
    assert sharing.fail_stale_trials(study) == [dead.number], "the live one's beats change: it is heard"


def test_a_trial_watched_silent_while_a_stuck_lock_blocks_the_writes_is_counted_silent_from_the_locks_end(
    tmp_path, monkeypatch
):
    study, clocks = _study(tmp_path, monkeypatch)
    live = study.ask()
    _beat(study, live, clocks.time() + AHEAD)
    lock = tmp_path / "study.log.lock"
    lock.symlink_to(tmp_path / "gone")  # as Optuna's lock makes it, taken 5 s ago by a writer since killed
    os.utime(lock, (time.time() - 5, time.time() - 5), follow_symlinks=False)
    assert sharing.fail_stale_trials(study) == []
    clocks.advance(2 * STALE_S)
    assert sharing.fail_stale_trials(study) == [], "silent while its writes wait"
    lock.unlink()  # broken: the writes go on
    clocks.advance(STALE_S * 0.6)
    assert sharing.fail_stale_trials(study) == [], "silence counts from the lock's end"
    clocks.advance(STALE_S * 0.6)
    assert sharing.fail_stale_trials(study) == [live.number], "and a tuner silent after it is dead"


def test_a_tuner_that_starts_after_a_crash_still_fails_an_old_trial_at_once(tmp_path, monkeypatch):
    study, clocks = _study(tmp_path, monkeypatch)
    dead = study.ask()
    _beat(study, dead, clocks.time() - 2 * STALE_S)
    assert sharing.fail_stale_trials(study) == [dead.number], "by its beat's time, not watched first"


def test_what_is_watched_of_a_trial_is_forgotten_once_it_ends_and_of_a_study_once_it_is_gone(tmp_path, monkeypatch):
    study, clocks = _study(tmp_path, monkeypatch)
    trial = study.ask()
    _beat(study, trial, clocks.time())
    sharing.fail_stale_trials(study)
    assert list(sharing._WATCHED[study]) == [trial._trial_id]
    study.tell(trial, 1.0)
    sharing.fail_stale_trials(study)
    assert sharing._WATCHED[study] == {}, "only the trials running are watched"
    study_gone = weakref.ref(study)
    del study, trial
    gc.collect()
    assert study_gone() is None, "nor is a study this process no longer has kept"


def test_a_claim_a_dead_tuner_beat_by_a_clock_ahead_is_ended_by_a_tuner_watching_it_silent(tmp_path, monkeypatch):
    study, clocks = _study(tmp_path, monkeypatch)
    finishing = study._storage.create_new_study([StudyDirection.MAXIMIZE], "s#finishing@m")
    study._storage.set_study_user_attr(finishing, ALIVE_ATTR, [clocks.time() + AHEAD, HEARTBEAT_S])
    looks = []

    def waits() -> bool:  # each look at the claim is STALE_S * 0.6 after the one before, for a few looks
        clocks.advance(STALE_S * 0.6)
        looks.append(clocks.mono)
        return len(looks) < 5

    sharing._await_claim(study, "s#finishing@m", waits, poll_s=0.001)
    assert "s#finishing@m" not in [s.study_name for s in study._storage.get_all_studies()], "ended as unheard"
    assert len(looks) == 2, "once watched silent for STALE_BEATS beats"

    searching = study._storage.create_new_study([StudyDirection.MAXIMIZE], "s#searching@m:dead")
    study._storage.set_study_user_attr(searching, ALIVE_ATTR, [clocks.time() + AHEAD, HEARTBEAT_S])
    assert sharing._searching_others(study, "m"), "first watched now"
    clocks.advance(STALE_S * 1.2)
    assert not sharing._searching_others(study, "m"), "its search no longer waited for"


def test_a_claim_a_dead_tuner_beat_by_a_clock_ahead_is_watched_by_every_look_at_it(tmp_path, monkeypatch):
    """Whichever look finds it (the study's end waited on, or left to the others past study.budget_s; the orphans
    ended as a trial is failed), a claim's silence counts from the first look of this process at its last beat."""
    study, clocks = _study(tmp_path, monkeypatch)
    searching = study._storage.create_new_study([StudyDirection.MAXIMIZE], "s#searching@m:dead")
    study._storage.set_study_user_attr(searching, ALIVE_ATTR, [clocks.time() + AHEAD, HEARTBEAT_S])
    assert sharing._searching_others(study, "m"), "first watched now, while waiting for the others"
    clocks.advance(STALE_S * 1.2)
    assert not sharing._others_at_it(study, "m"), "past study.budget_s, its search is not left the study's end"

    describing = study._storage.create_new_study([StudyDirection.MAXIMIZE], "s#describing@0")
    study._storage.set_study_user_attr(describing, ALIVE_ATTR, [clocks.time() + AHEAD, HEARTBEAT_S])
    sharing._end_orphan_claims(study)
    clocks.advance(STALE_S * 0.6)
    sharing._end_orphan_claims(study)
    assert "s#describing@0" in [s.study_name for s in study._storage.get_all_studies()], "heard not long ago"
    clocks.advance(STALE_S * 0.6)
    sharing._end_orphan_claims(study)
    assert [s.study_name for s in study._storage.get_all_studies()] == ["s"], "ended once watched silent"
    sharing._end_orphan_claims(study)
    assert sharing._CLAIMS_WATCHED[study] == {}, "only the claims there are watched"


class SlowRead:
    """A storage read that waits ``STALE_S`` twice over before it reads (a lock, the network), while the tuner it
    reads beats, once; later reads are quick."""

    def __init__(self, read, clocks: Clocks, beats) -> None:
        self.read, self.clocks, self.beats, self.slow = read, clocks, beats, False

    def __call__(self, *args):
        if self.slow:
            self.slow = False
            self.clocks.advance(2 * STALE_S)
            self.beats()
        return self.read(*args)


def test_a_trials_beat_written_during_a_slow_read_counts_as_heard_when_the_read_ends(tmp_path, monkeypatch):
    study, clocks = _study(tmp_path, monkeypatch)
    live = study.ask()
    _beat(study, live, clocks.time())
    read = SlowRead(sharing.running_trials, clocks, lambda: _beat(study, live, clocks.time()))
    monkeypatch.setattr(sharing, "running_trials", read)
    assert sharing.fail_stale_trials(study) == []
    read.slow = True
    assert sharing.fail_stale_trials(study) == [], "its new beat is first seen"
    clocks.advance(HEARTBEAT_S / 2)
    assert sharing.fail_stale_trials(study) == [], "half a beat later, it is not STALE_BEATS beats silent"


def test_a_search_claims_beat_written_during_a_slow_read_counts_as_heard_when_the_read_ends(tmp_path, monkeypatch):
    study, clocks = _study(tmp_path, monkeypatch)
    claim = study._storage.create_new_study([StudyDirection.MAXIMIZE], "s#searching@m:live")
    study._storage.set_study_user_attr(claim, ALIVE_ATTR, [clocks.time(), HEARTBEAT_S])

    def beats() -> None:
        study._storage.set_study_user_attr(claim, ALIVE_ATTR, [clocks.time(), HEARTBEAT_S])

    read = SlowRead(study._storage.get_all_studies, clocks, beats)
    monkeypatch.setattr(study._storage, "get_all_studies", read)
    assert sharing._searching_others(study, "m")
    read.slow = True
    assert sharing._searching_others(study, "m"), "its new beat is first seen"
    clocks.advance(HEARTBEAT_S / 2)
    assert sharing._searching_others(study, "m"), "half a beat later, its search is still waited for"
