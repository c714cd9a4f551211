"""Importance model: how often Optuna's importance (``autotune.results.model.knob_importance``) ranks first the knob
that matters most, for studies of N trials whose true effects are known.

    .venv/bin/python -m benchmarks.importance_model [--studies 60] [--trials 8 12 20 30 50] [--quantiles 0.1 0.5]
        [--run-sd 0.08] [--seed 0] [--results FILE]

A model, not a measurement, like ``benchmarks.race_model``: each study draws its trials at random from a space of
autotune's knobs (Optuna's RandomSampler), and a trial's throughput is the product of the factors of the values it
takes (``SCENARIOS``; a value without one does nothing) times the noise of one run (log-normal, ``--run-sd``). Each
study's importances come from autotune's own ``knob_importance`` at a target quantile (the share of best trials
PED-ANOVA compares with all: Optuna's default is 0.1). A guided search's trials are fewer and less spread than
random ones, so these figures are an upper bound for what importance says of a tuner's study.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import warnings
from pathlib import Path

import optuna

from autotune.results.model import knob_importance

SPACE = {
    "batch_size": [16, 32, 64, 128],
    "num_workers": [0, 1, 2],
    "num_threads": [1, 2],
    "channels_last": [False, True],
    "amp": ["off", "bf16"],
    "optimizer_impl": ["default", "foreach", "fused"],
    "set_to_none": [False, True],
    "malloc": ["default", "keep"],
}

# Each scenario: the factor a knob's value takes on throughput; the knob listed first matters most.
SCENARIOS = {
    "data-bound": {"num_workers": {1: 1.25, 2: 1.5}, "amp": {"bf16": 1.2}},
    "compute-bound": {
        "num_threads": {1: 1.3},
        "channels_last": {True: 1.15},
        "batch_size": {16: 0.85, 128: 1.1},
    },
}


def study_of(effects: dict[str, dict], trials: int, run_sd: float, seed: int) -> optuna.Study:
    """``trials`` random trials of ``SPACE``, each told its throughput under ``effects`` with one run's noise."""
    noise = random.Random(seed)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    space = {name: optuna.distributions.CategoricalDistribution(values) for name, values in SPACE.items()}
    for _ in range(trials):
        trial = study.ask(space)
        factor = math.prod(effects.get(name, {}).get(value, 1.0) for name, value in trial.params.items())
        study.tell(trial, factor * math.exp(noise.gauss(0.0, run_sd)))
    return study


def ranked_first(
    effects: dict[str, dict], trials: int, quantile: float, run_sd: float, seed: int
) -> tuple[bool, float]:
    """Whether the study's importance ranks the scenario's strongest knob first, and the largest share a knob that
    does nothing took."""
    study = study_of(effects, trials, run_sd, seed)
    importance = knob_importance(study, study.trials, quantile, min_trials=0)
    strongest = next(iter(effects))
    idle = [share for name, share in importance.items() if name not in effects]
    return max(importance, key=importance.get) == strongest, max(idle, default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=60)
    parser.add_argument("--trials", type=int, nargs="+", default=[8, 12, 20, 30, 50])
    parser.add_argument("--quantiles", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--run-sd", type=float, default=0.08, help="one run's noise, as a log-normal sigma")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")  # Optuna's notes on experimental evaluators
    rows = []
    for scenario, effects in SCENARIOS.items():
        for quantile in args.quantiles:
            for trials in args.trials:
                outcomes = [
                    ranked_first(effects, trials, quantile, args.run_sd, args.seed + study)
                    for study in range(args.studies)
                ]
                first = sum(right for right, _ in outcomes) / len(outcomes)
                idle = statistics.median(share for _, share in outcomes)
                rows.append(
                    {"scenario": scenario, "quantile": quantile, "trials": trials, "first": first, "idle": idle}
                )
                print(
                    f"{scenario:14} quantile {quantile:.2f} {trials:3} trials: strongest knob first in {first:.0%} "
                    f"of {len(outcomes)} studies; median largest share of a knob that does nothing {idle:.2f}",
                    flush=True,
                )
    if args.results:
        args.results.write_text(json.dumps({"args": {**vars(args), "results": str(args.results)}, "rows": rows}))


if __name__ == "__main__":
    main()
