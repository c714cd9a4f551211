"""Run a trial in a fresh subprocess with a timeout, and turn any way it ends into a TrialResult."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from autotune.files import write_atomic
from autotune.trial.result import Failure, FailureKind, TrialRequest, TrialResult


def run_trial(request: TrialRequest, timeout_s: float, workdir: Path, name: str) -> TrialResult:
    """Run ``request`` in a subprocess; its output goes to ``workdir/NAME.log``.

    The subprocess leads its own process group, so on timeout, interrupt or exit the whole
    group (its DataLoader workers included) is killed and nothing is left behind.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    request_path = write_atomic(workdir / f"{name}.request.json", json.dumps(request.to_dict(), indent=1))
    result_path = workdir / f"{name}.result.json"
    result_path.unlink(missing_ok=True)
    log_path = workdir / f"{name}.log"
    command = [sys.executable, "-m", "autotune.trial.worker", str(request_path), str(result_path)]
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=_worker_env()
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc)
    wall_s = time.monotonic() - start
    if returncode is None:
        failure = Failure(FailureKind.TIMEOUT, f"timeout after {timeout_s:g} s")
        return TrialResult(knobs=request.knobs, failure=failure, wall_s=wall_s)
    if result_path.exists() and returncode == 0:
        result = TrialResult.from_dict(json.loads(result_path.read_text(encoding="utf-8")))
        return result.with_wall_time(wall_s)
    return TrialResult(knobs=request.knobs, failure=_exit_failure(returncode, log_path), wall_s=wall_s)


def run_repeated(request: TrialRequest, repeats: int, timeout_s: float, workdir: Path, name: str) -> TrialResult:
    """Run ``request`` in ``repeats`` fresh subprocesses, one after another, and keep the median run.

    Run-to-run variation between processes is larger than within one, so the median of a few
    processes is what makes a figure repeatable. The kept run's ``repeat_throughputs`` lists all of
    them; ``wall_s`` is their total. The first failure ends the repeats and is the result.
    """
    runs: list[TrialResult] = []
    for index in range(repeats):
        run = run_trial(request, timeout_s, workdir, name if repeats == 1 else f"{name}.{index + 1}")
        runs.append(run)
        if not run.ok:
            break
    total_s = sum(run.wall_s for run in runs)
    if not runs[-1].ok:
        return runs[-1].with_wall_time(total_s)
    by_throughput = sorted(runs, key=lambda run: run.timing.throughput)
    median = by_throughput[(len(runs) - 1) // 2]
    return replace(median, wall_s=total_s, repeat_throughputs=[run.timing.throughput for run in runs])


def _exit_failure(returncode: int, log_path: Path) -> Failure:
    last_line = _last_line(log_path)
    detail = f" ({last_line})" if last_line else ""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        if name == "SIGKILL":
            return Failure(FailureKind.SIGNAL, f"killed by SIGKILL, likely the out-of-memory killer{detail}")
        return Failure(FailureKind.SIGNAL, f"killed by {name}{detail}")
    return Failure(FailureKind.NO_RESULT, f"exited with code {returncode} without a result{detail}")


def _last_line(log_path: Path) -> str:
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _worker_env() -> dict[str, str]:
    """The tuner's environment, with the current directory importable as it is for the tuner."""
    env = dict(os.environ)
    paths = [os.getcwd(), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env
