"""The race model drives autotune's own finalist selection and race with simulated runs."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.race_model import SCENARIOS, Noise, fit_noise, median_run_noise, simulate_study, summarise


def test_the_noise_fit_splits_round_effects_from_run_noise():
    round_effects, config_effects = [0.0, 0.1, -0.05, 0.02], [0.0, 0.3, -0.2]
    rounds = [{f"grid{i}": 500 * math.exp(c + r) for i, c in enumerate(config_effects)} for r in round_effects]
    noise = fit_noise([{"pipelines": {"images": {"check": {"rounds": rounds}}}}], "images")
    assert noise.run_sd == pytest.approx(0.0, abs=1e-9), "no residual once configuration and round are taken out"
    assert noise.round_sd == pytest.approx(math.sqrt(sum((r - 0.0175) ** 2 for r in round_effects) / 3))
    with pytest.raises(ValueError, match="no re-measurement rounds of transformer_lm"):
        fit_noise([{"pipelines": {"images": {"check": {"rounds": rounds}}}}], "transformer_lm")


def test_without_noise_the_race_picks_the_best_or_a_leaner_tie():
    quiet = Noise(0.0, 0.0, None)
    images = [simulate_study(SCENARIOS["images"], quiet, 3, random.Random(0)) for _ in range(3)]
    assert summarise(images)["met"] == 1.0 and summarise(images)["mean_ratio"] == 1.0
    assert {o.pick for o in images} == {"batch 128, workers 2, channels_last, bf16"}
    transformer = simulate_study(SCENARIOS["transformer_lm"], quiet, 3, random.Random(0))
    assert transformer.ratio == pytest.approx(1 / 1.028), "batch 32 is within 3 % of 64 and leaner: a tie"
    best_case = simulate_study(SCENARIOS["tabular_mlp, baseline best"], quiet, 3, random.Random(0))
    assert best_case.kept_baseline and best_case.race_runs == 0, "no trial's run beat the baseline's"


def test_noise_costs_quality():
    noisy = Noise(0.05, 0.15, 5)
    outcomes = [simulate_study(SCENARIOS["images"], noisy, 3, random.Random(seed)) for seed in range(200)]
    figures = summarise(outcomes)
    assert 0.3 < figures["met"] < 1.0 and figures["mean_ratio"] < 1.0


class _ScriptedNoise(Noise):
    """Run noise drawn from a fixed list, in order."""

    def __init__(self, draws: list[float]):
        super().__init__(0.0, 0.0, None)
        object.__setattr__(self, "draws", iter(draws))

    def run(self, rng: random.Random) -> float:
        return next(self.draws)


def test_a_screening_trial_is_the_median_of_its_runs():
    assert median_run_noise(_ScriptedNoise([0.3, -0.2, 0.0]), random.Random(0), 3) == 0.0, "not the first, nor the mean"
    scenario = SCENARIOS["images"]
    screened = 1 + len(scenario.screened)  # the baseline too
    many = _ScriptedNoise([0.0] * 1000)
    outcome = simulate_study(scenario, many, 3, random.Random(0), screening_runs=3)
    assert len(list(many.draws)) == 1000 - 3 * screened - outcome.race_runs, "3 runs per screened configuration"
