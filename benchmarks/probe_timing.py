"""How long the probe must time each setting (#23): probes timed as ``--variant`` says (e.g. ``seconds=0.25``,
``warmup_steps=1``, ``min_steps=2``: ProbePlan's fields) against probes timed as ProbePlan's defaults say,
interleaved, each in a fresh process, on the example pipeline's default search space.

What the probe is for is a ranking: the guide proposes the configurations it predicts fastest. So two probes A and
B agree where B judges A's pick as fast as its own: the pick's regret, 1 - B(A's pick) / B(B's pick), and the share of
pairs where it is 0 (the same pick: configurations differing only in knobs the probe does not time tie, so picks are
compared by value, not by name); and where their predictions over the whole space rank alike (rank correlation).
Agreement between a variant and a default probe is compared with agreement between two default ones (the noise
floor: the same probe run twice): a cheaper probe is as good where its agreement with the default is as high.

    .venv/bin/python -m benchmarks.probe_timing --rounds 3 --variant seconds=0.5 warmup_steps=3 min_steps=3
    # results: benchmarks/results/probe_timing.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from autotune.app import TrialRunner, _search_context
from autotune.measure.environment import describe_machine
from autotune.records import config_key
from autotune.study.probe_model import ProbeModel, probe_plan
from autotune.study.space import build_space
from autotune.trial.probe import ProbePlan
from benchmarks.common import settings_for

RESULTS = Path(__file__).resolve().parent / "results" / "probe_timing.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", nargs="+", default=["seconds=0.5", "warmup_steps=3", "min_steps=3"])
    parser.add_argument("--pipeline", default="mymodel")
    args = parser.parse_args()
    variant = {name: float(value) if name == "seconds" else int(value) for name, value in _pairs(args.variant)}
    settings = settings_for(args.pipeline, ["measure.device=cpu"])
    probes: dict[str, list[dict[str, float]]] = {"default": [], "variant": []}
    walls: dict[str, list[float]] = {"default": [], "variant": []}
    with tempfile.TemporaryDirectory() as scratch:
        runner = TrialRunner(settings, "cpu", Path(scratch))
        ctx = _search_context(settings, runner.inspect().inspection)
        space = build_space(settings.search, ctx)
        configurations = list(space.configurations())
        for index in range(args.rounds):
            # Each round: default, variant, default (rotated), so that every variant has default probes beside it.
            order = ["default", "variant", "default"] if index % 2 == 0 else ["variant", "default", "default"]
            for which in order:
                plan = probe_plan(space, settings.baseline, **(variant if which == "variant" else {}))
                result = runner.probe(plan)
                probes[which].append(_predictions(ProbeModel(plan, result.probe, ctx.cpu_count), configurations))
                walls[which].append(result.wall_s)
                print(f"round {index + 1}: {which}, {len(plan.loaders) + len(plan.computes)} settings, "
                      f"{result.wall_s:.1f} s")  # fmt: skip
    defaults = [_agreement(a, b) for a, b in itertools.permutations(probes["default"], 2)]
    crossed = [_agreement(a, b) for a in probes["variant"] for b in probes["default"]]
    crossed += [_agreement(b, a) for a in probes["variant"] for b in probes["default"]]
    record = {
        "pipeline": args.pipeline,
        "cpu": {key: describe_machine().get(key) for key in ("cpu_model", "cpu_flags", "cpu_count", "torch")},
        "configurations": len(configurations),
        "default": {name: getattr(ProbePlan([], []), name) for name in variant},
        "variant": variant,
        "wall_s": {which: [round(wall, 1) for wall in values] for which, values in walls.items()},
        "default against default": _summary(defaults),
        "variant against default": _summary(crossed),
    }
    RESULTS.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({key: value for key, value in record.items() if key != "cpu"}, indent=1))


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    return [tuple(item.split("=", 1)) for item in items]


def _predictions(model: ProbeModel, configurations: list[dict[str, Any]]) -> dict[str, float]:
    predicted = {}
    for knobs in configurations:
        try:
            predicted[config_key(knobs)] = model.predict(knobs)
        except ValueError:  # a setting it needs ran out of memory
            continue
    return predicted


def _agreement(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """How B judges A's pick (the regret), and how alike the two rank every configuration."""
    keys = sorted(set(a) & set(b))
    regret = 1 - b[max(keys, key=a.__getitem__)] / max(b[k] for k in keys)
    ranks_a, ranks_b = (_ranks([p[k] for k in keys]) for p in (a, b))
    return {
        "pick_regret": regret,
        "same_pick": float(regret < 1e-9),
        "spearman": statistics.correlation(ranks_a, ranks_b),
    }


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0] * len(values)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


def _summary(pairs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.fmean(p[key] for p in pairs), 3) for key in pairs[0]} | {"pairs": len(pairs)}


if __name__ == "__main__":
    main()
