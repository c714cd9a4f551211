"""The knobs autotune can turn, one module each, in the order they are applied."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import Knob, SearchContext
from autotune.knobs.amp import AmpKnob
from autotune.knobs.batch_size import BatchSizeKnob
from autotune.knobs.channels_last import ChannelsLastKnob
from autotune.knobs.compile import CompileKnob
from autotune.knobs.num_threads import NumThreadsKnob
from autotune.knobs.num_workers import NumWorkersKnob
from autotune.knobs.pin_memory import PinMemoryKnob

# Order matters for apply: layout changes come before compile, which must see the final model.
KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        BatchSizeKnob(),
        NumWorkersKnob(),
        PinMemoryKnob(),
        NumThreadsKnob(),
        ChannelsLastKnob(),
        AmpKnob(),
        CompileKnob(),
    )
}


def apply_knobs(values: dict[str, Any], setup) -> None:
    """Apply every knob's value to ``setup`` in registry order."""
    for name, knob in KNOBS.items():
        knob.apply(values[name], setup)


__all__ = ["KNOBS", "Knob", "SearchContext", "apply_knobs"]
