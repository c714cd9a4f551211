"""report.html: the report document as one self-contained HTML page; every string is escaped."""

from __future__ import annotations

import base64
from html import escape

from autotune.report.document import Document, Section, Table
from autotune.report.plots import Plot, png
from autotune.report.study_document import build_document
from autotune.results.model import StudyResults
from autotune.results.summary import Summary

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; } h3 { font-size: 1rem; margin-top: 1.5rem; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; text-align: left; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
.headline { font-size: 1.1rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; } figcaption { color: #555; font-size: .9rem; }
"""


def render_html(results: StudyResults, summary: Summary) -> str:
    return to_html(build_document(results, summary))


def to_html(document: Document) -> str:
    body = [
        f"<h1>{escape(document.title)}</h1>",
        f'<p class="headline"><strong>{escape(document.headline.lead)}</strong> {escape(document.headline.rest)}</p>',
    ]
    for section in document.sections:
        body += _section(section, level=2)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(document.title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _section(section: Section, level: int) -> list[str]:
    """``section``'s elements under an ``h{level}`` heading, then its subsections' one level down."""
    body = [f"<h{level}>{escape(section.heading)}</h{level}>"]
    body += [f"<p>{escape(paragraph)}</p>" for paragraph in section.paragraphs]
    body += [_figure(plot) for plot in section.plots]
    if section.table:
        body.append(_table(section.table))
    if section.bullets:
        body.append("<ul>" + "".join(f"<li>{escape(bullet)}</li>" for bullet in section.bullets) + "</ul>")
    if section.links:
        items = "".join(f'<li><a href="{escape(link.href)}">{escape(link.text)}</a></li>' for link in section.links)
        body.append(f"<ul>{items}</ul>")
    for subsection in section.subsections:
        body += _section(subsection, level + 1)
    return body


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(header)}</th>" for header in table.headers)
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _figure(plot: Plot) -> str:
    """``plot`` embedded as a PNG data URI: the page needs no other file and no network."""
    data = base64.b64encode(png(plot)).decode("ascii")
    caption = escape(plot.caption)
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{caption}"><figcaption>{caption}</figcaption></figure>'
    )
