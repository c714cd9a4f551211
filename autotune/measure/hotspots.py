"""Where loading data spends its time: cProfile over the dataset's ``__getitem__`` (a stream's next sample) and the
collate function, in the process that runs them (each DataLoader worker profiles its own batches:
``autotune.measure.loading``), summed over a sample of batches.

A hot function is one with much self time (time in its own code, not in what it calls). Where it is a library's
(PIL, NumPy, torch, the standard library), its **call sites** are the lines of the user's own code that lead to it,
each with the share of its self time spent through it. cProfile records, per pair of caller and callee, the callee's
time in calls from that caller (not per line, nor per path): the hot function's self time is split over its callers
by that time exactly, and a library caller's share over its own callers in proportion to their time in it, up to the
first function of the user's code on each path; the line is the call in that function's source to the next function
down. Below a library function that several of the user's lines call, the split is that proportion, an estimate: a
deeper function that only one of the lines reaches is still shared among them.
"""

from __future__ import annotations

import ast
import functools
import os
import pstats
import re
import sys
import sysconfig
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

# cProfile's statistics: (file, line, function) -> (primitive calls, calls, self s, cumulative s, callers).
Stats = dict[tuple[str, int, str], tuple]


class MadeBatch(Protocol):
    """What a batch tells of its making (``autotune.measure.loading.Instrumented`` is one): its samples, the seconds
    fetching and collating took in process ``pid``, and cProfile's ``stats`` of that work where profiled."""

    samples: int
    fetch_s: float
    collate_s: float
    pid: int
    stats: Stats | None


_TOP = 12
_OWN = 6
_CHAIN_LIMIT = 30  # callers followed up from a hot function before giving up on finding the user's code
# A share of a hot function's self time below this, on its way up the callers, is not followed further: paths through
# a library multiply, and so little changes no call site's share visibly.
_SMALLEST_SHARE = 0.002
Key = tuple[str, int, str]
_AUTOTUNE = str(Path(__file__).resolve().parent.parent)
_AUTOTUNE_PARENT = str(Path(_AUTOTUNE).parent)
# The standard library and the installed packages, of this environment and of the Python it was made from (a
# virtual environment's platstdlib is its own). Not all of sys.base_prefix: a system Python's is /usr, under which
# the user's code may live (/usr/src/app).
_LIBRARY_ROOTS = tuple(
    {
        str(Path(paths[name]).resolve())
        for paths in (
            sysconfig.get_paths(),
            sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix}),
        )
        for name in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)
# "<built-in method torch.conv2d>" is torch.conv2d; "<method 'resize' of 'ImagingCore' objects>" ImagingCore.resize.
_BUILTIN = re.compile(r"<(?:built-in )?(?:method|function) '?([\w.]+)'?(?: of '([\w.]+)' objects)?>")


@dataclass(frozen=True)
class CallSite:
    """A line of the user's code (``site``, file:line) in function ``caller`` that leads to a hot function, and the
    seconds of the hot function's self time spent through it (``self_s``)."""

    site: str
    caller: str
    self_s: float


@dataclass(frozen=True)
class HotFunction:
    """A function's ``self_s`` (in its own code) and ``cumulative_s`` (with what it calls) over the sample, its
    ``calls``; ``location`` where it is defined (file:line, None for a built-in), ``own`` whether it is the user's
    code. For a library's function, ``call_sites`` are the lines of the user's code that lead to it, the most time
    first, and ``call_site`` and ``caller`` the first's line and function, None where no chain of callers reaches the
    user's code; for the user's own, ``caller`` is the function that calls it most."""

    name: str
    location: str | None
    self_s: float
    cumulative_s: float
    calls: int
    own: bool
    call_site: str | None = None
    caller: str | None = None
    call_sites: list[CallSite] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HotFunction:
        return cls(**{**data, "call_sites": [CallSite(**site) for site in data.get("call_sites", [])]})


@dataclass(frozen=True)
class Hotspots:
    """cProfile's view of ``batches`` batches (``samples`` samples) made in ``processes`` processes (DataLoader
    workers, or the training process without them): ``total_s`` seconds profiled in all, of which ``fetch_s`` in
    the dataset and ``collate_s`` collating; ``functions`` the hottest by self time, ``own`` the user's own functions
    by cumulative time."""

    batches: int
    samples: int
    processes: int
    num_workers: int
    total_s: float
    fetch_s: float
    collate_s: float
    functions: list[HotFunction] = field(default_factory=list)
    own: list[HotFunction] = field(default_factory=list)

    @property
    def collate_share(self) -> float:
        """The share of loading spent collating (the rest fetching samples), by the clock around each."""
        total = self.fetch_s + self.collate_s
        return self.collate_s / total if total > 0 else 0.0

    def share(self, function: HotFunction) -> float:
        """``function``'s self time as a share of all the time profiled."""
        return function.self_s / self.total_s if self.total_s > 0 else 0.0

    def cost_share(self, function: HotFunction) -> float:
        """The share of all the time profiled that ``function`` costs: for the user's own, with what it calls (done
        once, offline, its calls go too); for a library's, its self time."""
        spent = function.cumulative_s if function.own else function.self_s
        return min(1.0, spent / self.total_s) if self.total_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hotspots:
        functions = [HotFunction.from_dict(f) for f in data.get("functions", [])]
        own = [HotFunction.from_dict(f) for f in data.get("own", [])]
        return cls(**{**data, "functions": functions, "own": own})


