"""``mode=report``: every report of a stored study rendered again from the study alone.

Nothing is measured and the pipeline's code is not imported: the reports read only what the study stores
(``autotune/records.py``), so a study tuned on another machine, or in a repository not at hand, renders here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from autotune.errors import ConfigError
from autotune.records import BASELINE_ATTR, META_ATTR
from autotune.redact import redact_url
from autotune.report import write_reports
from autotune.report.console import print_summary
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.study.storage import load_study


def run(name: str, storage: str, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Render the reports of study ``name`` in ``storage`` into ``output_dir``; returns the files written."""
    try:
        study = load_study(name, storage)
    except KeyError:
        raise ConfigError("study.name", f"no study '{name}' in {redact_url(storage)}") from None
    if META_ATTR not in study.user_attrs or BASELINE_ATTR not in study.user_attrs:
        raise ConfigError("study.name", f"study '{name}' was not made by autotune, or has no measured baseline")
    results = load_results(study)
    summary = summarise(results)
    files = write_reports(results, summary, output_dir)
    print(f"autotune: the reports of study '{name}' ({redact_url(storage)}), rendered from storage", file=out)
    print_summary(summary, files, f"{len(results.trials)} trial(s) stored", out)
    return files
