"""Writing files so that a crash never leaves a half-written one."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

# The process's umask, read once (os.umask can only be read by setting it): a report is created with the
# permissions any file the user writes gets, not the 0600 of a temporary file.
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, readable as the umask
    allows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def file_name(text: str) -> str:
    """``text`` as one file or folder name: characters other than letters, digits, ``.``, ``_`` and ``-`` become
    ``_``, and no leading dot, so that a study's or a trial's name can neither reach another folder (``..``) nor
    hide a file."""
    return re.sub(r"[^\w.-]+", "_", text).lstrip(".") or "_"
