"""Keep DataLoader workers alive between epochs."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import SearchContext, WorkerKnob


class PersistentWorkersKnob(WorkerKnob):
    name = "persistent_workers"
    baseline_default = False
    preferred = True  # workers that are not restarted each epoch
    description = (
        "Keep DataLoader worker processes alive across epochs instead of starting them again each epoch. "
        "Only with num_workers > 0."
    )

    def parse(self, value: Any) -> bool | None:
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value

    def default_candidates(self, ctx: SearchContext) -> list[bool]:
        return [False, True]

    def apply(self, value: bool | None, setup) -> None:
        if value:
            setup.loader_kwargs["persistent_workers"] = True
