"""Race model: how often autotune's finalist selection and race pick a configuration within 0.97 of the best,
when runs vary the way re-measurements on this machine were measured to vary.

    .venv/bin/python -m benchmarks.race_model [--studies 4000] [--rounds 3 [6 10]] [--screening-runs 1]
        [--finalist-window 0.15 [0.25 ...]] [--picks] [--seed 0] [FILE ...]

A model, not a measurement: it answers in seconds what would take dozens of 20-minute efficiency runs, to compare
rules of the race; only ``benchmarks.efficiency`` judges the tuner. It drives autotune's own code
(``select_finalists``, ``run_race``, ``Confirmation.winner``) with simulated runs:

    log(samples/s) = log(true) + round effect (shared by the runs of one round) + run noise

The two noise levels are fitted to the re-measurement rounds in FILE (``efficiency.json`` files; by default the
six efficiency runs of 2026-11-22 in benchmarks/results/) by a two-way analysis of variance (configuration x round):
the run noise is the residual, the round effect what the round means add to it. The run noise has Student's t tails
with the degrees of freedom that give the residuals' kurtosis. A screening run (a search trial) is taken at its own
time, so it draws its own round effect; the runs of one race round share one.

Scenarios (``SCENARIOS``): for each example pipeline, the configurations the tuner screened in the efficiency runs
of sessions 7-8 with their true throughput relative to the best: the pooled paired ratios of
``benchmarks.pooled`` where the configuration was re-measured, else the tuner's own races (marked "est.").
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autotune.records import TrialRecord
from autotune.results import race_rules
from autotune.results.model import StudyResults
from autotune.study.run_race import run_race
from benchmarks.efficiency import TARGET_RATIO

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_FILES = [RESULTS / f"efficiency-2026-11-22-run{n}.json" for n in (8, 9, 10, 11, 12, 13)]


@dataclass(frozen=True)
class Config:
    """A configuration of a scenario: its throughput relative to the best, the knobs it changes from the baseline
    (as the race counts them) and its peak memory (the tie-break after changes)."""

    name: str
    relative: float
    changes: int
    memory_mb: float


@dataclass(frozen=True)
class Scenario:
    """The baseline and the configurations the tuner screened, on ``pipeline`` (whose noise it has)."""

    pipeline: str
    baseline: Config
    screened: list[Config]


IMAGES_SCREENED = [
    Config("batch 128, workers 2, channels_last, bf16", 1.0, 6, 400),
    Config("batch 128, workers 2, bf16, compile", 1 / 1.056, 6, 920),
    Config("batch 64, workers 2, channels_last, bf16", 0.885, 6, 360),
    Config("batch 32, workers 2, channels_last, bf16", 0.885 * 0.861, 5, 341),
]
# Sources: benchmarks.pooled over benchmarks/results/efficiency-*-run12..17.json; "est." from the tuner's races.
SCENARIOS = {
    "images": Scenario(
        "images",
        Config("baseline: batch 32, no workers, fp32", 1 / 1.55, 0, 305),  # est.: races confirmed 1.48-1.61x
        IMAGES_SCREENED,
    ),
    "transformer_lm": Scenario(
        "transformer_lm",
        Config("baseline: batch 16, fp32", 1 / 1.028 / 1.25, 0, 362),  # est.: races confirmed 1.06-1.39x
        [
            Config("batch 64, bf16", 1.0, 2, 520),
            Config("batch 32, bf16", 1 / 1.028, 2, 400),
            Config("batch 64, bf16, compile", 1 / 1.149, 3, 810),
            Config("batch 16, bf16", 1 / 1.028 * 0.826, 1, 350),
        ],
    ),
    "tabular_mlp": Scenario(
        "tabular_mlp",
        Config("baseline: batch 64, fp32", 1 / 1.75, 0, 267),  # est.: races confirmed 1.38-2.56x
        [
            Config("batch 256, bf16", 1.0, 2, 276),
            Config("batch 256, fp32", 1 / 1.037, 1, 270),
            Config("batch 256, bf16, compile", 1 / 1.037 / 1.126, 3, 650),
            Config("batch 128, bf16", 0.85, 2, 275),  # est.: screening runs
        ],
    ),
    # Synthetic: images with a baseline only 15 % below the best, so the race is rarely decided early and runs
    # its planned rounds; how the proof against the baseline behaves as rounds are added shows here.
    "images, small gain": Scenario("images", Config("baseline (synthetic)", 0.85, 0, 305), IMAGES_SCREENED),
    # The efficiency benchmark's best case: the baseline set to the best; anything recommended is slower.
    "tabular_mlp, baseline best": Scenario(
        "tabular_mlp",
        Config("baseline: batch 256, bf16", 1.0, 0, 276),
        [
            Config("batch 256, fp32", 1 / 1.037, 1, 270),
            Config("batch 128, bf16", 0.85, 1, 275),
            Config("batch 256, bf16, compile", 1 / 1.037 / 1.126, 1, 650),
        ],
    ),
}


@dataclass(frozen=True)
class Noise:
    """Log-scale standard deviations: ``round_sd`` shared by the runs of one round, ``run_sd`` each run's own, with
    Student's t tails of ``tail_dof`` degrees of freedom (None: normal)."""

    round_sd: float
    run_sd: float
    tail_dof: int | None

    def run(self, rng: random.Random) -> float:
        if self.tail_dof is None:
            return rng.gauss(0.0, self.run_sd)
        chi2 = sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(self.tail_dof)) / self.tail_dof
        scale = math.sqrt((self.tail_dof - 2) / self.tail_dof)  # a t variable's SD is sqrt(dof / (dof - 2))
        return self.run_sd * scale * rng.gauss(0.0, 1.0) / math.sqrt(chi2)


