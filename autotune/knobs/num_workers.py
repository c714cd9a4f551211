"""DataLoader worker processes."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import Knob, Role, SearchContext, Target, parse_int

# Workers beyond the cores, where loading waits more than it works: at most this many a core (each holds the dataset
# object and its prefetched batches); more is not searched, nor advised.
WORKERS_A_CORE = 4


class NumWorkersKnob(Knob):
    name = "num_workers"
    role = Role.LOADER
    applies_to = (Target.LOADER,)
    baseline_default = 0
    description = (
        "DataLoader worker processes preparing batches in parallel with training (0 = in the training process)."
    )

    def parse(self, value: Any) -> int:
        return parse_int(value, minimum=0)

    def default_candidates(self, ctx: SearchContext) -> list[int]:
        """0 to 4 workers, then steps of about 1.5x (6, 8, 12, 16, 24, ...) up to one per usable CPU core, the
        core count itself, ``beyond_cores`` and the baseline's count: not every count, as the probe times each, and
        neighbouring counts that many cores up differ little."""
        ladder = {0, 1, 2, 3, 4} | {factor * 2**power for power in range(1, 16) for factor in (2, 3)}
        counts = {count for count in ladder if count <= ctx.cpu_count} | {ctx.cpu_count, beyond_cores(ctx.cpu_count)}
        baseline = ctx.baseline.get("num_workers")
        if isinstance(baseline, int) and 0 <= baseline <= beyond_cores(ctx.cpu_count):
            counts.add(baseline)
        return sorted(counts)

    def unavailable_reason(self, value: int, ctx: SearchContext) -> str | None:
        if value > 1 and ctx.repeats_in_workers:
            return repeated_stream(value)
        return None

    def wasteful_reason(self, value: int, ctx: SearchContext) -> str | None:
        if value > WORKERS_A_CORE * ctx.cpu_count:
            return (
                f"{value} workers on the {ctx.cpu_count} cores trials run on is more than {WORKERS_A_CORE} a core, "
                "which even loading that waits on files or the network does not fill: more only add processes and "
                "memory"
            )
        return None

    def apply(self, value: int, setup) -> None:
        setup.loader_kwargs["num_workers"] = value


def beyond_cores(cores: int) -> int:
    """The one worker count searched beyond ``cores``: twice them, at most 32 more. Loading that waits (files, the
    network) rather than computes leaves cores idle that more workers fill; the probe reads the CPU loading takes
    and predicts them faster only then (``autotune/study/probe_model.py``)."""
    return min(2 * cores, cores + 32)


# What makes more than one worker load a stream (an IterableDataset) that gives each the same samples.
SPLIT_STREAM = "split the stream across workers by torch.utils.data.get_worker_info()"


def repeated_stream(workers: int) -> str:
    """Why ``workers`` DataLoader workers cannot load a stream that gives each of them the same samples."""
    return (
        f"the dataset, an IterableDataset, gives every DataLoader worker the same samples, so {workers} workers would "
        f"train on each sample {workers} times an epoch, where 0 or 1 read it once; {SPLIT_STREAM} (PyTorch's "
        "IterableDataset documentation) to have more than one (a stream of random samples: draw them from a "
        "generator seeded by get_worker_info().seed)"
    )
