"""The study's Optuna storage: checked before Optuna reads it, its faults named by their cause wherever they happen.

``study.storage`` is a SQLAlchemy URL (a SQLite file, the default; PostgreSQL or MySQL, shared by tuners on many
machines) or ``journal:///PATH``, Optuna's journal in a file (shared through a filesystem, NFS included). A SQLite
study has one tuner at a time (``autotune/study/lock.py``); the others are ``shared``.

A storage fault (a full disk, a read-only file or folder, a damaged SQLite file, a lock held past SQLite's busy
timeout, an I/O error, a database server's connection lost; any operating-system error of a journal file) is one
line naming ``study.storage`` and its cause. Found while opening the study, it is a ConfigError (exit 2: nothing
ran); found once the run is under way, a StorageFaultError (exit 1: the study keeps what it stored before, each write
being one transaction, and a tuning run reports that). A SQLite file is checked whole
(``PRAGMA quick_check``) before Optuna reads it: where the damage misses the pages its queries read, Optuna would
read a damaged study without noticing, or as empty, and write into it.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import StorageInternalError
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import LOCK_FILE_SUFFIX
from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from autotune.errors import AutotuneError, ConfigError
from autotune.redact import redact_url
from autotune.study.lock import sqlite_file, unexpanded_home

KEY = "study.storage"
JOURNAL = "journal://"
_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Cause:
    """A kind of storage fault: its name, the words of a driver's error that tell it (SQLite's error name first, as
    Python gives it, then the message of SQLite, of another database or of the operating system, less what it
    quotes), and what the user can do about it."""

    name: str
    marks: tuple[str, ...]
    advice: str


READ_ONLY = Cause(
    "read-only",
    ("sqlite_readonly", "readonly database", "read-only", "permission denied"),
    "make the file and its folder writable",
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
    Cause(
        "I/O error",
        ("sqlite_ioerr", "disk i/o error", "input/output error", "stale file handle", "disk quota exceeded"),
        "check its disk, its mount (a network filesystem's), your quota, and the file size limit (ulimit -f)",
    ),
)
# Only once the storage is open: one that cannot be opened had no connection to lose, and the driver's own words
# (refused, no such host, timed out) say why. Once open, a connection the server dropped is replaced as it is taken
# (``_engine_options``): one that cannot be made again, within CONNECT_TIMEOUT_S, is lost.
CONNECTION_LOST = Cause(
    "connection lost",
    (
        "server closed the connection",
        "terminating connection",
        "connection refused",
        "could not connect",
        "can't connect",
        "timeout expired",
        "timed out",
        "gone away",
        "lost connection",
    ),
    "check that its database server is up and this machine reaches it",
)
# The seconds a database server's driver may take to connect, where it takes a bound (``_CONNECT_TIMEOUT_ARG``):
# without one, a server that does not answer (a host down, a firewall that drops packets) holds the tuner for the
# system's TCP retries (minutes), or for ever where it accepted the connection and says nothing.
CONNECT_TIMEOUT_S = 10
# The keyword of that bound in each driver's connect() (by SQLAlchemy's name of the driver), which SQLAlchemy passes
# it by (``connect_args``): only drivers whose bound is on connecting alone. pg8000's ``timeout`` and MySQL
# Connector's ``connection_timeout`` bound every read of the socket too, so a query or lock wait longer than the bound
# would read as a connection lost: they get none. SQLite needs none.
_CONNECT_TIMEOUT_ARG = {
    "psycopg": "connect_timeout",
    "psycopg2": "connect_timeout",
    "mysqldb": "connect_timeout",
    "pymysql": "connect_timeout",
}
# libpq's drivers, and the environment it may read a connect timeout from (``_libpq_bound_elsewhere``).
_LIBPQ_DRIVERS = ("psycopg", "psycopg2")
_LIBPQ_TIMEOUT_SOURCES = ("PGCONNECT_TIMEOUT", "PGSERVICE")
# What a message quotes (a study's, a database's or a file's name: the user's words, not the driver's), quoted as
# PostgreSQL ("x"), MySQL and Python ('x') quote it; an apostrophe inside a word (can't) opens no quote.
_QUOTED = re.compile(r"""(?<!\w)'[^']*'(?!\w)|(?<!\w)"[^"]*"(?!\w)""")


class StorageFaultError(AutotuneError):
    """The study's storage failed once the run was under way; the message names study.storage and the cause."""

    exit_code = 1  # not an input refused before anything ran (2): the run measured, and stored what it could


def storage_cause(exc: BaseException, connected: bool = True) -> Cause | None:
    """The cause of a failed storage operation, or None where ``exc`` is none of ``CAUSES`` (``CONNECTION_LOST`` too
    where ``connected``: the storage was open): read from the driver's error, which Optuna and SQLAlchemy wrap (their
    own messages quote the statement and its values: user data). A broken constraint is no fault of the storage: it
    is how a storage creates a name once, which Optuna meets on purpose (a study resumed or joined, a claim taken)."""
    causes = (*CAUSES, CONNECTION_LOST) if connected else CAUSES
    for error in _driver_errors(exc):
        if any(kind.__name__ == "IntegrityError" for kind in type(error).__mro__):  # every driver's (PEP 249)
            return None
        said = _words(error)
        for cause in causes:
            if any(mark in said for mark in cause.marks):
                return cause
    return None


