"""Pooled: the re-measurements of several efficiency runs of one grid, pooled per pair of configurations.

    .venv/bin/python -m benchmarks.pooled FILE [FILE ...]

FILE: an ``efficiency.json`` written by ``benchmarks.efficiency`` (e.g. ``benchmarks/results/efficiency-*.json``).
One run re-measures the grid's top configurations and the tuner's pick 6 times, which gives a 95 % interval of
about +-10 % on a ratio here: too wide to tell whether a pick reaches 0.97 of the best. Runs of one grid (the same
grid measurement, reused with ``--reuse-grids``) re-measure many of the same configurations with the same harness,
so their paired rounds can be pooled. For each pipeline and each configuration some run's tuner recommended, this
prints its paired ratio (``remeasure.ratio_interval``) against every configuration re-measured beside it, pooled
over all those rounds, and the verdict against the quality target for its strongest rival (the lowest ratio).
Files of different grids are refused: their harness or pipelines may differ.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.efficiency import TARGET_RATIO, knob_text
from benchmarks.remeasure import Rounds, ratio_interval, verdict


class PoolingError(Exception):
    """The files cannot be pooled (they were measured on different grids)."""


def config_key(knobs: dict[str, Any], varied: list[str]) -> str:
    """A configuration as the knobs its grid varies, e.g. ``amp=bf16 batch_size=64``."""
    return knob_text(knobs, sorted(varied))


def pool(runs: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, Any]]:
    """Per pipeline: ``rounds`` (every run's re-measurement rounds, keyed by ``config_key``), ``picks`` (each
    tuner recommendation and how many runs made it), ``runs`` (how many runs it pools) and ``grid``. ``names``
    label ``runs`` in errors. Raises PoolingError when two runs' grids of one pipeline differ."""
    pooled: dict[str, dict[str, Any]] = {}
    for name, run in zip(names, runs, strict=True):
        for pipeline, entry in run["pipelines"].items():
            check = entry.get("check")
            if not check:
                continue
            grid = (entry["grid"]["size"], entry["grid"]["wall_s"])
            into = pooled.setdefault(pipeline, {"grid": grid, "first": name, "rounds": [], "picks": {}, "runs": 0})
            if into["grid"] != grid:
                raise PoolingError(
                    f"{name}: the {pipeline} grid ({grid[0]} configurations, {grid[1]:.1f} s) is not the one of "
                    f"{into['first']} ({into['grid'][0]}, {into['grid'][1]:.1f} s); pool only runs of one grid"
                )
            keys = {label: config_key(knobs, entry["varied_knobs"]) for label, knobs in check["configs"].items()}
            into["rounds"] += [{keys[label]: sps for label, sps in r.items()} for r in check["rounds"]]
            pick = keys[check["tuner_label"]]
            into["picks"][pick] = into["picks"].get(pick, 0) + 1
            into["runs"] += 1
    return pooled


def rivals(rounds: Rounds, pick: str) -> list[tuple[str, dict[str, float]]]:
    """``pick``'s pooled paired ratio against every configuration measured in a round beside it, lowest first."""
    others = sorted({key for r in rounds if r.get(pick) is not None for key in r} - {pick})
    intervals = [(other, ratio_interval(rounds, pick, other)) for other in others]
    return sorted(((o, i) for o, i in intervals if i is not None), key=lambda item: item[1]["geomean"])


def pooled_verdict(ranked: list[tuple[str, dict[str, float]]]) -> tuple[str, str] | None:
    """The pick against the quality target and the rival that decides it: missed when some rival's interval lies
    wholly below TARGET_RATIO, met when every rival's interval clears it, else unresolved (the lowest ratio)."""
    if not ranked:
        return None
    for outcome in ("missed", "unresolved"):
        deciding = [other for other, interval in ranked if verdict(interval, TARGET_RATIO) == outcome]
        if deciding:
            return outcome, deciding[0]
    return "met", ranked[0][0]


def report(pooled: dict[str, dict[str, Any]]) -> list[str]:
    """The lines printed: per pipeline, per pick, its ratio to each rival and the verdict against the target."""
    lines = []
    for pipeline, data in pooled.items():
        lines.append(f"\n== {pipeline}: {data['runs']} runs, {len(data['rounds'])} rounds pooled")
        for pick, times in sorted(data["picks"].items(), key=lambda item: -item[1]):
            lines.append(f"  recommended in {times} of {data['runs']} runs: {pick}")
            ranked = rivals(data["rounds"], pick)
            for other, i in ranked:
                lines.append(
                    f"    vs {other}: {i['geomean']:.3f} (95 % CI {i['low']:.3f}-{i['high']:.3f}, {i['n']} rounds)"
                )
            decided = pooled_verdict(ranked)
            if decided:
                lines.append(f"    ratio >= {TARGET_RATIO} to every rival: {decided[0]} (deciding rival: {decided[1]})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="efficiency.json files of runs on one grid")
    args = parser.parse_args()
    try:
        runs = [json.loads(path.read_text(encoding="utf-8")) for path in args.files]
        pooled = pool(runs, [str(path) for path in args.files])
    except (OSError, json.JSONDecodeError, PoolingError) as error:
        parser.exit(2, f"benchmarks.pooled: {error}\n")
    skipped = [str(path) for path, run in zip(args.files, runs, strict=True) if not _has_checks(run)]
    if skipped:
        print(f"no per-configuration re-measurement (written by an older benchmarks.efficiency): {', '.join(skipped)}")
    print("\n".join(report(pooled)))


def _has_checks(run: dict[str, Any]) -> bool:
    return any(entry.get("check") for entry in run["pipelines"].values())


if __name__ == "__main__":
    main()
