"""The facts a trial subprocess reads about the machine's devices and the pipeline before any trial runs
(``pipeline/inspect.py``), as plain data: they decide which knobs apply. No torch here: the tuner's process reads
them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PipelineFacts:
    """``input_ndim`` counts the batch dimension; None when the input is not a tensor.
    ``optimizer_options`` are the implementations ("for_loop", "foreach", "fused") the optimizer runs here. ``code``:
    the user's modules the pipeline imported (not the standard library's, an installed package's or autotune's), each
    by name with a digest of what its source runs (``autotune/code_digest.py``: a comment, a reformat or a docstring
    edit changes none): a study measured one version of them. ``dataset_len`` is None for a stream
    (an IterableDataset) with no length; ``repeats_in_workers`` is True for a stream that gives every DataLoader
    worker the same samples (``pipeline/streams.py``); ``channels_last_refused`` is why the model cannot be converted to
    channels_last where its inputs could go so (what torch raised), None where it can. ``optimizer_default`` is the
    implementation the optimizer's default runs on the trials' device, as one step of it showed ("for_loop",
    "foreach" or "fused": ``optimizer_facts`` in ``pipeline/inspect.py``); None where it was not seen, or in facts
    stored before it was read."""

    dataset_len: int | None
    input_ndim: int | None
    optimizer_options: frozenset[str] = frozenset()
    code: dict[str, str] = field(default_factory=dict)
    repeats_in_workers: bool = False
    channels_last_refused: str | None = None
    optimizer_default: str | None = None


@dataclass(frozen=True)
class DeviceFacts:
    """The names of the CUDA devices a process sees, by index (none: a CPU-only machine)."""

    cuda: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """A ConfigError raised where the facts were read, to raise again in the tuner: the key it names, its problem."""

    key: str
    problem: str


@dataclass(frozen=True)
class Inspection:
    """What ``read_facts`` found: the ``machine`` (``describe_machine``, read before the user's code ran) and its
    ``devices``, with the GPU the trials run on where one does (its ``gpu`` and whether it computes in bfloat16
    natively, ``gpu_bf16``); the ``device`` measure.device resolves to and the ``pipeline``'s facts there; or, in
    their place, the configuration error that stopped it (``refused``)."""

    devices: DeviceFacts
    device: str | None = None
    pipeline: PipelineFacts | None = None
    refused: Refusal | None = None
    machine: dict[str, Any] = field(kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        pipeline = self.pipeline
        return {
            **asdict(self),
            "pipeline": {**asdict(pipeline), "optimizer_options": sorted(pipeline.optimizer_options)}
            if pipeline
            else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Inspection:
        pipeline, refused = data.get("pipeline"), data.get("refused")
        return cls(
            devices=DeviceFacts(tuple(data["devices"]["cuda"])),
            machine=data["machine"],
            device=data.get("device"),
            pipeline=PipelineFacts(**{**pipeline, "optimizer_options": frozenset(pipeline["optimizer_options"])})
            if pipeline
            else None,
            refused=Refusal(**refused) if refused else None,
        )
