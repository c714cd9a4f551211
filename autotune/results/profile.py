"""A profiling run as saved (profile.json) and the diagnosis derived from it: saved first, rendered from the saved
record, so a report re-renders without profiling again."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import gc_finding, leaks, saturation_finding, verdict
from autotune.results.remedies import Advice, Tried, advise


@dataclass(frozen=True)
class Diagnosis:
    """The ``verdict``, the ``rules`` tried to reach it (each figure against its threshold, the deciding one last),
    the ``findings`` beside it (a possible leak, garbage-collection pauses) and the ranked ``advice``."""

    verdict: str
    rules: list[str]
    findings: list[str] = field(default_factory=list)
    advice: list[Advice] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProfileRecord:
    """One profiled configuration (``label``: "baseline", or what gave it) of ``pipeline`` on ``device``: its
    ``knobs``, the machine, what the run found (``result``; None where it failed, with ``failure`` saying why), the
    trace file it wrote, and what the stored study ``study`` tried (``tried``; None where there is no such study)."""

    pipeline: str
    device: str
    label: str
    knobs: dict[str, Any]
    machine: dict[str, Any]
    study: str
    result: ProfileResult | None = None
    failure: str | None = None
    tried: Tried | None = None

    @property
    def diagnosis(self) -> Diagnosis | None:
        """What limits the configuration and what to change; None without a result."""
        if self.result is None:
            return None
        decided, tried_rules = verdict(self.result)
        cores = self.machine.get("cpu_count") or 1
        findings = [str(leak) for leak in leaks(self.result)]
        findings += [line for line in (gc_finding(self.result), saturation_finding(self.result, cores)) if line]
        advice = advise(self.result, decided, self.knobs, cores, self.tried, self.study)
        return Diagnosis(decided, [str(rule) for rule in tried_rules], findings, advice)

    def to_dict(self) -> dict[str, Any]:
        """The record, and the diagnosis derived from it (for readers of the JSON; not read back)."""
        diagnosis = self.diagnosis
        return {
            **asdict(self),
            "result": self.result.to_dict() if self.result else None,
            "diagnosis": diagnosis.to_dict() if diagnosis else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileRecord:
        fields = {key: value for key, value in data.items() if key != "diagnosis"}
        result, tried = fields.get("result"), fields.get("tried")
        return cls(
            **{
                **fields,
                "result": ProfileResult.from_dict(result) if result else None,
                "tried": Tried(**tried) if tried else None,
            }
        )
