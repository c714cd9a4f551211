"""A tuner stopped by job control (Ctrl-Z) stops the processes it started with it, and continues them with itself.

Trials run in sessions of their own (``launch``), outside the terminal's foreground process group, so the terminal's
stop signals (SIGTSTP: Ctrl-Z; SIGTTIN, SIGTTOU: a tuner in the background reading or writing the terminal) reach the
tuner alone: its trials would run on unwatched, and another tuner of the same study would measure beside them. Once
``install``-ed, such a signal has the tuner stop every process it started (its descendants: trials, their DataLoader
workers, fork servers), then itself; continued (SIGCONT: ``fg``, ``bg``), it continues them.

SIGSTOP cannot be caught: a tuner stopped by it (``kill -STOP``) stops alone, and its trials run on.

The time the tuner spent stopped is counted (``stopped_s``): a wait for a trial counts only the time it could run
(``unstopped_clock``, ``readable_within``), and a trial whose own clocks counted a stop is run again
(``runner.run_trial``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from typing import IO

import psutil

JOB_CONTROL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)

# The seconds stopped before the stop under way, and when that stop began (None: none is). One tuple, rebound whole,
# so that a thread reading it while the handler writes it sees one state or the other.
_STOPPED: tuple[float, float | None] = (0.0, None)


def install() -> None:
    """Have this process (the tuner) stop the processes it started with it on a job-control stop, and continue them
    with it (the module's rule). Python runs handlers in the main thread alone and sets them there only: called from
    another thread it does nothing. A stop signal not at its default action is left as it is (one ignored stays
    ignored), so a second call changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in JOB_CONTROL_STOPS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _stop_with_descendants)


def stopped_s() -> float:
    """The seconds this process has spent stopped by job control so far (``install``), a stop under way counted to
    now: the threads that run on once it is continued, before its handler ends, count it too."""
    total, since = _STOPPED
    return total + (time.monotonic() - since if since is not None else 0.0)


def unstopped_clock() -> float:
    """``time.monotonic()`` less ``stopped_s``: the seconds this process and the processes it started could run. The
    monotonic clock runs on while a process is stopped."""
    return time.monotonic() - stopped_s()


def readable_within(file: IO | int, seconds: float) -> bool:
    """Whether ``file`` becomes readable within ``seconds`` of ``unstopped_clock``: ``select``'s own timeout counts a
    stop, during which the process that would write it was stopped too."""
    deadline = unstopped_clock() + seconds
    while True:
        ready, _, _ = select.select([file], [], [], max(0.0, deadline - unstopped_clock()))
        if ready:
            return True
        if unstopped_clock() >= deadline:
            return False


def _stop_with_descendants(signum: int, frame) -> None:
    global _STOPPED
    total, _ = _STOPPED
    since = time.monotonic()
    _STOPPED = (total, since)
    stopped = _stop_descendants()
    # The stop signal's default action, which this handler replaced: SIGSTOP, which stops this process whatever the
    # signal was and where its process group is orphaned too (whose SIGTSTP the kernel would discard).
    os.kill(os.getpid(), signal.SIGSTOP)
    for process in reversed(stopped):  # children first: a trial continues with its DataLoader workers running
        with contextlib.suppress(psutil.Error):  # it ended meanwhile (killed from outside)
            process.resume()
    _STOPPED = (total + time.monotonic() - since, None)


def _stop_descendants() -> list[psutil.Process]:
    """Stop every descendant of this process, parents before their children, listing them again until no new one
    appeared (one may fork before it is stopped); those stopped, in that order."""
    stopped: dict[int, psutil.Process] = {}
    while new := [process for process in psutil.Process().children(recursive=True) if process.pid not in stopped]:
        for process in new:
            with contextlib.suppress(psutil.Error):  # it ended since it was listed
                process.suspend()
            stopped[process.pid] = process
    return list(stopped.values())
