"""recommended.yaml as an API: what autotune recommends, read back into a training script.

    rec = autotune.load_recommended("outputs/.../recommended.yaml")
    rec.apply_process_settings()  # once the model and the dataset are built
    loader = DataLoader(dataset, shuffle=True, drop_last=True, **rec.dataloader_kwargs())  # a stream: no shuffle
    model = rec.prepare_model(model.to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=rec.learning_rate(0.1), **rec.optimizer_kwargs())
    scaler = rec.grad_scaler(device)  # loss scaling for fp16; a pass-through otherwise
    for step, batch in enumerate(loader):
        inputs, targets = rec.to_device(batch, device)
        with rec.autocast(device):
            loss = loss_fn(model(inputs), targets) / rec.accumulation_steps
        scaler.scale(loss).backward()
        if (step + 1) % rec.accumulation_steps == 0:  # micro-batches accumulated to the batch the study kept
            scaler.step(optimizer)
            scaler.update()
            rec.zero_grad(optimizer)

Every method applies the knobs through the same ``Knob.apply`` the trials ran, so the script runs what was measured.
The file is read with ``yaml.safe_load``: nothing in it is imported or executed.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune.errors import ConfigError
from autotune.knobs import BATCH_POLICIES, KNOBS, REQUIRED, Target, TrainingSetup, changed
from autotune.knobs._base import parse_int
from autotune.measure.environment import HARDWARE_KEYS, describe_machine, machine_fingerprint
from autotune.measure.stats import RatioInterval

if TYPE_CHECKING:  # the training script's process has torch; the tuner's, which writes the file, imports none
    import torch

# The layout of recommended.yaml. Raise it when a key changes meaning or goes; a new optional key keeps it.
SCHEMA_VERSION = 2  # 2: training.learning_rate.rule (an older autotune would scale every rate linearly)
MACHINE_SCHEMA = 1  # the first layout that says which machine measured the recommendation
# The first layout that writes every section (``to_document``), and training's keys: a file of it or later without
# one was cut short (a copy that stopped, a full disk) or edited. Read as a file from before the section existed, it
# would run its missing knobs at their defaults.
WHOLE_SCHEMA = 2
_ALWAYS_WRITTEN = (
    "pipeline",
    "study",
    "device",
    "machine",
    "knobs",
    "baseline",
    "no_difference",
    "untrimmed",
    "throughput",
    "peak_memory_mb",
    "training",
)
_TRAINING_WRITTEN = ("batch_policy", "gradient_accumulation_steps", "note")  # and learning_rate under "free"
# The most bytes read of a file autotune wrote (recommended=, against=): far more than any it writes (a report.json
# of a thousand trials holds a few MiB), read whole before it is parsed.
MAX_RECORD_BYTES = 64 * 2**20

# How a learning rate follows a batch ``ratio`` times the baseline's, by rule: the linear scaling rule for SGD, with
# or without momentum (Goyal et al., 2017, "Accurate, Large Minibatch SGD"), the square-root scaling rule for
# adaptive optimizers, Adam's family (Malladi et al., 2022, "On the SDEs and Scaling Rules for Adaptive Gradient
# Algorithms").
LEARNING_RATE_RULES = {"linear": float, "square-root": math.sqrt}

# Where a training script applies the knobs of each target, and the calls of a ``Recommendation`` (named ``rec``)
# that do: each of them applies the knobs of its target (``Knob.applies_to``). recommended.yaml's comments say so.
APPLIED_BY: dict[Target, str] = {
    Target.PROCESS: "to the process: rec.apply_process_settings()",
    Target.LOADER: "to the DataLoader: rec.dataloader_kwargs()",
    Target.BATCH: "to each batch: rec.to_device(batch, device)",
    Target.MODEL: "to the model: rec.prepare_model(model)",
    Target.PRECISION: "to the forward pass and the loss: rec.autocast(device), rec.grad_scaler(device) (fp16's loss "
    "scaling)",
    Target.OPTIMIZER: "to the optimizer: rec.optimizer_kwargs()",
    Target.GRADIENTS: "to each step's gradients: rec.zero_grad(optimizer)",
}


def batch_scale(ratio: float, rule: str) -> float:
    """What a learning rate is multiplied by for a batch ``ratio`` times the baseline's: ``ratio`` by the linear
    scaling rule, its square root by the square-root scaling rule (``LEARNING_RATE_RULES``)."""
    return LEARNING_RATE_RULES[rule](ratio)


class MachineMismatchWarning(UserWarning):
    """The recommendation was measured on a different machine or software than this one."""


class UntrimmedWarning(UserWarning):
    """Not every change of the recommendation was raced undone: its trim did not run to its end, or did not run."""


@dataclass(frozen=True)
class Measured:
    """What the recommended knobs measured against the baseline's: samples/s (the races' medians where a race ran,
    ``method`` says) and peak memory; ``interval``: the speedup's 95 % interval over the paired rounds it counts
    (``Summary.gain_runs``; None from fewer than two rounds, or in a file written before it was kept);
    ``unsteady``: where the machine's speed did not hold through the study, how far apart the baseline's race medians
    read (``Summary.unsteady``: none of these figures stands), else None."""

    throughput: float
    baseline_throughput: float
    speedup: float
    method: str
    peak_memory_mb: float
    baseline_peak_memory_mb: float
    interval: RatioInterval | None = None
    unsteady: float | None = None


@dataclass(frozen=True)
class Training:
    """How to train with the recommended batch size: under ``batch_policy`` "fixed_effective" accumulate
    ``accumulation_steps`` micro-batches per optimizer step; under "free" the batch changes training and the
    learning rate scales with it by ``learning_rate_rule`` (``batch_scale``: "linear" or "square-root")."""

    batch_policy: str
    accumulation_steps: int
    note: str
    baseline_learning_rate: float | None = None
    suggested_learning_rate: float | None = None
    learning_rate_rule: str = "linear"


@dataclass(frozen=True)
class Recommendation:
    """The knob values autotune recommends for ``pipeline`` over ``baseline`` (the values it ran before), what
    they measured on ``machine``, and how to apply them. ``no_difference`` holds the changes that were tried on
    top of the recommendation and made no difference beyond noise, so they were left out; ``untrimmed``: the trim
    did not run to its end, so not every change in ``knobs`` was raced undone."""

    knobs: dict[str, Any]
    baseline: dict[str, Any]
    pipeline: str
    study: str
    device: str
    machine: dict[str, Any]
    measured: Measured
    training: Training
    no_difference: dict[str, Any] = field(default_factory=dict)
    untrimmed: bool = False
    schema_version: int = SCHEMA_VERSION
    # Setups without a model, by (target, device): to_device, autocast and zero_grad run every training step.
    _applied: dict[tuple[Target, str], TrainingSetup] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Each knob the recommendation changes: (the baseline's value, the recommended one) (``knobs.changed``)."""
        return changed(self.knobs, self.baseline)

    @property
    def batch_size(self) -> int:
        return self.knobs["batch_size"]

    @property
    def accumulation_steps(self) -> int:
        return self.training.accumulation_steps

    def learning_rate(self, learning_rate: float) -> float:
        """``learning_rate``, the baseline's, for the recommended batch: as given under batch_policy
        "fixed_effective" (each optimizer step sees the baseline's batch), else scaled by the file's rule
        (``batch_scale``; linear where the file names none). As given, with a warning, where the file records no
        baseline batch size to scale from (older autotunes wrote none)."""
        if self.training.batch_policy == "fixed_effective":
            return learning_rate
        before = self.baseline.get("batch_size")
        if before is None:
            warnings.warn(
                "the recommendation records no baseline batch size (baseline.batch_size): the learning rate is "
                f"returned as given; scale it for batch {self.batch_size} yourself, or run autotune again",
                UserWarning,
                stacklevel=2,
            )
            return learning_rate
        return learning_rate * batch_scale(self.batch_size / before, self.training.learning_rate_rule)

    def apply_process_settings(self) -> None:
        """Set what holds for the whole process: torch's threads, cuDNN autotuning, the allocator. Call it once the
        model and the dataset are built, before the DataLoader, as a trial applies it: their code may set threads or
        cuDNN itself, and the values measured are those set after it. ``num_threads: null`` ran at torch's default
        of the measuring machine (``machine.torch_threads``): on a machine like it (``machine_fingerprint``), that
        count is set too, whatever the script set before."""
        self._setup(Target.PROCESS, device=self.device)
        measured = self.machine.get("torch_threads")
        if self.knobs.get("num_threads") is None and isinstance(measured, int) and measured > 0:
            if machine_fingerprint(_described_here(self.device)) == machine_fingerprint(self.machine):
                import torch

                torch.set_num_threads(measured)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """batch_size, num_workers and the worker options, pin_memory: keyword arguments for ``DataLoader``."""
        return dict(self._setup(Target.LOADER).loader_kwargs)

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` (already on its device) in the recommended memory layout, compiled where recommended."""
        return self._setup(Target.MODEL, model=model).model

    def to_device(self, batch: Any, device: str | torch.device) -> Any:
        """``batch`` on ``device`` as the trials moved it: asynchronous from pinned memory, images in the layout."""
        from autotune.batches import to_device

        return to_device(batch, self._setup(Target.BATCH, device=device))

    def optimizer_kwargs(self) -> dict[str, Any]:
        """foreach/fused: keyword arguments for a ``torch.optim`` optimizer."""
        return dict(self._setup(Target.OPTIMIZER).optimizer_kwargs)

    def autocast(self, device: str | torch.device) -> contextlib.AbstractContextManager:
        """The forward pass's mixed precision: ``torch.autocast`` with the recommended type, or nothing."""
        import torch

        dtype = self._setup(Target.PRECISION, device=device).autocast_dtype
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(device).type, dtype=dtype)

    def grad_scaler(self, device: str | torch.device) -> torch.amp.GradScaler:
        """A new GradScaler for one training, enabled only for fp16 (a disabled one passes the loss and the step
        through). Its scale and growth tracker are that training's state, so each call makes another: call it once
        per training, as for the optimizer."""
        import torch

        scaler = self._apply(Target.PRECISION, torch.nn.Module(), torch.device(device)).grad_scaler
        return scaler or torch.amp.GradScaler(torch.device(device).type, enabled=False)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients as recommended (to None, or to zero)."""
        optimizer.zero_grad(set_to_none=self._setup(Target.GRADIENTS).zero_grad_to_none)

    def _setup(self, target: Target, model: Any = None, device: str | torch.device = "cpu") -> TrainingSetup:
        """A training setup with the knobs that apply to ``target`` applied (to a stand-in model where none is
        given: what they do to a model is not asked for). Applied once per target and device, but for the model
        and the process, which are applied whenever asked."""
        import torch

        if model is not None or target is Target.PROCESS:
            return self._apply(target, model, torch.device(device))
        key = (target, str(device))
        if key not in self._applied:
            self._applied[key] = self._apply(target, torch.nn.Module(), torch.device(device))
        return self._applied[key]

    def _apply(self, target: Target, model: Any, device: torch.device) -> TrainingSetup:
        setup = TrainingSetup(model=model, device=device)
        for name, knob in KNOBS.items():
            if target in knob.applies_to:
                knob.apply(self.knobs[name], setup)
        return setup

    def to_document(self) -> dict[str, Any]:
        """The recommendation as recommended.yaml lays it out."""
        measured, training = self.measured, self.training
        document = {
            "schema_version": self.schema_version,
            "pipeline": self.pipeline,
            "study": self.study,
            "device": self.device,
            "machine": self.machine,
            "knobs": self.knobs,
            "baseline": self.baseline,
            "no_difference": self.no_difference,
            "untrimmed": self.untrimmed,
            "throughput": {
                "recommended": measured.throughput,
                "baseline": measured.baseline_throughput,
                "speedup": measured.speedup,
                "unit": "samples/s",
                "method": measured.method,
                "interval": _interval_document(measured.interval),
                "unsteady": measured.unsteady,
            },
            "peak_memory_mb": {"recommended": measured.peak_memory_mb, "baseline": measured.baseline_peak_memory_mb},
            "training": {
                "batch_policy": training.batch_policy,
                "gradient_accumulation_steps": training.accumulation_steps,
                "note": training.note,
            },
        }
        if training.batch_policy == "free":  # the rule is what ``learning_rate`` scales by, with or without a rate
            rate: dict[str, Any] = {"rule": training.learning_rate_rule}
            if training.suggested_learning_rate is not None:
                rate |= {"baseline": training.baseline_learning_rate, "suggested": training.suggested_learning_rate}
            document["training"]["learning_rate"] = rate
        return document

    @classmethod
    def from_document(cls, document: Any, source: str = "recommended.yaml") -> Recommendation:
        """Read a recommended.yaml document, checking its version, every knob value and, in a layout that writes
        every section (WHOLE_SCHEMA on), that none is missing."""
        if not isinstance(document, dict) or "knobs" not in document:
            raise ConfigError(source, "not a recommended.yaml written by autotune (it has no 'knobs:')")
        version = document.get("schema_version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ConfigError(
                f"{source}: schema_version", f"expected a whole number, as autotune writes, got {version!r}"
            )
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{source}: schema_version",
                f"{version!r} was written by a newer autotune than this one (it reads up to {SCHEMA_VERSION}); "
                "upgrade autotune",
            )
        knobs = parse_knobs(document["knobs"], source)
        baseline = _baseline(document, source)
        recommendation = cls(
            knobs=knobs,
            baseline=baseline,
            pipeline=document.get("pipeline", ""),
            study=document.get("study", ""),
            device=document.get("device", "cpu"),
            machine=dict(_section(document, "machine", source, null_too=True)),
            measured=_measured(document, source),
            training=_training(document, source, knobs["batch_size"], baseline.get("batch_size")),
            no_difference=dict(_section(document, "no_difference", source, null_too=True)),
            untrimmed=_flag(document.get("untrimmed", False), "untrimmed", source),
            schema_version=version,
        )
        if version >= WHOLE_SCHEMA:  # its sections' values are checked first: a mangled one is named as such
            _refuse_cut_short(document, version, source)
        return recommendation


def load_recommended(path: str | Path, machine: dict[str, Any] | None = None) -> Recommendation:
    """The recommendation in ``path`` (a recommended.yaml). Warns (MachineMismatchWarning) where it was measured
    on another machine or torch than this one (``machine``, ``describe_machine``'s; None: described here), and
    (UntrimmedWarning) where its trim was cut short; raises ConfigError naming the key where the file cannot be
    used."""
    path = Path(path)
    recommendation = read_recommended(path)
    _warn_if_elsewhere(recommendation, str(path), machine)
    if recommendation.untrimmed:
        warnings.warn(
            f"{path}: untrimmed: not every change in it was raced undone (the trim, which undoes each in turn, "
            "did not run to its end, or no race ran: study.budget_s, a failed or stopped run, another tuner still "
            "at it, study.confirm_rounds=0); mode=benchmark measures each change",
            UntrimmedWarning,
            stacklevel=2,
        )
    return recommendation


def read_recommended(path: str | Path) -> Recommendation:
    """The recommendation in ``path`` (a recommended.yaml), read without a word on where it was measured: ConfigError
    naming the key where the file cannot be used (or naming the file, where it cannot be read as YAML text)."""
    try:
        document = yaml.safe_load(read_record(path).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(
            str(path), f"cannot read it ({exc.strerror}); pass the recommended.yaml autotune wrote"
        ) from exc
    except UnicodeDecodeError as exc:  # autotune writes UTF-8
        raise ConfigError(
            str(path), f"is not UTF-8 text (byte {exc.start}: {exc.reason}); pass the recommended.yaml autotune wrote"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            str(path), f"is not valid YAML ({_where(exc)}); pass the recommended.yaml autotune wrote"
        ) from exc
    return Recommendation.from_document(document, str(path))


def read_record(path: str | Path) -> bytes:
    """The bytes of the file at ``path``, one autotune wrote (recommended=, against=); OSError, its ``strerror``
    saying why, where it cannot be read, is no regular file (a FIFO or a device, which a read would wait on or never
    finish: /dev/zero) or holds more than MAX_RECORD_BYTES."""
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting for a writer
    with os.fdopen(handle, "rb") as file:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise OSError(errno.EINVAL, "not a regular file, but a FIFO, a device or a folder")
        data = file.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise OSError(errno.EFBIG, f"over {MAX_RECORD_BYTES // 2**20} MiB, more than any file autotune writes")
    return data


def _where(error: yaml.YAMLError) -> str:
    """Where and what the YAML error is, on one line: "line 3, column 1: could not find expected ':'"."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _section(parent: dict[str, Any], key: str, source: str, null_too: bool = False) -> dict[str, Any]:
    """The mapping at ``key`` (dotted, its last part in ``parent``): {} where absent (files from before it existed),
    and where null if ``null_too``; ConfigError naming ``key`` where it is anything else."""
    value = parent.get(key.rsplit(".", 1)[-1], {})
    if value is None and null_too:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key}", f"expected a mapping, got {value!r}; use the file as autotune wrote it")
    return value


def _baseline(document: dict[str, Any], source: str) -> dict[str, Any]:
    """The baseline's knob values, each checked and every knob given as the recommendation's are (``parse_knobs``);
    {} where the file records none (an older autotune's): nothing to compare the recommendation with."""
    given = document.get("baseline", {})
    if isinstance(given, dict) and not given:
        return {}
    return parse_knobs(given, source, section="baseline")


def _refuse_cut_short(document: dict[str, Any], version: int, source: str) -> None:
    """Refuse a file of layout ``version`` (WHOLE_SCHEMA or later) without a section it always writes
    (``_ALWAYS_WRITTEN``, ``_TRAINING_WRITTEN``), naming the first missing."""
    training = document.get("training") or {}
    written = [*_TRAINING_WRITTEN, *(["learning_rate"] if training.get("batch_policy") == "free" else [])]
    missing = [key for key in _ALWAYS_WRITTEN if key not in document]
    missing += [f"training.{key}" for key in written if key not in training]
    if missing:
        raise ConfigError(
            f"{source}: {missing[0]}",
            f"missing, which autotune writes in every recommended.yaml of schema_version {version}: the file was cut "
            "short or edited; use the file as autotune wrote it",
        )


def _measured(document: dict[str, Any], source: str) -> Measured:
    throughput = _section(document, "throughput", source)
    memory = _section(document, "peak_memory_mb", source)
    return Measured(
        throughput.get("recommended", 0.0),
        throughput.get("baseline", 0.0),
        throughput.get("speedup", 1.0),
        throughput.get("method", ""),
        memory.get("recommended", 0.0),
        memory.get("baseline", 0.0),
        _interval(throughput, source),
        _unsteady(throughput, source),
    )


def _unsteady(throughput: dict[str, Any], source: str) -> float | None:
    """The throughput section's ``unsteady`` (``Measured.unsteady``); None where null or absent (a file from before it
    was kept); ConfigError naming throughput.unsteady where it is not a number over 1."""
    given = throughput.get("unsteady")
    if given is None:
        return None
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given) or given <= 1:
        raise ConfigError(
            f"{source}: throughput.unsteady",
            f"expected null or a number over 1, got {given!r}; use the file as autotune wrote it",
        )
    return float(given)


def _interval_document(interval: RatioInterval | None) -> dict[str, Any] | None:
    """The speedup's interval as recommended.yaml holds it (the speedup beside it is its geometric mean)."""
    return None if interval is None else {"low": interval.low, "high": interval.high, "rounds": interval.n}


def _interval(throughput: dict[str, Any], source: str) -> RatioInterval | None:
    """The throughput section's speedup interval (``_interval_document``); None where null or absent (fewer than two
    rounds, or a file from before it was kept); ConfigError naming throughput.interval where it is anything else."""
    given = _section(throughput, "throughput.interval", source, null_too=True)
    if not given:
        return None
    try:
        low, high, rounds = float(given["low"]), float(given["high"]), int(given["rounds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{source}: throughput.interval",
            f"expected low, high and rounds, got {given!r}; use the file as autotune wrote it",
        ) from exc
    return RatioInterval(float(throughput.get("speedup", 1.0)), low, high, rounds)


def _training(document: dict[str, Any], source: str, batch_size: int, baseline_batch_size: int | None) -> Training:
    """The training section; an absent key at what older autotunes meant: batch_policy "free", one step per optimizer
    step, the linear rule. Gradient accumulation steps given must agree with the batch policy (``_accumulation``)."""
    training = _section(document, "training", source)
    learning_rate = _section(training, "training.learning_rate", source)
    policy = _choice(training.get("batch_policy", "free"), "training.batch_policy", source, BATCH_POLICIES)
    return Training(
        policy,
        _accumulation(training, policy, batch_size, baseline_batch_size, source),
        training.get("note", ""),
        learning_rate.get("baseline"),
        learning_rate.get("suggested"),
        _choice(learning_rate.get("rule", "linear"), "training.learning_rate.rule", source, tuple(LEARNING_RATE_RULES)),
    )


def _accumulation(
    training: dict[str, Any], policy: str, batch_size: int, baseline_batch_size: int | None, source: str
) -> int:
    """``training.gradient_accumulation_steps`` (1 where absent), checked where given against ``policy``, as the
    trials trained: under "free" every batch steps the optimizer; under "fixed_effective" that many micro-batches of
    ``batch_size`` make the baseline's batch (where the file records it)."""
    key = "training.gradient_accumulation_steps"
    steps = _count(training.get("gradient_accumulation_steps", 1), key, source)
    if "gradient_accumulation_steps" not in training:
        return steps
    if policy == "free" and steps != 1:
        raise ConfigError(
            f"{source}: {key}",
            f"expected 1 under batch_policy free (every batch steps the optimizer), got {steps}; use the file as "
            "autotune wrote it",
        )
    if policy == "fixed_effective" and baseline_batch_size not in (None, batch_size * steps):
        raise ConfigError(
            f"{source}: {key}",
            "under batch_policy fixed_effective knobs.batch_size x it is baseline.batch_size, but "
            f"{batch_size} x {steps} != {baseline_batch_size}; use the file as autotune wrote it",
        )
    return steps


def _flag(value: Any, key: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{source}: {key}", f"expected true or false, got {value!r}; use the file as autotune wrote it")


def _choice(value: Any, key: str, source: str, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value in choices:
        return value
    raise ConfigError(
        f"{source}: {key}", f"expected one of {', '.join(choices)}, got {value!r}; use the file as autotune wrote it"
    )


def _count(value: Any, key: str, source: str) -> int:
    try:
        return parse_int(value, minimum=1)
    except ValueError as exc:
        raise ConfigError(f"{source}: {key}", f"{exc}; use the file as autotune wrote it") from None


def parse_knobs(node: Any, source: str, section: str = "knobs") -> dict[str, Any]:
    """Every knob's value from ``node``, the ``section`` of the file ``source`` (recommended.yaml's knobs, or the
    knobs of a report.json or check.json mode=check gates against): each parsed as its knob reads it, the rest as a
    trial runs them (``_complete_knobs``). ConfigError naming ``section`` where ``node`` is not a mapping or names
    knobs this autotune lacks: those come first, as such a file is another autotune's, whose values and gaps only
    tuning again with this one makes sense of; else naming the knob whose value is wrong or missing."""
    if not isinstance(node, dict):
        raise ConfigError(
            f"{source}: {section}",
            f"expected a mapping of knob values, got {node!r}; use the file as autotune wrote it",
        )
    unknown = [name for name in node if name not in KNOBS]
    if unknown:
        raise ConfigError(
            f"{source}: {section}",
            f"written by another autotune (knobs this one lacks: {', '.join(unknown)}; it has {', '.join(KNOBS)}); "
            "tune again with this one",
        )
    parsed = {name: _parse(name, value, source, section=section) for name, value in node.items()}
    return _complete_knobs(parsed, source, section)


def _parse(name: str, value: Any, source: str, null_too: bool = False, section: str = "knobs") -> Any:
    """``value`` of knob ``name`` (one this autotune has; in ``section`` of the file) as the knob reads it; None stays
    None unless ``null_too`` (where the knob applies, a switch refuses it)."""
    try:
        return None if value is None and not null_too else KNOBS[name].parse(value)
    except ValueError as exc:
        raise ConfigError(f"{source}: {section}.{name}", f"{exc}; use the file as autotune wrote it") from None


def _complete_knobs(given: dict[str, Any], source: str, section: str = "knobs") -> dict[str, Any]:
    """Every knob's value (of ``section`` of the file): the file's, else what a trial runs when the knob is unset (a
    file from before the knob existed), None where the knob does not apply (worker options without workers)."""
    knobs: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        if not knob.active(knobs):
            knobs[name] = None
        elif name in given and given[name] is None:  # the knob's own verdict: num_threads' null is torch's default
            knobs[name] = _parse(name, None, source, null_too=True, section=section)
        elif name in given:
            knobs[name] = given[name]
        elif knob.baseline_default is REQUIRED:
            raise ConfigError(
                f"{source}: {section}.{name}",
                "missing, though autotune always writes it; use the file as autotune wrote it",
            )
        else:
            knobs[name] = knob.baseline_default
    return knobs


def _warn_if_elsewhere(recommendation: Recommendation, source: str, machine: dict[str, Any] | None) -> None:
    if recommendation.schema_version < MACHINE_SCHEMA:
        warnings.warn(
            f"{source} was written by an older autotune (schema {recommendation.schema_version}, this one writes "
            f"{SCHEMA_VERSION}): its knobs are applied, but it does not say which machine measured them",
            MachineMismatchWarning,
            stacklevel=3,
        )
        return
    if not recommendation.machine:  # written without one: nothing to compare
        return
    # described only when compared
    here = _described_here(recommendation.device) if machine is None else machine
    where = measured_elsewhere(recommendation.machine, here)
    if where:
        warnings.warn(
            f"{source} was measured {where}: its gains may not hold here: re-run autotune on this machine as you "
            "train on it",
            MachineMismatchWarning,
            stacklevel=3,
        )


# The parts of a machine's description that a study pinned to some of its cores (study.cpu_sets) reads as that many.
_CORE_KEYS = {"cpu_count", "torch_threads"}
_SOFTWARE = "with other software or thread settings"


def measured_elsewhere(there: dict[str, Any], here: dict[str, Any]) -> str | None:
    """Where a record measured on the machine ``there`` (``describe_machine``) was measured, seen from ``here``, with
    what differs: "on another machine (cpu_model 'X' there, 'Y' here; ...)" (``measured_where``); None where their
    fingerprints (``machine_fingerprint``) agree."""
    then, now = machine_fingerprint(there), machine_fingerprint(here)
    differs = [key for key in now if then[key] != now[key]]
    if not differs:
        return None
    listed = "; ".join(f"{key} {then[key]!r} there, {now[key]!r} here" for key in differs)
    return f"{measured_where(differs)} ({listed})"


def measured_where(differs: Iterable[str]) -> str:
    """Where a record whose machine description ``differs`` from this one's in those keys was measured, in words: "on
    another machine" where its hardware differs (``HARDWARE_KEYS``); else "on other cores" where the cores do (a
    study pinned by study.cpu_sets describes the machine as the cores of its slot), and "with other software or
    thread settings" where torch, CUDA, the driver or thread variables do, both where both do."""
    differs = set(differs)
    if differs & set(HARDWARE_KEYS):
        return "on another machine"
    said = [*(["on other cores"] if differs & _CORE_KEYS else []), *([_SOFTWARE] if differs - _CORE_KEYS else [])]
    return " ".join(said)


def _described_here(device: str) -> dict[str, Any]:
    """This machine (``describe_machine``), its GPU the one the file's ``device`` names (on a machine of mixed GPUs,
    the one the recommendation was measured on), or the current one where this process has no GPU of that index
    (CUDA_VISIBLE_DEVICES numbers the GPUs it shows from 0)."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):  # a device the file names that torch does not know: compared as this one
        return describe_machine(None)
    shown = parsed.type == "cuda" and (parsed.index or 0) < torch.cuda.device_count()
    return describe_machine(device if shown else None)
