"""Instantiate a pipeline's components: the one place a pipeline's ``_target_`` runs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hydra.utils import get_object, instantiate

from autotune.errors import ConfigError
from autotune.pipeline.spec import PipelineSpec


@dataclass
class Pipeline:
    """The live objects of a pipeline; ``optimizer_factory`` is called with the model's parameters."""

    model: torch.nn.Module
    dataset: Any
    loss_fn: Callable[..., torch.Tensor]
    optimizer_factory: Callable[..., torch.optim.Optimizer]
    collate_fn: Callable | None
    step_fn: Callable | None


def build_component(spec: PipelineSpec, key: str) -> Any:
    """Instantiate one component; callables (optimizer, collate_fn, step, and a loss given as the function to call
    rather than a class or a factory that builds one) come back partially applied."""
    node = spec.components.get(key)
    if node is None:
        return None
    partial = applied_partially(key, node)
    try:
        return plain_partial(instantiate(node, _partial_=True)) if partial else instantiate(node)
    except Exception as exc:
        cause = exc.__cause__ or exc
        raise ConfigError(
            f"pipeline.{key}", f"building {node.get('_target_')} failed: {type(cause).__name__}: {cause}"
        ) from exc


def plain_partial(applied: functools.partial) -> functools.partial:
    """``applied``, a callable Hydra built partially applied, as the user's own loop calls it: a plain
    ``functools.partial`` of the same target and arguments. Hydra's own subclass authorises its target again at each
    call (about 0.1 ms here), a cost inside the timed loop (a collate_fn, a step, a loss function is called once a
    batch) that the user's training never pays; its target was authorised as it was built."""
    return functools.partial(applied.func, *applied.args, **applied.keywords)


def applied_partially(key: str, node: dict[str, Any]) -> bool:
    """Whether component ``key`` is built partially applied, the rest of its arguments given as it is called."""
    return key in ("optimizer", "collate_fn", "step") or (key == "loss" and _is_loss_function(node))


def _is_loss_function(node: dict[str, Any]) -> bool:
    """Whether ``node``'s target is the loss function itself, to call as loss(output, target): a function that, with
    the config's arguments bound, still takes two positional arguments; not a class or a factory that returns one.
    The config's own ``_partial_`` decides where it has one."""
    if "_partial_" in node:
        return bool(node["_partial_"])
    try:
        target = get_object(node["_target_"])
        if inspect.isclass(target):
            return False
        parameters = inspect.signature(target).parameters.values()
    except Exception:  # not importable (building it says why), or no signature to read: built as it is
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    given = len(node.get("_args_", []))
    unbound = [p for p in list(parameters)[given:] if p.kind in positional and p.default is p.empty]
    return len([p for p in unbound if p.name not in node]) >= 2


def checked_model(spec: PipelineSpec, model: Any) -> torch.nn.Module:
    """``model``, built by ``spec``'s model target; a ConfigError naming pipeline.model where it is no
    ``torch.nn.Module``."""
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            "pipeline.model",
            f"{spec.components['model']['_target_']} built {with_article(type(model).__name__)}, not a "
            "torch.nn.Module: name the module's class, or a function that returns one",
        )
    return model


def with_article(noun: str) -> str:
    """``noun`` with its indefinite article: "an int", "a float"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def build_pipeline(spec: PipelineSpec) -> Pipeline:
    """Instantiate every component of ``spec``."""
    return Pipeline(
        model=checked_model(spec, build_component(spec, "model")),
        dataset=build_component(spec, "dataset"),
        loss_fn=build_component(spec, "loss"),
        optimizer_factory=build_component(spec, "optimizer"),
        collate_fn=build_component(spec, "collate_fn"),
        step_fn=build_component(spec, "step"),
    )
