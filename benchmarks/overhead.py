"""Overhead of the harness on the real trial path: autotune / bare, target >= 0.98 in each case.

    .venv/bin/python -m benchmarks.overhead [--rounds 7] [--cases big big-workers tiny-steps] [--results PATH]
        [--knob malloc=keep ...]

Each round runs each case twice, in fresh processes, the one that goes first alternating from round to round:
- autotune: a trial as the tuner runs one (``run_trial``: the worker's Profiler, its memory and CPU samplers and
  progress lines; the tuner polling the trial's memory against a budget and reading its progress);
- bare: the same Trainer, DataLoader and steps in a process of its own (``--bare``), with the harness reduced to
  two clock reads around as many steps as the case's first autotune run timed, after as many warm-up steps as it
  ran (a trial's warm-up lasts until step times settle: the bare window starts as far into the run).
The ratio per round is autotune / bare; a case's figure is the median of its rounds' ratios, beside the 95 %
interval of their geometric mean. ``--knob`` changes a knob of every case (``malloc=keep`` takes glibc's trim
regime, which differs from process to process, out of the comparison: benchmarks/allocator.py). Results go to
benchmarks/results/overhead.json unless ``--results`` names another file.

Cases:
  big          a ~700 MiB training process with ~110 ms steps: CachedImages (benchmarks/workloads.py), SmallCNN,
               batch 32, no DataLoader workers
  big-workers  the same with 2 persistent workers and 1 compute thread (a tree of three large processes)
  tiny-steps   tabular_mlp: in-memory tensors and a small MLP, ~1 ms steps
  pick-persistent  the example's pick on the Xeon model 167 (batch 64, 2 persistent workers, 1 thread, channels_last,
               bf16): 64 steps an epoch, timed in whole epochs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from autotune.files import write_atomic
from autotune.measure.gpu import synchronize
from autotune.measure.memory import MemoryBudget
from autotune.measure.page_faults import FaultWatch
from autotune.measure.stats import ratio_interval
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.setup import Trainer
from autotune.trial.result import TrialRequest
from autotune.trial.runner import run_trial
from benchmarks.common import announce_machine, knob_values, settings_for
from benchmarks.truth import CASES as TRUTH_CASES

RESULTS = Path(__file__).resolve().parent / "results" / "overhead.json"
TARGET = 0.98
BIG = {"dataset": {"_target_": "benchmarks.workloads.CachedImages"}}
# label: (pipeline, replaced components, knob changes from its baseline)
CASES = {
    "big": ("mymodel", BIG, {}),
    "big-workers": (
        "mymodel",
        BIG,
        {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "num_threads": 1},
    ),
    "tiny-steps": ("tabular_mlp", {}, {}),
    "pick-persistent": ("mymodel", {}, TRUTH_CASES["mymodel/pick-persistent"][1]),
}


def request_for(case: str, device: str, knobs: dict | None = None) -> TrialRequest:
    """The trial of ``case`` on ``device``, ``knobs`` changed on top of the case's own changes."""
    pipeline, components, changes = CASES[case]
    settings = settings_for(pipeline, [f"measure.device={device}"], components)
    m = settings.measure
    return TrialRequest(
        settings.pipeline, {**settings.baseline, **changes, **(knobs or {})}, device, m.plan, m.memory_interval_s
    )


def autotune_run(request: TrialRequest, workdir: Path, name: str) -> tuple[float, int, int]:
    """Samples/s, timed steps and warm-up steps of one trial, run as the tuner runs it."""
    budget = MemoryBudget("study.memory_budget_mb", 1e9)
    result = run_trial(request, 600, workdir, name, budget, on_progress=lambda steps, throughput: None)
    if not result.ok:
        raise SystemExit(f"{name} failed: {result.failure}")
    return result.timing.throughput, result.timing.steps, result.timing.warmup_steps


