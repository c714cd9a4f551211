"""What a report's content is made of: a Document of Sections (paragraphs, a Table, bullets, plots, Links) under a
Headline, built once and rendered as Markdown or HTML; and what every report's parts share: a table's cells, the
machine's lines.

Every string in a Document is plain text, user-controlled ones included (pipeline names, error messages): renderers
escape for their format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.measure.environment import thread_variables
from autotune.report.plots import Plot


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Link:
    """A file or page the reader can open: its ``text`` and ``href`` (a path relative to the report, or a URL)."""

    text: str
    href: str


@dataclass(frozen=True)
class Section:
    """A part of a report under its ``heading``; its ``subsections`` follow its own content, each under a heading one
    level down (a trim race under "Only the changes that matter")."""

    heading: str
    paragraphs: list[str] = field(default_factory=list)
    table: Table | None = None
    bullets: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass(frozen=True)
class Headline:
    """``lead`` is the part to emphasise."""

    lead: str
    rest: str

    def __str__(self) -> str:
        return f"{self.lead} {self.rest}"


@dataclass(frozen=True)
class Document:
    title: str
    headline: Headline
    sections: list[Section]


def present(*found: Plot | None) -> list[Plot]:
    """The pictures whose data exists (a plot function returns None without it)."""
    return [plot for plot in found if plot is not None]


def format_cell(value: Any) -> str:
    """A table's cell: a number to a tenth from 10 up (as samples/s are said everywhere), to three significant
    digits below (2.08, 0.247), zero as 0."""
    if value is None:
        return ""
    if isinstance(value, float):
        size = abs(value)
        decimals = 0 if value == 0 else 1 if size >= 10 else 2 if size >= 1 else 3
        return f"{value:.{decimals}f}"
    return str(value)


def table_of(headers: list[str], rows: list[list[Any]]) -> Table:
    """A Table of ``rows`` under ``headers``, each value a cell as ``format_cell`` writes it."""
    return Table(headers, [[format_cell(value) for value in row] for row in rows])


def machine_lines(machine: dict[str, Any], device: str) -> list[str]:
    """The machine a report's figures were measured on (``describe_machine``'s description), a line per part, in
    words; "?" for what a description stored by an earlier version lacks."""

    def of(key: str) -> Any:
        return machine.get(key, "?")

    return [
        f"CPU: {of('cpu_model')} ({of('cpu_count')} usable cores, {of('physical_cores')} physical; "
        f"flags: {', '.join(machine.get('cpu_flags') or ['none of note'])})",
        f"Memory: {of('memory_gb')} GiB",
        f"GPU: {machine.get('gpu') or 'none'}; device used: {device}",
        f"torch {of('torch')} (CUDA {machine.get('cuda') or 'none'}, cuDNN {machine.get('cudnn') or 'none'}), "
        f"Python {of('python')}, {of('torch_threads')} torch threads"
        + (f" (by {variables})" if (variables := thread_variables(machine)) else ""),
        f"Platform: {of('platform')}",
    ]
