"""Whether this machine's cores keep their speed: a fixed pure-Python loop timed every ``--every`` seconds for
``--seconds``, nothing else meant to run beside it. A core that runs the loop slower while its process keeps the CPU
the whole time (no steal counted, no other process busy) slows a trial's run in a way autotune's check of other
processes (``SystemReport.disturbed``) cannot see.

    .venv/bin/python -m benchmarks.host_speed --seconds 600        # results: benchmarks/results/host_speed.json
    .venv/bin/python -m benchmarks.host_speed --from benchmarks/results/host_speed.json   # judged again, no sampling

Prints the loop's median, its 10th-90th percentiles, and each episode of samples slower than ``--slow`` times the
median (slow samples less than ``--gap`` seconds apart are one episode): its length, how many of its samples were
slow, the worst, the share of that sample's wall time that was its own CPU time (about 1: the core itself ran slower;
well below 1: the process waited) and the steal the kernel counted in the episode. The loop is the tuner's
(``autotune/measure/core_speed.loop_s``), counting to ``LOOP`` here."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.measure.core_speed import loop_s
from autotune.measure.environment import describe_machine

LOOP = 300_000  # about 7 ms on the Xeon of 2026-12-03


@dataclass(frozen=True)
class Sample:
    """One timing of the loop: when (s from the start), its wall and CPU seconds, the steal ticks meanwhile."""

    at_s: float
    wall_s: float
    cpu_s: float
    steal_ticks: int


def steal_ticks() -> int:
    """The machine's steal time so far, in clock ticks (``/proc/stat``'s eighth field of the cpu line)."""
    with open("/proc/stat") as stat:
        return int(stat.readline().split()[8])


def sample(start: float) -> Sample:
    steal, at, cpu = steal_ticks(), time.perf_counter(), time.process_time()
    wall_s = loop_s(LOOP)
    return Sample(at - start, wall_s, time.process_time() - cpu, steal_ticks() - steal)


def episodes(samples: list[Sample], slow: float, gap_s: float) -> list[list[Sample]]:
    """The samples slower than ``slow`` times the median, in runs: a gap of ``gap_s`` or more starts a new one."""
    median = statistics.median(s.wall_s for s in samples)
    found: list[list[Sample]] = []
    for s in (s for s in samples if s.wall_s > slow * median):
        if found and s.at_s - found[-1][-1].at_s < gap_s:
            found[-1].append(s)
        else:
            found.append([s])
    return found


def report(samples: list[Sample], slow: float, gap_s: float) -> None:
    """Print the loop's spread and its slow episodes (``episodes``)."""
    walls = sorted(s.wall_s for s in samples)
    median = statistics.median(walls)
    print(
        f"{len(samples)} samples over {samples[-1].at_s:.0f} s: median {median * 1e3:.1f} ms, 10th-90th percentile "
        f"{walls[len(walls) // 10] * 1e3:.1f}-{walls[9 * len(walls) // 10] * 1e3:.1f} ms, max {walls[-1] * 1e3:.1f}"
    )
    found = episodes(samples, slow, gap_s)
    print(f"{len(found)} episodes of samples slower than {slow}x the median ({gap_s:g} s apart or more):")
    for run in found:
        first, last = run[0].at_s, run[-1].at_s
        within = [s for s in samples if first <= s.at_s <= last]
        worst = max(run, key=lambda s: s.wall_s)
        print(
            f"  at {first:.0f} s, {last - first + run[-1].wall_s:.1f} s long: {len(run)} of {len(within)} samples "
            f"slow, up to {worst.wall_s / median:.2f}x (CPU/wall {worst.cpu_s / worst.wall_s:.2f}); "
            f"steal {sum(s.steal_ticks for s in within)} ticks"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--slow", type=float, default=1.3, help="a sample this many times the median is slow")
    parser.add_argument("--gap", type=float, default=10.0, help="seconds between slow samples that end an episode")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/host_speed.json"))
    parser.add_argument("--from", dest="stored", type=Path, help="judge the samples of an earlier run")
    args = parser.parse_args()
    if args.stored:
        samples = [Sample(**s) for s in json.loads(args.stored.read_text())["samples"]]
    else:
        start, samples = time.perf_counter(), []
        while time.perf_counter() - start < args.seconds:
            samples.append(sample(start))
            time.sleep(args.every)
    report(samples, args.slow, args.gap)
    if not args.stored:
        rounded = [Sample(round(s.at_s, 3), round(s.wall_s, 6), round(s.cpu_s, 6), s.steal_ticks) for s in samples]
        arguments = {**vars(args), "results": str(args.results), "stored": None}
        data = {"machine": describe_machine(), "arguments": arguments, "samples": [asdict(s) for s in rounded]}
        args.results.write_text(json.dumps(data, indent=None))
        print(f"results in {args.results}")


if __name__ == "__main__":
    main()
