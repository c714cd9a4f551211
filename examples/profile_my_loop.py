"""Measure your own training loop with autotune's profiler, without the tuner.

    .venv/bin/python examples/profile_my_loop.py

Wrap the DataLoader (time blocked on it is data wait), call prof.step() after each step, and read
prof.result: timing, memory, compute and system sections, saveable as JSON.
"""

import itertools
import sys
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import autotune  # noqa: E402
from examples.mymodel import SmallCNN, SyntheticImages  # noqa: E402


def train_step(model, loss_fn, optimizer, inputs, targets):
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    model, loss_fn = SmallCNN(), torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(SyntheticImages(length=1024), batch_size=32, shuffle=True, drop_last=True, num_workers=1)

    # A bounded window: warm up until step times settle, then time at least 20 steps and 3 s.
    plan = autotune.WindowPlan(min_steps=20, min_time_s=3.0)
    with autotune.profile("my-loop", plan=plan) as prof:
        for _ in itertools.count():  # as many epochs as the window needs
            for inputs, targets in prof.wrap(loader):
                train_step(model, loss_fn, optimizer, inputs, targets)
                prof.step()
                if prof.done:
                    break
            if prof.done:
                break
        # Optional, once the window is done: FLOPs of one step (a step of its own, so not before the window).
        prof.count_flops(partial(train_step, model, loss_fn, optimizer, inputs, targets), len(inputs))

    result = prof.result
    timing = result.timing
    ends = (timing.throughput_ci95_low, timing.throughput_ci95_high)
    bounds = "-".join("?" if v is None else f"{v:.1f}" for v in ends)
    untold = ", ? where the window cannot tell" if None in ends else ""
    print(
        f"{timing.throughput:.1f} samples/s (95% CI {bounds}{untold})"
        f" after {timing.warmup_steps} warm-up steps; waiting for data {timing.data_stall_fraction:.0%} of the time"
    )
    print(
        f"peak memory {result.memory.peak_mb:.0f} MiB ({result.memory.metric}, DataLoader workers included); "
        f"{result.compute.flops_per_sample / 1e6:.1f} MFLOP/sample; {result.system.process_tree_cores:.2f} cores busy"
    )
    print(f"saved to {result.save('profile.json')}")


if __name__ == "__main__":
    main()