def fit_noise(runs: list[dict[str, Any]], pipeline: str) -> Noise:
    """The noise of ``pipeline``'s re-measurement rounds in ``runs`` (efficiency.json contents): a configuration x
    round analysis of variance per run, sums of squares pooled over the runs."""
    residual_ss = residual_df = round_ss = round_df = 0.0
    round_sizes, residuals = [], []
    for run in runs:
        check = run["pipelines"].get(pipeline, {}).get("check") or {}
        rounds = [r for r in check.get("rounds", []) if all(v is not None for v in r.values())]
        if len(rounds) < 2:
            continue
        labels = list(rounds[0])  # each round lists them in its own (rotated) order
        logs = [[math.log(r[label]) for label in labels] for r in rounds]
        grand = statistics.fmean(v for row in logs for v in row)
        config_means = [statistics.fmean(row[i] for row in logs) for i in range(len(labels))]
        round_means = [statistics.fmean(row) for row in logs]
        run_residuals = [
            value - config_mean - round_mean + grand
            for row, round_mean in zip(logs, round_means, strict=True)
            for value, config_mean in zip(row, config_means, strict=True)
        ]
        residuals += run_residuals
        residual_ss += sum(e * e for e in run_residuals)
        residual_df += (len(rounds) - 1) * (len(labels) - 1)
        round_ss += len(labels) * sum((m - grand) ** 2 for m in round_means)
        round_df += len(rounds) - 1
        round_sizes.append(len(labels))
    if not residual_df:
        raise ValueError(f"no re-measurement rounds of {pipeline} to fit the noise to")
    run_var = residual_ss / residual_df
    round_var = max(0.0, (round_ss / round_df - run_var) / statistics.fmean(round_sizes))
    return Noise(math.sqrt(round_var), math.sqrt(run_var), _tail_dof(residuals))


def _tail_dof(residuals: list[float]) -> int | None:
    """Student's t degrees of freedom whose excess kurtosis, 6 / (dof - 4), is the residuals'; at least 5 (a finite
    fourth moment with room), None (normal) when the residuals are not heavier-tailed than normal."""
    mean = statistics.fmean(residuals)
    variance = statistics.fmean((e - mean) ** 2 for e in residuals)
    if variance == 0:
        return None
    excess = statistics.fmean((e - mean) ** 4 for e in residuals) / variance**2 - 3
    if excess <= 6 / 60:
        return None
    return max(5, round(4 + 6 / excess))


@dataclass(frozen=True)
class Outcome:
    ratio: float  # the pick's true throughput over the best's
    race_runs: int
    kept_baseline: bool
    pick: str  # the recommended configuration's name


