"""One tuner per study on a SQLite file: a second tuner of the same study is refused while the first runs.

Two tuners on one SQLite study would measure the same configurations twice and recommend different ones from a
study the other is changing. The lock is an advisory ``flock`` on a file beside the database, which the kernel
releases when its holder exits, however it exits (a ``kill -9`` included): a stale lock cannot outlive its tuner.
Other storages are shared on purpose by the scale-out work and are not locked here.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.util import asbool

from autotune.errors import ConfigError
from autotune.files import file_name
from autotune.redact import redact_url


@contextmanager
def one_tuner(storage: str, name: str) -> Iterator[None]:
    """Hold study ``name`` in ``storage`` for this process; ConfigError naming ``study.name`` (and the holder's pid)
    where another process holds it."""
    database = sqlite_file(storage)
    if database is None:
        yield
        return
    path = database.with_name(f"{database.name}.{file_name(name)}.lock")
    try:
        handle = open(path, "a+", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "study.storage",
            f"cannot create {path} beside the database of {redact_url(storage)} ({exc.strerror}); give a file in a "
            "folder that exists and this user can write",
        ) from exc
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            raise ConfigError(
                "study.name",
                f"another autotune{f' (pid {holder})' if holder else ''} is tuning study '{name}' in "
                f"{redact_url(storage)}; wait for it to end, or choose another study.name",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


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
