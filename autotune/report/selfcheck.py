"""The self-check's record as selfcheck.json, and what the terminal shows of it; nothing here measures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from autotune.files import write_atomic
from autotune.report.benchmark import stopped_words
from autotune.report.console import format_knobs
from autotune.results.selfcheck import AGREEMENT, ConfigurationCheck, SelfCheck
from autotune.words import counted


def write_selfcheck(check: SelfCheck, out_dir: Path) -> dict[str, Path]:
    """Write selfcheck.json; returns name → path."""
    return {"selfcheck.json": write_atomic(out_dir / "selfcheck.json", json.dumps(check.to_dict(), indent=1))}


def format_check(record: SelfCheck, check: ConfigurationCheck, baseline: dict | None) -> str:
    """``LABEL (knobs): harness / plain RATIO (95 % interval LOW-HIGH, N rounds): VERDICT``, the verdict
    ``record``'s on it."""
    changed = f" ({format_knobs(check.knobs, baseline)})" if baseline is not None else ""
    interval = check.interval
    if interval is None:
        ratio = f"{counted(len(check.ratios), 'complete round')}: too few for an interval"
    else:
        ratio = (
            f"harness / plain loop {interval.geomean:.3f} (95 % interval {interval.low:.3f}-{interval.high:.3f}, "
            f"{interval.n} rounds)"
        )
    failed = f"; {counted(len(check.failures), 'run')} failed: {check.failures[0]}" if check.failures else ""
    return f"{check.label}{changed}: {ratio}: {record.verdict(check)}{failed}"


def print_selfcheck(check: SelfCheck, files: dict[str, Path], out: TextIO) -> None:
    """Each configuration's line, then what its verdicts mean, or, where it stopped before its last round, that it
    decides nothing."""
    baseline = check.configurations[0].knobs
    print(f"\nSelf-check of '{check.pipeline}' on {check.device} ({check.source}):", file=out)
    for index, configuration in enumerate(check.configurations):
        print(f"  {format_check(check, configuration, baseline if index else None)}", file=out)
    stopped = f"The self-check {stopped_words(check.complete_rounds, check.rounds)}; the figures above are provisional"
    legend = (
        f"agree: the interval lies within {AGREEMENT:.0%} of 1, so autotune's figures hold for this pipeline here; "
        "disagree: it lies outside; unresolved: more rounds (selfcheck.rounds) would tell"
    )
    print(stopped if check.stopped else legend, file=out)
    for name, path in files.items():
        print(f"  {name:<17} {path}", file=out)
