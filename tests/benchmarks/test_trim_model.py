"""The trim model drives autotune's own trim with simulated runs."""

from __future__ import annotations

import random

from autotune.results.finalist import Finalist, Left
from autotune.results.race import Confirmation
from benchmarks.race_model import Noise
from benchmarks.trim_model import SCENARIOS, _intervals, simulate_trim


def test_without_noise_the_trim_keeps_exactly_the_changes_that_matter():
    quiet = Noise(0.0, 0.0, None)
    for name, scenario in SCENARIOS.items():
        outcome = simulate_trim(scenario, quiet, 3, random.Random(0))
        assert (outcome.kept_idle, outcome.dropped_needed, outcome.ratio) == (0, 0, 1.0), name
        assert outcome.runs > 0


def test_a_redundant_pair_needs_one_of_its_two_changes_and_an_unproven_winner_leaves_the_baseline():
    scenario = SCENARIOS["4 changes, 1 matters, 2 redundant (either gives 15 %)"]
    assert scenario.score({"num_threads", "batch_size"}) == (0, 0)
    assert scenario.score({"num_threads", "batch_size", "optimizer_impl", "set_to_none"}) == (2, 0)
    assert scenario.score({"num_threads"}) == (0, 1)
    impossible = Noise(0.0, 0.0, None)
    flat = type(scenario)(scenario.baseline, scenario.winner, {}, baseline_relative=1.0)  # the winner gains nothing
    outcome = simulate_trim(flat, impossible, 3, random.Random(0))
    assert outcome.runs == 0 and outcome.ratio == 1.0 and outcome.kept_idle == 0, "the baseline, nothing kept"


def test_noise_makes_the_trim_keep_changes_that_do_nothing():
    noisy = Noise(0.017, 0.098, None)
    outcomes = [simulate_trim(SCENARIOS["6 changes, 1 matters"], noisy, 3, random.Random(seed)) for seed in range(30)]
    assert sum(o.kept_idle for o in outcomes) > 0 and all(o.dropped_needed == 0 for o in outcomes)


def test_the_tuners_rule_gives_no_interval_where_other_races_take_the_proof_back():
    knobs = {"num_workers": 2, "amp": "bf16"}
    race = Confirmation([100.0] * 3, [Finalist("winner", knobs, 2, 100.0, [103.0] * 3)], None, 3)
    left = Finalist("winner", knobs, 2, 100.0, [95.0], left=Left.UNPROVABLE, dropped="lost a round to the baseline")
    trim = Confirmation([100.0], [left], None, 3)
    alone, pooled, every = _intervals("winner", [race, trim])
    assert pooled is None, "the tuner keeps the baseline: over the 4 rounds 1.009x, the trim's round 0.95x"
    assert alone is not None and every is not None
