"""A trial's log kept to a bounded size while the trial runs: a pipeline that prints at every sample must not fill
the disk. The head (how it started) and the tail (how it is going, how it ended) are what a user reads."""

from __future__ import annotations

import os
from pathlib import Path

# A log over CAP is cut back to its first HEAD and last TAIL bytes, with one line saying how much was cut.
CAP_BYTES = 16 * 2**20
HEAD_BYTES = 2**20
TAIL_BYTES = 2**20


class LogCap:
    """Checks the log at ``path`` (written in append mode by the trial) and cuts its middle once it is over
    ``cap`` bytes; ``cut`` counts the bytes cut so far."""

    def __init__(self, path: Path, cap: int = CAP_BYTES, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.path, self.cap, self.head, self.tail = path, cap, head, tail
        self.cut = 0

    def check(self) -> None:
        """Cut the log's middle if it is over the cap; a ``stat`` otherwise."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return
        if size <= self.cap:
            return
        with open(self.path, "r+b") as log:
            log.seek(max(self.head, size - self.tail))
            tail = log.read()
            self.cut += size - self.head - len(tail)
            note = f"\n[autotune: {self.cut / 2**20:.1f} MiB of this trial's output cut here to keep the log small]\n"
            # The trial appends (O_APPEND), so its next write lands after what is written here.
            log.truncate(self.head)
            log.seek(self.head)
            log.write(note.encode() + tail)
