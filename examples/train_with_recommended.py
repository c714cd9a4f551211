"""Train SmallCNN on SyntheticImages with the settings autotune recommended.

autotune writes its result to ``recommended.yaml``; this script shows how to
use that file in your own training code. Every entry under ``knobs:`` is
applied to an ordinary PyTorch loop: DataLoader arguments (batch_size,
num_workers, prefetch_factor, persistent_workers, pin_memory), threads
(num_threads), memory format (channels_last), mixed precision (amp),
torch.compile (compile), cuDNN autotuning (cudnn_benchmark), the optimizer's
implementation (optimizer_impl) and zero_grad(set_to_none). ``training:`` says
how many micro-batches to accumulate per optimizer step, and the learning rate
autotune suggests when the batch size changed. At the end it prints samples/s.

    python -m autotune pipeline=mymodel
    python examples/train_with_recommended.py --recommended recommended.yaml
"""

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
import yaml
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.mymodel import SmallCNN, SyntheticImages  # noqa: E402

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def forever(loader):
    while True:
        yield from loader


def worker_options(knobs: dict) -> dict:
    """prefetch_factor and persistent_workers, which exist only with worker processes (null otherwise)."""
    options = {name: knobs.get(name) for name in ("prefetch_factor", "persistent_workers")}
    return {name: value for name, value in options.items() if value is not None}


def optimizer_options(knobs: dict) -> dict:
    """optimizer_impl as the keyword arguments torch.optim optimizers take."""
    return {"for_loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}.get(
        knobs.get("optimizer_impl", "default"), {}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recommended", default="recommended.yaml", help="file written by autotune")
    parser.add_argument("--steps", type=int, default=50, help="training steps to run")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2")

    with open(args.recommended) as f:
        recommended = yaml.safe_load(f)
    knobs, training = recommended["knobs"], recommended.get("training", {})
    print(f"knobs: {knobs}")
    accumulation = training.get("gradient_accumulation_steps", 1)
    lr = training.get("learning_rate", {}).get("suggested", 0.01)
    if training.get("note"):
        print(f"training: {training['note']}")

    if knobs.get("num_threads") is not None:
        torch.set_num_threads(knobs["num_threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = knobs.get("cudnn_benchmark", False)
    amp = knobs.get("amp", "off")
    compile_mode = knobs.get("compile", "off")
    channels_last = knobs.get("channels_last", False)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    loader = DataLoader(
        SyntheticImages(length=4096),
        batch_size=knobs["batch_size"],
        shuffle=True,
        drop_last=True,
        num_workers=knobs.get("num_workers", 0),
        pin_memory=knobs.get("pin_memory", False) and device.type == "cuda",
        **worker_options(knobs),
    )

    model = SmallCNN(num_classes=10).to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, **optimizer_options(knobs))
    set_to_none = knobs.get("set_to_none", True)
    loss_fn = torch.nn.CrossEntropyLoss()
    if compile_mode != "off":
        model = torch.compile(model, mode=compile_mode)

    if amp == "off":
        autocast = contextlib.nullcontext
    else:
        autocast = lambda: torch.autocast(device.type, dtype=AMP_DTYPES[amp])  # noqa: E731
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16" and device.type == "cuda")

    warmup = min(5, args.steps // 2)
    batches = forever(loader)
    model.train()
    for step in range(args.steps):
        if step == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start, seen = time.perf_counter(), 0
        images, labels = next(batches)
        images = images.to(device, non_blocking=True).contiguous(memory_format=memory_format)
        labels = labels.to(device, non_blocking=True)

        with autocast():
            loss = loss_fn(model(images), labels)
        scaler.scale(loss / accumulation).backward()
        if (step + 1) % accumulation == 0:  # one optimizer step per `accumulation` micro-batches
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=set_to_none)
        if step >= warmup:
            seen += images.shape[0]

    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"device={device.type} steps={args.steps} loss={loss.item():.3f}")
    print(f"{seen / elapsed:.1f} samples/s over {args.steps - warmup} timed steps")


if __name__ == "__main__":
    main()
