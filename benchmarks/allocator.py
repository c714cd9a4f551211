"""How much of a run's speed is the allocator's state: fresh processes of one loop, glibc's malloc as it is and
with the ``malloc=keep`` knob, the pages each faulted in during its window beside its samples/s.

    .venv/bin/python -m benchmarks.allocator [--processes 8] [--case big] [--fixed-layout] [--results PATH]

Each round runs the case's loop (``benchmarks/overhead.py``'s bare loop: its Trainer and DataLoader, timed by two
clock reads after the warm-up of a calibration trial) once with ``malloc=default`` and once with ``malloc=keep``,
each a fresh process, the order alternating. Printed per setting: the median samples/s and its range, the fresh
pages faulted in per step, the share of the process's CPU time spent in the kernel, and how the runs' speed ranks
against their faults (Spearman's rank correlation: Pearson's on the ranks).

Which regime a process falls into is decided by its memory layout: ``--fixed-layout`` starts every process with
address-space randomisation off and one seed for Python's string hashes, and every process then faults in the same
pages a step (a forked trial inherits its server's layout, and with it one regime for every trial it forks).
Results go to benchmarks/results/allocator.json unless ``--results`` names another file.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd

from autotune.files import write_atomic
from benchmarks.common import announce_machine
from benchmarks.overhead import CASES, autotune_run, bare_run, request_for

RESULTS = Path(__file__).resolve().parent / "results" / "allocator.json"
SETTINGS = ("default", "keep")
ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="runs of each setting")
    parser.add_argument("--case", default="big", choices=list(CASES))
    parser.add_argument("--fixed-layout", action="store_true", help="every process laid out alike")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.fixed_layout:
        fix_layout()
    machine = announce_machine()
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
    stored = {
        "machine": machine,
        "case": args.case,
        "fixed_layout": args.fixed_layout,
        "runs": runs,
        "summary": summary,
    }
    write_atomic(args.results, json.dumps(stored, indent=1))
    for setting, row in summary.items():
        print(
            f"{setting:8} median {row['median']:.1f} samples/s ({row['low']:.1f}-{row['high']:.1f}), faults/step "
            f"{row['faults_low']:.0f}-{row['faults_high']:.0f}, {row['kernel_share']:.1%} in the kernel (median), "
            f"rank correlation speed/faults {row['spearman']:+.2f}"
        )
    print(f"saved {args.results}")


def fix_layout() -> None:
    """Every process started from here on lays its memory out as the others do: address-space randomisation off
    (a personality, inherited across fork and exec) and one seed for Python's string hashes."""
    if ctypes.CDLL(None, use_errno=True).personality(ADDR_NO_RANDOMIZE) == -1:
        reason = os.strerror(ctypes.get_errno())
        raise SystemExit(f"--fixed-layout: address-space randomisation cannot be turned off here ({reason})")
    os.environ["PYTHONHASHSEED"] = "0"


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
