"""The fork server: ``python -m autotune.trial.zygote``, a process that has imported what nearly every trial
imports (torch, torch._dynamo, the trial worker) and forks each trial from there, so that a trial starts in
milliseconds instead of paying those imports again.

It runs no torch operation (forking a process whose thread pools have run is unsafe), creates no CUDA context and
imports no user code: a trial's child process does all of that after the fork. Its garbage collector is left as a
fresh interpreter's after the same imports (no ``gc.freeze``): a full collection in a trial, or in its DataLoader
workers, walks every object the imports made, as it does in the user's process (~0.1 s after torch's imports).

Once its imports are done it writes ``{"ready": N}`` (its pid) to stdout. Orders come one JSON line each on stdin:
``{"argv": [...], "log": PATH, "env": {...}, "cwd": PATH}`` (a relative path is the order's ``cwd``'s); for each, one
trial is forked and its pid written as ``{"pid": N}``, then, as soon as it is reaped, ``{"exit": N, "code": C}`` (C
as ``Popen.returncode``: negative for a signal), and, once its orphans are ended, ``{"ended": N}``. Trials run one at
a time. End of stdin (the tuner exited, however it exited) ends the server; a reply that cannot be written (the
tuner was killed: a broken pipe) is dropped, and the server goes on to that end.

The server is a child subreaper (``reaper``): a process a trial detached is adopted by the server once its parent
dies, and every such orphan is killed and reaped before the next order is read, and as the server ends however it
ends (but killed), so its child list holds nothing but the running trial and what it left. A trial dies with the
server (``die_with_parent``): a server that died mid-trial leaves nothing running that no one waits for.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import traceback
from typing import NoReturn, TextIO

import torch._dynamo  # noqa: F401  (imported by every torch.optim optimizer: ~1 s a trial would pay)

from autotune.measure.memory import FORK_SERVER_ENV
from autotune.trial import worker
from autotune.trial.launch import open_log
from autotune.trial.reaper import become_subreaper, die_with_parent, end_children


def main() -> int:
    control_in = os.fdopen(os.dup(0), "rb", buffering=0)
    control_out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    # Stray output of the server's own imports must not land in the control pipe.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    base_path = [entry for entry in sys.path[1:] if entry not in _python_path(os.environ)]
    os.chdir("/")  # each trial runs in the directory its order names; the server holds on to none
    become_subreaper()
    _tell(control_out, {"ready": os.getpid()})
    try:
        for line in control_in:
            order = json.loads(line)
            server, pid = os.getpid(), os.fork()
            if pid == 0:
                die_with_parent(server)
                _run_child(order, base_path, (control_in.fileno(), control_out.fileno(), devnull))
            _tell(control_out, {"pid": pid})
            _, status = os.waitpid(pid, 0)
            # Reported as it is reaped, before its orphans are ended (up to END_S): the tuner must not count that
            # time against the trial's timeout, nor signal the trial's pid, free for another process from now on.
            _tell(control_out, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
            end_children()
            _tell(control_out, {"ended": pid})
    finally:  # however the server ends, the orphans it adopted go with it: no subreaper is left to end them
        end_children()
    return 0


def _tell(control_out: TextIO, message: dict) -> None:
    """Write ``message`` to the tuner, as one JSON line; nothing where the tuner is gone (killed: a broken pipe). The
    server then goes on as if it were there: it reaps the trial, which ends with its tuner, ends its orphans, and
    ends at the end of its input, which the tuner's end closed."""
    with contextlib.suppress(OSError):
        control_out.write(json.dumps(message) + "\n")


def _run_child(order: dict, base_path: list[str], inherited: tuple[int, ...]) -> NoReturn:
    """The trial, in the forked child: the state a fresh ``python -m autotune.trial.worker`` would start from
    (its own session, its log as stdout and stderr, the order's environment, working directory and import path,
    fresh seeds), then the worker's ``run``. Never returns."""
    try:
        os.setsid()
        # Opened before the chdir below, so that a failing chdir is in the log too.
        log = open_log(os.path.join(order["cwd"], order["log"]))
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (*inherited, log, devnull):
            os.close(fd)
        os.environ.clear()
        os.environ.update(order["env"], **{FORK_SERVER_ENV: str(os.getppid())})
        os.chdir(order["cwd"])
        sys.path[:] = [order["cwd"], *_python_path(order["env"]), *base_path]
        sys.argv = [worker.__file__, *order["argv"]]
        _reseed()
    except BaseException:
        traceback.print_exc()
        worker.exit_now(1)
    worker.run(order["argv"])


def _python_path(env: dict) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _reseed() -> None:
    """Seed Python's and NumPy's global generators from the OS, as a fresh process does: each forked trial would
    otherwise inherit the server's state and draw the same numbers."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


if __name__ == "__main__":
    sys.exit(main())
