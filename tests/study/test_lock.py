"""One tuner per SQLite study: a second is refused while the first runs, and nothing is left once it ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.study.lock import one_tuner, sqlite_file
from tests.conftest import REPO

HOLD = """
import sys, time
from autotune.study.lock import one_tuner
with one_tuner(sys.argv[1], "mine"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_tuner_of_the_same_study_is_refused_naming_the_key_and_the_holder(tmp_path):
    storage = f"sqlite:///{tmp_path}/autotune.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, storage], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"study.name: another autotune \(pid {holder.pid}\) is tuning"):
            with one_tuner(storage, "mine"):
                pass
        with one_tuner(storage, "another study"):  # other studies of the same file are free
            pass
    finally:
        holder.kill()
        holder.wait()
    with one_tuner(storage, "mine"):  # the kernel released the killed holder's lock
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no lock file is left behind"


def test_only_sqlite_files_are_locked(tmp_path):
    assert sqlite_file(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db"
    assert sqlite_file("sqlite:///relative.db") == Path.cwd() / "relative.db"
    assert sqlite_file("sqlite://") is None and sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("postgresql://user:secret@db/optuna") is None and sqlite_file("not a url") is None
