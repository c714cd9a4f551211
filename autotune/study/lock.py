"""One tuner per study on a SQLite file: a second tuner of the same study is refused while the first runs.

Two tuners on one SQLite study would measure the same configurations twice and recommend different ones from a
study the other is changing. The lock is an advisory ``flock`` on a file beside the database, which the kernel
releases when its holder exits, however it exits (a ``kill -9`` included): a stale lock cannot outlive its tuner.
Other storages are shared on purpose by the scale-out work and are not locked here.

A study's lock file is ``lock_file``; autotune before it locked ``DB.NAME.lock`` (``_legacy_file``), which a tuner
also locks, so that a tuner of either version is refused while one of the other tunes the study.

The lock files lie beside the database file as reached through each link to it (``_lock_places``): beside its
resolved path, which every tuner of one file locks whichever link it was given, and beside the path as given, which
autotune before locked alone, so that a tuner of that version given the same link is refused too. A file has as many
resolved paths as hard links, beside none of which another's lock files lie: a tuner also locks the study on the
database file itself (``_file_held``), which the kernel knows by its device and inode, whichever path opened it. That
lock is Linux's; where the system, its kernel or the file system has none, the lock files alone hold the study.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.util import asbool

from autotune.errors import ConfigError
from autotune.files import file_name
from autotune.redact import redact_url


@contextmanager
def one_tuner(storage: str, name: str) -> Iterator[None]:
    """Hold study ``name`` in ``storage`` for this process; ConfigError naming ``study.name`` (and the holder's pid,
    where known) where another process holds it. Its locks are taken in the order of ``_lock_places``, then the
    file's own (``_file_held``), each at once or refused, never waited for, so no two tuners wait on each other; two
    tuners of this autotune meet at the first, or, given two hard links to one file, at the file's own."""
    database = sqlite_file(storage)
    if database is None:
        yield
        return
    with contextlib.ExitStack() as held:
        for place in _lock_places(database):
            held.enter_context(_held_beside(place, storage, name))
        held.enter_context(_file_held(database, storage, name))
        yield


def _lock_places(database: Path) -> list[Path]:
    """The paths of ``database`` beside which a tuner locks its studies: where the file itself is a link, its resolved
    path first, then the path as given; else the path as given alone (through a linked folder above it, the lock
    files beside it are those beside the resolved path)."""
    resolved = database.resolve()
    return [database] if database.parent.resolve() / database.name == resolved else [resolved, database]


@contextmanager
def _held_beside(database: Path, storage: str, name: str) -> Iterator[None]:
    """Hold study ``name``'s lock file beside ``database`` (``lock_file``), and its legacy one (``_legacy_held``),
    while inside, writing this process's pid into it; ConfigError naming ``study.name`` where another holds either."""
    path = lock_file(database, name)
    with _locked(path, storage, name, fcntl.LOCK_EX) as handle:
        try:
            with _legacy_held(database, storage, name):
                handle.seek(0)
                handle.truncate()
                handle.write(str(os.getpid()))
                handle.flush()
                yield
        finally:  # still held: a tuner that opened it meanwhile finds it gone (``_locked``)
            path.unlink(missing_ok=True)


# Where in the database file the locks of its studies lie (``_file_held``): from 2**62 on, far past the bytes SQLite
# locks (from 2**30), and the file's end; each study at a byte of its own, picked by a hash of its name.
_STUDY_BYTES = 1 << 62
# Linux's ``struct flock`` (a 64-bit ``off_t``): type, whence, start, length, pid.
_FLOCK = "hhqqi0q"
# The errors of a lock call where the kernel or the file system has no such locks (WSL1, proot, older gVisor and
# Linux before 3.15 refuse F_OFD_SETLK; a network file system may refuse any lock): the lock files alone hold it then.
_NO_SUCH_LOCKS = frozenset({errno.EINVAL, errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EOVERFLOW})
# The descriptors this process opened on database files to lock them (``_file_held``), by the file's device and
# inode, that hold no lock now: never closed, as a close drops every POSIX lock this process holds on the file,
# SQLite's among them (a slot's transaction may still be open as a tuner ends), but taken again by the next tuner of
# the file here. A file held open keeps its inode: no other file gets its key meanwhile.
_IDLE: dict[tuple[int, int], list[int]] = {}


