"""The knobs autotune can turn, one module each, in the order they are applied: the registry. Every fact about a
knob is on the knob; the groups the search and the config use are derived here from them."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import (
    BATCH_POLICIES,
    REQUIRED,
    Knob,
    Role,
    SearchContext,
    Target,
    TrainingSetup,
    accumulated_to,
    whole_cycles,
)
from autotune.knobs.amp import AmpKnob
from autotune.knobs.batch_size import BatchSizeKnob
from autotune.knobs.channels_last import ChannelsLastKnob
from autotune.knobs.compile import CompileKnob
from autotune.knobs.cudnn_benchmark import CudnnBenchmarkKnob
from autotune.knobs.malloc import MallocKnob
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
        MallocKnob(),
    )
}


def named(*roles: Role) -> tuple[str, ...]:
    """The knobs with one of ``roles``, in registry order."""
    return tuple(name for name, knob in KNOBS.items() if knob.role in roles)


# The DataLoader's shape: timed by the probe with the loader alone.
LOADER_KNOBS = named(Role.LOADER)
# Timed by the probe on a cached batch; those acting on activations at every batch size.
COMPUTE_KNOBS = named(Role.COMPUTE, Role.ACTIVATIONS)
PER_BATCH_KNOBS = named(Role.ACTIVATIONS)
# Not timed by the probe: tried on the best configuration found, the costly ones last.
UNTIMED_KNOBS = tuple(sorted(named(Role.UNTIMED), key=lambda name: KNOBS[name].costly))
# The value of each worker option in the configurations the probe steers to.
WORKER_OPTIONS = {name: KNOBS[name].preferred for name in named(Role.WORKER_OPTION)}
# The value of each knob a pipeline's baseline leaves unset.
BASELINE_DEFAULTS = {
    name: knob.baseline_default for name, knob in KNOBS.items() if knob.baseline_default is not REQUIRED
}


# The knobs that state conflicts (``Knob.conflict``): only they are asked, in each of up to 10**5 configurations.
_CONFLICTING = tuple(name for name, knob in KNOBS.items() if type(knob).conflict is not Knob.conflict)


def conflict(knobs: dict[str, Any], effective_batch_size: int | None, device: str | None) -> tuple[str, str] | None:
    """The first knob of ``knobs`` (a configuration, or the knobs chosen so far) whose value cannot run beside the
    others with gradients accumulated up to ``effective_batch_size`` (None: none) on ``device``, a kind of device
    (``device_kind``; None: not known, judged as a GPU), ``Knob.conflict``, and why; None when none conflicts. Every
    caller names both: a rule judged without them would refuse configurations that run (on a CPU, no CUDA graphs)."""
    for name in _CONFLICTING:
        reason = KNOBS[name].conflict(knobs[name], knobs, effective_batch_size, device) if name in knobs else None
        if reason:
            return name, reason
    return None


def unavailable(values: dict[str, Any], ctx: SearchContext) -> tuple[str, str] | None:
    """The first knob of ``values`` (knob name → value: a configuration, or some of its knobs) whose value cannot run
    here (``Knob.unavailable_reason``), and why; None when each can."""
    for name, knob in KNOBS.items():
        reason = knob.unavailable_reason(values[name], ctx) if name in values else None
        if reason:
            return name, reason
    return None


def apply_knobs(values: dict[str, Any], setup: TrainingSetup) -> None:
    """Apply every knob's value to ``setup`` in registry order."""
    for name, knob in KNOBS.items():
        knob.apply(values[name], setup)


def changed(values: dict[str, Any], baseline: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The knobs ``values`` changes from ``baseline``: name → (before, after). An option at its default where the
    baseline's configuration does not have it (prefetch_factor 2 with workers, against None without) is no change of
    its own: it comes with the change that makes it apply; nor is an option that no longer applies in ``values``
    (None: no prefetch_factor without workers): it goes with the change that ends it."""
    return {
        name: (baseline.get(name), value)
        for name, value in values.items()
        if baseline.get(name) != value and not _comes_with_another(name, value, values, baseline)
    }


def _comes_with_another(name: str, value: Any, values: dict[str, Any], baseline: dict[str, Any]) -> bool:
    knob = KNOBS.get(name)
    if knob is None:  # a key of no knob (the race's model labels its configurations so): a change as it reads
        return False
    if value is None and not knob.active(values):
        return True
    return baseline.get(name) is None and value == knob.baseline_default


def undo(knobs: dict[str, Any], baseline: dict[str, Any], name: str, options_too: bool = True) -> dict[str, Any]:
    """``knobs`` with ``name`` back at the baseline's value: knobs that then no longer apply are None (no worker
    options without workers); one that applies again takes the baseline's value where ``options_too`` (the user's
    worker options back with their workers), else its default, as does one that applies where the baseline's does
    not."""
    undone: dict[str, Any] = {}
    for other, knob in KNOBS.items():
        value = baseline[other] if other == name else knobs[other]
        if not knob.active(undone):
            value = None
        elif options_too and not knob.active(knobs) and baseline[other] is not None:
            value = baseline[other]
        elif value is None and knob.baseline_default is not REQUIRED:
            value = knob.baseline_default
        undone[other] = value
    return undone


def costly(values: dict[str, Any]) -> bool:
    """Whether ``values`` turn on a costly knob (torch.compile): long one-off work in warm-up, reported as compile
    time, that the search spends only where it may pay."""
    return bool(costly_values(values))


def costly_values(values: dict[str, Any]) -> dict[str, Any]:
    """The costly knobs ``values`` turn on (``costly``), with their values."""
    return _set_away(values, "costly")


def changes_numerics(values: dict[str, Any]) -> bool:
    """Whether ``values`` set a knob that changes the arithmetic away from its baseline default (fp32 eager)."""
    return bool(_set_away(values, "changes_numerics"))


def redraws_random(values: dict[str, Any]) -> bool:
    """Whether ``values`` set a knob whose step draws other random numbers than eager's of the same seed."""
    return bool(_set_away(values, "redraws_random"))


def _set_away(values: dict[str, Any], trait: str) -> dict[str, Any]:
    """The knobs with ``trait`` (a flag of ``Knob``) that ``values`` set away from their baseline default (one
    ``values`` lacks is at its default)."""
    return {
        name: values[name]
        for name, knob in KNOBS.items()
        if getattr(knob, trait) and values.get(name, knob.baseline_default) != knob.baseline_default
    }


__all__ = [
    "BASELINE_DEFAULTS",
    "REQUIRED",
    "COMPUTE_KNOBS",
    "KNOBS",
    "LOADER_KNOBS",
    "PER_BATCH_KNOBS",
    "UNTIMED_KNOBS",
    "WORKER_OPTIONS",
    "Knob",
    "Role",
    "SearchContext",
    "Target",
    "TrainingSetup",
    "accumulated_to",
    "BATCH_POLICIES",
    "apply_knobs",
    "changed",
    "changes_numerics",
    "redraws_random",
    "costly",
    "device_kind",
    "whole_cycles",
]


def device_kind(device: str) -> str:
    """The kind of ``device`` the knobs decide by ("cpu", "cuda"): trials run on cuda:N itself."""
    return device.partition(":")[0]
