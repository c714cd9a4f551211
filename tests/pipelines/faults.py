"""Pipeline components that each provoke one fault in a trial, for tests of how failures are reported."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import torch
from torch import nn
from torch.utils.data import get_worker_info

from tests.pipelines.tiny import TinyCNN, TinyImages


class SegfaultingCNN(TinyCNN):
    """Dereferences a null pointer in forward: the trial process dies of SIGSEGV."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)
        return super().forward(x)


class WorkerKillingImages(TinyImages):
    """SIGKILLs its own process inside a DataLoader worker, as the kernel's OOM killer would."""

    def __getitem__(self, index: int):
        if get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


class CorruptSampleImages(TinyImages):
    """Raises ValueError for sample ``bad_index``, in whichever process loads it (num_workers=0: the main one)."""

    def __init__(self, length: int = 16, bad_index: int = 5) -> None:
        super().__init__(length)
        self.bad_index = bad_index

    def __getitem__(self, index: int):
        if index == self.bad_index:
            raise ValueError(f"sample {index} is corrupt")
        return super().__getitem__(index)


class RaisingCNN(TinyCNN):
    """Raises ValueError in forward, eager or compiled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model cannot run forward")


class ClassCountLoss(nn.Module):
    """Cross-entropy that raises ValueError unless the output has ``num_classes`` columns (a config mismatch)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.num_classes = num_classes

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if output.dim() != 2 or output.shape[1] != self.num_classes:
            raise ValueError(f"loss expects output [N, {self.num_classes}], got {list(output.shape)}")
        return nn.functional.cross_entropy(output, target)


@torch.library.custom_op("autotune_test_faults::no_fake_kernel", mutates_args=())
def _no_fake_kernel(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_no_fake_kernel.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("this model refuses to be compiled")


_no_fake_kernel.register_autograd(lambda ctx, grad: grad)


class CompileRefusingCNN(TinyCNN):
    """Runs eagerly but fails under torch.compile: a custom op whose fake (tracing) kernel raises RuntimeError.

    A ``raise`` behind ``torch.compiler.is_compiling()`` would not do: Dynamo treats an exception
    while tracing as a graph break and silently runs that frame eagerly, where it does not raise.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _no_fake_kernel(super().forward(x))


class WrongShapeCNN(TinyCNN):
    """Outputs [N, 3, 7]: CrossEntropyLoss with class-index targets [N] rejects it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)[:, :1, None].expand(-1, 3, 7)


class CudaOomCNN(TinyCNN):
    """Raises torch.OutOfMemoryError (torch.cuda.OutOfMemoryError) in forward, as a full GPU would, on any device."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class MemoryHogCNN(TinyCNN):
    """Keeps 20 MB more alive on every forward (at most 20 per second): it crosses any memory budget."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__(num_classes)
        self.hoard: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hoard.append(torch.ones(5 * 2**20))  # 20 MB, touched
        time.sleep(0.05)
        return super().forward(x)


class SelfKillingCNN(TinyCNN):
    """Sends itself SIGKILL, as the kernel's out-of-memory killer would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(x)


class CudaHogCNN(TinyCNN):
    """Asks the GPU for 100 TiB: a real CUDA out-of-memory error (on a machine with a GPU)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.empty(100 * 2**40, dtype=torch.uint8, device=x.device)
        return super().forward(x)


class NanCNN(TinyCNN):
    """Produces NaN outputs, so the loss is NaN: training runs, but trains nothing."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * float("nan")


class SlowCNN(TinyCNN):
    """Sleeps 20 ms per forward: a slow but steady step, for pruning tests."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02)
        return super().forward(x)
