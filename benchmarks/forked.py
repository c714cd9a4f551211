"""Forked against fresh: does a trial forked from the fork server read what the same trial reads as a fresh
interpreter? Target: forked / fresh within 0.97-1.03 per case (throughput), peak memory within 5 %.

    .venv/bin/python -m benchmarks.forked [--rounds 8] [--cases big big-workers tiny-steps] [--results PATH]
        [--knob malloc=keep ...]

Each round runs each case twice as the tuner runs a trial (``run_trial``, the whole harness), once forked from a
fork server of the round's own and once as a fresh ``python -m autotune.trial.worker``, the one that goes first
alternating from round to round. A server per round: every trial a server forks inherits its memory layout (and with
it glibc's trim regime and the hash seed), so the rounds of one server would sample one layout, not the layouts
forked trials read. The server ends before the fresh run starts: a process mapping the same libraries would take a
share of the fresh run's memory. The cases are ``benchmarks/overhead.py``'s. A case's figure is the geometric mean
of its rounds' forked/fresh ratios with its 95 % interval. ``--knob`` changes a knob of every case (``malloc=keep``
holds glibc's allocator in one regime, which takes the allocator's process-to-process lottery out of the
comparison). Results go to benchmarks/results/forked.json unless ``--results`` names another file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path

from autotune.files import write_atomic
from autotune.measure.stats import ratio_interval
from autotune.trial.launch import ForkServer, FreshLauncher
from autotune.trial.result import TrialRequest
from autotune.trial.runner import run_trial
from benchmarks.common import announce_machine, knob_values
from benchmarks.overhead import CASES, request_for

RESULTS = Path(__file__).resolve().parent / "results" / "forked.json"
LOW, HIGH = 0.97, 1.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--knob", nargs="*", default=[], metavar="NAME=VALUE", help="a knob's value in every case")
    args = parser.parse_args()
    machine = announce_machine()
    rows, knobs = [], knob_values(args.knob)
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            request = request_for(case, args.device, knobs)
            rows.append(measure_case(case, request, args.rounds, Path(tmp)))
    record = {"machine": machine, "rounds": args.rounds, "knobs": knobs, "cases": rows}
    write_atomic(args.results, json.dumps(record, indent=1))
    print(
        f"\n{'case':12} {'forked':>9} {'fresh':>9} {'ratio':>7}  95 % interval  in {LOW}-{HIGH}  peak MiB forked/fresh"
    )
    for row in rows:
        interval = row["interval"] or {}
        low, high, ratio = interval.get("low", 0), interval.get("high", 0), interval.get("geomean", 0)
        peaks = row["peak_mb"]
        print(
            f"{row['case']:12} {row['forked_median']:9.1f} {row['fresh_median']:9.1f} {ratio:7.3f}"
            f"  {low:.3f}-{high:.3f}  {LOW <= ratio <= HIGH}  {peaks['forked']:.0f}/{peaks['fresh']:.0f}"
        )
    print(f"saved {args.results}")


def measure_case(case: str, request: TrialRequest, rounds: int, workdir: Path) -> dict:
    runs: dict[str, list] = {"forked": [], "fresh": []}
    for index in range(rounds):
        launchers = {"forked": ForkServer(), "fresh": FreshLauncher()}  # the server imports before it forks: untimed
        for name in launchers if index % 2 == 0 else reversed(list(launchers)):
            result = run_trial(request, 600, workdir, f"{case}-{index + 1}-{name}", launcher=launchers[name])
            if not result.ok:
                raise SystemExit(f"{case} {name} failed: {result.failure}")
            runs[name].append(result)
            launchers["forked"].close()  # no server beside the fresh run, sharing its libraries' pages
        forked, fresh = (runs[name][-1].timing.throughput for name in ("forked", "fresh"))
        print(f"{case} round {index + 1}: forked {forked:.1f}, fresh {fresh:.1f} samples/s", flush=True)
    throughput = {name: [run.timing.throughput for run in results] for name, results in runs.items()}
    ratios = [f / s for f, s in zip(throughput["forked"], throughput["fresh"], strict=True)]
    interval = ratio_interval(ratios)
    return {
        "case": case,
        "forked": throughput["forked"],
        "fresh": throughput["fresh"],
        "forked_median": statistics.median(throughput["forked"]),
        "fresh_median": statistics.median(throughput["fresh"]),
        "ratios": ratios,
        "interval": asdict(interval) if interval else None,
        "peak_mb": {
            name: statistics.median(r.measurement.memory.peak_mb for r in results) for name, results in runs.items()
        },
    }


if __name__ == "__main__":
    main()
