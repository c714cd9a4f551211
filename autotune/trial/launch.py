"""How a trial's process starts: forked from a fork server that has imported torch (milliseconds), or as a fresh
``python -m autotune.trial.worker`` (seconds of imports). Either way the trial is its own process leading its own
process group, so a crash, a hang or an out-of-memory kill still ends only it."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

WORKER_MODULE = "autotune.trial.worker"


class TrialProcess(Protocol):
    """A started trial process; ``lender``: the fork server it shares pages with, if any."""

    pid: int
    lender: int | None

    def exited_within(self, seconds: float) -> bool:
        """Whether the process has ended, waiting up to ``seconds`` for it, asleep meanwhile."""

    def kill(self) -> int | None:
        """Kill its process group and wait for it; its exit code as ``Popen.returncode`` (None if unknown)."""


class Launcher(Protocol):
    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> TrialProcess:
        """Start the trial worker with ``argv``, its output into ``log_path``, in environment ``env``."""


class FreshLauncher:
    """Each trial a new interpreter: slower to start, nothing shared with any other process."""

    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> TrialProcess:
        log = open_log(log_path)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        finally:
            os.close(log)
        return _FreshProcess(proc)


class _FreshProcess:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.pid, self.lender = proc, proc.pid, None
        try:
            self._fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux 5.3+, or the process is already gone
            self._fd = None

    def exited_within(self, seconds: float) -> bool:
        # Popen.wait(timeout) polls every few milliseconds; on a machine whose cores the trial's threads fill,
        # each wake-up of the tuner takes time from the trial it measures.
        if self._fd is not None:
            select.select([self._fd], [], [], seconds)
        elif self.proc.poll() is None:
            time.sleep(seconds)
        return self.proc.poll() is not None

    def kill(self) -> int | None:
        _signal_group(self.pid)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        returncode = self.proc.wait()  # a zombie leader would keep its group alive
        _await_group(self.pid)
        return returncode


class ForkServer:
    """Trials forked from one server process (``autotune.trial.zygote``), started on the first trial and ended
    with this process. Where the server cannot start or dies, that trial and the ones after it start fresh."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None
        self._broken = False

    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> TrialProcess:
        server = self._running(env)
        if server is not None:
            order = {"argv": argv, "log": str(log_path), "env": env, "cwd": os.getcwd()}
            try:
                server.stdin.write((json.dumps(order) + "\n").encode())
                server.stdin.flush()
                reply = server.stdout.readline()
                return _ForkedProcess(server, json.loads(reply)["pid"])
            except (OSError, ValueError, KeyError):
                self.close()
                self._broken = True
        return FreshLauncher().start(argv, log_path, env)

    def close(self) -> None:
        """End the server (it also ends by itself when this process exits)."""
        if self._server is not None:
            self._server.kill()
            self._server.wait()
            for pipe in (self._server.stdin, self._server.stdout):
                pipe.close()
            self._server = None

    def _running(self, env: dict[str, str]) -> subprocess.Popen | None:
        if self._server is not None and self._server.poll() is not None:
            self.close()
        if self._server is None and not self._broken:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "autotune.trial.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C at the terminal is the tuner's to handle, not the server's
                env=env,
            )
        return self._server


class _ForkedProcess:
    """A trial forked by the server: it is the server's child, so its end is read from the server's report."""

    def __init__(self, server: subprocess.Popen, pid: int) -> None:
        self.server, self.pid, self.lender = server, pid, server.pid
        self.returncode: int | None = None
        self._ended = False

    def exited_within(self, seconds: float) -> bool:
        if not self._ended:
            ready, _, _ = select.select([self.server.stdout], [], [], seconds)
            if ready:
                self._read_end()
        return self._ended

    def kill(self) -> int | None:
        # Once reaped, its pid may be another process's: only its group (which holds the number while any member
        # lives) is still safe to signal.
        _signal_group(self.pid, leader=not self._ended)
        if not self._ended:
            self._read_end()
        _await_group(self.pid)
        return self.returncode

    def _read_end(self) -> None:
        line = self.server.stdout.readline()  # the server writes it as soon as the trial is reaped
        self._ended = True
        if line:
            self.returncode = json.loads(line)["code"]


def open_log(path: Path | str) -> int:
    """A trial's log, emptied, as a file descriptor in append mode: its writes land at the end even after the log
    was cut (``LogCap``)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)


def _signal_group(pid: int, leader: bool = True) -> None:
    """SIGKILL the process group ``pid`` leads, and the leader itself where ``leader`` (a forked trial may not yet
    lead its own group)."""
    for kill in (os.killpg, os.kill) if leader else (os.killpg,):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _await_group(pgid: int) -> None:
    """Wait (up to ``_GROUP_EXIT_S``) until no process of group ``pgid`` is left, its leader reaped: the kernel
    delivers SIGKILL at once, but a loaded machine may take a moment to end a large process."""
    deadline = time.monotonic() + _GROUP_EXIT_S
    while time.monotonic() < deadline and _group_lives(pgid):
        time.sleep(0.01)


_GROUP_EXIT_S = 5.0


def _group_lives(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
