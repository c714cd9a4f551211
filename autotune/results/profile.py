"""A profiling run as saved (profile.json, or a tuning study's TunedProfiles) and the diagnosis derived from it:
saved first, rendered from the saved record, so a report re-renders without profiling again."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.measure.environment import has_16_bit_units, runs_glibc
from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import (
    contention_finding,
    fault_finding,
    gc_finding,
    leaks,
    saturation_finding,
    verdict,
)
from autotune.results.remedies import advise
from autotune.results.remedy_model import Advice, Tried


@dataclass(frozen=True)
class Diagnosis:
    """The ``verdict``, the ``rules`` tried to reach it (each figure against its threshold, the deciding one last),
    the ``findings`` beside it (other processes busy on the cores, a possible leak, garbage-collection pauses,
    saturated cores, fresh pages faulted in), the ranked ``advice``, and the verdict in a few words with its figures
    (``gist``: "data-bound (waiting for data 60%)")."""

    verdict: str
    rules: list[str]
    findings: list[str] = field(default_factory=list)
    advice: list[Advice] = field(default_factory=list)
    gist: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProfileRecord:
    """One profiled configuration (``label``: "baseline", or what gave it) of ``pipeline`` on ``device``: its
    ``knobs``, the machine, what the run found (``result``; None where it failed, with ``failure`` saying why), the
    trace file it wrote, what the stored study ``study`` tried (``tried``; None where there is no such study), how
    long the profiling run took (``wall_s``, process start to exit), and the command that would tune the pipeline
    so profiled (``tune_command``: mode=profile's own arguments but the mode; None: a tuning run's profile), and
    the batch its gradients are accumulated up to (``effective_batch_size``: search.batch_policy=fixed_effective's;
    None: none, or a record saved before it was kept), which the advice's configurations must run beside; and why
    the inspection found the model cannot go channels-last (``channels_last_refused``:
    ``PipelineFacts.channels_last_refused``; None: it can, or a record saved before it was kept), which the advice
    honours."""

    pipeline: str
    device: str
    label: str
    knobs: dict[str, Any]
    machine: dict[str, Any]
    study: str
    result: ProfileResult | None = None
    failure: str | None = None
    tried: Tried | None = None
    wall_s: float | None = None
    tune_command: str | None = None
    effective_batch_size: int | None = None
    channels_last_refused: str | None = None

    @property
    def diagnosis(self) -> Diagnosis | None:
        """What limits the configuration and what to change; None without a result."""
        if self.result is None:
            return None
        decided, tried_rules = verdict(self.result)
        cores = self.machine.get("cpu_count") or 1
        contention = contention_finding(self.result)  # first: it qualifies every figure and advice after it
        findings = ([contention] if contention else []) + [str(leak) for leak in leaks(self.result)]
        lines = (gc_finding(self.result), saturation_finding(self.result, cores), fault_finding(self.result))
        findings += [line for line in lines if line]
        sixteen_bit = has_16_bit_units(self.machine, self.device)
        advice = advise(
            self.result,
            decided,
            self.knobs,
            cores,
            self.tried,
            sixteen_bit,
            runs_glibc(self.machine),
            self.effective_batch_size,
            self.channels_last_refused,
        )
        if self.tried is None and any(a.knob for a in advice):
            named = f" study.name={self.study}" if self.study != self.pipeline else ""
            command = self.tune_command or f"python -m autotune pipeline={self.pipeline}{named}"
            findings.append(
                f"no stored study '{self.study}' says whether the tuner tried the knobs advised: "
                f"{command} measures them"
            )
        figures = [tried_rules[0].gist] + ([tried_rules[-1].gist] if len(tried_rules) > 1 else [])
        gist = f"{decided} ({', '.join(figures)})"
        return Diagnosis(decided, [str(rule) for rule in tried_rules], findings, advice, gist)

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


@dataclass(frozen=True)
class TunedProfiles:
    """A tuning run's baseline and recommendation, each profiled after the race (``autotune/study/profiles.py``)
    and stored in its study, each as soon as it is made; ``recommended`` is None where the recommendation is to keep
    the baseline, or where a run stopped before it profiled the recommendation (``about`` then finds these not of a
    recommendation that changes something)."""

    baseline: ProfileRecord
    recommended: ProfileRecord | None = None

    def about(self, baseline: dict[str, Any], recommended: dict[str, Any] | None) -> bool:
        """Whether these profile the configurations ``baseline`` and ``recommended`` (None: keep the baseline)."""
        profiled = self.recommended.knobs if self.recommended else None
        return self.baseline.knobs == baseline and profiled == recommended

    @property
    def wall_s(self) -> float:
        """What the profiling runs took, in all."""
        return sum(r.wall_s or 0.0 for r in (self.baseline, self.recommended) if r is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_dict(),
            "recommended": self.recommended.to_dict() if self.recommended else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TunedProfiles:
        recommended = data.get("recommended")
        return cls(
            ProfileRecord.from_dict(data["baseline"]), ProfileRecord.from_dict(recommended) if recommended else None
        )
