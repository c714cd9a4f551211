"""A description of the machine and software a measurement ran on."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pynvml

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")
# What a throughput depends on beyond the pipeline: measured on a machine that differs in one of these, a figure may
# not hold (bf16 autocast wins with avx512_bf16 and loses ~40 % without it). thread_env: the thread variables
# (OMP_NUM_THREADS, ...) the tuner ran under, which every trial inherits: torch's default thread count, the
# num_threads knob's null, is theirs, unless the trial is pinned (study.cpu_sets), which sets it to the count of its
# cores (``placement.pin_from_env``; cpu_count and torch_threads then describe those cores: ``runner.study_machine``).
MACHINE_KEYS = ("cpu_model", "cpu_flags", "cpu_count", "gpu", "gpu_driver", "cuda", "torch", "thread_env")
# Of MACHINE_KEYS, those of the hardware: where one differs, the machine is another one (not its software).
HARDWARE_KEYS = ("cpu_model", "cpu_flags", "gpu")
# CPU features that change which knobs win: bf16 autocast runs in hardware only with avx512_bf16 or AMX.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def usable_cpu_count() -> int:
    """CPU cores this process may use: those it may run on (its affinity, which cgroup-pinned sets set), and no more
    than its cgroup's CPU quota, rounded up (a container's ``--cpus``, a Kubernetes CPU limit: the kernel lets its
    threads run on every core but throttles them once they used that many cores' time)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def cgroup_cpu_quota(membership: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota, in cores, of this process's cgroup (``membership`` names it, under the cgroup file system at
    ``root``) and of the cgroups above it, the smallest: cgroup v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``; None without one, or where the files cannot be read. In a container whose cgroup
    namespace hides the path, the cgroup mounted at ``root`` is its own."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in filter(lambda line: line.count(":") >= 2, lines):  # "id:controllers:path"
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2, one hierarchy
            quotas += _quotas(root, path, _v2_quota)
        elif "cpu" in controllers.split(","):
            mount = next((root / name for name in (controllers, "cpu", "cpu,cpuacct") if (root / name).is_dir()), None)
            quotas += _quotas(mount, path, _v1_quota) if mount else []
    return min(quotas, default=None)


def _quotas(mount: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The quotas ``read`` finds in cgroup ``path`` under ``mount`` and each cgroup above it (the mount's own where
    the path is not there)."""
    here = mount / path.lstrip("/")
    if not here.is_dir():
        here = mount
    found = []
    for level in [here, *here.parents]:
        if quota := read(level):
            found.append(quota)
        if level == mount:
            break
    return found


def _v2_quota(cgroup: Path) -> float | None:
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(cgroup: Path) -> float | None:
    try:
        quota = int((cgroup / "cpu.cfs_quota_us").read_text())
        return None if quota <= 0 else quota / int((cgroup / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def describe_machine(device: str | None = None) -> dict[str, Any]:
    """CPU, memory, GPU and library versions, as plain data for reports and result tagging; the GPU is the one
    ``device`` names (a CUDA device; else the current one). It imports torch (whose facts it reads): the tuner's
    process, which never does, takes them from its inspection (``Inspection.machine``)."""
    import torch

    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_info("model name") or platform.processor() or platform.machine(),
        "cpu_flags": [flag for flag in _CPU_FLAGS if flag in _cpu_info("flags").split()],
        "cpu_count": usable_cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "gpu": gpu_name(device) if torch.cuda.is_available() else None,
        "gpu_bf16": gpu_computes_bf16(device) if torch.cuda.is_available() else None,
        "gpu_driver": _gpu_driver() if torch.cuda.is_available() else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": str(torch.__version__),  # a str subclass YAML cannot write
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_env": {name: os.environ[name] for name in _THREAD_VARIABLES if name in os.environ},
    }


def gpu_name(device: str | None) -> str:
    """The model of the GPU ``device`` names (a CUDA device, such as "cuda:1"; else the current one): on a machine
    of mixed GPUs, the one the trials run on names the machine, not the first."""
    import torch

    cuda = device is not None and str(device).startswith("cuda")
    return torch.cuda.get_device_name(torch.device(device) if cuda else None)


def gpu_computes_bf16(device: str | None) -> bool:
    """Whether the GPU ``device`` names (else the current one) computes in bfloat16 natively: compute capability 8.0
    or later, not one that emulates it, slower than fp32 (pre-Ampere, such as V100 and T4: ``is_bf16_supported()``
    counts emulation by default)."""
    import torch

    if device is None or not str(device).startswith("cuda"):
        return torch.cuda.is_bf16_supported(including_emulation=False)
    with torch.cuda.device(torch.device(device)):  # is_bf16_supported asks the current device
        return torch.cuda.is_bf16_supported(including_emulation=False)


def has_16_bit_units(machine: dict[str, Any], device: str) -> bool:
    """Whether ``device`` of ``machine`` (``describe_machine``) computes in 16 bits in hardware: a GPU that computes
    bfloat16 natively (``gpu_bf16``; one described before it was read counts as one), or a CPU with one of
    ``BF16_CPU_FLAGS`` (elsewhere bf16 autocast is emulated, and slower than fp32)."""
    if device.startswith("cuda"):
        return machine.get("gpu_bf16") is not False
    return any(flag in (machine.get("cpu_flags") or []) for flag in BF16_CPU_FLAGS)


def runs_glibc(machine: dict[str, Any]) -> bool:
    """Whether ``machine`` (``describe_machine``) ran on glibc, whose allocator the ``malloc`` knob tunes."""
    return "glibc" in (machine.get("platform") or "")


def thread_variables(machine: dict[str, Any]) -> str:
    """The thread variables ``machine`` (``describe_machine``) ran under, in words: ``NAME=VALUE, ...``, or ``""``."""
    return ", ".join(f"{name}={value}" for name, value in (machine.get("thread_env") or {}).items())


def machine_fingerprint(machine: dict[str, Any]) -> dict[str, Any]:
    """The parts of a machine description (``describe_machine``) that throughput depends on (``MACHINE_KEYS``); no
    thread variables set is None, as a description from before they were read says."""
    return {key: machine.get(key) or None if key == "thread_env" else machine.get(key) for key in MACHINE_KEYS}


def machine_id(machine: dict[str, Any]) -> str:
    """A short name of ``machine_fingerprint(machine)``: machines with the same id are alike for measuring (without
    thread variables, the name of a machine described before they were part of it)."""
    fingerprint = machine_fingerprint(machine)
    if fingerprint["thread_env"] is None:
        del fingerprint["thread_env"]
    canonical = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


@functools.cache
def this_machine_id() -> str:
    """``machine_id`` of the machine this process runs on."""
    return machine_id(describe_machine())


def _gpu_driver() -> str | None:
    """The NVIDIA driver's version, from NVML (None where NVML cannot tell)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return str(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _cpu_info(field: str) -> str:
    """The first value of ``field`` in /proc/cpuinfo; "" where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
