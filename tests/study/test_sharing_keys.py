"""What a process holds and beats is known by storage and id: an id is its storage's own, and a claim or trial of
another storage the process opens may have the same."""

from __future__ import annotations

import time

from optuna.study import StudyDirection

from autotune.config.settings import StudySettings
from autotune.records import ALIVE_ATTR
from autotune.study import sharing
from autotune.study.storage import create_study

HOUR_AGO = time.time() - 3600


def _two_storages(tmp_path):
    """Study "s" in two journal files, each its storage's first study: their claims and trials get the same ids."""
    return [
        create_study(f"journal://{tmp_path}/{name}.log", study_name="s", directions=["maximize"])
        for name in ("mine", "other")
    ]


def test_a_claim_held_in_one_storage_keeps_no_claim_of_the_same_id_in_another_alive(tmp_path):
    mine, other = _two_storages(tmp_path)
    storage = f"journal://{tmp_path}/mine.log"
    settings = StudySettings(name="s", storage=storage, n_trials=1, timeout_s=None, seed=0, heartbeat_s=60.0)
    with sharing.searching(mine, settings, "m"):
        (held,) = [s._study_id for s in mine._storage.get_all_studies() if s.study_name.startswith("s#searching@")]
        dead = other._storage.create_new_study([StudyDirection.MAXIMIZE], "s#searching@m:dead")
        assert dead == held, "the same id, in another storage"
        other._storage.set_study_user_attr(dead, ALIVE_ATTR, [HOUR_AGO, 60.0])  # then its tuner died
        assert not sharing._searching_others(other, "m"), "the dead tuner's search is not waited for"
        assert [s.study_name for s in other._storage.get_all_studies()] == ["s"], "its claim ended"


def test_a_trial_beaten_in_one_storage_keeps_no_trial_of_the_same_id_in_another_running(tmp_path):
    mine, other = _two_storages(tmp_path)
    trial = mine.ask()
    with sharing.heartbeat(trial, 60.0):
        dead = other.ask()
        assert dead._trial_id == trial._trial_id, "the same id, in another storage"
        other._storage.set_trial_user_attr(dead._trial_id, ALIVE_ATTR, [HOUR_AGO, 60.0])  # then its tuner died
        assert sharing.fail_stale_trials(other) == [dead.number]
        assert sharing.fail_stale_trials(mine) == [], "the one this process beats runs on"
