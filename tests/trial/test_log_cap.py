"""A trial's log stays bounded however much the pipeline prints, keeping its head and its tail."""

from __future__ import annotations

import os
from functools import partial

from autotune.trial import runner
from autotune.trial.launch import open_log
from autotune.trial.log_cap import LogCap
from tests.trial.test_runner import request


def test_a_log_over_its_cap_keeps_its_head_and_tail_and_says_what_was_cut(tmp_path):
    path = tmp_path / "t.log"
    fd = open_log(path)
    os.write(fd, b"started\n" + b"." * 3_000_000)
    cap = LogCap(path, cap=1_000_000, head=100_000, tail=100_000)
    cap.check()
    os.write(fd, b"\nTraceback: the end\n")  # the writer appends after the cut, as a trial does
    os.close(fd)
    text = path.read_text()
    assert path.stat().st_size < 300_000
    assert text.startswith("started\n") and text.endswith("Traceback: the end\n")
    assert "[autotune: 2.7 MiB of this trial's output cut here to keep the log small]" in text


def test_a_log_under_its_cap_is_left_alone(tmp_path):
    path = tmp_path / "t.log"
    path.write_text("short\n")
    LogCap(path, cap=1_000).check()
    assert path.read_text() == "short\n"


def test_a_trial_that_prints_at_every_sample_keeps_a_bounded_log(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "LogCap", partial(LogCap, cap=2**20, head=2**16, tail=2**16))
    result = runner.run_trial(request(dataset="faults.ChattyImages"), 120, tmp_path, "chatty")
    assert result.ok, result.failure
    log = (tmp_path / "chatty.log").read_text()
    cut_mb = float(log.split("[autotune: ")[1].split(" MiB of this trial's output cut here")[0])
    assert cut_mb >= 1.0, "it printed more than its cap"
    assert len(log) <= 2**16 + 2**16 + 200, "the head, the note and the tail"
    assert log.rstrip().rsplit("\n", 1)[1].startswith("x"), "the tail ends with the last line printed"
