"""The digests of the pipeline's modules that a shared study keeps: tuners joining it at once each add theirs, none
writing over another's."""

from __future__ import annotations

import threading

import optuna

from autotune.config.settings import StudySettings
from autotune.records import META_ATTR
from autotune.study.start import open_study
from tests.study.test_shared import META


def test_tuners_joining_a_shared_study_at_once_each_add_the_modules_they_read(tmp_path, monkeypatch):
    settings = StudySettings(
        name="s", storage=f"journal://{tmp_path}/study.log", n_trials=1, timeout_s=None, seed=0, heartbeat_s=1.0
    )
    open_study(settings, META, code={"mine.model": "aaaa"})
    write, writing, joined = optuna.Study.set_user_attr, threading.Event(), threading.Event()

    def set_user_attr(study, key, value):  # the first tuner writes its digests once the second has joined, if it can
        if key == META_ATTR and threading.current_thread().name == "first":
            writing.set()
            joined.wait(timeout=2)  # the second cannot join while the first holds the description: it waits for it
        write(study, key, value)

    monkeypatch.setattr(optuna.Study, "set_user_attr", set_user_attr)
    first = threading.Thread(
        target=open_study, args=(settings, META), kwargs={"code": {"mine.data": "bbbb"}}, name="first"
    )
    first.start()
    assert writing.wait(timeout=30), "the first read the digests stored, and writes them with its own"
    open_study(settings, META, code={"mine.loss": "cccc"})
    joined.set()
    first.join()
    stored = open_study(settings, META).user_attrs[META_ATTR]["code"]
    assert stored == {"mine.model": "aaaa", "mine.data": "bbbb", "mine.loss": "cccc"}