def simulate_study(
    scenario: Scenario, noise: Noise, rounds: int, rng: random.Random, screening_runs: int = 1
) -> Outcome:
    """Screen every configuration (the median of ``screening_runs`` runs, as ``measure.repeats`` would), then race
    the finalists as the tuner does; the pick's true ratio."""
    configs = [scenario.baseline, *scenario.screened]
    # "config" differs between any two configurations; so many more knobs differ as make up its changes
    knobs = {c.name: {"config": c.name} | {f"knob{i}": int(i < c.changes - 1) for i in range(8)} for c in configs}
    by_name = {c.name: c for c in configs}

    def run_of(config: Config, round_effect: float, runs: int = 1) -> Any:
        throughput = config.relative * math.exp(round_effect + median_run_noise(noise, rng, runs))
        timing = SimpleNamespace(throughput=throughput)
        return SimpleNamespace(
            knobs=knobs[config.name],
            ok=True,
            timing=timing,
            peak_memory_mb=config.memory_mb,
            failure=None,
            disturbed=False,  # nothing beside the simulated run slowed it
        )

    def screened(config: Config, label: str) -> TrialRecord:
        return TrialRecord(label, run_of(config, rng.gauss(0.0, noise.round_sd), screening_runs))

    results = StudyResults(
        "model", "model", "cpu", {}, {}, {}, screened(scenario.baseline, "baseline"),
        [screened(config, str(i)) for i, config in enumerate(scenario.screened)],
    )  # fmt: skip
    round_effects: dict[str, float] = {}
    race_runs = 0

    def measure(run_knobs: dict[str, Any], name: str, _progress: Callable | None) -> Any:
        nonlocal race_runs
        race_runs += 1
        round_index = name.split("-")[1]
        effect = round_effects.setdefault(round_index, rng.gauss(0.0, noise.round_sd))
        return run_of(by_name[run_knobs["config"]], effect)

    confirmation = run_race(UnstoredStudy(), results, rounds, measure, lambda name, result: None)
    winner = confirmation.winner if confirmation else None  # None: no finalist, or none proven
    pick = by_name[winner.knobs["config"]] if winner else scenario.baseline
    best = max(c.relative for c in configs)
    return Outcome(pick.relative / best, race_runs, pick is scenario.baseline, pick.name)


def median_run_noise(noise: Noise, rng: random.Random, runs: int) -> float:
    """The run noise of the median of ``runs`` runs (as ``measure.repeats`` keeps)."""
    return statistics.median(noise.run(rng) for _ in range(runs))


class UnstoredStudy:
    """Stands in for the Optuna study ``run_race`` stores its outcome in."""

    def set_user_attr(self, key: str, value: Any) -> None:
        pass


def summarise(outcomes: list[Outcome]) -> dict[str, float]:
    return {
        "met": sum(o.ratio >= TARGET_RATIO for o in outcomes) / len(outcomes),
        "mean_ratio": statistics.fmean(o.ratio for o in outcomes),
        "race_runs": statistics.fmean(o.race_runs for o in outcomes),
        "kept_baseline": sum(o.kept_baseline for o in outcomes) / len(outcomes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES, help="efficiency.json files")
    parser.add_argument("--studies", type=int, default=4000, help="simulated studies per scenario")
    parser.add_argument(
        "--rounds", type=int, nargs="+", default=[3], help="the race's planned rounds (study.confirm_rounds)"
    )
    parser.add_argument(
        "--screening-runs", type=int, default=1, help="runs per search trial, median kept (measure.repeats)"
    )
    parser.add_argument(
        "--finalist-window",
        type=float,
        nargs="+",
        default=[race_rules.FINALIST_WINDOW],
        help="the finalists' window (FINALIST_WINDOW of autotune/results/race_rules.py), one setting each",
    )
    parser.add_argument("--picks", action="store_true", help="also print how often each configuration is picked")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in args.files]
    rng = random.Random(args.seed)
    for name, scenario in SCENARIOS.items():
        noise = fit_noise(runs, scenario.pipeline)
        tails = f"t, {noise.tail_dof} d.o.f." if noise.tail_dof else "normal"
        print(f"{name}: noise (log SD) round {noise.round_sd:.3f}, run {noise.run_sd:.3f} ({tails})")
        for rounds, window in itertools.product(args.rounds, args.finalist_window):
            race_rules.FINALIST_WINDOW = window  # select_finalists reads it at each call
            outcomes = [simulate_study(scenario, noise, rounds, rng, args.screening_runs) for _ in range(args.studies)]
            figures = summarise(outcomes)
            print(
                f"  {rounds:2d} rounds, window {window:.2f}: pick >= {TARGET_RATIO} of the best in "
                f"{figures['met']:6.1%} of studies; "
                f"mean ratio {figures['mean_ratio']:.3f}; baseline kept {figures['kept_baseline']:6.1%}; "
                f"{figures['race_runs']:4.1f} race runs"
            )
            if args.picks:
                for pick, count in Counter(o.pick for o in outcomes).most_common():
                    print(f"      {count / len(outcomes):6.1%} picked {pick}")


if __name__ == "__main__":
    main()
