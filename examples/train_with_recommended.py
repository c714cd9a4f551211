"""Train SmallCNN on SyntheticImages with the settings autotune recommended, in an ordinary PyTorch loop.

    python -m autotune pipeline=mymodel
    python examples/train_with_recommended.py --recommended outputs/<run>/recommended.yaml

Each line marked "autotune" is what a training script adds to use recommended.yaml; the rest is the loop it
already had. At the end it prints samples/s.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import autotune  # noqa: E402
from examples.mymodel import SmallCNN, SyntheticImages  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recommended", default="recommended.yaml", help="the file autotune wrote")
    parser.add_argument("--steps", type=int, default=50, help="training steps to run (at least 2)")
    args = parser.parse_args()

    rec = autotune.load_recommended(args.recommended)  # autotune
    device = torch.device(rec.device)  # the device it was tuned on: its knobs were measured there
    changes = [f"{name} {'default' if old is None else old} -> {new}" for name, (old, new) in rec.changes.items()]
    print("changes:", ", ".join(changes) or "none")  # None: the knob left unset, PyTorch's default
    dataset, model = SyntheticImages(length=4096), SmallCNN(num_classes=10).to(device)
    rec.apply_process_settings()  # autotune: threads, allocator, cuDNN; once the model and dataset are built
    loader = DataLoader(dataset, shuffle=True, drop_last=True, **rec.dataloader_kwargs())
    model = rec.prepare_model(model)  # autotune: memory layout, compile
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=rec.learning_rate(0.01),
        momentum=0.9,
        **rec.optimizer_kwargs(),  # autotune
    )
    scaler = rec.grad_scaler(device)  # autotune: loss scaling for fp16, a pass-through otherwise
    loss_fn = torch.nn.CrossEntropyLoss()
    print("applied:", describe(model, loader, optimizer, rec, device))

    model.train()
    warmup, step, seen, start = min(5, args.steps // 2), 0, 0, time.perf_counter()
    while step < args.steps:
        for batch in loader:
            if step == warmup:
                start, seen = time.perf_counter(), 0
            images, labels = rec.to_device(batch, device)  # autotune: pinned copies, memory layout
            with rec.autocast(device):  # autotune: mixed precision
                loss = loss_fn(model(images), labels) / rec.accumulation_steps
            scaler.scale(loss).backward()
            if (step + 1) % rec.accumulation_steps == 0:
                scaler.step(optimizer)
                scaler.update()
                rec.zero_grad(optimizer)  # autotune
            seen += images.shape[0]
            step += 1
            if step == args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"device={device.type} steps={args.steps} loss={loss.item() * rec.accumulation_steps:.3f}")
    print(f"{seen / (time.perf_counter() - start):.1f} samples/s over {args.steps - warmup} timed steps")


def describe(model, loader, optimizer, rec, device) -> str:
    """What the recommendation set in this process, as torch reports it."""
    with rec.autocast(device):
        precision = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else "fp32"
    layout = "channels_last" if next(model.parameters()).is_contiguous(memory_format=torch.channels_last) else "nchw"
    given = {name: optimizer.defaults.get(name) for name in ("fused", "foreach")}
    update = next((name for name, on in given.items() if on), "for_loop" if given["foreach"] is False else "default")
    return (
        f"threads={torch.get_num_threads()} workers={loader.num_workers} batch={loader.batch_size} "
        f"precision={precision} layout={layout} optimizer={update} lr={optimizer.defaults['lr']}"
    )


if __name__ == "__main__":
    main()
