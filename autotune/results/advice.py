"""What a recommended batch size means for training: learning rate, or gradient accumulation."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.recommendation import batch_scale
from autotune.results.model import StudyResults
from autotune.results.summary import Summary

# torch.optim's optimizers by the learning-rate scaling rule published for them (``batch_scale``): the linear rule
# for SGD, with or without momentum (Goyal et al., 2017), the square-root rule for the adaptive ones (Malladi et al.,
# 2022). Any other class gets the linear rule, and the note says it was assumed.
_RULES = {
    "SGD": "linear",
    **dict.fromkeys(
        ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adagrad", "RMSprop", "Adadelta"), "square-root"
    ),
}
_RULE_NAMES = {"linear": "the linear scaling rule", "square-root": "the square-root scaling rule"}


@dataclass(frozen=True)
class BatchAdvice:
    """The recommended batch size against the baseline's.

    Under batch_policy "free" a larger or smaller batch changes optimisation: the learning rate suggested
    follows ``rule``, chosen from the pipeline's ``optimizer`` class (``optimizer_rule``). Under
    "fixed_effective" the batch is a micro-batch and ``accumulation_steps`` micro-batches make one optimizer
    step of the baseline's size: the same effective batch and learning rate, but layers that compute
    statistics over the batch (BatchNorm) see each micro-batch alone.
    """

    policy: str
    baseline_batch_size: int
    batch_size: int
    accumulation_steps: int
    learning_rate: float | None = None
    suggested_learning_rate: float | None = None
    rule: str = "linear"
    optimizer: str | None = None

    def describe(self) -> str:
        before, after = self.baseline_batch_size, self.batch_size
        if before == after:  # under fixed_effective too: one micro-batch per step is the baseline's batch
            return f"Batch size unchanged ({before}): the batch per optimizer step and its learning rate stay."
        if self.policy == "fixed_effective":
            return (
                f"Micro-batches of {after} with {self.accumulation_steps} gradient-accumulation steps make the "
                f"baseline's {before} samples per optimizer step (search.batch_policy=fixed_effective): the same "
                "effective batch and learning rate, but layers that compute statistics over the batch (BatchNorm) "
                f"see micro-batches of {after}."
            )
        return (
            f"The batch size changes from {before} to {after}, which changes training: by {self._rule_named()} "
            f"scale the learning rate by {batch_scale(after / before, self.rule):g}{self._rates()}, use a warm-up "
            "for large increases, and check convergence. To keep the batch per optimizer step, tune with "
            "search.batch_policy=fixed_effective."
        )

    def _rule_named(self) -> str:
        """The rule by name, saying where it was assumed for an optimizer autotune does not know."""
        named = _RULE_NAMES[self.rule]
        if optimizer_rule(self.optimizer) is not None:
            return named
        which = f" {self.optimizer}" if self.optimizer else ""
        return f"{named} (assumed: autotune does not know the optimizer{which})"

    def _rates(self) -> str:
        if self.learning_rate is None or self.suggested_learning_rate is None:
            return ""
        return f" (learning rate {self.learning_rate:g} → {self.suggested_learning_rate:g})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def optimizer_rule(target: Any) -> str | None:
    """The learning-rate scaling rule for the optimizer class ``target`` (a config's ``_target_``): "linear" for
    torch.optim.SGD, "square-root" for torch.optim's adaptive optimizers; None for any other class (autotune does
    not know how its learning rate follows the batch)."""
    if not isinstance(target, str) or not target.startswith("torch.optim."):
        return None
    return _RULES.get(target.rsplit(".", 1)[-1])


def batch_advice(results: StudyResults, summary: Summary) -> BatchAdvice:
    before = summary.baseline.result.knobs["batch_size"]
    after = summary.recommended.result.knobs["batch_size"]
    if results.batch_policy == "fixed_effective":
        return BatchAdvice("fixed_effective", before, after, summary.accumulation_steps(summary.recommended))
    target = (results.optimizer or {}).get("_target_")
    rule = optimizer_rule(target) or "linear"
    lr = _learning_rate(results.optimizer)
    suggested = lr * batch_scale(after / before, rule) if lr is not None else None
    return BatchAdvice("free", before, after, 1, lr, suggested, rule, str(target) if target is not None else None)


def _learning_rate(optimizer: dict[str, Any] | None) -> float | None:
    value = (optimizer or {}).get("lr")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
