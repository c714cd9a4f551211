"""Profiling records built to order, for the rules and the advice."""

from __future__ import annotations

from autotune.measure.gc_pauses import GcPauses
from autotune.measure.hotspots import HotFunction, Hotspots
from autotune.measure.page_faults import PageFaults
from autotune.measure.profiling import (
    DEVICE_WAIT,
    MemoryTrend,
    OperatorProfile,
    OperatorStat,
    ProfileResult,
    StageTiming,
)

STEPS, LOOP_S = 10, 0.1


def profile_result(
    wait_share: float = 0.1,
    compute_share: float = 0.8,
    small_operators: float = 0.0,
    device_busy: float | None = None,
    tree_mb: list[float] | None = None,
    loading_s: float | None = None,
    num_workers: int = 0,
    optimizer_share: float = 0.05,
    transfer_share: float = 0.0,
    gc_share: float = 0.0,
    functions: list[HotFunction] | None = None,
    collate_share: float = 0.05,
    faults: PageFaults | None = None,
    device_wait_s: float | None = 0.0,
) -> ProfileResult:
    """A profiled configuration whose step of ``LOOP_S`` waits ``wait_share`` of it for data; whose model step spends
    ``small_operators`` of its time in operators under 10 µs a call and splits the rest between matrix products
    (``compute_share``) and elementwise operators; on a GPU (``device_busy`` given) busy that share of it, its host
    waiting for it ``device_wait_s`` beyond, timed apart as the trace times it (``DEVICE_WAIT``; None: a trace
    stored before it did)."""
    wait, transfer = wait_share * LOOP_S, transfer_share * LOOP_S
    step = LOOP_S - wait - transfer
    loading = wait if loading_s is None else loading_s
    stages = StageTiming(
        steps=STEPS,
        batch_size=16,
        num_workers=num_workers,
        wall_s=STEPS * LOOP_S,
        wait_s=[wait] * STEPS,
        transfer_s=[transfer] * STEPS,
        forward_s=[0.3 * step] * STEPS,
        optimizer_s=[optimizer_share * LOOP_S] * STEPS,
        step_s=[step] * STEPS,
        fetch_s=[loading * (1 - collate_share)] * STEPS,
        collate_s=[loading * collate_share] * STEPS,
    )
    traced = 2 * step
    work = traced * (1 - small_operators)
    busy = (device_busy or 0.0) * traced
    operators = [
        OperatorStat("aten::mm", 10, work * compute_share, busy * compute_share),
        OperatorStat("aten::add", 10, work * (1 - compute_share), busy * (1 - compute_share)),
        OperatorStat("aten::view", max(1, int(traced * small_operators / 2e-6)), traced * small_operators),
    ]
    on_gpu = device_busy is not None
    waits = [OperatorStat(DEVICE_WAIT, 2, device_wait_s)] if on_gpu and device_wait_s is not None else []
    total = sum(f.self_s for f in functions or [])
    return ProfileResult(
        stages=stages,
        memory=MemoryTrend(tree_mb or [300.0] * STEPS),
        gc=GcPauses(wall_s=1.0, collections=[5, 0, 0], total_s=gc_share, longest_s=gc_share / 5),
        operators=OperatorProfile(
            2, "t.pt.trace.json", "cuda" if on_gpu else "cpu", traced, 0.0, operators, operators + waits
        ),  # fmt: skip
        hotspots=Hotspots(
            4, 64, 1, num_workers, total or 1.0, 0.9 * (total or 1.0), collate_share * (total or 1.0), functions or []
        ),  # fmt: skip
        sample_bytes=1024,
        dataset_len=1000,
        faults=faults,
    )


def hot(name: str, self_s: float, own: bool = False, call_site: str | None = "data.py:12") -> HotFunction:
    """A hot function of ``self_s`` seconds, called from ``call_site`` in the user's code."""
    return HotFunction(name, None, self_s, self_s, 10, own, None if own else call_site, "__getitem__")
