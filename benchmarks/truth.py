"""Truth: does autotune read what a plain training loop reads? Target: autotune / plain within 0.97-1.03 per case.

    .venv/bin/python -m benchmarks.truth [--rounds 6] [--cases mymodel/baseline ...] [--device cuda]
                                         [--set measure.min_time_s=2 ...] [--results PATH]

Each case, a pipeline in a configuration, is timed in rounds by a trial (the harness, with the window the baseline
and the race use) and by the plain loop that judges it (``autotune/trial/plain.py``: one DataLoader over epochs,
a fixed warm-up, two clock reads, no code shared with the harness's measurement), each run a fresh process, the
loop that goes first alternating: ``python -m autotune mode=selfcheck``'s machinery, on several pipelines. The
ratio per case is the geometric mean of its rounds' autotune/plain ratios, with a 95 % interval. On a machine with
a GPU the cases run there (``--device cuda``); ``--set`` adds overrides to every case. Results go to
benchmarks/results/truth.json unless ``--results`` names another file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from autotune.files import write_atomic
from autotune.runner import TrialRunner
from autotune.selfcheck import check_configurations
from benchmarks.common import announce_machine, settings_for

RESULTS = Path(__file__).resolve().parent / "results" / "truth.json"
LOW, HIGH = 0.97, 1.03
WORKERS = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "num_threads": 1}
# label: (pipeline, knob changes from its baseline, config overrides)
CASES = {
    "mymodel/baseline": ("mymodel", {}, []),
    # 11 steps an epoch, 40 timed: several epoch boundaries inside the window, where persistent workers must persist.
    # (An epoch as long as the plain loop's warm-up would start its window at a boundary, with the prefetch queue
    # empty: up to 4 batches fewer in a 30-step window than a window that starts mid-epoch.)
    "mymodel/workers": (
        "mymodel",
        {**WORKERS, "batch_size": 64, "channels_last": True},
        ["pipeline.dataset.length=704", "measure.min_steps=40"],
    ),
    # What the tuner recommended here before FLOPs were counted after the window: a step run before it had made
    # the following ones 1.18x faster than in a plain loop (gradients kept, so the allocator's state persists).
    "mymodel/fused-keep-grads": (
        "mymodel",
        {**WORKERS, "channels_last": True, "optimizer_impl": "fused", "set_to_none": False},
        [],
    ),
    # The example's pick on a many-core GPU host (an H200's 16 cores): a worker a core, and at batch 128 their
    # prefetch holds a whole 32-batch epoch, which comes in bursts between stalls. 8 s windows: a round holds more
    # cycles, so its figure varies less.
    "mymodel/worker-a-core": (
        "mymodel",
        {"batch_size": 128, "num_workers": os.cpu_count(), "prefetch_factor": 2, "persistent_workers": True},
        ["measure.min_time_s=8"],
    ),
    # The same cycle on any machine: 16 workers whose samples wait 3 ms each (a slow store, no core used) and a step
    # on 8-pixel images that outruns them; 8 s windows, as above.
    "mymodel/bursty-workers": (
        "mymodel",
        {"batch_size": 128, "num_workers": 16, "prefetch_factor": 2, "persistent_workers": True, "num_threads": 1},
        [
            "pipeline.dataset._target_=benchmarks.workloads.WaitingImages",
            "+pipeline.dataset.wait_ms=3",
            "+pipeline.dataset.image_size=8",
            "measure.min_time_s=8",
        ],
    ),
    # A pick of the tuner on 2 cores with bf16 (the Xeon model 167): 4 workers for 2 cores at batch 128, one thread.
    "mymodel/four-workers": (
        "mymodel",
        {**WORKERS, "batch_size": 128, "num_workers": 4, "channels_last": True, "amp": "bf16"},
        [],
    ),
    # The example's pick on the Xeon model 167 (2026-12-05): 2 workers for 2 cores, restarted each epoch (64 steps,
    # ~7 s), and the same with persistent workers: a window shorter than an epoch may hold no boundary.
    "mymodel/pick": (
        "mymodel",
        {"batch_size": 64, "num_workers": 2, "num_threads": 1, "channels_last": True, "amp": "bf16"},
        [],
    ),
    "mymodel/pick-persistent": (
        "mymodel",
        {**WORKERS, "batch_size": 64, "channels_last": True, "amp": "bf16"},
        [],
    ),
    "mymodel/pick-persistent-keep": (
        "mymodel",
        {**WORKERS, "batch_size": 64, "channels_last": True, "amp": "bf16", "malloc": "keep"},
        [],
    ),
    "transformer_lm/baseline": ("transformer_lm", {}, []),
    "transformer_lm/batch64-1thread": ("transformer_lm", {"batch_size": 64, "num_threads": 1}, []),
    # Persistent workers across epoch boundaries where the model step, not loading, is the work: 11 steps an epoch.
    "transformer_lm/workers": ("transformer_lm", WORKERS, ["pipeline.dataset.length=176", "measure.min_steps=40"]),
    "tabular_mlp/baseline": ("tabular_mlp", {}, []),
    "tabular_mlp/batch256-1thread": ("tabular_mlp", {"batch_size": 256, "num_threads": 1}, []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every case")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    machine = announce_machine()
    checks = {}
    with tempfile.TemporaryDirectory() as workdir:
        for label in args.cases:
            pipeline, changes, overrides = CASES[label]
            settings = settings_for(pipeline, [f"measure.device={args.device}", *overrides, *args.set])
            runner = TrialRunner(settings, args.device, Path(workdir) / label.replace("/", "-"))
            (checks[label],) = check_configurations(
                runner, {label: {**settings.baseline, **changes}}, args.rounds, sys.stdout
            )
    rows = [_row(label, check) for label, check in checks.items()]
    record = {"machine": machine, "rounds": args.rounds, "device": args.device, "overrides": args.set, "cases": rows}
    write_atomic(args.results, json.dumps(record, indent=1))
    print(f"\n{'case':32} {'autotune':>9} {'plain':>9} {'ratio':>6}  95 % interval  boundaries  within {LOW}-{HIGH}")
    for row in rows:
        interval = row["interval"] or {}
        print(
            f"{row['case']:32} {row['harness_median']:9.1f} {row['plain_median']:9.1f} "
            f"{interval.get('geomean', 0):6.3f}"
            f"  {interval.get('low', 0):.3f}-{interval.get('high', 0):.3f}  {row['boundaries']:>10}  {row['within']}"
        )
    print(f"saved {args.results}")


def _row(label: str, check) -> dict:
    interval = check.interval
    boundaries = [b for b in check.epoch_boundaries if b is not None]
    return {
        "case": label,
        "knobs": check.knobs,
        "harness": check.harness,
        "plain": check.plain,
        "harness_median": statistics.median(v for v in check.harness if v is not None),
        "plain_median": statistics.median(v for v in check.plain if v is not None),
        "ratios": check.ratios,
        "interval": asdict(interval) if interval else None,
        "boundaries": f"{min(boundaries)}-{max(boundaries)}" if boundaries else "-",
        "within": bool(interval and LOW <= interval.geomean <= HIGH),
        "failures": check.failures,
    }


if __name__ == "__main__":
    main()
