"""Why a finalist whose run failed left the race is said by one helper (``Finalist.fail``), which the race runs and
which a race stored before ``Finalist.failed_round`` was kept is read back by."""

from __future__ import annotations

from autotune.results.finalist import Finalist
from autotune.study.run_race import race
from tests.study.test_disturbed import BASELINE, Runs, run_of

FAST = {**BASELINE, "batch_size": 32}


def test_a_finalist_whose_run_failed_says_the_round_and_a_race_stored_without_it_reads_it_back():
    finalist = Finalist("0", FAST, 1, 100.0, [110.0])
    finalist.fail("exception: boom")
    assert finalist.failed_round == 2 and finalist.dropped == "round 2 failed: exception: boom"
    stored = {key: value for key, value in finalist.to_dict().items() if key != "failed_round"}
    assert Finalist.from_dict(stored).failed_round == 2, "an older race's reason says which round failed"


def test_the_race_drops_a_finalist_whose_run_failed_by_that_helper():
    ran = {"confirm-1-baseline": run_of(100.0), "confirm-1-trial-0": run_of(110.0)}
    runs = Runs({**ran, "confirm-2-trial-0": run_of(None), "confirm-2-baseline": run_of(100.0)})
    raced = race([Finalist("0", FAST, 1, 100.0)], BASELINE, {}, 3, "confirm", runs, lambda name, result: None)
    said = Finalist("0", FAST, 1, 100.0, [110.0])
    said.fail(run_of(None).failure)
    assert (raced.finalists[0].failed_round, raced.finalists[0].dropped) == (said.failed_round, said.dropped)
