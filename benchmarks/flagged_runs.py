"""Flagged runs: how slow were the runs the cores' reading flagged, beside the same configuration's other runs?

    .venv/bin/python -m benchmarks.flagged_runs BENCHMARK_JSON [...] [--results FILE]

Reads what ``mode=benchmark`` stored (``benchmark.json``: each configuration's run in every round, and the runs
something beside them slowed, ``Entry.disturbed``). For each configuration with two or more runs the cores' reading did
not flag (``CoreSpeed.slow``; runs other processes slowed are left out), each flagged run is set against the median of
those, and each unflagged run against the median of the others: were the flags right, the first read low and the
second about 1. It also counts the paired comparisons (each configuration against the baseline and against the
recommendation) whose ratio keeps a slowed round: where too few rounds stayed quiet for ``quiet_rounds`` to leave
the slowed ones out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from autotune.results.benchmark import Benchmark, Entry
from benchmarks.common import announce_machine


def against_unflagged(entry: Entry) -> tuple[list[float], list[float]]:
    """``entry``'s flagged runs over the median of its unflagged ones, and each unflagged run over the median of the
    other unflagged ones (both empty with fewer than two unflagged runs)."""
    runs = {index: run for index, run in enumerate(entry.throughputs, start=1) if run is not None}
    others = {index for index, why in entry.disturbed.items() if why.others_cores is not None}
    flagged = {index for index, why in entry.disturbed.items() if why.cores_slowdown is not None} - others
    clean = {index: run for index, run in runs.items() if index not in flagged | others}
    if len(clean) < 2:
        return [], []
    usual = statistics.median(clean.values())
    slow = [runs[index] / usual for index in sorted(flagged) if index in runs]
    rest = [run / statistics.median(v for i, v in clean.items() if i != index) for index, run in clean.items()]
    return slow, rest


def thin_comparisons(record: Benchmark) -> tuple[int, int]:
    """How many paired comparisons of ``record`` state their ratio from rounds of which one was slowed (too few
    stayed quiet for ``quiet_rounds`` to leave the slowed out: ``Benchmark.ratios``), of how many."""
    pairs = [(entry, other) for entry in record.entries[1:] for other in (record.baseline, record.recommendation)]
    pairs = [(entry, other) for entry, other in pairs if other is not None and entry is not other]
    kept = 0
    for entry, other in pairs:
        slowed = set(entry.disturbed) | set(other.disturbed)
        both = [i for i, (a, b) in enumerate(zip(entry.throughputs, other.throughputs, strict=True), 1) if a and b]
        kept += bool(slowed & set(both)) and len(record.ratios(entry, other)) == len(both)
    return kept, len(pairs)


def spread(ratios: list[float]) -> dict[str, float] | None:
    """How many ``ratios``, their geometric mean and range (None without any)."""
    if not ratios:
        return None
    mean = math.exp(statistics.fmean(math.log(ratio) for ratio in ratios))
    return {"runs": len(ratios), "geomean": mean, "min": min(ratios), "max": max(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    announce_machine()
    slow: list[float] = []
    rest: list[float] = []
    thin = total = 0
    for path in args.files:
        record = Benchmark.from_dict(json.loads(path.read_text()))
        for entry in record.entries:
            flagged, unflagged = against_unflagged(entry)
            slow += flagged
            rest += unflagged
        counted = thin_comparisons(record)
        thin, total = thin + counted[0], total + counted[1]
    found = {
        "flagged": spread(slow),
        "unflagged": spread(rest),
        "comparisons_keeping_slowed_rounds": thin,
        "comparisons": total,
    }
    for kind in ("flagged", "unflagged"):
        if found[kind]:
            figures = found[kind]
            print(
                f"{kind}: {figures['runs']} runs, {figures['geomean']:.3f}x the same configuration's unflagged runs "
                f"(geometric mean; {figures['min']:.2f}-{figures['max']:.2f})"
            )
    print(f"paired comparisons whose ratio keeps a slowed round: {thin} of {total}")
    if args.results:
        args.results.write_text(json.dumps({"files": [str(p) for p in args.files], **found}, indent=2) + "\n")


if __name__ == "__main__":
    main()