@contextmanager
def _file_held(database: Path, storage: str, name: str) -> Iterator[None]:
    """Hold study ``name`` on the file ``database`` itself while inside, whichever path reaches it (a hard link's
    too): an open file description lock on the study's byte of it (``_study_byte``), which SQLite never locks, and
    the kernel releases when its holder exits, however it exits; ConfigError naming ``study.name`` where another
    process holds it (``_file_locked_by_another``). Nothing to hold where the file cannot be locked so
    (``_file_to_lock``: not there yet, as SQLite makes it once the run's input is known good, a hard link made to it
    while this tuner runs then not covered; not writable by this user, which ``storage.open_storage`` refuses; not
    on Linux), or where the kernel or its file system has no such locks (``_NO_SUCH_LOCKS``): the lock files alone
    hold it then. The byte is unlocked as the tuner ends, and its descriptor kept for the next (``_IDLE``)."""
    file = _file_to_lock(database)
    if file is None:
        yield
        return
    key, handle = file
    try:
        locked = _took_study_byte(handle, storage, name)
        try:
            yield
        finally:
            if locked:  # an unlock, unlike a close, leaves the process's other locks on the file held
                fcntl.fcntl(handle, fcntl.F_OFD_SETLK, _study_byte(name, fcntl.F_UNLCK))
    finally:
        _IDLE.setdefault(key, []).append(handle)


def _file_to_lock(database: Path) -> tuple[tuple[int, int], int] | None:
    """The file ``database`` as its locks need it (``_file_held``): its device and inode, and a descriptor of it open
    for writing, one of this process's idle ones (``_IDLE``) or one opened now; None where it cannot be opened so,
    or elsewhere than Linux (another system may name F_OFD_SETLK, as some macOS Pythons do, with another
    ``struct flock``)."""
    if sys.platform != "linux" or not hasattr(fcntl, "F_OFD_SETLK"):
        return None
    try:
        there = os.stat(database)
    except OSError:
        return None
    key = (there.st_dev, there.st_ino)
    with contextlib.suppress(IndexError):
        return key, _IDLE.get(key, []).pop()
    try:
        handle = os.open(database, os.O_RDWR)
    except OSError:
        return None
    opened = os.fstat(handle)  # the file opened, whatever lay at the path as it was looked at
    return (opened.st_dev, opened.st_ino), handle


def _took_study_byte(handle: int, storage: str, name: str) -> bool:
    """Lock study ``name``'s byte of the file open as ``handle``, at once or refused: whether it was locked (False:
    the kernel or the file system has no such locks); ConfigError where another process holds it."""
    try:
        fcntl.fcntl(handle, fcntl.F_OFD_SETLK, _study_byte(name, fcntl.F_WRLCK))
    except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: another holds it
        raise _file_locked_by_another(storage, name, _holder(handle, name)) from None
    except OSError as exc:
        if exc.errno in _NO_SUCH_LOCKS:
            return False
        raise
    return True


def _holder(handle: int, name: str) -> str:
    """The pid of the process holding a POSIX lock over study ``name``'s byte of the file open as ``handle`` (a tool
    locking the whole file), as the kernel tells it; "" where none is told: an open file description lock (another
    autotune's) keeps none, and a lock let go meanwhile is no longer there."""
    with contextlib.suppress(OSError):
        kind, _, _, _, pid = struct.unpack(
            _FLOCK, fcntl.fcntl(handle, fcntl.F_OFD_GETLK, _study_byte(name, fcntl.F_WRLCK))
        )
        if kind != fcntl.F_UNLCK and pid > 0:
            return str(pid)
    return ""


def _study_byte(name: str, kind: int) -> bytes:
    """The ``struct flock`` of study ``name``'s byte of the database file (``_STUDY_BYTES``), of lock ``kind``
    (``F_WRLCK``, ``F_UNLCK``)."""
    byte = _STUDY_BYTES + int.from_bytes(hashlib.sha256(name.encode()).digest()[:7], "big")
    return struct.pack(_FLOCK, kind, os.SEEK_SET, byte, 1, 0)