def is_shared(url: str) -> bool:
    """Whether tuners on other machines can join a study in ``url`` (a database server, or a journal file)."""
    return sqlite_file(url) is None and not url.startswith("sqlite")


def is_server(url: str) -> bool:
    """Whether ``url`` names a database server (not a file of this machine: SQLite, a journal)."""
    return is_shared(url) and not url.startswith(JOURNAL)


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """The storage of ``url`` to tune in, checked (kept once the run ends; a SQLite file whole, and writable; a
    journal file writable) and opened (a database server connected); ConfigError naming study.storage, and the
    cause where known, if it cannot be. Faults once open raise StorageFaultError."""
    with opening(url):
        _check_kept(url)
        _check_sqlite(url, writing=True)
        return _storage(url, writing=True)


def create_study(url: str, storage: optuna.storages.BaseStorage | None = None, **options: Any) -> optuna.Study:
    """``optuna.create_study(**options)`` on ``storage``, the one ``open_storage(url)`` opened (by default opened
    here); a fault while creating it is a ConfigError as ``open_storage``'s are."""
    if storage is None:
        storage = open_storage(url)
    with opening(url):
        return optuna.create_study(storage=storage, **options)


def load_study(name: str, url: str) -> optuna.Study:
    """Study ``name`` of ``url``, as ``create_study`` opens it, for reading; KeyError where there is no such study
    (and no file made where there is no such file)."""
    with _reading(url) as storage:
        if storage is None:
            raise KeyError(name)
        return optuna.load_study(study_name=name, storage=storage)


def study_names(url: str) -> list[str]:
    """The names of the studies ``url`` holds, sorted ([] where its file does not exist: none is made)."""
    with _reading(url) as storage:
        return sorted(optuna.get_all_study_names(storage=storage)) if storage is not None else []


@contextmanager
def _reading(url: str) -> Iterator[optuna.storages.BaseStorage | None]:
    """``url``'s storage, checked and opened for reading, its failures as ``opening`` says; None where its file does
    not exist (none is made)."""
    path = sqlite_file(url) or journal_file(url)
    if path is not None and not path.exists():
        yield None
        return
    with opening(url):
        _check_sqlite(url, writing=False)
        yield _storage(url, writing=False)


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
        cause = storage_cause(exc, connected=False)
        problem = f"cannot open Optuna storage {redact_url(url)!r}: {_detail(exc)}"
        raise ConfigError(KEY, f"{cause.name}: {problem}; {cause.advice}" if cause else problem) from exc


def _check_kept(url: str) -> None:
    """Refuse an in-memory SQLite database: it is gone when the run ends (a resume, mode=report), and each thread
    of study.parallel would get one of its own."""
    try:
        driver = make_url(url).drivername
    except ArgumentError:  # not a URL: Optuna's error names it
        return
    if driver.startswith("sqlite") and sqlite_file(url) is None:
        raise ConfigError(
            KEY,
            f"{redact_url(url)!r} is a SQLite database in memory, lost when the run ends; give a file: sqlite:///PATH",
        )


def _check_sqlite(url: str, writing: bool) -> None:
    """Refuse a SQLite file that fails ``PRAGMA quick_check`` (the driver's own errors are raised as they are), and,
    when ``writing``, one in a folder that does not exist (``_check_folder``), or one this user cannot write, or in a
    folder it cannot write (SQLite writes its journal there)."""
    path = sqlite_file(url)
    if path is not None and writing:
        _check_folder(url, path, "SQLite file")
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


def _storage(url: str, writing: bool) -> optuna.storages.BaseStorage:
    """The storage of ``url`` (a journal file, checked writable where ``writing``, or what Optuna makes of a URL),
    raising StorageFaultError on each fault it meets: a database's that is a storage fault (``storage_cause``), any
    operating-system error of a journal file."""
    if url.startswith(JOURNAL):
        return optuna.storages.JournalStorage(_JournalFile(url, writing))
    storage = optuna.storages.RDBStorage(url, engine_kwargs=_engine_options(url))

    def name_fault(context: ExceptionContext) -> None:
        if storage_cause(context.original_exception) is not None:
            error = context.original_exception
            raise _fault(url, error) from context.sqlalchemy_exception or error

    event.listen(storage.engine, "handle_error", name_fault)
    return storage


def _engine_options(url: str) -> dict[str, Any]:
    """SQLAlchemy's engine options for a database server's ``url`` (none for SQLite, a file of this machine): each
    connection tested as it is taken from the pool (``pool_pre_ping``: one the server dropped between two uses is
    replaced, not failed on), and connecting bounded by CONNECT_TIMEOUT_S where the driver takes a bound on connecting
    alone (``_CONNECT_TIMEOUT_ARG``) and neither the URL nor libpq's environment sets one
    (``_libpq_bound_elsewhere``)."""
    try:
        parsed = make_url(url)
        backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    except ArgumentError:  # not a URL, or no dialect SQLAlchemy has: Optuna's error names it
        return {}
    if backend == "sqlite":
        return {}
    options: dict[str, Any] = {"pool_pre_ping": True}
    argument = _CONNECT_TIMEOUT_ARG.get(driver)
    if argument and argument not in parsed.query and not _libpq_bound_elsewhere(driver, parsed.query):
        options["connect_args"] = {argument: CONNECT_TIMEOUT_S}
    return options


