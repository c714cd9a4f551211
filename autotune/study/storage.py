"""The study's Optuna storage: checked before Optuna reads it, its faults named by their cause wherever they happen.

A storage fault (a full disk, a read-only file or folder, a damaged SQLite file, a lock held past SQLite's busy
timeout, an I/O error) is one line naming ``study.storage`` and its cause. Found while opening the study, it is a
ConfigError (exit 2: nothing ran); found once the run is under way, a StorageFaultError (exit 1: the study keeps what
it stored before, each write being one transaction, and a tuning run reports that). A SQLite file is checked whole
(``PRAGMA quick_check``) before Optuna reads it: where the damage misses the pages its queries read, Optuna would
read a damaged study without noticing, or as empty, and write into it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.exceptions import StorageInternalError
from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError

from autotune.errors import AutotuneError, ConfigError
from autotune.redact import redact_url
from autotune.study.lock import sqlite_file

KEY = "study.storage"
_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Cause:
    """A kind of storage fault: its name, the words of a driver's error that tell it (SQLite's error name first, as
    Python gives it, then the message of SQLite or of another database), and what the user can do about it."""

    name: str
    marks: tuple[str, ...]
    advice: str


READ_ONLY = Cause(
    "read-only", ("sqlite_readonly", "readonly database", "read-only"), "make the file and its folder writable"
)
MALFORMED = Cause(
    "malformed database",
    ("sqlite_corrupt", "sqlite_notadb", "malformed", "file is not a database"),
    "restore it from a backup, or choose another study.storage (the file is left as it is)",
)
CAUSES = (
    Cause("disk full", ("sqlite_full", "disk is full", "no space left on device"), "free space on its disk"),
    READ_ONLY,
    MALFORMED,
    Cause("locked", ("sqlite_busy", "sqlite_locked", "database is locked"), "end the process that holds it locked"),
    Cause("I/O error", ("sqlite_ioerr", "disk i/o error"), "check its disk, and the file size limit (ulimit -f)"),
)


class StorageFaultError(AutotuneError):
    """The study's storage failed once the run was under way; the message names study.storage and the cause."""

    exit_code = 1  # not an input refused before anything ran (2): the run measured, and stored what it could


def storage_cause(exc: BaseException) -> Cause | None:
    """The cause of a failed storage operation, or None where ``exc`` is none of ``CAUSES``: read from the driver's
    error, which Optuna and SQLAlchemy wrap (their own messages quote the statement and its values: user data)."""
    for error in _driver_errors(exc):
        text = f"{getattr(error, 'sqlite_errorname', '')} {error}".lower()
        for cause in CAUSES:
            if any(mark in text for mark in cause.marks):
                return cause
    return None


def create_study(url: str, **options: Any) -> optuna.Study:
    """``optuna.create_study(storage=url, **options)`` on a storage checked first (a SQLite file whole, and writable);
    ConfigError naming study.storage, and the cause where known, if it cannot be opened. Faults once open raise
    StorageFaultError."""
    with opening(url):
        _check_sqlite(url, writing=True)
        return optuna.create_study(storage=_storage(url), **options)


def load_study(name: str, url: str) -> optuna.Study:
    """Study ``name`` of ``url``, as ``create_study`` opens it, for reading; KeyError where there is no such study."""
    with opening(url):
        _check_sqlite(url, writing=False)
        return optuna.load_study(study_name=name, storage=_storage(url))


@contextmanager
def opening(url: str) -> Iterator[None]:
    """A failure inside as a ConfigError naming study.storage, and its cause where known (a storage fault, or any
    error but KeyError, no such study, and autotune's own): a run does not start on a storage it cannot open."""
    try:
        yield
    except KeyError:
        raise
    except Exception as exc:
        if isinstance(exc, AutotuneError) and not isinstance(exc, StorageFaultError):
            raise
        cause = storage_cause(exc)
        problem = f"cannot open Optuna storage {redact_url(url)!r}: {_detail(exc)}"
        raise ConfigError(KEY, f"{cause.name}: {problem}; {cause.advice}" if cause else problem) from exc


def _check_sqlite(url: str, writing: bool) -> None:
    """Refuse a SQLite file that fails ``PRAGMA quick_check`` (the driver's own errors are raised as they are), and,
    when ``writing``, one this user cannot write, or in a folder it cannot write (SQLite writes its journal there)."""
    path = sqlite_file(url)
    if path is None or not path.is_file():
        return
    with closing(sqlite3.connect(path)) as connection:  # it rolls back what a killed writer left, as Optuna would
        found = [row[0] for row in connection.execute("PRAGMA quick_check")]
    if found != ["ok"]:
        damage = " ".join(" ".join(found).split())[:_DETAIL_CHARS]
        raise ConfigError(
            KEY,
            f"malformed database: {redact_url(url)!r} fails SQLite's integrity check (PRAGMA quick_check: {damage}); "
            f"{MALFORMED.advice}",
        )
    if writing and (unwritable := [place for place in (path, path.parent) if not os.access(place, os.W_OK)]):
        raise ConfigError(
            KEY,
            f"read-only: {redact_url(url)!r} cannot be written by this user ({unwritable[0]} is not writable), and "
            f"the study stores each result as it is measured; {READ_ONLY.advice}",
        )


def _storage(url: str) -> optuna.storages.RDBStorage:
    """The RDB storage of ``url`` (what Optuna makes of a URL), raising StorageFaultError on each fault it meets."""
    storage = optuna.storages.RDBStorage(url)

    def name_fault(context: ExceptionContext) -> None:
        cause = storage_cause(context.original_exception)
        if cause is not None:
            raise StorageFaultError(
                f"{KEY}: {cause.name}: Optuna storage {redact_url(url)!r} failed mid-run "
                f"({_detail(context.original_exception)}); {cause.advice}, then run the same command again to resume "
                "from what the study stored"
            ) from context.sqlalchemy_exception

    event.listen(storage.engine, "handle_error", name_fault)
    return storage


def _driver_errors(exc: BaseException | None) -> Iterator[BaseException]:
    """The errors of ``exc``'s chain that are not a wrapper's: a driver's, SQLite's, the operating system's."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DBAPIError):
            if exc.orig is not None:
                yield exc.orig
        elif not isinstance(exc, AutotuneError | StorageInternalError):
            yield exc
        exc = exc.__cause__ or exc.__context__


def _detail(exc: BaseException) -> str:
    """The driver's error of ``exc`` (or ``exc``) as one line: its type and message, passwords redacted."""
    error = next(_driver_errors(exc), exc)
    return f"{type(error).__name__}: {redact_url(' '.join(str(error).split()))[:_DETAIL_CHARS]}"
