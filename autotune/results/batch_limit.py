"""The largest batch known to fit in memory and the smallest known not to, from what the trials and the probe ran."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.records import OutOfMemory, TrialRecord, record_name
from autotune.results.model import StudyResults


@dataclass(frozen=True)
class BatchEvidence:
    """A batch size and what showed it: "the baseline", "trial 3" or a setting of the probe."""

    batch_size: int
    shown_by: str


@dataclass(frozen=True)
class BatchLimit:
    """``fits``: the largest batch size that trained without running out of memory (the baseline, a trial or the
    probe's model step); ``out_of_memory``: the smallest that ran out (an allocation failed, killed for memory, or
    over the memory budget); each under the settings it ran with, None where nothing showed one."""

    fits: BatchEvidence | None
    out_of_memory: BatchEvidence | None

    def sentences(self) -> list[str]:
        """What the report says of it: one sentence where something ran out of memory, else none."""
        if self.out_of_memory is None:
            return []
        fits = f"; the largest batch that ran was {self.fits.batch_size} ({self.fits.shown_by})" if self.fits else ""
        return [
            f"Batch size {self.out_of_memory.batch_size} ran out of memory ({self.out_of_memory.shown_by}), so no "
            f"configuration that needs as much memory or more was measured after it{fits}."
        ]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def batch_limit(results: StudyResults) -> BatchLimit:
    """What the measured configurations and the probe's settings show of the batch sizes that fit."""
    fits = [BatchEvidence(r.result.knobs["batch_size"], record_name(r.label)) for r in results.records if _trained(r)]
    ran_out = [found for r in results.trials if (found := OutOfMemory.of_trial(r.label, r.result)) is not None]
    probe = results.probe
    if probe is not None and probe.result is not None:
        ran_out += probe.out_of_memory
        timed = zip(probe.plan.computes, probe.result.compute_throughputs, strict=True)
        sizes = {knobs["batch_size"] for knobs, rate in timed if rate is not None}
        fits += [BatchEvidence(size, f"the probe's model step at batch_size={size}") for size in sizes]
    smallest = min(ran_out, key=lambda found: found.knobs["batch_size"], default=None)
    return BatchLimit(
        max(fits, key=lambda evidence: evidence.batch_size, default=None),
        BatchEvidence(smallest.knobs["batch_size"], smallest.shown_by) if smallest else None,
    )


def _trained(record: TrialRecord) -> bool:
    """Whether ``record`` trained without running out of memory: measured (an incorrect loss too), or stopped after
    its first steps with a reading of them (pruned; an incorrect loss the pruner stopped)."""
    return record.result.ran_values
