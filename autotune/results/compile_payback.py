"""What torch.compile in a recommendation costs before training starts, and after how many training steps the time
it saves has paid that back: from the recommendation's measured compile time and its throughput beside the same
configuration's without compile (the trim's race, else a trial of the study). Nothing here measures."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.knobs import KNOBS
from autotune.records import record_name
from autotune.results.model import StudyResults
from autotune.results.summary import Summary

_PLAIN = KNOBS["compile"].baseline_default


@dataclass(frozen=True)
class CompilePayback:
    """The recommendation compiles for ``compile_s`` seconds before its first step, then trains at ``compiled_sps``
    samples/s where the same configuration without compile trains at ``plain_sps`` (None: never measured), as
    ``plain_by`` measured the two; ``batch_size`` samples a step."""

    compile_s: float
    compiled_sps: float
    plain_sps: float | None
    plain_by: str
    batch_size: int

    @property
    def steps(self) -> float | None:
        """The batches after which the seconds each batch saves add up to ``compile_s``; None where compile saves
        nothing per batch, or the configuration without it was not measured."""
        if self.plain_sps is None:
            return None
        saved_s = self.batch_size / self.plain_sps - self.batch_size / self.compiled_sps
        return self.compile_s / saved_s if saved_s > 0 else None

    def sentences(self) -> list[str]:
        """What the report says of it."""
        up_front = f"torch.compile takes {self.compile_s:.0f} s before the first training step"
        if self.plain_sps is None:
            return [
                f"{up_front}; the recommendation without it, every other knob as recommended, was not measured, so "
                "its payback is unknown (mode=benchmark measures it: recommended - compile)."
            ]
        rates = f"{self.plain_sps:.1f} → {self.compiled_sps:.1f} samples/s ({self.plain_by})"
        if self.steps is None:
            return [f"{up_front} and saves nothing per step ({rates}): it never pays back."]
        seconds = self.steps * self.batch_size / self.compiled_sps
        training = f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
        return [
            f"{up_front}; against the same configuration without it ({rates}) it pays that back after "
            f"{self.steps:,.0f} batches of {self.batch_size} (about {training} of training): worth it for runs "
            "longer than that. The compile time is the study's, whose compile cache (measure.compile_cache_dir) may "
            "have been warm: a first compile can take longer."
        ]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "steps": self.steps}


def compile_payback(results: StudyResults, summary: Summary) -> CompilePayback | None:
    """The payback of the recommendation's torch.compile; None where it does not compile."""
    recommended = summary.recommended
    knobs = recommended.result.knobs
    timing = recommended.result.timing
    if summary.is_baseline or knobs["compile"] == _PLAIN or timing is None:
        return None
    plain = {**knobs, "compile": _PLAIN}
    batch = knobs["batch_size"]
    for trim in summary.trim:
        raced = [f for f in trim.finalists if f.throughputs]
        leader = next((f for f in raced if f.knobs == knobs), None)
        twin = next((f for f in raced if f.knobs == plain), None)
        if leader is not None and twin is not None:
            return CompilePayback(timing.compile_s, leader.median, twin.median, "medians of the trim's race", batch)
    measured = next((r for r in results.records if r.result.ok and r.result.knobs == plain), None)
    if measured is None:
        return CompilePayback(timing.compile_s, recommended.throughput, None, "", batch)
    by = f"single runs of {record_name(recommended.label)} and {record_name(measured.label)}"
    return CompilePayback(timing.compile_s, recommended.throughput, measured.throughput, by, batch)
