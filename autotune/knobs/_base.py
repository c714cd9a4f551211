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
    dimensions of one batched input tensor (None when the input is not a tensor);
    ``optimizer_options`` the implementation switches ("foreach", "fused") the pipeline's optimizer
    accepts and can run here. With ``batch_policy`` "fixed_effective", the batch size is a micro-batch
    and gradients are accumulated up to the baseline's batch size.
    """

    device: str
    cpu_count: int
    bf16_supported: bool
    dataset_len: int
    input_ndim: int | None
    baseline: dict[str, Any]
    optimizer_options: frozenset[str] = frozenset()
    batch_policy: str = "free"


class Knob(ABC):
    """One tunable setting.

    A knob validates values (``parse``), proposes candidates for a machine and pipeline
    (``default_candidates``), says why a value cannot run here (``unavailable_reason``) and
    applies a value to a training setup (``apply``). A knob that only means something given the
    values of knobs before it in the registry (e.g. prefetching needs worker processes) says so in
    ``active``; an inactive knob's value is None and it is never searched. Knobs are stateless singletons.
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

    def active(self, earlier: dict[str, Any]) -> bool:
        """Whether this knob applies, given the values of the knobs before it in the registry."""
        return True

    inactive_because: ClassVar[str] = ""

    @abstractmethod
    def apply(self, value: Any, setup: TrainingSetup) -> None:
        """Change ``setup`` so that training runs with ``value``."""


class WorkerKnob(Knob):
    """A DataLoader option that exists only with worker processes (num_workers > 0)."""

    inactive_because = "only applies with num_workers > 0"

    def active(self, earlier: dict[str, Any]) -> bool:
        return earlier["num_workers"] > 0


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
