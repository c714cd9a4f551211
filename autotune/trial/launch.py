"""How a trial's process starts: forked from a fork server that has imported torch (milliseconds), or as a fresh
``python -m autotune.trial.worker`` (seconds of imports). Either way the trial is its own process leading its own
process group, so a crash, a hang or an out-of-memory kill still ends only it; the processes it detached from that
group end with it too (``reaper``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from autotune.trial.placement import pinned_cores, starting_on
from autotune.trial.reaper import TRIAL_TOKEN_ENV, Strays, disown, start_owned

WORKER_MODULE = "autotune.trial.worker"


class TrialProcess(Protocol):
    """A started trial process; ``lender``: the fork server it shares pages with, if any."""

    pid: int
    lender: int | None

    def exited_within(self, seconds: float) -> bool:
        """Whether the process has ended, waiting up to ``seconds`` for it, asleep meanwhile."""

    def kill(self) -> int | None:
        """Kill its process group and every process it detached from it (``reaper.Strays``), and wait for them; its
        exit code as ``Popen.returncode`` (None if unknown)."""


class Launcher(Protocol):
    servers_started: int  # processes started so far to fork trials from (each a new draw's cost): 0 if fresh

    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> TrialProcess:
        """Start the trial worker with ``argv``, its output into ``log_path``, in environment ``env`` (its
        ``TRIAL_TOKEN_ENV`` marks the processes that end with it)."""

    def new_draw(self) -> None:
        """Let the trials from here on draw a process memory layout of their own, not the trials' before them."""


class FreshLauncher:
    """Each trial a new interpreter: slower to start, nothing shared with any other process."""

    servers_started = 0

    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> TrialProcess:
        strays = Strays(env.get(TRIAL_TOKEN_ENV))
        try:
            proc = start_owned(lambda: _start_worker(argv, log_path, env))
        except BaseException:
            strays.forget()
            raise
        return _FreshProcess(proc, strays)

    def new_draw(self) -> None:
        """Nothing to do: every fresh process draws its own layout."""


