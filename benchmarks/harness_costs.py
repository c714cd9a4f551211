"""What each of the harness's readings and per-step marks costs, and what share of a timed window that is.

    .venv/bin/python -m benchmarks.harness_costs [--megabytes 320] [--workers 2] [--device cuda]

In a training-sized process (``--megabytes`` of data touched in memory beside torch, like a cached dataset) with
``--workers`` forked DataLoader workers sharing it, each reading is timed as the trial and the tuner take it
(best of 5 repeats of a batch of calls, so what is printed is the cost itself, not the machine's noise), then
put against how often it runs: inside the window, every 0.5 s (the samplers), every step (the marks), or only at
the window's edges and not in the window at all. With ``--device cuda`` the marks are a CUDA window's (CUDA events on
a sample of steps), the events of one sampled step are timed on their own, and NVML is read for the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import timeit
from pathlib import Path

import numpy as np
import torch

from autotune.measure.gpu import DeviceTimeline, Nvml
from autotune.measure.memory import MemoryBudget, ProcessTree
from autotune.measure.profiler import Profiler
from autotune.measure.recorder import WindowPlan
from autotune.measure.system import tree_cpu_seconds
from autotune.trial.runner import _BudgetWatch, _ProgressReader
from autotune.trial.worker import _progress_writer
from benchmarks.common import announce_machine


def cost_s(call, number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=5)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=320)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    data = np.ones(args.megabytes * 2**20, dtype=np.uint8)  # touched: resident, shared with forked workers
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4096, 8)), num_workers=args.workers)
    batches = iter(loader)  # starts the workers
    next(batches)
    tree = ProcessTree(os.getpid())
    full = tree.read_full()
    announce_machine()
    rss_mb, total_mb = sum(full.rss.values()) / 2**20, full.total / 2**20
    print(f"tree: {len(full.rss)} processes, RSS {rss_mb:.0f} MiB, {tree.metric} {total_mb:.0f} MiB")

    rows = _readings(tree, full, device) + _marks(device)
    print(f"\n{'reading':48} {'us/call':>10}  when  {'share of the window':>22}")
    for name, seconds, when, share in rows:
        print(f"{name:48} {seconds * 1e6:10.1f}  {when:5} {share:>22}")
    del data, batches


def _readings(tree: ProcessTree, full, device: torch.device) -> list[tuple[str, float, str, str]]:
    nvml, pid = Nvml(device), os.getpid()
    with tempfile.TemporaryDirectory() as tmp:
        progress_path = Path(tmp) / "progress.jsonl"
        progress_path.write_text(json.dumps({"steps": 1, "throughput": 1.0, "compile_s": 0.0}) + "\n")
        reader = _ProgressReader(progress_path, lambda steps, throughput: None)
        budget = _BudgetWatch(pid, MemoryBudget("study.host_memory_budget_mb", 1e9))
        rows = [
            ("memory: cheap read of the tree (RSS, statm)", cost_s(tree.read_cheap, 200), "0.5 s", None),
            ("memory: full read of the tree (PSS, smaps_rollup)", cost_s(tree.read_full, 5), "edges", None),
            ("memory: training process high-water mark", cost_s(tree.peak_rss, 200), "end", None),
            ("cpu: tree CPU times (window start and end)", cost_s(lambda: tree_cpu_seconds(pid), 50), "edges", None),
            ("nvml: one reading" + ("" if nvml.available else " (not read)"), cost_s(nvml.read, 200), "0.5 s", None),
            ("tuner: memory budget check of the trial (0.25 s)", cost_s(budget.over, 200), "0.25 s", None),
            ("tuner: progress file read (0.25 s)", cost_s(reader.check, 200), "0.25 s", None),
        ]
    return [(name, s, when, _share(s, when)) for name, s, when, _ in rows]


def _marks(device: torch.device) -> list[tuple[str, float, str, str]]:
    """A trial's marks per step (batch ready, transferred, step, the progress writer's clock check), timed inside a
    window on ``device``, and the progress line it writes every 0.5 s."""

    def forever():
        while True:
            yield (torch.zeros(1),)

    profiler = Profiler(device=device, plan=WindowPlan.unbounded(), memory_interval_s=3600)
    with tempfile.TemporaryDirectory() as tmp, profiler as prof:
        path = Path(tmp) / "progress.jsonl"
        batches = prof.wrap(forever())
        while prof.recorder.phase != "window":
            next(batches)
            prof.step(1)
        report = _progress_writer(path, 0.0, False)

        def one_step():
            next(batches)
            prof.transferred()
            prof.step(1)
            report(prof)

        per_step = cost_s(one_step, 2000)
        line = cost_s(lambda: _progress_writer(path, 0.0, False)(prof), 200)
    return [
        (
            "per step: batch ready + transferred + step + check",
            per_step,
            "step",
            f"{per_step / 0.001:.2%} of a 1 ms step",
        ),
        ("progress: one line for the pruner", line, "0.5 s", _share(line, "0.5 s")),
        *(_sampled_step(device) if device.type == "cuda" else []),
    ]


def _sampled_step(device: torch.device) -> list[tuple[str, float, str, str]]:
    """The CUDA events of one sampled step (every step of a loop whose warm-up steps last DeviceTimeline.spacing_s or
    more), each created and recorded inside the window."""
    timeline = DeviceTimeline(spacing_s=0.0)
    timeline.start(1.0)

    def one_step():
        timeline.batch_ready()
        timeline.batch_transferred()
        timeline.step_done(1)

    seconds = cost_s(one_step, 2000)
    torch.cuda.synchronize(device)
    spacing_s = DeviceTimeline.spacing_s
    share = f"{seconds / spacing_s:.2%} (about 1 per {spacing_s * 1e3:g} ms of a warm-up step)"
    return [("CUDA events of a sampled step", seconds, "step", share)]


def _share(seconds: float, when: str) -> str:
    if when.startswith("0.5 s"):
        return f"{seconds / 0.5:.3%} (1 per 0.5 s)"
    if when == "0.25 s":
        return f"{seconds / 0.25:.3%} of a core"
    return "0 (outside the window)"


if __name__ == "__main__":
    main()