def collect_hotspots(batches: Iterable[MadeBatch], count: int, num_workers: int) -> Hotspots:
    """Profile ``count`` batches of ``batches`` (made by ``InstrumentedData`` with ``profile``) and find the hot
    functions; paths are shown relative to the current directory where they are under it."""
    made = [item for item, _ in zip(batches, range(count), strict=False)]
    stats = pstats.Stats(*(_Loaded(item.stats or {}) for item in made)).stats
    stats = {key: value for key, value in stats.items() if not _is_profiler(key)}
    total_s = sum(value[2] for value in stats.values())
    by_self = sorted(stats, key=lambda key: stats[key][2], reverse=True)[:_TOP]
    own = sorted((key for key in stats if is_own_code(key[0])), key=lambda key: stats[key][3], reverse=True)[:_OWN]
    return Hotspots(
        batches=len(made),
        samples=sum(item.samples for item in made),
        processes=len({item.pid for item in made}),
        num_workers=num_workers,
        total_s=total_s,
        fetch_s=sum(item.fetch_s for item in made),
        collate_s=sum(item.collate_s for item in made),
        functions=[_hot(key, stats) for key in by_self],
        own=[_hot(key, stats) for key in own],
    )


class _Loaded:
    """Statistics already taken, in the shape ``pstats.Stats`` loads from a profiler."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def create_stats(self) -> None:
        """Nothing to take: ``stats`` is set."""


def _hot(key: Key, stats: dict[Key, tuple]) -> HotFunction:
    _, calls, self_s, cumulative_s, callers = stats[key]
    own = is_own_code(key[0])
    sites = [] if own else call_sites(key, stats)
    call_site = caller = None
    if sites:
        call_site, caller = sites[0].site, sites[0].caller
    elif own and callers:  # the user's function that runs it
        parent = _heaviest_caller(key, stats)
        caller = _own_name(parent, stats) if is_own_code(parent[0]) else None
    name = f"{shown_path(key[0])}:{_own_name(key, stats)}" if own else display_name(key)
    if key[0] == "~" and callers:  # a built-in is known by the library function that calls it
        wrapper = _heaviest_caller(key, stats)
        name = f"{display_name(wrapper)} → {name}" if _module_of(wrapper[0]) else name
    return HotFunction(
        name=name,
        location=f"{shown_path(key[0])}:{key[1]}" if key[0] != "~" else None,
        self_s=self_s,
        cumulative_s=cumulative_s,
        calls=calls,
        own=own,
        call_site=call_site,
        caller=caller,
        call_sites=sites,
    )


def _heaviest_caller(key: Key, stats: dict[Key, tuple]) -> Key | None:
    callers = stats.get(key, (0, 0, 0, 0, {}))[4]
    return max(callers, key=lambda c: callers[c][3]) if callers else None


def _own_name(key: Key, stats: dict[Key, tuple]) -> str:
    """A function of the user's code by name; a comprehension, generator expression or lambda (``<genexpr>``) within
    the user's function that runs it (``_render.<genexpr>``), past any built-in between them (``sum``)."""
    if not key[2].startswith("<"):
        return key[2]
    outer = key
    for _ in range(_CHAIN_LIMIT):
        outer = _heaviest_caller(outer, stats)
        if outer is None:
            break
        if is_own_code(outer[0]) and not outer[2].startswith("<"):
            return f"{outer[2]}.{key[2]}"
    return key[2]


def call_sites(key: Key, stats: dict[Key, tuple]) -> list[CallSite]:
    """The lines of the user's code that lead to ``key``, each with the seconds of its self time spent through it,
    the most first: its self time split over its callers by their calls' self time, then a library caller's share
    over that one's callers in proportion to their time in it, up to the first function of the user's code on each
    path. What reaches no user's code (the DataLoader's own, say) is on no line."""
    through: dict[tuple[Key, Key], float] = defaultdict(float)  # (user's function, what it calls) → seconds
    smallest = _SMALLEST_SHARE * stats[key][2]
    pending = [(caller, key, edge[2], (key,)) for caller, edge in stats[key][4].items()]
    while pending:
        function, callee, seconds, path = pending.pop()
        if is_own_code(function[0]):
            through[(function, callee)] += seconds
            continue
        callers = stats.get(function, (0, 0, 0, 0, {}))[4]
        total = sum(edge[3] for edge in callers.values())
        if seconds < smallest or total <= 0 or function in path or len(path) >= _CHAIN_LIMIT:
            continue
        for caller, edge in callers.items():
            pending.append((caller, function, seconds * edge[3] / total, (*path, function)))
    by_line: dict[str, CallSite] = {}
    for (function, callee), seconds in through.items():
        site = f"{shown_path(function[0])}:{_call_line(function, callee)}"
        before = by_line.get(site)
        by_line[site] = CallSite(site, _own_name(function, stats), seconds + (before.self_s if before else 0.0))
    return sorted(by_line.values(), key=lambda found: found.self_s, reverse=True)


