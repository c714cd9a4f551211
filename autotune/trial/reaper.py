"""Every process a trial starts ends with the trial, even one it detached from the trial's process group.

A trial leads its own process group, killed when the trial ends; a process the user's code detaches (``os.setsid()``
in a child, a double fork, ``subprocess.Popen(start_new_session=True)``) leaves that group. Two nets catch it:

- the process that starts trials (the tuner; the fork server for the trials it forks) is a *child subreaper*
  (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux): a process whose parent dies is adopted by it instead of by init, so
  every orphan of a trial becomes its child, however it detached and whatever environment it keeps;
- each trial's environment carries a token of its own (``TRIAL_TOKEN_ENV``): every process started from it with its
  environment has it in ``/proc/PID/environ``, the environment it started with, which ``setsid`` keeps.

When a trial ends, however it ends, ``Strays.end`` kills every live process carrying its token and kills and reaps
every child this process adopted while the trial ran (``end_children`` in the fork server, whose only child is the
trial). Every child the tuner starts on purpose is started and recorded at once (``start_owned``): any other child
that appears while a trial runs is an adopted orphan, and reaping it takes no exit code from a ``subprocess.Popen``.

Neither net reaches a process that another service started (``systemd-run``, ``at``, a container runtime): it is no
descendant and has its own environment. Elsewhere than Linux, neither exists and only the group is killed.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import psutil

TRIAL_TOKEN_ENV = "AUTOTUNE_TRIAL_TOKEN"  # a trial's own mark, inherited by every process it starts
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PR_SET_CHILD_SUBREAPER = 36
# How long a trial's end waits for its processes to go: SIGKILL is delivered at once, but a loaded machine may take a
# moment to end a large process.
END_S = 5.0


def new_token() -> str:
    """A token for one trial's environment."""
    return secrets.token_hex(16)


def become_subreaper() -> bool:
    """Make this process adopt the orphans of its descendants; False where the OS cannot (not Linux). A forked
    child does not inherit it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent ``parent`` ends (Linux; elsewhere nothing), and end it
    now if that parent is already gone. A forked trial whose fork server died would otherwise run on unseen: it
    carries no token of its own in ``/proc/PID/environ`` (the server's), so ``Strays`` cannot tell it from another
    trial's orphan while trials run at once."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


class Strays:
    """What one trial, about to start from this process, may leave behind: the processes carrying ``token``, and the
    orphans this process adopts from now on. Children it started on purpose (``start_owned``) and those it had before
    are never touched; trials may run at once (``study.parallel``), each with its own ``Strays``."""

    def __init__(self, token: str | None) -> None:
        become_subreaper()
        self.token = token
        self.before = _children()
        with _LOCK:
            _RUNNING.add(self)

    def end(self, group: int) -> None:
        """Kill them and reap the adopted ones, until none is left and no process of group ``group`` lives (a zombie
        this process adopted would keep it), or ``END_S`` passed.

        Call it once the trial's own process is reaped. An adopted orphan carrying another trial's token is left to
        that trial; one carrying none (its environment wiped or replaced) could be any running trial's, so while
        others run it is kept for the first end with no other trial running (at the latest, the study's last).
        """
        deadline = time.monotonic() + END_S
        try:
            while True:
                marked = kill_marked(self.token) if self.token else 0
                adopted = self._adopted()
                for pid in adopted:
                    _kill(pid)
                    _reap(pid)
                if (not adopted and not marked and not _group_lives(group)) or time.monotonic() >= deadline:
                    return
                time.sleep(0.01)
        finally:
            with _LOCK:
                _RUNNING.discard(self)

    def forget(self) -> None:
        """The trial did not start: nothing of it is left to end."""
        with _LOCK:
            _RUNNING.discard(self)

    def _adopted(self) -> list[int]:
        """The adopted children to end now: this trial's, the dead (a zombie is reaped whoever's it was), and, with
        no other trial running, those carrying no token."""
        found = []
        with _LOCK:
            alone = _RUNNING == {self}
            for pid, started in _children().items():
                new = self.before.get(pid) != started or _UNCLAIMED.get(pid) == started
                if pid in _OWN or not new:
                    continue
                token = _token(pid)
                if token == self.token or _dead(pid) or (token is None and alone):
                    found.append(pid)
                    _UNCLAIMED.pop(pid, None)
                elif token is None:
                    _UNCLAIMED[pid] = started
        return found


def start_owned(start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """The child ``start()`` starts on purpose (a trial, a fork server), recorded as never a stray. No trial's end
    looks at this process's children meanwhile: one ending in another thread (study.parallel) would take the new
    child, not yet recorded and carrying no token, for an orphan and kill it."""
    with _LOCK:
        child = start()
        _OWN.add(child.pid)
    return child


def disown(pid: int) -> None:
    """Forget ``pid`` once its ``Popen`` reaped it (the number may be reused)."""
    with _LOCK:
        _OWN.discard(pid)


_LOCK = threading.Lock()
_OWN: set[int] = set()
_RUNNING: set[Strays] = set()
# Adopted orphans carrying no token, seen while several trials ran: pid -> start time.
_UNCLAIMED: dict[int, float] = {}


def end_children() -> None:
    """Kill and reap every child of this process, until none is left or ``END_S`` passed: in the fork server, a
    subreaper whose one child, the trial, is reaped, they are the trial's orphans."""
    deadline = time.monotonic() + END_S
    while (children := _children()) and time.monotonic() < deadline:
        for pid in children:
            _kill(pid)
            _reap(pid)
        time.sleep(0.01)


def kill_marked(token: str) -> int:
    """SIGKILL every live process of this user but this one that started with ``token`` in its environment; how many
    were found."""
    found = [pid for pid in _pids() if pid != os.getpid() and _token(pid) == token]
    for pid in found:
        _kill_if_marked(pid, token)
    return len(found)


def _kill_if_marked(pid: int, token: str) -> None:
    """SIGKILL ``pid`` if it is still a process carrying ``token``: held by a pidfd while it is checked, so that a
    process reusing the pid later is never signalled (without pidfds, Linux < 5.3, only the moment between the check
    and the signal is left)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        handle = None
    try:
        if _token(pid) == token:
            if handle is None:
                os.kill(pid, signal.SIGKILL)
            else:
                signal.pidfd_send_signal(handle, signal.SIGKILL)
    except OSError:
        pass
    finally:
        if handle is not None:
            os.close(handle)


def _pids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:  # no /proc: not Linux
        return []


def _token(pid: int) -> str | None:
    """The trial token ``pid`` started with; None where it has none, or cannot be read (gone, a zombie)."""
    prefix = f"{TRIAL_TOKEN_ENV}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            entries = environ.read().split(b"\0")
    except OSError:
        return None
    return next((entry[len(prefix) :].decode() for entry in entries if entry.startswith(prefix)), None)


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _children() -> dict[int, float]:
    """This process's children, zombies included, each with its start time (a pid may be reused)."""
    found = {}
    for child in psutil.Process().children():
        try:
            found[child.pid] = child.create_time()
        except psutil.Error:
            pass
    return found


def _kill(pid: int) -> None:
    """SIGKILL a child (its pid is not reused before it is reaped)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _group_lives(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
