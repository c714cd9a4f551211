"""Picks against each other: the recommendations of several tuning runs (their recommended.yaml) and the baseline,
measured again in interleaved rounds of fresh trial processes, each against the fastest of them round by round.

    .venv/bin/python -m benchmarks.picks --rounds 4 --results benchmarks/results/picks.json \\
        old-1=RUN_DIR/recommended.yaml new-1=RUN_DIR/recommended.yaml ...

Two tuning runs of one pipeline pick different configurations on a machine whose runs vary 6-20 %: whether one
run's pick is as good as another's (the "pick >= 0.97 of today's pick" of issue #23) only interleaved rounds tell.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

from autotune.config.settings import Settings
from benchmarks.common import announce_machine, settings_for
from benchmarks.remeasure import fastest, ratio_interval, remeasure_interleaved, runs_of


def picks_of(arguments: list[str]) -> dict[str, dict]:
    """LABEL=PATH arguments: each label with the knobs of the recommended.yaml at PATH."""
    picks = {}
    for argument in arguments:
        label, _, path = argument.partition("=")
        picks[label] = yaml.safe_load(Path(path).read_text())["knobs"]
    return picks


def compare(settings: Settings, picks: dict[str, dict], rounds: int) -> dict:
    """The picks and the baseline re-measured for ``rounds`` rounds: each label's median and its ratio to the
    fastest (by geometric mean) with its 95 % interval."""
    configs = {"baseline": settings.baseline, **picks}
    with tempfile.TemporaryDirectory() as workdir:
        measured, failures = remeasure_interleaved(settings, configs, rounds, Path(workdir), Path(workdir) / "cache")
    best = fastest(measured, list(picks))
    summary = {
        label: {
            "median_sps": statistics.median(runs_of(measured, label)) if runs_of(measured, label) else None,
            "against_baseline": ratio_interval(measured, label, "baseline"),
            "against_fastest_pick": ratio_interval(measured, label, best) if best and label != best else None,
        }
        for label in configs
    }
    return {"rounds": measured, "failures": failures, "fastest_pick": best, "picks": picks, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("picks", nargs="+", help="LABEL=PATH of a recommended.yaml")
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--results", type=Path)
    args = parser.parse_args()
    machine = announce_machine()
    outcome = compare(settings_for(args.pipeline, []), picks_of(args.picks), args.rounds)
    for label, row in outcome["summary"].items():
        against = row["against_fastest_pick"]
        shown = f"{against['geomean']:.3f} ({against['low']:.3f}-{against['high']:.3f})" if against else "-"
        print(f"{label}: median {row['median_sps']:.1f} samples/s; against the fastest pick {shown}")
    if args.results:
        args.results.write_text(json.dumps({"machine": machine, "pipeline": args.pipeline, **outcome}, indent=1))


if __name__ == "__main__":
    main()
