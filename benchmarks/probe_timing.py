"""How long the probe must time each setting (#23): probes timed as ``--variant`` says against probes timed as
``--reference`` says (each a list of ProbePlan's timing fields, ``seconds=S warmup_steps=N min_steps=N far_slower=F``;
the reference's default: ProbePlan's defaults), interleaved, each in a fresh process, on the example pipeline's default
search space.

What the probe is for is a ranking: the guide proposes the configurations it predicts fastest. So two probes A and
B agree where B judges A's pick as fast as its own: the pick's regret, 1 - B(A's pick) / B(B's pick), and the share of
pairs where it is 0 (the same pick: configurations differing only in knobs the probe does not time tie, so picks are
compared by value, not by name); and where their predictions over the whole space rank alike (rank correlation).
Agreement between a variant and a reference probe is compared with agreement between two reference ones (the
noise floor: the same probe run twice): a cheaper variant is as good where its agreement with the reference is as
high.

    .venv/bin/python -m benchmarks.probe_timing --rounds 3 --reference seconds=0.5 warmup_steps=3 min_steps=3 \
        --variant seconds=0.25 warmup_steps=1 min_steps=2      # results: benchmarks/results/probe_timing.json
    .venv/bin/python -m benchmarks.probe_timing --rounds 3 --reference far_slower=inf --variant far_slower=3 \
        --results benchmarks/results/probe_far_slower.json     # every setting timed against the default
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from autotune.measure.environment import describe_machine
from autotune.records import config_key
from autotune.runner import TrialRunner, search_context
from autotune.study.probe_model import ProbeModel, probe_plan
from autotune.study.space import build_space
from autotune.trial.result import ProbePlan
from benchmarks.common import settings_for

RESULTS = Path(__file__).resolve().parent / "results" / "probe_timing.json"
TIMING = ("seconds", "warmup_steps", "min_steps", "far_slower")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", nargs="+", default=[])
    parser.add_argument("--variant", nargs="+", required=True)
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    timings = {"reference": _timing(args.reference), "variant": _timing(args.variant)}
    settings = settings_for(args.pipeline, ["measure.device=cpu"])
    probes: dict[str, list[dict[str, float]]] = {"reference": [], "variant": []}
    walls: dict[str, list[float]] = {"reference": [], "variant": []}
    with tempfile.TemporaryDirectory() as scratch:
        runner = TrialRunner(settings, "cpu", Path(scratch))
        ctx = search_context(settings, runner.inspect().inspection)
        space = build_space(settings.search, ctx)
        configurations = list(space.configurations())
        for index in range(args.rounds):
            # Each round: reference, variant, reference (rotated): every variant has reference probes beside it.
            order = ["reference", "variant", "reference"] if index % 2 == 0 else ["variant", "reference", "reference"]
            for which in order:
                plan = probe_plan(space, settings.baseline, **timings[which])
                result = runner.probe(plan)
                model = ProbeModel(plan, result.probe, ctx.cpu_count, host_cores=ctx.cpu_count)
                probes[which].append(_predictions(model, configurations))
                walls[which].append(result.wall_s)
                print(f"round {index + 1}: {which}, {len(plan.loaders) + len(plan.computes)} settings, "
                      f"{result.wall_s:.1f} s")  # fmt: skip
    references = [_agreement(a, b) for a, b in itertools.permutations(probes["reference"], 2)]
    crossed = [_agreement(a, b) for a in probes["variant"] for b in probes["reference"]]
    crossed += [_agreement(b, a) for a in probes["variant"] for b in probes["reference"]]
    record = {
        "pipeline": args.pipeline,
        "cpu": {key: describe_machine().get(key) for key in ("cpu_model", "cpu_flags", "cpu_count", "torch")},
        "configurations": len(configurations),
        **timings,
        "wall_s": {which: [round(wall, 1) for wall in values] for which, values in walls.items()},
        "reference against reference": _summary(references),
        "variant against reference": _summary(crossed),
    }
    args.results.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({key: value for key, value in record.items() if key != "cpu"}, indent=1))


def _timing(fields: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` items as ProbePlan's timing fields, every field given (ProbePlan's defaults for the rest)."""
    given = dict(item.split("=", 1) for item in fields)
    defaults = ProbePlan([], [])
    return {name: type(getattr(defaults, name))(given.get(name, getattr(defaults, name))) for name in TIMING}


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
