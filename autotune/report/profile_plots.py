"""The profile's pictures, drawn from a saved profiling run; nothing here measures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.measure.profiling import MemoryTrend, StageTiming
from autotune.report.plots import BASELINE, Plot, legend_below
from autotune.words import percents

if TYPE_CHECKING:  # matplotlib is imported where a picture is drawn (``plots.png``), not by every command
    from matplotlib.axes import Axes

# One colour per stage, the same in both bars; the data pipeline's stages in warm colours.
STAGE_COLOURS = {
    "fetching samples": "#d62728",
    "collating": "#ff9896",
    "the DataLoader's own work": "#ffbb78",
    "waiting for data": "#ff7f0e",
    "to device and layout": "#9467bd",
    "forward": "#1f77b4",
    "loss and backward": "#6baed6",
    "optimizer step": "#2ca02c",
    "the rest of the step (zeroing gradients, the loop itself)": "#c7c7c7",
}


def stage_segments(stages: StageTiming) -> dict[str, float]:
    """The training process's step split into its stages, ms per step; without workers, the wait split into the
    fetching and collating it holds and the DataLoader's own rest."""
    fetch, collate, wait = (stages.mean(name) * 1e3 for name in ("fetch_s", "collate_s", "wait_s"))
    split = {
        "fetching samples": fetch,
        "collating": collate,
        "the DataLoader's own work": max(0.0, wait - fetch - collate),
    }
    segments = split if stages.num_workers == 0 else {"waiting for data": wait}
    segments |= {
        "to device and layout": stages.mean("transfer_s") * 1e3,  # the copy, and channels_last's conversion
        "forward": stages.mean("forward_s") * 1e3,
        "loss and backward": stages.mean("backward_s") * 1e3,
        "optimizer step": stages.mean("optimizer_s") * 1e3,
    }
    segments["the rest of the step (zeroing gradients, the loop itself)"] = max(
        0.0, stages.loop_s * 1e3 - sum(segments.values())
    )
    return segments


def stage_percents(stages: StageTiming) -> dict[str, int]:
    """``stage_segments``' stages in whole percents of the step, adding up as their shares do (``percents``): to
    100 % where they fill the step."""
    step_ms = stages.loop_s * 1e3
    return percents({stage: ms / step_ms for stage, ms in stage_segments(stages).items()})


def stage_bars(stages: StageTiming) -> Plot:
    """A stacked bar of a step's stages in the training process and, with workers, one of a batch in a worker."""
    bars = {"training process, per step": stage_segments(stages)}
    if stages.num_workers:
        fetch, collate = stages.mean("fetch_s") * 1e3, stages.mean("collate_s") * 1e3
        bars[f"a worker (of {stages.num_workers}), per batch"] = {"fetching samples": fetch, "collating": collate}
    caption = "Where a step's time goes: the training process's stages per step" + (
        ", and beside it what loading one batch costs a worker (the workers load in parallel with training)."
        if stages.num_workers
        else "; without workers, waiting for data is fetching and collating in the training process itself."
    )
    return _stacked(bars, caption, "ms")


def paired_stage_bars(configurations: dict[str, StageTiming]) -> Plot:
    """One stacked bar per configuration (name → its stages) of the training process's stages per sample, so that
    configurations of different batch sizes compare."""
    bars = {
        name: {stage: ms / stages.batch_size for stage, ms in stage_segments(stages).items()}
        for name, stages in configurations.items()
    }
    caption = (
        "Where the time goes, per sample, in each configuration's training process, from its own profiling run "
        "(slowed by its instruments: not the throughputs the report ranks and recommends by). With workers, loading "
        "shows as waiting for data only where the workers fall behind."
    )
    return _stacked(bars, caption, "ms per sample")


def _stacked(bars: dict[str, dict[str, float]], caption: str, unit: str) -> Plot:
    """A horizontal stacked bar per entry of ``bars`` (label → stage → value), stages in ``STAGE_COLOURS``' order."""

    def draw(ax: Axes) -> None:
        labels = list(bars)
        drawn: set[str] = set()
        for stage, colour in STAGE_COLOURS.items():
            widths = [bars[label].get(stage, 0.0) for label in labels]
            lefts = [sum(v for s, v in bars[label].items() if _before(s, stage)) for label in labels]
            label = stage if stage not in drawn and any(widths) else None
            ax.barh(labels, widths, left=lefts, color=colour, label=label)
            drawn.add(stage)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        legend_below(ax)

    return Plot(caption, draw, height=1.6 + 0.4 * len(bars))


def _before(stage: str, other: str) -> bool:
    order = list(STAGE_COLOURS)
    return order.index(stage) < order.index(other)


def memory_trend(trend: MemoryTrend) -> Plot:
    """Memory after each sampled step: a leak climbs steadily."""

    def draw(ax: Axes) -> None:
        steps = range(1, len(trend.tree_mb) + 1)
        ax.plot(
            steps,
            trend.tree_mb,
            "o-",
            color=BASELINE,
            markersize=3,
            label=f"host ({trend.metric.upper()}, with workers)",
        )
        if trend.cuda_allocated_mb is not None:
            ax.plot(steps, trend.cuda_allocated_mb, "o-", color="#1f77b4", markersize=3, label="CUDA allocated")
        ax.set_xlabel("step of the sample")
        ax.set_ylabel("MiB")
        legend_below(ax)

    return Plot("Memory after each step of the sample: a steady climb is a possible leak.", draw, height=2.6)