def _libpq_bound_elsewhere(driver: str, query: Mapping[str, Any]) -> bool:
    """Whether libpq, the ``driver``'s (psycopg, psycopg2), may read a connect timeout from other than the URL: the
    environment's PGCONNECT_TIMEOUT, or a service file's (``service=`` in the URL's ``query``, or PGSERVICE)."""
    if driver not in _LIBPQ_DRIVERS:
        return False
    return "service" in query or any(os.environ.get(name) for name in _LIBPQ_TIMEOUT_SOURCES)


def _fault(url: str, error: BaseException) -> StorageFaultError:
    """The StorageFaultError of ``error``, met mid-run: named by its cause where it is one (``storage_cause``)."""
    cause = storage_cause(error)
    named, advice = (f"{cause.name}: ", cause.advice) if cause else ("", "mend what it says")
    return StorageFaultError(
        f"{KEY}: {named}Optuna storage {redact_url(url)!r} failed mid-run ({_detail(error)}); {advice}, then run "
        "the same command again to resume from what the study stored"
    )


# A journal file's lock held this long is a writer's that died holding it (a write holds it for milliseconds): every
# write, heartbeats too, waits until Optuna's lock breaks it, JOURNAL_LOCK_GRACE_S after it was taken.
_STUCK_LOCK_S = 1.0
JOURNAL_LOCK_GRACE_S = 30.0  # Optuna's JournalFileSymlinkLock's default grace period


def journal_file(url: str) -> Path | None:
    """The file of a journal storage URL (``journal:///PATH``); None for another storage."""
    return Path(url[len(JOURNAL) :]) if url.startswith(JOURNAL) else None


def journal_lock(study: optuna.Study) -> tuple[str, float | None] | None:
    """The study's journal file lock: its path, and when it was taken where a writer that died holding it left it
    (else None); None for a database (its transactions end with their connections)."""
    backend = getattr(study._storage, "_backend", None)
    return backend.lock() if isinstance(backend, _JournalFile) else None


class _JournalFile(JournalFileBackend):
    """Optuna's journal file of ``journal:///PATH``, checked writable where ``writing`` (a file read alone may be
    another user's, or on a read-only mount), its operating-system errors raised as storage faults."""

    def __init__(self, url: str, writing: bool) -> None:
        path = journal_file(url)
        if writing:
            _check_journal(url, path)
        super().__init__(str(path))
        self.url = url

    def lock(self) -> tuple[str, float | None]:
        path = self._file_path + LOCK_FILE_SUFFIX
        try:
            taken = os.lstat(path).st_mtime
        except OSError:  # not held
            return path, None
        return path, taken if time.time() - taken > _STUCK_LOCK_S else None

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        try:  # Optuna's reads the file as its logs are iterated: the errors come then
            yield from super().read_logs(log_number_from)
        except OSError as exc:
            raise _fault(self.url, exc) from exc

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        try:
            super().append_logs(logs)
        except OSError as exc:
            raise _fault(self.url, exc) from exc


def _check_folder(url: str, path: Path, what: str) -> None:
    """Refuse the file ``path`` (``what``: a SQLite file, a journal file) of a storage ``url`` in a folder that does
    not exist, saying where the path holds a ``~``, which no shell expanded inside the URL."""
    if not path.parent.is_dir():
        raise ConfigError(
            KEY,
            f"no folder {path.parent} for the {what} of {redact_url(url)!r}{unexpanded_home(path)}; make it, or give "
            "a file in a folder that exists",
        )


def _check_journal(url: str, path: Path) -> None:
    """Refuse a journal file in a folder that does not exist (``_check_folder``), or that this user cannot write, or
    in a folder it cannot write (its lock is made there)."""
    _check_folder(url, path, "journal file")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(
            KEY, f"read-only: {redact_url(url)!r}: {path} cannot be written by this user; {READ_ONLY.advice}"
        )


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


def _words(error: BaseException) -> str:
    """What ``error`` says, lower case, for ``storage_cause``: SQLite's error name and the message (an operating-system
    error's without its file name), less what it quotes."""
    said = " ".join(arg for arg in error.args if isinstance(arg, str)) or str(error)
    return _QUOTED.sub(" ", f"{getattr(error, 'sqlite_errorname', '')} {said}").lower()


def _detail(exc: BaseException) -> str:
    """The driver's error of ``exc`` (or ``exc``) as one line: its type and message, passwords redacted."""
    error = next(_driver_errors(exc), exc)
    return f"{type(error).__name__}: {redact_url(' '.join(str(error).split()))[:_DETAIL_CHARS]}"
