"""The knob contract: a named setting with candidate values, applicability, its role in the search, its baseline
default and an apply step, and the training setup that knobs change."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


class Role(Enum):
    """How the search treats a knob. The differential probe times the DataLoader alone and the model step alone
    (``autotune/study/``): LOADER knobs at each of their values in the loader; COMPUTE knobs on a cached batch at
    the baseline's batch size, ACTIVATIONS knobs (they act on activations, so their gain changes with the batch
    size) at every batch size. WORKER_OPTION knobs are not timed: the configurations the probe steers to take their
    ``preferred`` value. UNTIMED knobs are not timed either: each is tried by measuring the best configuration with
    it changed, the ``costly`` ones last."""

    LOADER = "loader"
    WORKER_OPTION = "worker option"
    COMPUTE = "compute"
    ACTIVATIONS = "compute, at every batch size"
    UNTIMED = "untimed"


class Target(Enum):
    """What a knob's ``apply`` changes: the TrainingSetup ``fields`` it may write, or the process (threads,
    allocator, cuDNN), which no field holds. A training script applies each where it builds that thing
    (``autotune.Recommendation``)."""

    PROCESS = ()
    LOADER = ("loader_kwargs",)
    BATCH = ("non_blocking_copy", "input_memory_format")  # how each batch goes to the device
    MODEL = ("model",)
    PRECISION = ("autocast_dtype", "grad_scaler")
    OPTIMIZER = ("optimizer_kwargs",)
    GRADIENTS = ("zero_grad_to_none",)  # how each step clears them

    @property
    def fields(self) -> tuple[str, ...]:
        return self.value


REQUIRED = object()  # the baseline_default of a knob every pipeline must set


@dataclass
class TrainingSetup:
    """Everything a knob may change before training starts."""

    model: torch.nn.Module
    device: torch.device
    loader_kwargs: dict[str, Any] = field(default_factory=dict)
    non_blocking_copy: bool = False
    input_memory_format: torch.memory_format | None = None  # None: each batch as it comes
    autocast_dtype: torch.dtype | None = None
    grad_scaler: Any = None
    optimizer_kwargs: dict[str, Any] = field(default_factory=dict)
    zero_grad_to_none: bool = True


@dataclass(frozen=True)
class SearchContext:
    """What knobs may look at to decide their candidates: the machine and the pipeline.

    ``device`` is the kind of device the trials run on, "cpu" or "cuda" (whichever GPU measure.device names);
    ``bf16_supported`` whether it computes in bfloat16 in hardware (``has_16_bit_units``: a GPU that emulates it does
    not, nor a CPU without avx512_bf16 or AMX, where bf16 autocast still runs, for the trials to measure).
    ``baseline`` holds the knob values the user runs today; ``input_ndim`` is the number of
    dimensions of one batched input tensor (None when the input is not a tensor);
    ``optimizer_options`` the implementations ("for_loop", "foreach", "fused") the pipeline's optimizer
    accepts and can run here. With ``batch_policy`` "fixed_effective", the batch size is a micro-batch
    and gradients are accumulated up to the baseline's batch size. ``torch_threads`` is the intra-op thread
    count torch starts with in a fresh process here (None: unknown). ``gpu_visible``: whether the trials see a GPU
    (the DataLoader pins memory where one is, whatever device the model runs on). ``dataset_len`` is None for a
    stream with no length; ``repeats_in_workers``: the dataset is a stream that gives every DataLoader worker the
    same samples (``PipelineFacts``); ``channels_last_refused``: why the model cannot be converted to channels_last
    (what torch raised: a 5-D parameter or buffer beside 4-D inputs), None where it can; ``optimizer_default``: the
    implementation the optimizer's default runs here, as the inspection saw it ("for_loop", "foreach" or "fused";
    None: not seen).
    """

    device: str
    cpu_count: int
    bf16_supported: bool
    dataset_len: int | None
    input_ndim: int | None
    baseline: dict[str, Any]
    optimizer_options: frozenset[str] = frozenset()
    batch_policy: str = "free"
    torch_threads: int | None = None
    gpu_visible: bool = False
    repeats_in_workers: bool = False
    channels_last_refused: str | None = None
    optimizer_default: str | None = None

    @property
    def effective_batch_size(self) -> int | None:
        """The batch gradients are accumulated up to (``accumulated_to``), or None."""
        return accumulated_to(self.batch_policy, self.baseline)


# search.batch_policy's values: the batch size varies, or is a micro-batch of the baseline's (``accumulated_to``).
BATCH_POLICIES = ("free", "fixed_effective")


def accumulated_to(batch_policy: str, baseline: dict[str, Any]) -> int | None:
    """The batch gradients are accumulated up to under ``batch_policy``: the ``baseline``'s with "fixed_effective"
    (each trial's batch a micro-batch of it), else None (every batch a step)."""
    return baseline["batch_size"] if batch_policy == "fixed_effective" else None


def whole_cycles(steps: int, step_multiple: int) -> int:
    """``steps`` rounded up to whole cycles of ``step_multiple`` steps: micro-batches to whole optimizer steps."""
    return -(-steps // step_multiple) * step_multiple


class Knob(ABC):
    """One tunable setting, and every fact about it.

    A knob validates values (``parse``), proposes candidates for a machine and pipeline (``default_candidates``), says
    why a value cannot run here (``unavailable_reason``: refused wherever it is given) or runs but is not worth
    searching (``wasteful_reason``) and applies a value to a training setup (``apply``). A knob that only means
    something given the values of knobs before it in the registry (e.g. prefetching needs worker processes) says so in
    ``active``; an inactive knob's value is None and it is never searched. A value that cannot run beside other knobs'
    values (CUDA graphs with gradients kept across steps) says so in ``conflict``: no configuration the search proposes,
    and no baseline, holds one. ``role`` is how the search treats it (``Role``); ``baseline_default`` the value a
    baseline that does not set it runs (PyTorch's own default, or REQUIRED); ``applies_to`` what ``apply`` changes
    (``Target``s); ``costly`` whether turning it on costs long one-off work in warm-up (compiling); ``changes_numerics``
    whether its values change the arithmetic, so that a trial's first loss is checked against fp32; ``redraws_random``
    whether a step under its values draws other random numbers than the eager step of the same seed (dropout masks
    compiled: the check then allows the loss's own spread). Knobs are stateless singletons.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    role: ClassVar[Role]
    applies_to: ClassVar[tuple[Target, ...]]
    baseline_default: ClassVar[Any]
    preferred: ClassVar[Any] = None
    costly: ClassVar[bool] = False
    changes_numerics: ClassVar[bool] = False
    redraws_random: ClassVar[bool] = False
    # Its values by the memory training keeps with them, least first, where they are so ordered (a value later
    # needs no less, so one earlier may fit where it ran out); None: they change no memory the training keeps.
    memory_order: ClassVar[tuple[Any, ...] | None] = None

    @abstractmethod
    def parse(self, value: Any) -> Any:
        """Return ``value`` in canonical form, or raise ValueError saying what is allowed."""

    @abstractmethod
    def default_candidates(self, ctx: SearchContext) -> list[Any]:
        """Candidate values worth trying on this machine for this pipeline."""

    def unavailable_reason(self, value: Any, ctx: SearchContext) -> str | None:
        """Why ``value`` cannot run here, or None when it can: a run with it fails, or does not train as asked
        (workers that each read the same samples). Every mode refuses such a value, naming the key: in the search,
        the baseline and a recommendation measured alike. A value that runs but gains nothing here says so in
        ``wasteful_reason`` instead."""
        return None

    def wasteful_reason(self, value: Any, ctx: SearchContext) -> str | None:
        """Why searching ``value`` here can only waste trials (it runs, and is never the faster for it), or None.
        The search refuses such a value given to it; a baseline or a recommendation holding one is measured all
        the same."""
        return None

    def searchable(self, value: Any, ctx: SearchContext) -> bool:
        """Whether ``value`` can run here and is worth a trial: neither ``unavailable_reason`` nor
        ``wasteful_reason`` rules it out."""
        return self.unavailable_reason(value, ctx) is None and self.wasteful_reason(value, ctx) is None

    def resolve(self, value: Any, ctx: SearchContext) -> Any:
        """What ``value`` means here once PyTorch's defaults are filled in: two values that resolve alike are one
        setting (the space keeps one of them, so a recommendation never lists a change that changes nothing)."""
        return value

    def active(self, earlier: dict[str, Any]) -> bool:
        """Whether this knob applies, given the values of the knobs before it in the registry."""
        return True

    def conflict(
        self, value: Any, knobs: dict[str, Any], effective_batch_size: int | None = None, device: str | None = None
    ) -> str | None:
        """Why ``value`` cannot run beside the other knobs' values in ``knobs`` (a configuration, or the knobs chosen
        so far: one not chosen yet is absent and conflicts with nothing), or None when it can.
        ``effective_batch_size`` is the batch gradients are accumulated up to (search.batch_policy=fixed_effective;
        None: no accumulation); ``device`` the kind of device it runs on, "cpu" or "cuda" (``SearchContext.device``;
        None where it is not known, judged as a GPU, where more conflicts hold)."""
        return None

    inactive_because: ClassVar[str] = ""

    @abstractmethod
    def apply(self, value: Any, setup: TrainingSetup) -> None:
        """Change ``setup`` so that training runs with ``value``. It runs in the trial (or the user's script), and
        imports torch there: the tuner's process reads the knobs and never imports torch."""


class WorkerKnob(Knob):
    """A DataLoader option that exists only with worker processes (num_workers > 0)."""

    inactive_because = "only applies with num_workers > 0"
    role = Role.WORKER_OPTION
    applies_to = (Target.LOADER,)

    def active(self, earlier: dict[str, Any]) -> bool:
        return earlier["num_workers"] > 0


class BoolKnob(Knob):
    """A knob that is on or off; both are candidates where ``searchable``."""

    def default_candidates(self, ctx: SearchContext) -> list[bool]:
        return [value for value in (False, True) if self.searchable(value, ctx)]

    def parse(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value


class ChoiceKnob(Knob):
    """A knob whose values are a fixed set of names; YAML's unquoted ``off`` (read as false) means "off"."""

    choices: ClassVar[tuple[str, ...]]

    def default_candidates(self, ctx: SearchContext) -> list[str]:
        """Each of ``choices`` where ``searchable``."""
        return [value for value in self.choices if self.searchable(value, ctx)]

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
