"""Reports rendered from saved results; nothing here measures."""

from __future__ import annotations

from pathlib import Path

from autotune.files import write_atomic
from autotune.report.html_report import render_html
from autotune.report.json_report import render_json
from autotune.report.markdown import render_markdown
from autotune.report.recommended import render_recommended
from autotune.report.rows import ranked_frame
from autotune.results.model import StudyResults
from autotune.results.summary import Summary


def write_reports(results: StudyResults, summary: Summary, out_dir: Path) -> dict[str, Path]:
    """Write recommended.yaml, trials.csv, report.md, report.json and report.html; returns name → path."""
    rendered = {
        "recommended.yaml": render_recommended(results, summary),
        "trials.csv": ranked_frame(summary).to_csv(index=False),
        "report.md": render_markdown(results, summary),
        "report.json": render_json(results, summary),
        "report.html": render_html(results, summary),
    }
    return {name: write_atomic(out_dir / name, text) for name, text in rendered.items()}


__all__ = ["write_reports"]
