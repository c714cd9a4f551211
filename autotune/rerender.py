"""``mode=report``: every report of a stored study rendered again from the study alone.

Nothing is measured and the pipeline's code is not imported: the reports read only what the study stores
(``autotune/records.py``), so a study tuned on another machine, or in a repository not at hand, renders here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from autotune.errors import ConfigError
from autotune.records import BASELINE_ATTR, META_ATTR, on_machine, study_machines
from autotune.redact import redact_url
from autotune.report import write_reports
from autotune.report.console import print_summary
from autotune.results.advice import batch_advice
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.study.storage import load_study, study_names
from autotune.words import counted


def run(name: str, storage: str, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Render the reports of study ``name`` in ``storage`` into ``output_dir``; returns the files written. A study
    measured on several machines gets one set of reports per machine, in ``output_dir/machine-ID`` (throughput from
    different hardware is never ranked together)."""
    try:
        study = load_study(name, storage)
    except KeyError:
        names = study_names(storage)
        held = f"; it holds {', '.join(names[:10])}{', …' if len(names) > 10 else ''}" if names else "; it holds none"
        raise ConfigError("study.name", f"no study '{name}' in {redact_url(storage)}{held}") from None
    machines = [machine for machine in study_machines(study) if on_machine(BASELINE_ATTR, machine) in study.user_attrs]
    if META_ATTR not in study.user_attrs or not machines:
        made = META_ATTR in study.user_attrs
        what = "has no measured baseline (its baseline failed, or no run got that far)" if made else "is not autotune's"
        raise ConfigError("study.name", f"study '{name}' {what}")
    files: dict[str, Path] = {}
    for machine in machines:
        results = load_results(study, machine)
        summary = summarise(results)
        folder = output_dir / f"machine-{machine}" if len(machines) > 1 else output_dir
        written = write_reports(results, summary, folder)
        on = f", measured on {results.machine.get('cpu_model')} (machine {machine})" if len(machines) > 1 else ""
        print(f"autotune: the reports of study '{name}' ({redact_url(storage)}){on}, rendered from storage", file=out)
        stored = f"Rendered from the study: {counted(len(results.trials), 'trial')} stored"
        print_summary(
            summary, written, stored, out, results.profiles, results.tuner_time, batch_advice(results, summary)
        )
        files |= {f"{machine}/{kind}" if len(machines) > 1 else kind: path for kind, path in written.items()}
    return files
