"""One tuner per SQLite study: a second is refused while the first runs, and nothing is left once it ends."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.study import lock
from autotune.study.lock import lock_file, one_tuner, sqlite_file
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


def test_a_tuner_that_opened_the_lock_file_as_its_holder_removed_it_holds_the_study_alone(tmp_path, monkeypatch):
    """Its holder removes the file on its way out, holding it: a tuner that opened it just before locks a file no
    longer there, which the next tuner makes anew."""
    storage = f"sqlite:///{tmp_path}/autotune.db"
    held, opened = one_tuner(storage, "mine"), []
    held.__enter__()

    def open_as_the_holder_ends(*args, **kwargs):
        handle = open(*args, **kwargs)
        if not opened:
            opened.append(handle)
            held.__exit__(None, None, None)
        return handle

    monkeypatch.setattr(lock, "open", open_as_the_holder_ends, raising=False)
    with one_tuner(storage, "mine"):
        with pytest.raises(ConfigError, match=r"^study.name: another autotune \(pid \d+\) is tuning"):
            with one_tuner(storage, "mine"):
                pass
    assert opened and sorted(p.name for p in tmp_path.iterdir()) == []


def test_studies_whose_names_make_one_file_name_are_locked_apart(tmp_path):
    storage = f"sqlite:///{tmp_path}/autotune.db"
    assert lock_file(tmp_path / "autotune.db", "a b") != lock_file(tmp_path / "autotune.db", "a_b")
    with one_tuner(storage, "a b"), one_tuner(storage, "a_b"):
        pass


@contextlib.contextmanager
def _held_by_pid_4242(path):
    """``path`` locked as a tuner of pid 4242 holds its lock file."""
    with open(path, "a+", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242")
        held.flush()
        yield


def test_a_tuner_of_the_previous_version_and_this_one_never_tune_one_study_at_once(tmp_path):
    """That version locked ``DB.NAME.lock`` alone, exclusively."""
    storage, previous = f"sqlite:///{tmp_path}/autotune.db", tmp_path / "autotune.db.my_study.lock"
    with _held_by_pid_4242(previous):
        with pytest.raises(ConfigError, match=r"^study.name: another autotune \(pid 4242\) is tuning study 'my study'"):
            with one_tuner(storage, "my study"):
                pass
        assert sorted(p.name for p in tmp_path.iterdir()) == [previous.name], "the refused one left no file"
    previous.unlink()  # as that version leaves
    with one_tuner(storage, "my study"), one_tuner(storage, "my_study"):  # one file name of that version: shared
        with open(previous, "a+", encoding="utf-8") as held, pytest.raises(BlockingIOError):
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no lock file is left behind"


def test_tuners_reaching_one_database_file_through_a_link_never_tune_one_study_at_once(tmp_path):
    real, elsewhere = tmp_path / "real", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    (elsewhere / "autotune.db").symlink_to(real / "autotune.db")
    direct, linked = f"sqlite:///{real}/autotune.db", f"sqlite:///{elsewhere}/autotune.db"
    for first, second in ((linked, direct), (direct, linked)):
        with one_tuner(first, "mine"), pytest.raises(ConfigError, match=r"^study.name: another autotune \(pid"):
            with one_tuner(second, "mine"):
                pass
    # the previous version, given the link, locked beside it alone
    with _held_by_pid_4242(lock_file(elsewhere / "autotune.db", "mine")):
        with pytest.raises(ConfigError, match=r"^study.name: another autotune \(pid 4242\)"):
            with one_tuner(linked, "mine"):
                pass
    lock_file(elsewhere / "autotune.db", "mine").unlink()  # as that version leaves
    assert [p.name for p in real.iterdir()] == [] and [p.name for p in elsewhere.iterdir()] == ["autotune.db"]


def test_a_tuner_reaching_the_database_through_a_linked_folder_takes_its_lock_once(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    with one_tuner(f"sqlite:///{tmp_path}/linked/autotune.db", "mine"):
        with pytest.raises(ConfigError, match=r"^study.name: another autotune \(pid \d+\) is tuning"):
            with one_tuner(f"sqlite:///{tmp_path}/real/autotune.db", "mine"):
                pass
    assert not any((tmp_path / "real").iterdir()), "no lock file is left behind"


def test_only_sqlite_files_are_locked(tmp_path):
    assert sqlite_file(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db"
    assert sqlite_file("sqlite:///relative.db") == Path.cwd() / "relative.db"
    assert sqlite_file("sqlite://") is None and sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("postgresql://user:secret@db/optuna") is None and sqlite_file("not a url") is None


def test_a_lock_beside_a_database_under_an_unexpanded_home_says_so(tmp_path, monkeypatch):
    # sqlite:///~/x.db names a folder "~" where the tuner runs: the lock file beside it cannot be made
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as raised, one_tuner("sqlite:///~/x.db", "s"):
        pass
    assert "(~ is not expanded: give the path from /) beside the database of" in str(raised.value)
