"""How much of a run's speed is the allocator's state: fresh processes of one loop, glibc's malloc as it is and
with the ``malloc=keep`` knob, the pages each faulted in during its window beside its samples/s.

    .venv/bin/python -m benchmarks.allocator [--processes 8] [--case big]

Each round runs the case's loop (``benchmarks/overhead.py``'s bare loop: its Trainer and DataLoader, timed by two
clock reads after the warm-up of a calibration trial) once with ``malloc=default`` and once with ``malloc=keep``,
each a fresh process, the order alternating. Printed per setting: the median samples/s and its range, the fresh
pages faulted in per step, the share of the process's CPU time spent in the kernel, and how the runs' speed ranks
against their faults (Spearman's rank correlation: Pearson's on the ranks).
Results go to benchmarks/results/allocator.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd

from autotune.files import write_atomic
from autotune.measure.environment import describe_machine
from benchmarks.overhead import CASES, autotune_run, bare_run, request_for

RESULTS = Path(__file__).resolve().parent / "results" / "allocator.json"
SETTINGS = ("default", "keep")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="runs of each setting")
    parser.add_argument("--case", default="big", choices=list(CASES))
    args = parser.parse_args()
    machine = describe_machine()
    print(f"{machine['cpu_model']} ({machine['cpu_count']} cores; flags {', '.join(machine.get('cpu_flags', []))})")
    request = request_for(args.case, "cpu")
    runs: dict[str, list[dict]] = {setting: [] for setting in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        _, steps, warmup_steps = autotune_run(request, Path(tmp), "calibration")
        for index in range(args.processes):
            for setting in SETTINGS if index % 2 == 0 else reversed(SETTINGS):
                changed = replace(request, knobs={**request.knobs, "malloc": setting})
                run = bare_run(changed, warmup_steps, steps, Path(tmp), f"{setting}-{index + 1}")
                runs[setting].append({**asdict(run), "faults_per_step": run.minor_faults / steps})
                print(
                    f"{setting:8} {run.throughput:8.1f} samples/s  {run.minor_faults / steps:9.0f} faults/step"
                    f"  {run.kernel_share:.1%} in the kernel"
                )
    summary = {setting: _summary(rows) for setting, rows in runs.items()}
    stored = {"machine": machine, "case": args.case, "runs": runs, "summary": summary}
    write_atomic(RESULTS, json.dumps(stored, indent=1))
    for setting, row in summary.items():
        print(
            f"{setting:8} median {row['median']:.1f} samples/s ({row['low']:.1f}-{row['high']:.1f}), faults/step "
            f"{row['faults_low']:.0f}-{row['faults_high']:.0f}, {row['kernel_share']:.1%} in the kernel (median), "
            f"rank correlation speed/faults {row['spearman']:+.2f}"
        )
    print(f"saved {RESULTS}")


def _summary(rows: list[dict]) -> dict:
    frame = pd.DataFrame(rows)
    return {
        "median": statistics.median(frame["throughput"]),
        "low": frame["throughput"].min(),
        "high": frame["throughput"].max(),
        "faults_low": frame["faults_per_step"].min(),
        "faults_high": frame["faults_per_step"].max(),
        "kernel_share": statistics.median(frame["kernel_share"]),
        "spearman": frame["throughput"].rank().corr(frame["faults_per_step"].rank()),  # Spearman: ranks, Pearson
    }


if __name__ == "__main__":
    main()
