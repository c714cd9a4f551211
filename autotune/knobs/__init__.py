"""The knobs autotune can turn, one module each, in the order they are applied."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import Knob, SearchContext
from autotune.knobs.amp import AmpKnob
from autotune.knobs.batch_size import BatchSizeKnob
from autotune.knobs.channels_last import ChannelsLastKnob
from autotune.knobs.compile import CompileKnob
from autotune.knobs.cudnn_benchmark import CudnnBenchmarkKnob
from autotune.knobs.num_threads import NumThreadsKnob
from autotune.knobs.num_workers import NumWorkersKnob
from autotune.knobs.optimizer_impl import OptimizerImplKnob
from autotune.knobs.persistent_workers import PersistentWorkersKnob
from autotune.knobs.pin_memory import PinMemoryKnob
from autotune.knobs.prefetch_factor import PrefetchFactorKnob
from autotune.knobs.set_to_none import SetToNoneKnob

# Order matters: a knob's ``active`` sees the knobs before it (worker options follow num_workers), and
# layout changes come before compile, which must see the final model.
KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        BatchSizeKnob(),
        NumWorkersKnob(),
        PrefetchFactorKnob(),
        PersistentWorkersKnob(),
        PinMemoryKnob(),
        NumThreadsKnob(),
        ChannelsLastKnob(),
        AmpKnob(),
        CompileKnob(),
        CudnnBenchmarkKnob(),
        OptimizerImplKnob(),
        SetToNoneKnob(),
    )
}


def apply_knobs(values: dict[str, Any], setup) -> None:
    """Apply every knob's value to ``setup`` in registry order."""
    for name, knob in KNOBS.items():
        knob.apply(values[name], setup)


__all__ = ["KNOBS", "Knob", "SearchContext", "apply_knobs"]
