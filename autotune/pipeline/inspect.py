"""Facts about the machine's devices and the pipeline that decide which knobs apply, read once before any trial runs,
in a trial subprocess (``read_facts``): reading them runs the user's code and initialises CUDA."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import inspect
import itertools
import logging
import os
import pkgutil
import sys
import sysconfig
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_object
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import default_collate

from autotune.code_digest import source_digest
from autotune.errors import ConfigError
from autotune.knobs.channels_last import ChannelsLastKnob
from autotune.knobs.optimizer_impl import IMPLEMENTATION_KWARGS
from autotune.measure.environment import describe_machine, gpu_computes_bf16, gpu_name
from autotune.pipeline.build import applied_partially, build_component, checked_model, with_article
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts, Refusal
from autotune.pipeline.spec import PipelineSpec
from autotune.pipeline.streams import dataset_length, is_stream, repeats_in_workers


def device_facts() -> DeviceFacts:
    """The CUDA devices this process sees, by name (nothing is allocated on them)."""
    if not torch.cuda.is_available():
        return DeviceFacts()
    return DeviceFacts(tuple(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())))


def resolve_device(devices: DeviceFacts, requested: str) -> str:
    """The device measure.device ``requested`` means with ``devices``: auto is cuda where a GPU is visible, else
    cpu; cuda and cuda:N must name a visible GPU. Raises ConfigError naming measure.device."""
    if requested == "auto":
        return "cuda" if devices.cuda else "cpu"
    if requested.startswith("cuda") and not devices.cuda:
        raise ConfigError("measure.device", f"{requested} was requested but torch.cuda.is_available() is False")
    index = torch.device(requested).index
    if index is not None and index >= len(devices.cuda):
        visible = ", ".join(f"cuda:{i} ({name})" for i, name in enumerate(devices.cuda))
        raise ConfigError("measure.device", f"{requested} was requested but the visible CUDA devices are {visible}")
    return requested


def read_facts(spec: PipelineSpec, requested_device: str) -> Inspection:
    """The machine (``describe_machine``) and the devices this process sees, the device ``requested_device``
    (measure.device) resolves to, whether it runs bfloat16 natively, and the pipeline's facts there
    (``inspect_pipeline``); a ConfigError is returned as the refusal. It initialises CUDA (a context on the
    device), and on a GPU in exclusive-process mode a process holding a context blocks every other: run it in a
    subprocess, not the tuner."""
    here = Inspection(device_facts(), machine=describe_machine())  # the machine before the user's code runs
    try:
        device = resolve_device(here.devices, requested_device)
        machine = here.machine
        if device.startswith("cuda"):
            machine = {**machine, "gpu": gpu_name(device), "gpu_bf16": gpu_computes_bf16(device)}
        pipeline = inspect_pipeline(spec, device)
        return replace(here, device=device, pipeline=pipeline, machine=machine)
    except ConfigError as exc:
        return replace(here, refused=Refusal(exc.key, exc.problem))


def inspect_pipeline(spec: PipelineSpec, device: str = "cpu") -> PipelineFacts:
    """Import every component's target (``import_targets``), build the dataset, check it is usable, read the shape of
    one collated input and whether the model can go channels-last with it (a model a function builds checked to be a
    Module: ``model_on_meta``), check the optimizer builds with its options, is one and steps without a closure
    (``_check_optimizer``), find which of its implementations can run on ``device`` and which its default runs
    there (``optimizer_facts``). A stream (an IterableDataset) may have no length; whether its DataLoader workers
    would repeat one another is read too."""
    import_targets(spec)
    dataset = build_component(spec, "dataset")
    repeats = repeats_in_workers(dataset)  # before this process reads it: workers start as a trial's do
    length = _length(dataset)
    batch = _first_batch(dataset, length, build_component(spec, "collate_fn"))
    if spec.components.get("step") is None and not _is_input_target(batch):
        raise ConfigError(
            "pipeline.step",
            f"a batch is {_what_batch_is(batch)}, not (input, target), which autotune's own step takes: give "
            "pipeline.step, a function fn(model, batch, loss_fn) -> loss (README: 'Tune your own pipeline')",
        )
    optimizer = build_component(spec, "optimizer")
    _check_optimizer(optimizer, spec, device)
    implementations = optimizer_facts(optimizer, device)
    ndim = input_ndim(batch)
    return PipelineFacts(
        length,
        ndim,
        implementations.options,
        user_code(spec),
        repeats_in_workers=repeats,
        channels_last_refused=channels_last_refused(model_on_meta(spec, ndim), ndim),
        optimizer_default=implementations.default,
    )


def _length(dataset: Any) -> int | None:
    """``dataset_length``: a ConfigError where a map-style dataset has none, or a dataset is empty."""
    try:
        length = dataset_length(dataset)
    except TypeError as exc:
        raise ConfigError(
            "pipeline.dataset",
            f"len() of {type(dataset).__name__} failed ({exc}): autotune needs a map-style Dataset (__getitem__ and "
            "__len__) or an IterableDataset",
        ) from None
    except Exception as exc:
        raise ConfigError("pipeline.dataset", f"len() of {type(dataset).__name__} failed: {exc}") from None
    if length == 0:
        raise ConfigError("pipeline.dataset", f"{type(dataset).__name__} is empty (length 0)")
    return length


def _first_batch(dataset: Any, length: int | None, collate: Any) -> Any:
    """The first samples of ``dataset``, of ``length`` (``_first_samples``: two where it holds two), collated as one
    batch by ``collate`` (the pipeline's collate_fn; None: PyTorch's default): two, as a collate may need an even
    batch (timm's Mixup), else the first alone (samples of different shapes, trained at batch size 1). A failure to
    collate either names the pipeline's collate_fn, or without one the dataset,
    whose samples PyTorch's default cannot collate: pipeline.collate_fn is then the pipeline's to give."""
    samples = _first_samples(dataset, length)
    try:
        return (collate or default_collate)(samples)
    except Exception as exc:
        if len(samples) == 2:  # a batch of one collates where two cannot (ragged samples at batch size 1): the
            with contextlib.suppress(Exception):  # trials tell which larger batches fail
                return (collate or default_collate)(samples[:1])
        what = _which_samples(dataset, len(samples))
        if collate:
            raise ConfigError("pipeline.collate_fn", f"collating {what} failed: {_raised(exc)}") from exc
        raise ConfigError(
            "pipeline.dataset",
            f"collating {what} failed: {_raised(exc)}; PyTorch's default collate cannot batch its samples: give "
            "pipeline.collate_fn, a function that collates a list of samples into a batch",
        ) from exc


def _first_samples(dataset: Any, length: int | None) -> list:
    """Samples 0 and 1 of a map-style ``dataset`` of ``length`` (sample 0 alone where it holds one), or a stream's
    first two (its first alone where it yields one). A ConfigError naming pipeline.dataset where reading one fails,
    or a stream yields none."""
    if is_stream(dataset):
        try:
            samples = list(itertools.islice(iter(dataset), 2))
        except Exception as exc:
            raise ConfigError("pipeline.dataset", f"reading its first samples failed: {_raised(exc)}") from exc
        if not samples:
            raise ConfigError("pipeline.dataset", f"{type(dataset).__name__} is empty: iterating it yields nothing")
        return samples
    samples = []
    for index in range(min(2, length)):
        try:
            samples.append(dataset[index])
        except Exception as exc:
            raise ConfigError("pipeline.dataset", f"reading sample {index} failed: {_raised(exc)}") from exc
    return samples


def _which_samples(dataset: Any, count: int) -> str:
    """The first ``count`` samples of ``dataset`` (one or two), as a message names them."""
    if is_stream(dataset):
        return "its first sample" if count == 1 else "its first two samples"
    return "sample 0" if count == 1 else "samples 0 and 1"


def _raised(exc: BaseException) -> str:
    """What ``exc`` says, on one line: its type and message."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


# A package the targets come from with more modules loaded than this is a library (a source build of torch on
# PYTHONPATH), not a pipeline's code: its digests would fill the study's description.
_MAX_CODE_MODULES = 200
_INSTALLED = ("site-packages", "dist-packages")


def user_code(spec: PipelineSpec) -> dict[str, str]:
    """The loaded modules of the packages ``spec``'s targets come from (each target's top-level package), by name,
    with a digest of each source file (``code_digest.source_digest``: of what Python runs, so a comment, a reformat or
    a docstring edit changes none): what a study measured with. Left out: a package installed as a library (its
    files under Python's own or installed packages' folders, symlinks not followed: an installer may link files from
    a cache) and autotune itself."""
    tops = {node["_target_"].partition(".")[0] for node in spec.components.values() if node}
    installed = _library_folders()
    found: dict[str, str] = {}
    for top in sorted(tops):
        modules = {name: module for name, module in list(sys.modules.items()) if name.partition(".")[0] == top}
        sources = {name: getattr(module, "__file__", None) or "" for name, module in modules.items()}
        sources = {name: Path(os.path.abspath(source)) for name, source in sources.items() if source.endswith(".py")}
        if len(sources) > _MAX_CODE_MODULES or any(
            path.is_relative_to(folder) for path in sources.values() for folder in installed
        ):
            continue
        for name, path in sources.items():
            with contextlib.suppress(OSError):
                found[name] = source_digest(path.read_bytes())
    return dict(sorted(found.items()))


def _library_folders() -> list[Path]:
    """The folders of code that is no pipeline's own: Python's, installed packages' (symlinks not followed: an
    installer may link files from a cache) and autotune's."""
    installed = [Path(os.path.abspath(path)) for path in sysconfig.get_paths().values()]
    installed += [Path(os.path.abspath(path)) for path in sys.path if Path(path).name in _INSTALLED]
    installed.append(Path(os.path.abspath(__file__)).parent.parent)  # autotune itself
    return installed


def _is_own_code(target: Any) -> bool:
    """Whether ``target`` is defined by the pipeline's own code: its module's file lies in none of
    ``_library_folders``."""
    source = getattr(sys.modules.get(getattr(target, "__module__", None) or ""), "__file__", None)
    if not source:
        return False
    path = Path(os.path.abspath(source))
    return not any(path.is_relative_to(folder) for folder in _library_folders())


def _is_input_target(batch: Any) -> bool:
    """Whether autotune's own step can take ``batch`` as ``inputs, targets = batch``."""
    if isinstance(batch, (Mapping, torch.Tensor, str)):
        return False
    try:
        _, _ = batch
    except (TypeError, ValueError):
        return False
    return True


def _what_batch_is(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return f"a {type(batch).__name__} of keys {', '.join(repr(key) for key in list(batch)[:4])}"
    if isinstance(batch, (tuple, list)):
        return f"a {type(batch).__name__} of {len(batch)} items"
    return f"a {type(batch).__name__}"


def _why(target: str, exc: Exception) -> str:
    """Why ``target`` could not be imported: a name its module lacks (with the closest it has), else what the
    import raised (hydra's ImportError wraps it)."""
    module_name, _, name = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception:
        cause = exc.__cause__ or exc
        missing = isinstance(cause, ModuleNotFoundError) and cause.name == module_name  # not a module it imports
        return _raised(cause) + (_closest_module(module_name) if missing else "")
    close = difflib.get_close_matches(name, [found for found in dir(module) if not found.startswith("_")], n=1)
    return f"module '{module_name}' has no '{name}'" + (f"; did you mean '{module_name}.{close[0]}'?" if close else "")


def _closest_module(name: str) -> str:
    """``"; did you mean 'PACKAGE.MODULE'?"`` for the module of ``name``'s package closest to its misspelt last part
    (``mypkg.model`` for ``mypkg.models``), or ``""``."""
    package, _, last = name.rpartition(".")
    try:
        found = importlib.import_module(package) if package else None
    except Exception:
        return ""
    names = [module.name for module in pkgutil.iter_modules(getattr(found, "__path__", [])) if module.name != last]
    close = difflib.get_close_matches(last, names, n=1)
    return f"; did you mean '{package}.{close[0]}'?" if close else ""


def import_targets(spec: PipelineSpec) -> None:
    """Import the ``_target_`` of each component of ``spec`` as building it will (the model's too, unbuilt): a
    ConfigError naming ``pipeline.KEY._target_`` for the first that cannot be. Importing runs the user's module-level
    code, so it happens here, in a subprocess; the config load only finds each target's top-level module."""
    for key, node in spec.components.items():
        if node is None:
            continue
        target = node["_target_"]
        try:
            with _quiet_hydra_logger():
                found = get_object(target)
        except Exception as exc:
            raise ConfigError(f"pipeline.{key}._target_", f"cannot import '{target}': {_why(target, exc)}") from exc
        if not callable(found):
            raise ConfigError(
                f"pipeline.{key}._target_",
                f"'{target}' is {with_article(type(found).__name__)}, not a class or function to call: name what "
                f"builds the {key}",
            )
        _check_arguments(key, node, found)
        _check_role(key, node, found)


# How the components a function stands for are called: (config's _args_ first, then) these arguments.
_CALLED_WITH = {"step": ("model", "batch", "loss_fn"), "collate_fn": ("samples",)}


def _check_role(key: str, node: dict[str, Any], target: Any) -> None:
    """Refuse, before a trial runs it, a model target that is a class but not a ``torch.nn.Module``, and a step or
    collate function that cannot take the arguments it is called with (``_CALLED_WITH``): either would fail the
    baseline, one trial and seconds later."""
    if key == "model" and inspect.isclass(target) and not issubclass(target, torch.nn.Module):
        raise ConfigError(
            "pipeline.model._target_",
            f"'{node['_target_']}' is a class but not a torch.nn.Module: name the module's class, or a function that "
            "returns one",
        )
    arguments = _CALLED_WITH.get(key)
    # A decorator (functools.wraps) shows the wrapped function's signature, whose arguments the wrapper may supply.
    if arguments is None or hasattr(target, "__wrapped__"):
        return
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # one without a signature to read: calling it says
        return
    try:
        signature.bind(*node.get("_args_", []), *arguments, **_given(node))
    except TypeError as exc:
        raise ConfigError(
            f"pipeline.{key}", f"{node['_target_']} cannot be called as {key}({', '.join(arguments)}): {exc}"
        ) from None


def _check_arguments(key: str, node: dict[str, Any], target: Any) -> None:
    """Refuse an argument the config gives that ``target`` does not take (a misspelt keyword), or, where it is built
    whole and not wrapped, one it requires that the config does not give, before a trial builds it: its failure
    there would be the baseline's."""
    given = _given(node)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # one without a signature to read: building it says
        return
    # A missing argument is refused only where the signature is the target's own: a decorator (functools.wraps)
    # shows the wrapped function's, whose arguments the wrapper may supply.
    whole = not node.get("_partial_") and not applied_partially(key, node) and not hasattr(target, "__wrapped__")
    try:
        (signature.bind if whole else signature.bind_partial)(*node.get("_args_", []), **given)
    except TypeError as exc:
        by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        taken = [name for name, parameter in signature.parameters.items() if parameter.kind in by_keyword]
        close = [(name, difflib.get_close_matches(name, taken, n=1)) for name in given if name not in taken]
        hints = [f"did you mean pipeline.{key}.{found[0]} for {name}?" for name, found in close if found]
        raise ConfigError(
            f"pipeline.{key}",
            f"{node['_target_']} {_fault(exc)}: {exc}" + "".join(f"; {h}" for h in hints),
        ) from None


def _given(node: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments a component's config gives its target: its keys but ``_target_``, ``_partial_``, ..."""
    return {name: value for name, value in node.items() if not name.startswith("_")}


def _fault(exc: TypeError) -> str:
    """What a signature's refusal of the config's arguments means, in words."""
    if str(exc).startswith("missing a required argument"):
        return "needs an argument the config does not give (add it under the component)"
    return "does not take these arguments"


@contextmanager
def _quiet_hydra_logger():
    """hydra.utils logs a multi-line error before raising; the raised error is reported instead."""
    logger = logging.getLogger("hydra.utils")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


@dataclass(frozen=True)
class OptimizerFacts:
    """What stepping the pipeline's optimizer on a device shows (``optimizer_facts``): ``options``, the
    implementations (of ``IMPLEMENTATION_KWARGS``) it can be switched to there, and ``default``, the one its default
    runs there ("for_loop", "foreach" or "fused"; None where it could not be seen)."""

    options: frozenset[str]
    default: str | None


def optimizer_facts(factory, device: str) -> OptimizerFacts:
    """Which implementations ``factory``'s optimizer can be switched to on ``device`` (``_switchable``) and which its
    default runs there (``_implementation_run``), read by stepping its default once, under ``_OperatorsCalled``, on
    the inspection's test parameters (as ``_check_optimizer`` builds it) with gradients of ones (``_stepped``): the
    operators it called say what ran, and whether it stepped says whether a switch's refusal there means anything.
    The default is None where it cannot be seen: no test parameters build it, they could not go on ``device`` or its
    step fails (the trial reports that)."""
    called = _OperatorsCalled()
    default_stepped = _stepped(factory, device, called)
    default = _implementation_run(called.names) if default_stepped else None
    return OptimizerFacts(_switchable(factory, device, default_stepped), default)


def _switchable(factory, device: str, default_stepped: bool) -> frozenset[str]:
    """The implementations ``factory``'s optimizer can be switched to on ``device`` (of ``IMPLEMENTATION_KWARGS``):
    those whose keyword it accepts, less those its build or one step refuses on the inspection's test parameters
    where its default steps there (``default_stepped``): torch refuses some pairings only then (fused on a CPU
    without its kernels, foreach with a tensor lr), and a candidate that fails every trial would be tried for
    nothing. Where the default does not step there (a step refusing tensors so small, parameters that could not go
    on ``device``), what it accepts stands and a trial tells. None where the pipeline's optimizer config sets
    foreach or fused itself (``fused: true``): the implementation is then the user's choice, which the knob's values
    would contradict (foreach and fused cannot both be on) or repeat."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return frozenset()
    if any(getattr(factory, "keywords", {}).get(name) is not None for name in ("foreach", "fused")):
        return frozenset()
    accepted = [impl for impl, kwargs in IMPLEMENTATION_KWARGS.items() if kwargs.keys() <= parameters.keys()]
    if not default_stepped:
        return frozenset(accepted)
    switched = {impl: functools.partial(factory, **IMPLEMENTATION_KWARGS[impl]) for impl in accepted}
    return frozenset(impl for impl, built in switched.items() if _stepped(built, device))


# The test parameters the inspection builds the optimizer on, in turn: a vector and a matrix together, as a model
# holds both (a factory may split them by shape: Muon for the matrices, AdamW for the rest, each refusing an empty
# list), then each alone (torch.optim.Muon takes matrices alone).
_TEST_SHAPES = (((1,), (1, 1)), ((1,),), ((1, 1),))


def _check_optimizer(factory, spec: PipelineSpec, device: str) -> None:
    """Build the pipeline's optimizer on the first of ``_TEST_SHAPES`` it takes, on ``device``, and check what it
    built is an optimizer (``_check_is_optimizer``) that steps without a closure (``_check_steps_without_closure``).
    A ConfigError naming pipeline.optimizer where every try raised the same error: torch checks an optimizer's
    options whatever its parameters (Adam's lr=-1 a ValueError, lr="0.001" a TypeError), as it would on the model's in
    every trial. Tries that fail differently (a factory splitting parameters by shape) are left to the trial, which
    builds it on the model's own parameters."""
    try:
        optimizer, _ = _built_on_test_parameters(factory, device)
    except _NotBuilt as failed:
        errors = failed.errors
        if len({(type(exc), _raised(exc)) for exc in errors}) == 1:
            raise ConfigError(
                "pipeline.optimizer",
                f"building {spec.components['optimizer']['_target_']} failed: {_raised(errors[0])} (the inspection "
                "built it on lone test parameters, a vector and a matrix, together and each alone: each try raised "
                "this)",
            ) from errors[0]
        return
    _check_is_optimizer(optimizer, spec)
    _check_steps_without_closure(optimizer, spec)


class _NotBuilt(Exception):
    """The optimizer factory built on none of ``_TEST_SHAPES``: ``errors`` holds each try's error, in turn."""

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__("the optimizer built on none of the test parameters")
        self.errors = errors


def _built_on_test_parameters(factory, device: str) -> tuple[Any, list[torch.nn.Parameter]]:
    """What ``factory`` builds on the first of ``_TEST_SHAPES`` it takes, as parameters on ``device``, and those
    parameters; _NotBuilt where it takes none."""
    errors = []
    for shapes in _TEST_SHAPES:
        parameters = [torch.nn.Parameter(_zeros_on(shape, device)) for shape in shapes]
        try:
            return factory(parameters), parameters
        except Exception as exc:
            errors.append(exc)
    raise _NotBuilt(errors)


def _check_is_optimizer(optimizer: Any, spec: PipelineSpec) -> None:
    """Refuse what the pipeline's optimizer factory built where it has no ``step`` or ``zero_grad`` (a list of
    optimizers): a training step calls both (``pipeline/setup.py``)."""
    if not all(callable(getattr(optimizer, name, None)) for name in ("step", "zero_grad")):
        raise ConfigError(
            "pipeline.optimizer",
            f"{spec.components['optimizer']['_target_']} built {with_article(type(optimizer).__name__)}, not an "
            "optimizer: autotune calls its step() and zero_grad(); name an optimizer's class, or a function that "
            "returns one (several optimizers: one torch.optim.Optimizer that steps them all)",
        )


def _zeros_on(shape: tuple[int, ...], device: str) -> torch.Tensor:
    """Zeros of ``shape`` on ``device``, or on the CPU where ``device`` holds none now: a device that fails is the
    trial's to report, not the optimizer's (torch built without CUDA raises an AssertionError)."""
    try:
        return torch.zeros(shape, device=device)
    except (RuntimeError, AssertionError):
        return torch.zeros(shape)


def _check_steps_without_closure(optimizer: torch.optim.Optimizer, spec: PipelineSpec) -> None:
    """Refuse an ``optimizer`` whose ``step`` requires an argument, a closure that evaluates the loss again
    (torch.optim.LBFGS): a training step calls ``optimizer.step()`` with none (``pipeline/setup.py``), so the
    baseline would fail with a TypeError."""
    try:
        step = inspect.signature(optimizer.step)
    except (TypeError, ValueError):  # no signature to read: its step in the trial says
        return
    required = [
        name
        for name, parameter in step.parameters.items()
        if parameter.default is parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    if required:
        raise ConfigError(
            "pipeline.optimizer",
            f"{spec.components['optimizer']['_target_']}.step() requires {', '.join(required)}: autotune steps the "
            "optimizer as optimizer.step(), without a closure; choose one that steps without (torch.optim.SGD, Adam, "
            "AdamW)",
        )


# The implementation a step ran, by the aten operators it called (their names' prefixes), the first that matches:
# fused first, as a fused step also calls foreach operators (Adam's counts its steps with _foreach_add_).
_IMPLEMENTATION_OPERATORS = (("fused", "_fused_"), ("foreach", "_foreach_"))


class _OperatorsCalled(TorchDispatchMode):
    """Records the name of every aten operator called under it (``_foreach_add_``), and runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _implementation_run(operators: set[str]) -> str:
    """The implementation a step that called the aten ``operators`` ran: "fused" where it called a fused operator,
    else "foreach" where it called a foreach one, else "for_loop". PyTorch picks it per optimizer and per call (Adam
    and SGD take foreach for CUDA parameters, Adafactor the loop there, and Adam the loop too with a tensor lr), so it
    is seen, not assumed. A step that loops over its parameters but calls a foreach operator for some other end (a
    third-party optimizer clipping by ``torch._foreach_norm``) reads foreach: the operators say what ran, not why."""
    ran = (impl for impl, prefix in _IMPLEMENTATION_OPERATORS if any(name.startswith(prefix) for name in operators))
    return next(ran, "for_loop")


def model_on_meta(spec: PipelineSpec, ndim: int | None) -> torch.nn.Module | None:
    """The inspection's one build of the model, where inputs of ``ndim`` dimensions can go channels-last (whether the
    model can: ``channels_last_refused``) or its target is a function of the pipeline's own code (``_is_own_code``;
    not a class, which ``_check_role`` checked is a Module's, nor a library's function, such as
    ``from_pretrained``, whose build may read a large checkpoint): only calling it tells what it builds. None where
    it is not built, or cannot be built on the meta device (a model that reads its tensors' values). A ConfigError
    naming pipeline.model where it builds no ``torch.nn.Module`` (``checked_model``), as it would in every trial.

    The search space these facts decide is fixed before any trial builds the real model, each in a process of its
    own. It is built on the meta device, where its ``__init__`` runs (a weight file it loads is read; one it
    downloads is then cached for the trials) but its tensors allocate nothing and its initialisers compute nothing."""
    target = get_object(spec.components["model"]["_target_"])
    if not ChannelsLastKnob.takes(ndim) and (inspect.isclass(target) or not _is_own_code(target)):
        return None
    try:
        with torch.device("meta"):
            model = build_component(spec, "model")
    except ConfigError:
        return None
    return checked_model(spec, model)


def channels_last_refused(model: torch.nn.Module | None, ndim: int | None) -> str | None:
    """Why ``model`` (``model_on_meta``'s) cannot be converted to channels_last where batches of ``ndim``
    dimensions could go so (``ChannelsLastKnob.takes``): what the knob's conversion (``ChannelsLastKnob.convert``)
    raises for it, as for a 5-D parameter or buffer (a Conv3d's weight) beside 2-D convolutions; None where it
    converts, or inputs could not go channels-last anyway. One not built is taken to convert, and a channels_last
    trial tells."""
    if model is None or not ChannelsLastKnob.takes(ndim):
        return None
    try:
        ChannelsLastKnob.convert(model)
    except (RuntimeError, ValueError) as exc:
        return str(exc)
    return None


def _stepped(factory, device: str, mode: contextlib.AbstractContextManager | None = None) -> bool:
    """Whether ``factory``'s optimizer, built on the inspection's test parameters on ``device``
    (``_built_on_test_parameters``), each given a gradient of ones, steps once (under ``mode`` where given): False
    where building or stepping raised, or the parameters could not go on ``device``."""
    try:
        optimizer, parameters = _built_on_test_parameters(factory, device)
    except _NotBuilt:
        return False
    if any(parameter.device.type != torch.device(device).type for parameter in parameters):
        return False
    for parameter in parameters:
        parameter.grad = torch.ones_like(parameter)
    try:
        with mode or contextlib.nullcontext():
            optimizer.step()
    except Exception:  # any refusal means: not here
        return False
    return True


def input_ndim(batch) -> int | None:
    """The dimensions of ``batch``'s input tensor (its first item, where it is a tuple or list); None where that is no
    tensor."""
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return first.dim() if isinstance(first, torch.Tensor) else None