def lock_file(database: Path, name: str) -> Path:
    """The lock file of study ``name`` of the SQLite file ``database``: the name made a file name, and a hash of it
    as given, as two names may make one file name ("a b", "a_b")."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return database.with_name(f"{database.name}.{file_name(name)}-{digest}.lock")


@contextmanager
def _legacy_held(database: Path, storage: str, name: str) -> Iterator[None]:
    """Hold the lock file of study ``name`` as autotune named it before ``lock_file`` while inside; ConfigError naming
    ``study.name`` where a tuner of that version holds it. Held shared: that version holds it exclusively, so either
    refuses the other, while studies whose names make one file name ("a b", "a_b") are still tuned at once. The last
    to hold it removes it, holding it exclusively (``_locked`` then reopens it for a tuner that opened it before)."""
    path = _legacy_file(database, name)
    with _locked(path, storage, name, fcntl.LOCK_SH) as handle:
        try:
            yield
        finally:
            with contextlib.suppress(BlockingIOError):  # another tuner holds it still, and removes it in its turn
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                path.unlink(missing_ok=True)


def _legacy_file(database: Path, name: str) -> Path:
    """The lock file of study ``name`` of ``database`` as autotune named it before ``lock_file``."""
    return database.with_name(f"{database.name}.{file_name(name)}.lock")


def _locked(path: Path, storage: str, name: str, operation: int) -> TextIO:
    """The lock file ``path``, opened and locked (``operation``: ``LOCK_EX`` or ``LOCK_SH``); ConfigError naming
    ``study.name`` where another process holds it otherwise. A file locked once its holder removed it (opened before,
    locked after) is no longer the file at ``path``, which the next tuner makes anew and locks too: it is let go, and
    ``path`` opened again."""
    while True:
        handle = _open(path, storage)
        try:
            fcntl.flock(handle, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise _held_by_another(storage, name, holder) from None
        except BaseException:
            handle.close()
            raise
        if _is_at(handle, path):
            return handle
        handle.close()


def _held_by_another(storage: str, name: str, holder: str) -> ConfigError:
    """The refusal of study ``name`` in ``storage``, which another process holds: ``holder``, its pid ("": unknown)."""
    return ConfigError(
        "study.name",
        f"another autotune{_pid_said(holder)} is tuning study '{name}' in "
        f"{redact_url(storage)}; wait for it to end, or choose another study.name",
    )


def _file_locked_by_another(storage: str, name: str, holder: str) -> ConfigError:
    """The refusal of study ``name`` in ``storage``, whose byte of the database file another process holds (``holder``,
    its pid; "": unknown): an autotune given another link to the file, or a tool locking the whole file."""
    return ConfigError(
        "study.name",
        f"the database file of {redact_url(storage)} is locked by another process{_pid_said(holder)}: an autotune "
        f"tuning study '{name}' through another link to the file, or a tool locking the whole file; wait for it to "
        "end, or, where it is an autotune, choose another study.name",
    )


def _pid_said(holder: str) -> str:
    """`` (pid N)`` of a lock's ``holder``, its pid, where known ("": unknown)."""
    return f" (pid {holder})" if holder else ""


def _open(path: Path, storage: str) -> TextIO:
    try:
        return open(path, "a+", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "study.storage",
            f"cannot create {path}{unexpanded_home(path)} beside the database of {redact_url(storage)} "
            f"({exc.strerror}); give a file in a folder that exists and this user can write",
        ) from exc


def unexpanded_home(path: Path | str) -> str:
    """What to say of a storage file's ``path`` holding ``~``: a shell expands it in an argument of its own, not
    inside a URL (sqlite:///~/s.db, journal://~/s.log), so it names a folder ``~``."""
    return " (~ is not expanded: give the path from /)" if "~" in str(path) else ""


def _is_at(handle: TextIO, path: Path) -> bool:
    """Whether the open file ``handle`` is the file at ``path`` (not one removed from there)."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def sqlite_file(storage: str) -> Path | None:
    """The database file of a SQLite storage URL; None for another storage or an in-memory database."""
    try:
        url = make_url(storage)
    except ArgumentError:
        return None
    if not url.drivername.startswith("sqlite") or url.database is None:
        return None
    database = url.database
    if asbool(url.query.get("uri", False)):  # a URI the driver opens: file:PATH?mode=...
        database = "" if url.query.get("mode") == "memory" else database.removeprefix("file:")
    return None if database in ("", ":memory:") else Path(database).absolute()
