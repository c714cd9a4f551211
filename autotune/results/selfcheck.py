"""What ``mode=selfcheck`` found: each configuration's throughput by the harness and by the plain loop, round by round.

The rule it reports by is written here once: the harness agrees with the plain loop when the 95 % interval of their
paired ratio lies within ``AGREEMENT`` of 1, and disagrees when it lies wholly outside that band. A self-check stopped
before its last round decides nothing (``SelfCheck.verdict``), as a stopped ``mode=check`` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.measure.stats import RatioInterval, ratio_interval
from autotune.results.benchmark import unless_stopped, without_computed

AGREEMENT = 0.03


@dataclass(frozen=True)
class ConfigurationCheck:
    """One configuration's rounds: samples/s by the harness and by the plain loop (None where that run failed),
    the epochs the plain loop began inside its window, and a line per failed run."""

    label: str
    knobs: dict[str, Any]
    harness: list[float | None] = field(default_factory=list)
    plain: list[float | None] = field(default_factory=list)
    epoch_boundaries: list[int | None] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        """harness / plain for each round where both ran (a run stopped mid-round leaves its round with one)."""
        return [h / p for h, p in zip(self.harness, self.plain, strict=False) if h is not None and p is not None]

    @property
    def interval(self) -> RatioInterval | None:
        return ratio_interval(self.ratios)

    @property
    def verdict(self) -> str:
        """What its rounds read: agree, disagree, or unresolved (the interval spans an edge of the band: more rounds
        would tell); the self-check's verdict on it is ``SelfCheck.verdict``."""
        interval = self.interval
        if interval is None:
            return "unresolved"
        if 1 - AGREEMENT <= interval.low and interval.high <= 1 + AGREEMENT:
            return "agree"
        if interval.high < 1 - AGREEMENT or interval.low > 1 + AGREEMENT:
            return "disagree"
        return "unresolved"


@dataclass(frozen=True)
class SelfCheck:
    """A self-check of ``pipeline`` on ``device``: ``source`` says where the checked configurations came from;
    ``stopped``: its rounds did not all run (an interrupt, an error), so it decides nothing (False in a record written
    before it was kept)."""

    pipeline: str
    device: str
    rounds: int
    source: str
    machine: dict[str, Any]
    configurations: list[ConfigurationCheck]
    stopped: bool = False

    @property
    def complete_rounds(self) -> int:
        """The rounds in which every configuration ran by both loops, failed runs too."""
        return min((min(len(c.harness), len(c.plain)) for c in self.configurations), default=0)

    def verdict(self, configuration: ConfigurationCheck) -> str:
        """The verdict on ``configuration``: what its rounds read (``ConfigurationCheck.verdict``), unless the
        self-check stopped before its last round (``unless_stopped``)."""
        return unless_stopped(configuration.verdict, self.stopped)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for entry, check in zip(data["configurations"], self.configurations, strict=True):
            interval = check.interval
            entry.update(
                ratios=check.ratios, interval=asdict(interval) if interval else None, verdict=self.verdict(check)
            )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SelfCheck:
        """The record ``to_dict`` wrote, the keys it computes dropped (``without_computed``); TypeError naming a key
        it does not know."""
        written = SelfCheck("", "", 0, "", {}, [ConfigurationCheck("", {})]).to_dict()  # the same whatever the figures
        written_by_configuration = written["configurations"][0]
        checks = [
            ConfigurationCheck(**without_computed(entry, written_by_configuration, ConfigurationCheck))
            for entry in data["configurations"]
        ]
        return cls(**{**without_computed(data, written, SelfCheck), "configurations": checks})