def _call_line(function: Key, callee: Key) -> int:
    """The first line in ``function``'s own source (not that of a function, lambda or comprehension nested in it, a
    code object of its own) that calls a function named as ``callee`` is (cProfile does not say which of several);
    its definition line where none does (or the source cannot be read)."""
    name = _callee_name(callee)
    definition = _definition(*function)
    if definition is None:
        return function[1]
    lines = [
        node.lineno
        for node in _own_nodes(definition)
        if isinstance(node, ast.Call) and name in (getattr(node.func, "attr", None), getattr(node.func, "id", None))
    ]
    return min(lines, default=function[1])


def _own_nodes(definition: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``definition``'s body, not descending into the code objects nested in it, but for a nested
    comprehension's first iterable, which the enclosing code evaluates."""
    for child in ast.iter_child_nodes(definition):
        yield child
        if not isinstance(child, _CODE_NODES):
            yield from _own_nodes(child)
        elif generators := getattr(child, "generators", None):
            yield generators[0].iter
            yield from _own_nodes(generators[0].iter)


# What cProfile names a code object, by the node it is made from: a def by its name; a lambda, a generator expression
# or (before Python 3.12, which inlines them: PEP 709) a comprehension by its kind, starting at its opening bracket
# (a generator that is a call's sole argument: at the call's).
_KIND_NAMES: dict[type, str] = {ast.Lambda: "<lambda>", ast.GeneratorExp: "<genexpr>"}
if sys.version_info < (3, 12):
    _KIND_NAMES |= {ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>"}
_CODE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, *_KIND_NAMES)


@functools.lru_cache(maxsize=64)
def _definition(path: str, line: int, name: str) -> ast.AST | None:
    """The node in ``path`` of the code object cProfile names ``name`` at ``line`` (``_CODE_NODES``); None where none
    is."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    return next((node for node in ast.walk(tree) if _named(node) == name and node.lineno == line), None)


def _named(node: ast.AST) -> str | None:
    """What cProfile names the code object of ``node``; None where ``node`` makes none."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name
    return _KIND_NAMES.get(type(node))


def _callee_name(key: Key) -> str:
    return display_name(key).rsplit(".", 1)[-1] if key[0] == "~" else key[2]


def display_name(key: Key) -> str:
    """A function as a reader knows it: a dotted name for library code (``PIL.Image.resize``: module, then
    function) and built-ins (``ImagingCore.resize``), or ``file:function`` for the user's code."""
    path, _, function = key
    if path == "~":
        found = _BUILTIN.match(function)
        return ".".join(part for part in found.groups()[::-1] if part) if found else function
    module = _module_of(path)
    return f"{module}.{function}" if module else f"{shown_path(path)}:{function}"


def _module_of(path: str) -> str | None:
    """The dotted module of a library file (``PIL.Image``); None for the user's code."""
    resolved = str(Path(path).resolve())
    roots = [root for root in (*_LIBRARY_ROOTS, _AUTOTUNE_PARENT) if resolved.startswith(root + os.sep)]
    if not roots or is_own_code(path):
        return None
    relative = Path(resolved).relative_to(max(roots, key=len)).with_suffix("")
    parts = [part for part in relative.parts if part not in _INSTALLED_DIRS]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


# The folders installed packages live in.
_INSTALLED_DIRS = ("site-packages", "dist-packages")


def _in_installed(resolved: str) -> bool:
    """Whether the resolved path ``resolved`` lies in an installed package's folder."""
    return any(folder in resolved for folder in _INSTALLED_DIRS)


def is_installed_package(path: str) -> bool:
    """Whether ``path`` is a file of an installed package other than autotune (torch's, say)."""
    resolved = str(Path(path).resolve())
    return _in_installed(resolved) and not resolved.startswith(_AUTOTUNE + os.sep)


def is_own_code(path: str) -> bool:
    """Whether ``path`` is the user's code: not a built-in, not the standard library or an installed package, not
    autotune's own."""
    if path == "~" or path.startswith("<"):
        return False
    resolved = str(Path(path).resolve())
    if resolved.startswith(_AUTOTUNE + os.sep) or _in_installed(resolved):
        return False
    return not resolved.startswith(tuple(root + os.sep for root in _LIBRARY_ROOTS))


def shown_path(path: str) -> str:
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else path
    except ValueError:
        return path


def _is_profiler(key: Key) -> bool:
    return key[0] == "~" and "_lsprof.Profiler" in key[2]