def bare_run(request: TrialRequest, warmup_steps: int, steps: int, workdir: Path, name: str) -> BareRun:
    """The same loop in a fresh process, timed by two clock reads."""
    path = write_atomic(workdir / f"{name}.request.json", json.dumps(request.to_dict()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "benchmarks.overhead", "--bare", str(path), str(warmup_steps), str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed: {done.stderr.strip().splitlines()[-1:]}")
    return BareRun(**json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class BareRun:
    """One bare run: samples/s, and over its window (read outside the clock's reads) the pages its process faulted in
    and the share of its CPU time spent in the kernel."""

    throughput: float
    minor_faults: int
    kernel_share: float


def bare(request: TrialRequest, warmup_steps: int, steps: int) -> BareRun:
    """The trial's loop without the harness: ``warmup_steps`` untimed, then ``steps`` timed."""
    device = torch.device(request.device)
    torch.manual_seed(0)
    trainer = Trainer(build_pipeline(request.pipeline), request.knobs, device, request.effective_batch_size)
    batches = trainer.batches()
    for _ in range(warmup_steps):
        trainer.train_step(trainer.to_device(next(batches)))
    synchronize(device)
    with FaultWatch() as watch:
        start = time.perf_counter()
        for _ in range(steps):
            trainer.train_step(trainer.to_device(next(batches)))
        synchronize(device)
        seconds = time.perf_counter() - start
    faults = watch.over(steps)
    return BareRun(steps * request.knobs["batch_size"] / seconds, faults.minor_faults, faults.kernel_share)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--knob", nargs="*", default=[], metavar="NAME=VALUE", help="a knob's value in every case")
    parser.add_argument("--bare", nargs=3, metavar=("REQUEST", "WARMUP_STEPS", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        request = TrialRequest.from_dict(json.loads(Path(args.bare[0]).read_text(encoding="utf-8")))
        print(json.dumps(asdict(bare(request, int(args.bare[1]), int(args.bare[2])))))
        return
    machine = announce_machine()
    rows, knobs = [], knob_values(args.knob)
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            rows.append(measure_case(case, request_for(case, args.device, knobs), args.rounds, Path(tmp)))
    record = {"machine": machine, "rounds": args.rounds, "knobs": knobs, "cases": rows}
    write_atomic(args.results, json.dumps(record, indent=1))
    print(f"\n{'case':12} {'autotune':>9} {'bare':>9} {'median ratio':>12}  95 % interval  >= {TARGET}")
    for row in rows:
        low, high = (row["interval"] or {}).get("low", 0), (row["interval"] or {}).get("high", 0)
        print(
            f"{row['case']:12} {row['autotune_median']:9.1f} {row['bare_median']:9.1f} {row['median_ratio']:12.3f}"
            f"  {low:.3f}-{high:.3f}  {row['median_ratio'] >= TARGET}"
        )
    print(f"saved {args.results}")


def measure_case(case: str, request: TrialRequest, rounds: int, workdir: Path) -> dict:
    _, steps, warmup_steps = autotune_run(request, workdir, f"{case}-calibration")
    harness, plain = [], []
    for index in range(rounds):
        for kind in ("autotune", "bare") if index % 2 == 0 else ("bare", "autotune"):
            name = f"{case}-{index + 1}-{kind}"
            if kind == "autotune":
                harness.append(autotune_run(request, workdir, name)[0])
            else:
                plain.append(bare_run(request, warmup_steps, steps, workdir, name).throughput)
        print(f"{case} round {index + 1}: autotune {harness[-1]:.1f}, bare {plain[-1]:.1f} samples/s", flush=True)
    ratios = [h / p for h, p in zip(harness, plain, strict=True)]
    interval = ratio_interval(ratios)
    return {
        "case": case,
        "bare_warmup_steps": warmup_steps,
        "bare_steps": steps,
        "autotune": harness,
        "bare": plain,
        "autotune_median": statistics.median(harness),
        "bare_median": statistics.median(plain),
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "interval": asdict(interval) if interval else None,
    }


if __name__ == "__main__":
    main()
