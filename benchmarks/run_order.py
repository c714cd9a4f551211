"""Does a run's place in a round matter? One configuration raced against copies of itself, as the trim races.

    .venv/bin/python -m benchmarks.run_order [--copies 8] [--rounds 4] [--knob NAME=VALUE ...]

The trim's races run up to nine configurations a round, in an order rotated each round (``run_race._run_round``), so
two runs it compares can run up to eight runs apart. Were the machine's speed to drift over a round, runs far apart
would differ more than neighbours and the order would need to pair them. Here one configuration runs under
``--copies`` labels with the baseline, each round as a race round does (a new draw of the process layout, the
rotation, the tuner's runner and its cores' reading), and the copies' runs, which should all read alike, are
compared by how many runs apart they ran: the root mean square of their log ratios by distance. Flat: a run's noise
does not depend on its place. It also prints what the runs the cores' reading flagged read against the unflagged ones.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.files import write_atomic
from autotune.runner import TrialRunner
from benchmarks.common import announce_machine, knob_values, settings_for

# Distances, in runs, the copies' pairs are pooled by: (first, last) inclusive.
DISTANCES = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 17), (18, 10_000))


@dataclass(frozen=True)
class Run:
    """One run: its place in the whole sequence, round and label, throughput (None: failed), and whether the cores'
    reading flagged it slowed."""

    place: int
    round: int
    label: str
    throughput: float | None
    flagged: bool


def race_rounds(runner: TrialRunner, configs: dict[str, dict], rounds: int) -> list[Run]:
    """``configs`` (label -> knobs) for ``rounds`` rounds, each starting with a new draw and one place further along
    the labels, as a race round runs its entrants."""
    labels, runs = list(configs), []
    for index in range(rounds):
        runner.new_draw()
        shift = index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            result = runner.run(configs[label], f"round{index + 1}-{label}")
            flagged = result.core_speed is not None and result.core_speed.slow
            throughput = result.timing.throughput if result.ok else None
            runs.append(Run(len(runs), index + 1, label, throughput, flagged))
            shown = f"{throughput:.1f} samples/s" if throughput else f"FAILED {result.failure}"
            print(f"  round {index + 1} {label}: {shown}{' (flagged)' if flagged else ''}", flush=True)
    return runs


def by_distance(runs: list[Run]) -> dict[str, tuple[int, float]]:
    """The pairs of ``runs`` (all of one configuration) pooled by how many runs apart they ran: per range of
    ``DISTANCES``, the pairs and the root mean square of their log ratios."""
    pooled: dict[tuple[int, int], list[float]] = {span: [] for span in DISTANCES}
    for first, second in itertools.combinations(runs, 2):
        apart = second.place - first.place
        span = next(s for s in DISTANCES if s[0] <= apart <= s[1])
        pooled[span].append(math.log(second.throughput / first.throughput))
    return {
        f"{low}" if low == high else f"{low}+" if high >= 10_000 else f"{low}-{high}": (
            len(logs),
            math.sqrt(statistics.fmean(x * x for x in logs)),
        )
        for (low, high), logs in pooled.items()
        if logs
    }


def flagged_against_rest(runs: list[Run]) -> tuple[float, int, int] | None:
    """The geometric mean of the flagged runs' throughput over the unflagged ones' (both of one configuration), and
    how many of each; None without both."""
    flagged = [math.log(r.throughput) for r in runs if r.flagged]
    rest = [math.log(r.throughput) for r in runs if not r.flagged]
    if not flagged or not rest:
        return None
    return math.exp(statistics.fmean(flagged) - statistics.fmean(rest)), len(flagged), len(rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=8, help="labels of the one configuration a round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--knob",
        nargs="*",
        default=["num_workers=2", "persistent_workers=True", "num_threads=1", "channels_last=True"],
        metavar="NAME=VALUE",
    )
    parser.add_argument("--results", type=Path)
    args = parser.parse_args()
    machine = announce_machine()
    settings = settings_for("mymodel", [])
    knobs = {**settings.baseline, **knob_values(args.knob)}
    configs = {"baseline": settings.baseline, **{f"copy{i + 1}": knobs for i in range(args.copies)}}
    with tempfile.TemporaryDirectory() as tmp:
        runner = TrialRunner(settings, "cpu", Path(tmp))
        try:
            runs = race_rounds(runner, configs, args.rounds)
        finally:
            runner.close()
    copies = [r for r in runs if r.label != "baseline" and r.throughput is not None]
    logs = [math.log(r.throughput) for r in copies]
    print(f"{len(copies)} runs of the configuration: SD of log throughput {statistics.stdev(logs):.3f}")
    for span, (pairs, rms) in by_distance(copies).items():
        print(f"  {span:>5} runs apart: {pairs:4d} pairs, root mean square log ratio {rms:.3f}")
    if (flags := flagged_against_rest(copies)) is not None:
        ratio, flagged, rest = flags
        print(f"  {flagged} runs flagged slowed read {ratio:.3f}x the {rest} unflagged (geometric means)")
    if args.results:
        payload = {"machine": machine, "arguments": {**vars(args), "results": str(args.results)}}
        write_atomic(args.results, json.dumps({**payload, "runs": [asdict(r) for r in runs]}))


if __name__ == "__main__":
    main()
