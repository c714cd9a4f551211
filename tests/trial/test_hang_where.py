"""A trial stopped at its timeout says where it hung: the runner asks it for its Python stacks (SIGUSR1, which the
worker's faulthandler answers in the trial's log) and names the main thread's innermost frame of the user's code."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune.measure import hotspots
from autotune.trial import runner
from autotune.trial.launch import FreshLauncher, _FreshProcess, open_log
from autotune.trial.result import Failure, FailureKind
from autotune.trial.runner import run_trial
from tests.conftest import processes_mentioning
from tests.trial.test_runner import request

TIMEOUT = Failure(FailureKind.TIMEOUT, "timeout after 1 s")
# A process that hangs in a function of its own, after it said it is ready; with "ignore", deaf to SIGUSR1.
_STUCK = """\
import faulthandler, signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
else:
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
def wait_forever():
    print("ready", flush=True)
    while True:
        time.sleep(1)
wait_forever()
"""


def _stuck(tmp_path: Path, mode: str) -> tuple[_FreshProcess, Path, Path]:
    """A started ``_STUCK`` process, ready, its output in its log; and its script and log."""
    script, log_path = tmp_path / "stuck.py", tmp_path / "stuck.log"
    script.write_text(_STUCK)
    log = open_log(log_path)
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 30
    while "ready" not in log_path.read_text():
        assert time.monotonic() < deadline, "the process never said it was ready"
        time.sleep(0.01)
    return _FreshProcess(proc), script, log_path


def test_a_timeout_names_the_frame_the_process_hung_in_and_leaves_its_stacks_in_the_log(tmp_path):
    proc, script, log_path = _stuck(tmp_path, "answer")
    try:
        failure = runner._where_it_hung(proc, log_path, TIMEOUT)
    finally:
        proc.kill()
    assert failure == Failure(FailureKind.TIMEOUT, f"timeout after 1 s, in {script}:9 wait_forever")
    assert "(most recent call first)" in log_path.read_text()


def test_a_process_that_does_not_answer_keeps_the_plain_timeout_and_is_waited_for_a_moment_only(tmp_path):
    proc, _, log_path = _stuck(tmp_path, "ignore")
    started = time.monotonic()
    try:
        assert runner._where_it_hung(proc, log_path, TIMEOUT) == TIMEOUT
    finally:
        proc.kill()
    assert time.monotonic() - started < runner._STACKS_S + 1.0


def _dump(*threads: list[str]) -> str:
    """faulthandler's dump of ``threads`` (each its frames' ``path:line:function``, innermost first), the last the
    current one."""
    blocks = []
    for index, frames in enumerate(threads):
        header = "Current thread" if index == len(threads) - 1 else "Thread"
        lines = [f'  File "{path}", line {line} in {function}' for path, line, function in map(_parts, frames)]
        blocks.append("\n".join([f"{header} 0x00007f38d2fc2b80 (most recent call first):", *lines]))
    return "\n\n".join(blocks) + "\n"


def _parts(frame: str) -> tuple[str, str, str]:
    path, line, function = frame.rsplit(":", 2)
    return path, line, function


LIBRARY = threading.__file__  # the standard library's: no user's code


def test_the_main_threads_innermost_frame_of_the_users_code_is_named_below_library_frames():
    stacks = _dump(
        ["/proj/pkg/loader.py:7:fetch", f"{LIBRARY}:331:wait"],  # another thread's user frame is not where it hung
        [f"{LIBRARY}:320:wait", "/proj/pkg/h.py:42:forward", "/proj/pkg/train.py:10:step"],
    )
    assert runner._hung_frame(stacks) == "/proj/pkg/h.py:42 forward"


def test_without_the_users_code_in_the_main_thread_its_innermost_frame_is_named():
    stacks = _dump(["/proj/pkg/loader.py:7:fetch"], [f"{LIBRARY}:320:wait", f"{LIBRARY}:629:wait"])
    assert runner._hung_frame(stacks) == f"{runner.shown_path(LIBRARY)}:320 wait"


def test_output_without_a_stack_names_no_frame():
    assert runner._hung_frame("") is None
    assert runner._hung_frame("loading shard 3\n") is None


def _hung_trial(tmp_path: Path, timeout_s: float, launcher) -> None:
    """A trial whose dataset hangs in ``__len__`` (the main thread, in the user's code) says so at its timeout."""
    hanging = request(dataset="inspection.HangingLengthImages")
    result = run_trial(hanging, timeout_s, tmp_path, "hangs", launcher=launcher)
    assert result.failure.kind is FailureKind.TIMEOUT
    line = next(i for i, text in enumerate(_FIXTURE.read_text().splitlines(), 1) if "time.sleep(1)" in text)
    assert result.failure.message == f"timeout after {timeout_s:g} s, in tests/fixtures/inspection.py:{line} __len__"
    assert "(most recent call first)" in (tmp_path / "hangs.log").read_text(), "the stacks are in the trial's log"
    assert processes_mentioning(str(tmp_path / "hangs.log")) == [], "no process of the trial survives"


_FIXTURE = Path(__file__).parents[1] / "fixtures" / "inspection.py"


def test_a_forked_trial_that_hangs_in_the_users_code_says_where_at_its_timeout(tmp_path, server):
    _hung_trial(tmp_path, 2, server)


@pytest.mark.slow
def test_a_fresh_trial_that_hangs_in_the_users_code_says_where_at_its_timeout(tmp_path):
    _hung_trial(tmp_path, 10, FreshLauncher())  # a fresh interpreter imports torch first: seconds


def test_without_the_users_code_an_installed_packages_frame_is_named_before_the_standard_librarys():
    loader = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
    stacks = _dump([f"{LIBRARY}:320:wait", f"{loader}:1291:_try_get_data", f"{loader}:1450:_next_data"])
    assert runner._hung_frame(stacks) == f"{loader}:1291 _try_get_data"


def test_autotunes_own_frames_are_not_named_as_where_a_trial_hung_wherever_it_is_installed(monkeypatch):
    installed = Path("/venv/lib/python3.11/site-packages/autotune")  # autotune installed, not a checkout
    monkeypatch.setattr(hotspots, "_AUTOTUNE", str(installed))
    stacks = _dump([f"{LIBRARY}:320:wait", f"{installed}/trial/worker.py:77:_run"])
    assert runner._hung_frame(stacks) == f"{runner.shown_path(LIBRARY)}:320 wait"
