"""A race's figures pair the finalists' runs with the baseline's by round: a run of the round whose baseline run
failed (the finalist ran first there, as the order rotates) counts in none of them; and a race stored before
``Finalist.failed_round`` was kept reads it from its reason."""

from __future__ import annotations

import pytest

from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation

ENDED = "confirm-2-baseline: signal: SIGKILL"


def test_a_run_of_the_round_whose_baseline_run_failed_is_left_out_of_the_ratio():
    race = Confirmation([100.0], [Finalist("0", {}, 1, 100.0, [110.0, 112.0])], ENDED)
    assert race.ratio(race.finalists[0]) == pytest.approx(1.10), "round 1's pair alone, not 111 over 100"
    assert race.paired(race.finalists[0]) == ([110.0], [100.0])
    assert race.speedup == pytest.approx(1.10)


def test_the_leader_is_the_fastest_by_the_rounds_the_baseline_ran():
    # Trial 0 ran before the baseline in round 2, trial 1 after it: trial 0's round-2 run has no pair.
    ahead, behind = Finalist("0", {}, 1, 100.0, [110.0, 200.0]), Finalist("1", {}, 1, 100.0, [115.0])
    race = Confirmation([100.0], [ahead, behind], ENDED)
    assert race.leader is behind and race.speedup == pytest.approx(1.15)


def test_a_finalist_whose_only_run_has_no_pair_has_no_figures():
    race = Confirmation([], [Finalist("0", {}, 1, 100.0, [110.0])], "confirm-1-baseline: signal: SIGKILL")
    assert race.leader is None and race.speedup is None
    assert race.paired_median(race.finalists[0]) is None


def test_a_race_stored_before_the_failed_round_was_kept_reads_it_from_the_reason():
    stored = Finalist("2", {}, 1, 100.0, [110.0], "round 2 failed: signal: SIGKILL", failed_round=2).to_dict()
    del stored["failed_round"]
    assert Finalist.from_dict(stored).failed_round == 2
    lagging = {**stored, "dropped": "more than 10% behind trial 0 after round 2"}
    assert Finalist.from_dict(lagging).failed_round is None, "only a failed run's reason names a failed round"
    kept = Finalist("2", {}, 1, 100.0, [110.0], "round 2 failed: signal: SIGKILL", failed_round=2)
    assert Finalist.from_dict(kept.to_dict()) == kept
