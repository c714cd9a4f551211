"""What a recommended batch size means for training: learning rate, or gradient accumulation."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.results.model import StudyResults
from autotune.results.summary import Summary


@dataclass(frozen=True)
class BatchAdvice:
    """The recommended batch size against the baseline's.

    Under batch_policy "free" a larger or smaller batch changes optimisation: the learning rate
    suggested follows the linear scaling rule (Goyal et al., 2017, "Accurate, Large Minibatch SGD").
    Under "fixed_effective" the batch is a micro-batch and ``accumulation_steps`` micro-batches make
    one optimizer step of the baseline's size, so training is unchanged.
    """

    policy: str
    baseline_batch_size: int
    batch_size: int
    accumulation_steps: int
    learning_rate: float | None = None
    suggested_learning_rate: float | None = None

    def describe(self) -> str:
        before, after = self.baseline_batch_size, self.batch_size
        if self.policy == "fixed_effective":
            if self.accumulation_steps == 1:
                return f"Batch size unchanged ({before}): training is the same."
            return (
                f"Micro-batches of {after} with {self.accumulation_steps} gradient-accumulation steps make the "
                f"baseline's {before} samples per optimizer step: training is unchanged "
                "(search.batch_policy=fixed_effective)."
            )
        if before == after:
            return f"Batch size unchanged ({before}): training is the same."
        lr = (
            f" (learning rate {self.learning_rate:g} → {self.suggested_learning_rate:g})"
            if self.learning_rate is not None
            else ""
        )
        return (
            f"The batch size changes from {before} to {after}, which changes training: by the linear scaling rule "
            f"scale the learning rate by {after / before:g}{lr}, use a warm-up for large increases, and check "
            "convergence. To keep training identical, tune with search.batch_policy=fixed_effective."
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def batch_advice(results: StudyResults, summary: Summary) -> BatchAdvice:
    before = summary.baseline.result.knobs["batch_size"]
    after = summary.recommended.result.knobs["batch_size"]
    if results.batch_policy == "fixed_effective":
        return BatchAdvice("fixed_effective", before, after, summary.accumulation_steps(summary.recommended))
    lr = _learning_rate(results.optimizer)
    suggested = lr * after / before if lr is not None else None
    return BatchAdvice("free", before, after, 1, lr, suggested)


def _learning_rate(optimizer: dict[str, Any] | None) -> float | None:
    value = (optimizer or {}).get("lr")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
