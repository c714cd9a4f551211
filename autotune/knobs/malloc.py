"""glibc malloc: whether freed memory goes back to the operating system or is kept for the next step."""

from __future__ import annotations

import ctypes
import platform

from autotune.knobs._base import ChoiceKnob, Role, SearchContext, Target

# mallopt parameters (glibc's malloc.h) and the values "keep" sets: allocations up to 32 MiB (glibc's largest
# threshold on 64-bit) come from the heap rather than fresh mappings, and freed heap memory is not trimmed.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP = {_M_MMAP_THRESHOLD: 32 * 2**20, _M_TRIM_THRESHOLD: 2**31 - 1}
ENVIRONMENT = {
    "MALLOC_MMAP_THRESHOLD_": str(_KEEP[_M_MMAP_THRESHOLD]),
    "MALLOC_TRIM_THRESHOLD_": str(_KEEP[_M_TRIM_THRESHOLD]),
}


class MallocKnob(ChoiceKnob):
    name = "malloc"
    role = Role.UNTIMED  # process-wide and for good once set: the probe, one process, cannot time both values
    applies_to = (Target.PROCESS,)
    baseline_default = "default"
    description = (
        "glibc malloc (Linux): default returns large freed blocks to the OS and adapts when it does, so a training "
        "step's activations may land on fresh pages, faulted in again every step; keep reuses freed memory instead "
        "(more resident memory). Apply it with rec.apply_process_settings(), or the environment variables "
        + " ".join(f"{key}={value}" for key, value in ENVIRONMENT.items())
        + " set before Python starts (glibc reads them once, at start: os.environ in the script does nothing)."
    )
    choices = ("default", "keep")
    memory_order = ("default", "keep")  # keep holds the freed memory default returns

    def unavailable_reason(self, value: str, ctx: SearchContext) -> str | None:
        """keep off glibc: ``apply`` raises, so every run with it fails."""
        if value == "keep" and platform.libc_ver()[0] != "glibc":
            return "malloc=keep tunes glibc's allocator; this Python does not run on glibc"
        return None

    def apply(self, value: str, setup) -> None:
        """Set glibc's thresholds; raises RuntimeError where this process's C library has no mallopt (musl, macOS)
        or refuses them: a configuration said to keep memory must not run without."""
        if value != "keep":
            return
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
        if mallopt is None or not all(mallopt(parameter, setting) for parameter, setting in _KEEP.items()):
            libc = " ".join(platform.libc_ver()).strip() or "not glibc"
            raise RuntimeError(
                f"malloc=keep tunes glibc's allocator, which this process does not run on ({libc}): "
                "set malloc: default, or run on Linux with glibc"
            )