def _start_worker(argv: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """``python -m autotune.trial.worker ARGV``, in a session of its own, its output into ``log_path``, on the cores
    ``env`` pins it to from its start, before its imports size their thread pools (``placement.starting_on``)."""
    log = open_log(log_path)
    try:
        with starting_on(pinned_cores(env)):
            return subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
    finally:
        os.close(log)


class _FreshProcess:
    def __init__(self, proc: subprocess.Popen, strays: Strays | None = None) -> None:
        self.proc, self.pid, self.lender = proc, proc.pid, None
        self.strays = strays or Strays(None)
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
        # Once reaped (``poll`` reaps), its pid may be another process's: only its group is still safe to signal.
        _signal_group(self.pid, leader=self.proc.poll() is None)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        returncode = self.proc.wait()  # reaped by its Popen, before the strays are: it keeps the exit code
        disown(self.pid)
        self.strays.end(self.pid)
        return returncode


# The server forks a trial as it reads its order and answers at once: one silent this long is stuck.
_REPLY_S = 30.0
# A new server imports torch and torch._dynamo before it takes orders: seconds, many more on a network file system or
# with several servers starting on a loaded machine. One not ready this long is stuck.
_READY_S = 180.0


class ForkServer:
    """Trials forked from one server process (``autotune.trial.zygote``), started on the first trial and ended
    with this process. Where the server cannot start or fails, that trial and the ones after it start fresh, which
    is said once on stderr.

    A forked trial inherits its server's memory layout (address-space randomisation, Python's hash seed, the heap),
    which decides for one whether glibc's malloc faults freed memory in again at every step: every trial of one
    server draws the same layout, where fresh processes draw one each (``docs/benchmarks.md``, Known limits).
    Comparisons whose rounds must be independent draws call ``new_draw`` between them.

    A server starts on the cores its trials are pinned to (``placement.starting_on``): its imports size the thread
    pools (OpenMP's, OpenBLAS's) its trials inherit. A trial pinned otherwise than the running server (the study's
    first slot after the unpinned inspection) starts a new one."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None
        self._cores: frozenset[int] | None = None  # those the running server started on
        self._broken = False
        self.servers_started = 0

    def start(self, argv: list[str], log_path: Path, env: dict[str, str]) -> TrialProcess:
        server = self._running(env)
        if server is not None:
            strays = Strays(env.get(TRIAL_TOKEN_ENV))
            order = {"argv": argv, "log": str(log_path), "env": env, "cwd": os.getcwd()}
            try:
                server.stdin.write((json.dumps(order) + "\n").encode())
                server.stdin.flush()
                return _ForkedProcess(server, _reply(server, _REPLY_S, "pid"), strays)
            except (OSError, ValueError, KeyError, TypeError) as error:  # not the reply of a server
                lost = server.pid
                self._give_up(f"the fork server failed an order ({error})")
                strays.end(lost)  # a trial it forked before it failed is now this process's orphan: it ends here
            except BaseException:  # interrupted (Ctrl-C): its reply, unread, would be taken for the next order's
                lost = server.pid
                self.close()
                strays.end(lost)
                raise
        return FreshLauncher().start(argv, log_path, env)

    def new_draw(self) -> None:
        """End the server: the next trial starts a new one (the interpreter and its imports, ~3 s), which draws a
        layout of its own."""
        self.close()

    def close(self) -> None:
        """End the server (it also ends by itself when this process exits)."""
        if self._server is not None:
            self._server.kill()
            self._server.wait()
            disown(self._server.pid)
            for pipe in (self._server.stdin, self._server.stdout):
                with contextlib.suppress(OSError):  # an order it never read: its pipe is broken
                    pipe.close()
            self._server = None

    def _running(self, env: dict[str, str]) -> subprocess.Popen | None:
        if self._server is not None and (self._server.poll() is not None or self._cores != pinned_cores(env)):
            self.close()
        if self._server is None and not self._broken:
            self._start_server(env)
        return self._server

    def _start_server(self, env: dict[str, str]) -> None:
        """Start a server on the cores ``env`` pins its trials to, and wait until it is ready to fork: its imports are
        no order's reply time."""
        self._cores = pinned_cores(env)
        with starting_on(self._cores):
            self._server = start_owned(
                lambda: subprocess.Popen(
                    [sys.executable, "-m", "autotune.trial.zygote"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # Ctrl-C at the terminal is the tuner's to handle, not the server's
                    # Without the first trial's token: the server, and every trial it forks (whose /proc/PID/environ
                    # is the server's), would carry it and be killed as that trial's strays.
                    env={name: value for name, value in env.items() if name != TRIAL_TOKEN_ENV},
                )
            )
        # Replies are read unbuffered: select() sees the pipe, not a reader's buffer, so a trial's end read
        # ahead with its pid (a trial that ended before its pid was read) would seem to run until its timeout.
        self._server.stdout = self._server.stdout.detach()
        self.servers_started += 1
        try:
            _reply(self._server, _READY_S, "ready")
        except (ValueError, KeyError, TypeError) as error:
            self._give_up(f"the fork server did not start ({error})")
        except BaseException:  # interrupted (Ctrl-C): its ready line, unread, would be taken for an order's reply
            self.close()
            raise

    def _give_up(self, why: str) -> None:
        """End the server and start every later trial fresh, saying so: forked and fresh trials differ in start-up
        time and memory layout, which the user must be able to tell from the console."""
        self.close()
        self._broken = True
        print(f"autotune: {why}; trials start as fresh processes from here on", file=sys.stderr, flush=True)


def _reply(server: subprocess.Popen, seconds: float, key: str) -> Any:
    """``key``'s value in the server's next line; ValueError saying why where none came within ``seconds``,
    KeyError or TypeError where the line is not what the server says."""
    answered, _, _ = select.select([server.stdout], [], [], seconds)
    if not answered:
        raise ValueError(f"no answer within {seconds:g} s")
    line = server.stdout.readline()
    if not line:
        raise ValueError("it ended")
    return json.loads(line)[key]


class _ForkedProcess:
    """A trial forked by the server: it is the server's child, so its end is read from the server's reports, its
    exit as the server reaps it, then that the orphans the server adopted from it are ended (``zygote``);
    ``strays`` ends the rest."""

    def __init__(self, server: subprocess.Popen, pid: int, strays: Strays) -> None:
        self.server, self.pid, self.lender = server, pid, server.pid
        self.strays = strays
        self.returncode: int | None = None
        self._exited = False

    def exited_within(self, seconds: float) -> bool:
        if not self._exited:
            ready, _, _ = select.select([self.server.stdout], [], [], seconds)
            if ready:
                self._read_exit()
        return self._exited

    def kill(self) -> int | None:
        # Once reaped, its pid may be another process's: only its group (which holds the number while any member
        # lives) is still safe to signal. The server reports the reap at once, so a report written is read first.
        self.exited_within(0)
        _signal_group(self.pid, leader=not self._exited)
        if not self._exited:
            self._read_exit()
        self.server.stdout.readline()  # its orphans ended (nothing where the server is gone)
        self.strays.end(self.pid)
        return self.returncode

    def _read_exit(self) -> None:
        line = self.server.stdout.readline()
        self._exited = True
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
