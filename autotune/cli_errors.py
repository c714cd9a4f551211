"""The command line's errors, each one line on stderr and an exit code (``report_errors``): refused input exits 2, a
failure 1, a stop signal 128 + the signal. Any exception becomes an AutotuneError whose message is one line
(``as_autotune_error``); Hydra's refusals of an override it cannot parse and of a config it cannot compose are said
in autotune's words, naming the key (``_parse_error``, ``_composition_error``). The command line that runs under it
is ``autotune/cli.py``.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException, SearchPathException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from autotune.config.load import NO_PIPELINE, unknown_key
from autotune.errors import AutotuneError, ConfigError, stop_signal
from autotune.hydra_args import config_dir, quoted
from autotune.pipeline_choice import pipeline_folder_given

# What AUTOTUNE_DEBUG is set to where it asks for no tracebacks (in any case; unset or empty too).
_OFF = ("", "0", "false", "no", "off")


def report_errors(func: Callable[[], None], where: str = "") -> None:
    """Run ``func``; any exception becomes one line on stderr (``where`` appended) and its exit code, after its
    traceback where AUTOTUNE_DEBUG is set (the exit code stays: a script tells a refused input, 2, from a failure, 1,
    either way)."""
    try:
        func()
    except KeyboardInterrupt as exc:
        signum = stop_signal(exc)
        fail("interrupted" if signum == signal.SIGINT else f"stopped by {signum.name}", 128 + signum)
    except Exception as exc:
        if os.environ.get("AUTOTUNE_DEBUG", "").strip().lower() not in _OFF:
            traceback.print_exc()
        error = as_autotune_error(exc)
        fail(str(error) + where, error.exit_code)


def as_autotune_error(exc: Exception) -> AutotuneError:
    """Any exception as an AutotuneError with a one-line message; config problems exit 2."""
    if isinstance(exc, AutotuneError):
        return exc
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, _, name = (exc.missing_cfg_file or "pipeline/").partition("/")
        given = config_dir(sys.argv[1:])
        if group == "pipeline" and given and (refusal := pipeline_folder_given(name, [Path(given)])):
            return refusal
        own = f"; a pipeline of your own: -cd DIR, DIR/pipeline/{name}.yaml" if group == "pipeline" else ""
        own = "" if given else own
        return ConfigError(group, f"no config named '{name}'; available: {', '.join(exc.options) or 'none'}{own}")
    if isinstance(exc, SearchPathException) and (folder := re.search(r"directory '(.*)' not found", str(exc))):
        return ConfigError("-cd", f"no folder {folder[1]}; give the folder that holds your pipeline/ configs")
    if isinstance(exc, ValueError) and (kind := _GROUP_VALUE.match(str(exc))):
        group, value = _group_given_no_name(sys.argv[1:])
        return ConfigError(
            group,
            f"the name reads as {_YAML_READS.get(kind[1], kind[1])} in YAML, not as a config name: quote it "
            f"({group}=\"'{value}'\"), or leave it out where the mode needs none",
        )
    if isinstance(exc, OverrideParseException):
        return _parse_error(exc)
    if isinstance(exc, (HydraException, OmegaConfBaseException)):
        return _composition_error(exc)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return ConfigError(f"{mark.name}:{mark.line + 1}:{mark.column + 1}", f"YAML syntax error: {exc.problem}")
    if isinstance(exc, OSError) and exc.filename:
        # Raised before the run starts, this is Hydra creating the output directory.
        return ConfigError("hydra.run.dir", f"cannot create or write {exc.filename}: {exc.strerror}")
    return AutotuneError(
        f"internal error: {type(exc).__name__}: {one_line(str(exc))} (set AUTOTUNE_DEBUG=1 for the traceback)"
    )


def _parse_error(exc: OverrideParseException) -> ConfigError:
    """The refusal of an override Hydra cannot parse, naming its key; where its value holds a character that Hydra's
    grammar takes only inside quotes (a letter beyond ASCII, '#') and parses once quoted, how to quote it."""
    name, _, value = exc.override.partition("=")
    problem = one_line(exc.message)
    # Hydra's lexer finds no token for a character that only a quoted value holds
    if exc.message.startswith("LexerNoViableAltException") and _parses(f"{name}={quoted(value)}"):
        problem = f"quote a value with a letter beyond ASCII or a character such as '#': {name}=\"{quoted(value)}\""
    return ConfigError(name.lstrip("+~"), f"cannot parse the override {exc.override!r}: {problem}")


def _parses(override: str) -> bool:
    try:
        OverridesParser.create().parse_override(override)
    except HydraException:
        return False
    return True


def _group_given_no_name(args: list[str]) -> tuple[str, str]:
    """The config group (``pipeline``, ``hydra/job_logging``) an override gives a value YAML reads as no name, and
    that value."""
    for arg in args:
        key, equals, value = arg.partition("=")
        if equals and "." not in key and not isinstance(_yaml_value(value), (str, list)):
            return key.lstrip("+~"), value
    return "pipeline", "NAME"


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# Hydra's refusal of a config group's value that YAML reads as other than a name (pipeline=1, =true, =null).
_GROUP_VALUE = re.compile(r"^Config group override must be a string or a list\. Got (\w+)")
_YAML_READS = {"int": "a number", "float": "a number", "bool": "true or false", "NoneType": "null"}

# Hydra's refusals of an override that adds (+) or removes (~) a key, which it raises without a cause to read the key
# from (hydra/_internal/config_loader_impl.py): its message, and what to say instead.
_OVERRIDE_REFUSALS = (
    (
        re.compile(r"^Could not append to config\. An item is already at '(?P<key>[^']+)'\."),
        "already set; change it with {key}=VALUE (without the +), or ++{key}=VALUE sets it whether set or not",
    ),
    (
        re.compile(r"^Could not delete from config\. '(?P<key>[^']+)' does not exist\.$"),
        "not set, so ~{key} has nothing to remove",
    ),
    (
        re.compile(
            r"^Could not delete from config\. The value of '(?P<key>[^']+)' is (?P<value>.*) and not (?P<given>.*)\.$"
        ),
        "is {value}, not {given}; ~{key} without a value removes it whatever it is",
    ),
)


# OmegaConf's refusal of a key a mapping lacks: one of the config's (in struct mode), or one of a structured config's
# (Hydra's own: "Key 'dri' not in 'RunDir'").
_NOT_IN = re.compile(r"Key '.*' (is not in struct|not in '\w+')")


def _composition_error(exc: Exception) -> ConfigError:
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    key = getattr(cause, "full_key", None)
    message = one_line(str(exc))
    if "You must specify 'pipeline'" in message:
        return ConfigError("pipeline", NO_PIPELINE)
    for refusal, problem in _OVERRIDE_REFUSALS:
        if found := refusal.search(message):
            return ConfigError(found["key"], problem.format(**found.groupdict()))
    if key and _NOT_IN.search(str(cause)):
        section, _, name = key.rpartition(".")
        if name == "pipeline" and not section:
            return ConfigError("pipeline", "no pipeline chosen for the pipeline.* keys; add pipeline=NAME before them")
        parent = getattr(cause, "parent_node", None)
        return unknown_key(section, name, [str(k) for k in parent] if isinstance(parent, DictConfig) else [])
    return ConfigError(key or "", message)


def fail(message: str, code: int) -> None:
    """Print ``message`` as autotune's one-line error and exit with ``code``."""
    print(f"autotune: error: {message}", file=sys.stderr)
    sys.exit(code)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, line breaks included, as one space."""
    return " ".join(text.split())
