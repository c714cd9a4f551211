from benchmarks.slow_cores import Run, Throttle, report


def test_a_runs_throttled_seconds_are_its_overlap_with_the_stretches_the_one_still_on_included(monkeypatch):
    throttle = Throttle(0.5)
    throttle.stretches = [(10.0, 14.0), (20.0, 22.0)]
    throttle.on_since = 30.0
    monkeypatch.setattr("benchmarks.slow_cores.time.monotonic", lambda: 33.0)
    assert throttle.overlap_s(0.0, 9.0) == 0
    assert throttle.overlap_s(12.0, 21.0) == 3.0
    assert throttle.overlap_s(31.0, 40.0) == 2.0, "the stretch still on counts up to now"


def test_the_report_counts_quiet_slow_and_touched_runs_apart_with_how_many_were_flagged(capsys):
    quiet = [Run(i, i + 1, 0.0, 100.0 + i, 1.01, False) for i in range(4)]
    runs = [
        *quiet,
        Run(5, 6, 0.0, 101.0, 1.3, True),  # quiet, flagged: a false alarm
        Run(7, 8, 1.0, 50.0, 1.9, True),  # read slow, caught
        Run(9, 10, 0.0, 70.0, 1.0, False),  # read slow, untouched, missed
        Run(11, 12, 0.5, 99.0, 1.1, False),  # touched, not read slow
        Run(13, 14, 0.5, None, None, False),  # failed: not counted
    ]
    report(runs, 0.85)
    said = capsys.readouterr().out
    assert "quiet (no stretch touched it): 5 runs, 1 flagged" in said
    assert "read below 0.85x the quiet runs' median: 2 runs, 1 flagged" in said
    assert "touched by a stretch, not read slow: 1 runs, 0 flagged" in said


def test_the_report_says_so_where_no_run_was_untouched(capsys):
    report([Run(0, 1, 0.5, 50.0, 2.0, True)], 0.85)
    assert "no run measured untouched" in capsys.readouterr().out
