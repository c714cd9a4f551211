"""The knob contract: a named setting with candidate values, applicability and an apply step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from autotune.pipeline.setup import TrainingSetup


@dataclass(frozen=True)
class SearchContext:
    """What knobs may look at to decide their candidates: the machine and the pipeline.

    ``baseline`` holds the knob values the user runs today; ``input_ndim`` is the number of
    dimensions of one batched input tensor (None when the input is not a tensor).
    """

    device: str
    cpu_count: int
    bf16_supported: bool
    dataset_len: int
    input_ndim: int | None
    baseline: dict[str, Any]


class Knob(ABC):
    """One tunable setting.

    A knob validates values (``parse``), proposes candidates for a machine and pipeline
    (``default_candidates``), says why a value cannot run here (``unavailable_reason``) and
    applies a value to a training setup (``apply``). Knobs are stateless singletons.
    """

    name: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def parse(self, value: Any) -> Any:
        """Return ``value`` in canonical form, or raise ValueError saying what is allowed."""

    @abstractmethod
    def default_candidates(self, ctx: SearchContext) -> list[Any]:
        """Candidate values worth trying on this machine for this pipeline."""

    def unavailable_reason(self, value: Any, ctx: SearchContext) -> str | None:
        """Why ``value`` cannot run here, or None when it can."""
        return None

    @abstractmethod
    def apply(self, value: Any, setup: TrainingSetup) -> None:
        """Change ``setup`` so that training runs with ``value``."""


class BoolKnob(Knob):
    """A knob that is on or off."""

    def parse(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value


class ChoiceKnob(Knob):
    """A knob whose values are a fixed set of names; YAML's unquoted ``off`` (read as false) means "off"."""

    choices: ClassVar[tuple[str, ...]]

    def parse(self, value: Any) -> str:
        if value is False:
            value = "off"
        if value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {value!r}")
        return value


def parse_int(value: Any, minimum: int) -> int:
    """Validate an integer knob value of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"expected an integer >= {minimum}, got {value}")
    return value
