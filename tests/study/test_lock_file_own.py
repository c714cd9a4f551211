"""The lock a tuner takes on the SQLite file itself: it leaves SQLite's own locks of the process alone, holds nothing
where the system has no such locks, and says who holds the file where it is refused."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

from autotune.errors import ConfigError
from autotune.study import lock
from autotune.study.lock import one_tuner
from tests.conftest import REPO

WRITE = """
import sqlite3, sys
with sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None) as database:
    try:
        database.execute("begin immediate")
    except sqlite3.OperationalError as exc:
        print(exc)
    else:
        print("written")
"""

LOCK_WHOLE_FILE = """
import fcntl, sys, time
with open(sys.argv[1], "r+") as database:
    fcntl.lockf(database, fcntl.LOCK_EX)  # bytes 0 to the end of any file: a backup tool's lock, say
    print("locked", flush=True)
    time.sleep(60)
"""


def _database(tmp_path) -> tuple[str, str]:
    """A SQLite file of one table, and its storage URL."""
    path = str(tmp_path / "autotune.db")
    with closing(sqlite3.connect(path)) as database:
        database.execute("create table t(a)")
    return path, f"sqlite:///{path}"


def _write_elsewhere(path: str) -> str:
    """What another process gets that begins writing the SQLite file ``path`` at once: "written", or SQLite's error."""
    return subprocess.run(
        [sys.executable, "-c", WRITE, path], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_tuner_ending_while_its_process_writes_the_database_leaves_sqlites_write_lock_held(tmp_path):
    """A slot thread may still be in a transaction as the tuner ends (a second Ctrl-C in the slots' join): the
    file's lock is let go without closing the file, which would drop every POSIX lock the process holds on it."""
    path, storage = _database(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None)) as mine:
        with one_tuner(storage, "mine"):
            mine.execute("begin immediate")
        assert _write_elsewhere(path) == "database is locked", "the process's write lock outlives the tuner"
        mine.execute("insert into t values (1)")
        mine.execute("commit")
    assert _write_elsewhere(path) == "written"


def test_tuners_one_after_another_in_one_process_lock_the_file_through_one_descriptor(tmp_path):
    path, storage = _database(tmp_path)
    for name in ("mine", "another study", "mine"):
        with one_tuner(storage, name):
            pass
    opened = [fd for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == path]
    assert len(opened) == 1, "the descriptor of the first is taken again, none opened, none closed"


@pytest.mark.parametrize("error", ["EINVAL", "ENOLCK", "ENOSYS", "EOPNOTSUPP", "EOVERFLOW"])
def test_where_the_kernel_has_no_such_locks_the_lock_files_alone_hold_the_study(tmp_path, monkeypatch, error):
    """WSL1, proot, older gVisor and Linux before 3.15 refuse F_OFD_SETLK: a tuner runs all the same."""
    real = fcntl.fcntl

    def no_such_locks(fd, command, arg=0):
        if command == fcntl.F_OFD_SETLK:
            raise OSError(getattr(errno, error), os.strerror(getattr(errno, error)))
        return real(fd, command, arg)

    monkeypatch.setattr(lock.fcntl, "fcntl", no_such_locks)
    _, storage = _database(tmp_path)
    with one_tuner(storage, "mine"):
        with pytest.raises(ConfigError, match=r"^study.name: another autotune \(pid \d+\) is tuning study 'mine'"):
            with one_tuner(storage, "mine"):
                pass


def test_elsewhere_than_linux_the_database_file_is_not_locked(tmp_path, monkeypatch):
    """Another system may name F_OFD_SETLK (some macOS Pythons do) with a ``struct flock`` of another layout."""
    calls = []
    real = fcntl.fcntl

    def recorded(fd, command, arg=0):
        calls.append(command)
        return real(fd, command, arg)

    monkeypatch.setattr(lock.fcntl, "fcntl", recorded)
    monkeypatch.setattr(lock.sys, "platform", "darwin")
    _, storage = _database(tmp_path)
    with one_tuner(storage, "mine"):
        pass
    assert calls == [], "the lock files alone hold the study"


def test_a_database_file_another_process_locks_whole_is_refused_naming_that_process(tmp_path):
    path, storage = _database(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_WHOLE_FILE, path], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        said = (
            rf"^study.name: the database file of {re.escape(storage)} is locked by another process \(pid {holder.pid}\)"
        )
        with pytest.raises(ConfigError, match=said + ": an autotune tuning study 'mine' .*, or a tool locking"):
            with one_tuner(storage, "mine"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with one_tuner(storage, "mine"):
        pass
