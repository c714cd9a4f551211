"""report.md: the report document as Markdown, user strings escaped (Markdown viewers render raw HTML)."""

from __future__ import annotations

import html

from autotune.report.document import Document, Section, Table
from autotune.report.study_document import build_document
from autotune.results.model import StudyResults
from autotune.results.summary import Summary


def render_markdown(results: StudyResults, summary: Summary) -> str:
    return to_markdown(build_document(results, summary))


def to_markdown(document: Document) -> str:
    parts = [f"# {_text(document.title)}", f"**{_text(document.headline.lead)}** {_text(document.headline.rest)}"]
    for section in document.sections:
        parts += _section(section, level=2)
    return "\n\n".join(parts) + "\n"


def _section(section: Section, level: int) -> list[str]:
    """``section``'s blocks under a heading of ``level``, then its subsections' one level down."""
    parts = [f"{'#' * level} {_text(section.heading)}", *(_text(paragraph) for paragraph in section.paragraphs)]
    if section.table:
        parts.append(markdown_table(section.table))
    if section.bullets:
        parts.append("\n".join(f"- {_text(bullet)}" for bullet in section.bullets))
    if section.links:
        parts.append("\n".join(f"- [{_text(link.text)}](<{link.href}>)" for link in section.links))
    for subsection in section.subsections:
        parts += _section(subsection, level + 1)
    return parts


def markdown_table(table: Table) -> str:
    lines = ["| " + " | ".join(map(_cell, table.headers)) + " |", "|" + "---|" * len(table.headers)]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in table.rows]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _text(text: str) -> str:
    return html.escape(text, quote=False)
