"""A finalist of the race (``Finalist``): its record, and the names of the race's runs."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from autotune.trial.result import TrialResult


class Left(str, Enum):
    """The rule a finalist left its race by (``run_race``): a run of it failed; it lost more rounds to the baseline
    than a proof allows (``unprovable``); it fell a margin behind the leader or the configuration it was made from
    (``lagging``); that configuration beat it whatever the rounds left read (``beaten_for_good``); the race was
    decided for another (``decided``); or, before the race, another finalist's trim races it (``left_to_trims``)."""

    FAILED = "failed"
    UNPROVABLE = "unprovable"
    LAGGING = "lagging"
    BEATEN = "beaten"
    DECIDED = "decided"
    TRIMMED = "trimmed"


@dataclass
class Finalist:
    """A configuration re-measured in the confirmation race. ``changes`` counts the knobs it changes from the
    baseline; ``throughputs`` holds one run per round it took part in, and ``peak_memories`` each of those runs' peak
    memory (``TrialResult.peak_memory_mb``; None where not read, or in a race stored before they were kept);
    ``dropped`` says why it left early, in words, ``left`` by which rule (None in a race stored before it was kept),
    and ``failed_round`` which round's run failed where that is why.
    ``result`` is the first run of a configuration that is no trial of the study (a variant of the winner with one
    change undone), so that it can be recommended with its measurement; its peak memory is that run's."""

    label: str
    knobs: dict[str, Any]
    changes: int
    peak_memory_mb: float | None
    throughputs: list[float] = field(default_factory=list)
    dropped: str | None = None
    result: TrialResult | None = None
    failed_round: int | None = None
    peak_memories: list[float | None] = field(default_factory=list)
    left: Left | None = None

    def leave(self, rule: Left, why: str) -> None:
        """Drop it from the race by ``rule``, saying ``why``."""
        self.left, self.dropped = rule, why

    def to_dict(self) -> dict[str, Any]:
        return {**record_fields(self), "result": self.result.to_dict() if self.result else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finalist:
        result = data.get("result")
        failed_round = data["failed_round"] if "failed_round" in data else _said_failed_round(data.get("dropped"))
        memories = data.get("peak_memories", unread_memories(data.get("throughputs", [])))
        left = Left(data["left"]) if data.get("left") else None
        read = {"result": TrialResult.from_dict(result) if result else None, "failed_round": failed_round, "left": left}
        return cls(**{**data, **read, "peak_memories": memories})

    def fail(self, failure: object) -> None:
        """Drop it from the race: its run of the round after those it ran failed with ``failure``
        (``_failed_in_round`` says why)."""
        self.failed_round = len(self.throughputs) + 1
        self.leave(Left.FAILED, _failed_in_round(self.failed_round, failure))

    def record_run(self, result: TrialResult) -> None:
        """Count ``result``, its run of the round after those it ran: its throughput and its peak memory."""
        self.throughputs.append(result.timing.throughput)
        self.peak_memories.append(result.peak_memory_mb)

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


def median_memory(peak_memories: list[float | None]) -> float | None:
    """The median of the race runs' peak memories that were read; None where none was (a race stored before they
    were kept)."""
    read = [memory for memory in peak_memories if memory is not None]
    return statistics.median(read) if read else None


def unread_memories(throughputs: list[float]) -> list[None]:
    """The peak memories of a race stored before they were kept, one a run of ``throughputs``: none read. Each run
    keeps its place, so that the rounds a resumed race adds or takes back stay paired with their throughputs."""
    return [None] * len(throughputs)


def _failed_in_round(index: int, failure: object) -> str:
    """Why a finalist whose run of round ``index`` failed with ``failure`` left the race (``Finalist.dropped``), as
    ``_said_failed_round`` reads it back."""
    return f"round {index} failed: {failure}"


# How ``_failed_in_round`` says, in ``dropped``, which round's run failed: read back from a race stored before
# ``Finalist.failed_round`` was kept.
_FAILED_ROUND_SAID = re.compile(r"round (\d+) failed: ")


def _said_failed_round(dropped: str | None) -> int | None:
    """The round whose run failed, read from ``dropped`` as a race stored before ``Finalist.failed_round`` was kept
    says it (``_failed_in_round``); None where it says no such thing."""
    said = _FAILED_ROUND_SAID.match(dropped or "")
    return int(said.group(1)) if said else None


def run_name(prefix: str, label: str | None) -> str:
    """The name of a race run (its files' name): PREFIX-baseline, or PREFIX-trial-LABEL for finalist ``label``."""
    return prefix + run_suffix(label)


def round_of(name: str) -> str:
    """The round (PREFIX) of race run ``name``, as ``run_name`` made it."""
    return name.removesuffix("-baseline") if name.endswith("-baseline") else name.split("-trial-", 1)[0]


def run_suffix(label: str | None) -> str:
    """The end of the name of ``label``'s race runs (None: the baseline's), after their round (``run_name``)."""
    return "-baseline" if label is None else "-trial-" + re.sub(r"[^\w.-]+", "-", label)


def record_fields(record: object) -> dict[str, Any]:
    """A record's fields, one level deep (``asdict`` would convert the nested records its caller converts itself)."""
    return {item.name: getattr(record, item.name) for item in fields(record)}
