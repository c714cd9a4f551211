"""The plain-data description of a user's pipeline, as read from its config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REQUIRED_COMPONENTS = ("model", "dataset", "loss", "optimizer")
OPTIONAL_COMPONENTS = ("collate_fn", "step")


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline's name and its components as Hydra nodes (plain dicts with ``_target_``).

    Nothing is instantiated here; ``autotune.pipeline.build`` does that inside each trial.
    """

    name: str
    components: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "components": self.components}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PipelineSpec:
        return cls(name=data["name"], components=data["components"])
