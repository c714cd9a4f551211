"""Writing files so that a crash never leaves a half-written one."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

# The process's umask, read once (os.umask can only be read by setting it): a report is created with the
# permissions any file the user writes gets, not the 0600 of a temporary file.
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: str | os.PathLike, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to a temporary file beside ``path`` and rename it over ``path``, readable
    as the umask allows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content if isinstance(content, bytes) else content.encode("utf-8"))
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# The bytes of a name file_name leaves as they are.
_NAME_BYTES = 100


def file_name(text: str) -> str:
    """``text`` as one file or folder name: characters other than letters, digits, ``.``, ``_`` and ``-`` become
    ``_``, and no leading dot, so that a study's or a trial's name can neither reach another folder (``..``) nor
    hide a file; a long one is cut, a hash of the whole ending it, to leave room under the 255 bytes a name may take
    for what is added to it (``.lock``, a database's name)."""
    name = re.sub(r"[^\w.-]+", "_", text).lstrip(".") or "_"
    if len(name.encode()) <= _NAME_BYTES:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{name.encode()[: _NAME_BYTES - 13].decode(errors='ignore')}-{digest}"
