"""What a config key takes (``Values``): each kind parses a value, or refuses it in one line saying what it allows."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.knobs import Knob

_SHOWN_CHARS = 80
_REFUSED = object()


def shown(value: Any) -> str:
    """``value`` as a refusal shows it: its repr, which escapes line breaks, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."


class Values(ABC):
    """The values one key takes."""

    @abstractmethod
    def parse(self, value: Any) -> Any:
        """``value`` in canonical form; ValueError with one line saying what is allowed where it is refused."""


@dataclass(frozen=True)
class Plain(Values):
    """A value of ``kind``: int (not a bool, nor a float); float (an int too; finite, as nan compares false with
    every bound and would pass them); str (non-empty and printable: no name, path or URL holds a line break or a
    NUL); bool; or tuple (a list of strings, or one string for a list of one). Numbers lie within ``minimum`` and
    ``maximum`` (excluded with ``above`` and ``below``); a string or a tuple is one of ``choices`` where given, or a
    string matches ``pattern``; null is allowed with ``null``. ``what`` describes a string otherwise; ``note``
    follows a refusal. A string's message leaves null unsaid: there it means the key is not given."""

    kind: type
    minimum: int | float | None = None
    above: bool = False
    maximum: int | float | None = None
    below: bool = False
    choices: tuple = ()
    pattern: str | None = None
    null: bool = False
    what: str = ""
    note: str = ""

    def parse(self, value: Any) -> Any:
        if value is None and self.null:
            return None
        typed = self._typed(value)
        if typed is _REFUSED or not self._allowed(typed):
            note = f"; {self.note}" if self.note else ""
            raise ValueError(f"expected {self.expected}, got {shown(value)}{note}")
        return typed

    @property
    def expected(self) -> str:
        """What the key takes, as a refusal says it."""
        if self.kind is tuple:
            return " or ".join(f"[{', '.join(choice)}]" for choice in self.choices)
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return self.what or (f"one of {', '.join(self.choices)}" if self.choices else "a non-empty string")
        bounds = [
            f"{'>' if self.above else '>='} {self.minimum}" if self.minimum is not None else "",
            f"{'<' if self.below else '<='} {self.maximum}" if self.maximum is not None else "",
        ]
        kind = "an integer" if self.kind is int else "a number"
        return f"{kind} {' and '.join(b for b in bounds if b)}{' or null' if self.null else ''}"

    def _typed(self, value: Any) -> Any:
        if self.kind is tuple:
            value = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) else value
            return value if isinstance(value, tuple) and all(isinstance(v, str) for v in value) else _REFUSED
        if self.kind is bool or isinstance(value, bool):
            return value if self.kind is bool and isinstance(value, bool) else _REFUSED
        if self.kind is str:
            return value if isinstance(value, str) and value and value.isprintable() else _REFUSED
        if self.kind is int:
            return value if isinstance(value, int) else _REFUSED
        return value if isinstance(value, (int, float)) and finite(value) else _REFUSED

    def _allowed(self, value: Any) -> bool:
        if self.kind in (str, tuple):
            matches = self.pattern is not None and re.fullmatch(self.pattern, value, re.ASCII) is not None
            return (not self.choices and self.pattern is None) or value in self.choices or matches
        if self.kind is bool:
            return True
        low, high = self.minimum, self.maximum
        above_low = low is None or (value > low if self.above else value >= low)
        return above_low and (high is None or (value < high if self.below else value <= high))


def finite(value: int | float) -> bool:
    """Whether ``value`` is a finite float, or an int a float can hold (a larger one is no number a float-valued
    setting can use)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


@dataclass(frozen=True)
class ImportPath(Values):
    """A component's ``_target_``: a dotted path of identifiers whose top-level module can be found. Found, not
    imported: importing runs the module's code, which runs only in subprocesses (``pipeline/inspect.py`` imports each
    target there, naming this key where it cannot be imported), and finding a top-level module runs nothing, as no
    package has to be imported first."""

    def parse(self, value: Any) -> str:
        if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")):
            raise ValueError(f"expected a dotted import path, got {shown(value)}")
        top = value.partition(".")[0]
        if not _findable(top):
            raise ValueError(
                f"cannot import '{value}': no module '{top}' in the current directory or on PYTHONPATH{_shipped(top)}"
            )
        return value


# autotune's checkout, where the shipped example pipelines' code (``examples``) lives beside the package.
_CHECKOUT = Path(__file__).resolve().parents[2]


def _shipped(top: str) -> str:
    """Where the checkout holds ``top`` (the shipped pipelines' ``examples``), how to reach it; else nothing."""
    if (_CHECKOUT / top / "__init__.py").is_file():
        return f" (it is in autotune's checkout: run from {_CHECKOUT}, or add it to PYTHONPATH)"
    return ""


def _findable(module: str) -> bool:
    try:
        return module in sys.modules or importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class KnobValue(Values):
    """A knob's value in the baseline, as the knob's ``parse`` allows. Null is for the loader to judge with the other
    knobs' values: where the knob does not apply it means "not applicable", where it does the knob's own verdict."""

    knob: Knob

    def parse(self, value: Any) -> Any:
        return None if value is None else self.knob.parse(value)


@dataclass(frozen=True)
class KnobCandidates(Values):
    """A knob's candidates in the search: a list of values the knob's ``parse`` allows (one value: a list of one),
    duplicates dropped; null derives them from the machine and the pipeline."""

    knob: Knob

    def parse(self, value: Any) -> list[Any] | None:
        if value is None:
            return None
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("the candidate list is empty; give at least one value, or null to derive them")
        return list(dict.fromkeys(self.knob.parse(v) for v in values))


@dataclass(frozen=True)
class CountOrAuto(Values):
    """A count of at least 1 (at most ``maximum``), or "auto"."""

    maximum: int = 1024

    def parse(self, value: Any) -> int | str:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= self.maximum):
            return value
        raise ValueError(f"expected an integer from 1 to {self.maximum}, or auto; got {shown(value)}")


@dataclass(frozen=True)
class CoreSets(Values):
    """Null, or a list of lists of CPU core numbers (each from 0 to ``maximum``), e.g. [[0,1],[2,3]]."""

    maximum: int = 65535

    def parse(self, value: Any) -> tuple[tuple[int, ...], ...] | None:
        if value is None:
            return None
        if isinstance(value, list | tuple) and value and all(isinstance(cores, list | tuple) for cores in value):
            if all(self._core(core) for cores in value for core in cores):
                return tuple(tuple(cores) for cores in value)
        raise ValueError(f"expected null or a list of lists of core numbers such as [[0,1],[2,3]]; got {shown(value)}")

    def _core(self, core: Any) -> bool:
        return isinstance(core, int) and not isinstance(core, bool) and 0 <= core <= self.maximum
