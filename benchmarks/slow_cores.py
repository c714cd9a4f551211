"""Whether the tuner's reading of its cores around each run (``autotune/measure/core_speed.py``) catches the runs
that slow cores slowed, and how often it flags a run that nothing slowed.

    sudo .venv/bin/python -m benchmarks.slow_cores --runs 40     # results: benchmarks/results/slow_cores.json

Cores that run slow while the run's process keeps them cannot be made on demand, so this makes their effect: the
tuner (this process, and so every trial it starts) joins a cgroup of its own whose CPU quota a thread switches on
(``--quota`` of a core, in 2 ms periods, so that a loop of milliseconds feels it as a slower core, not as pauses)
for stretches of ``--slow-s`` seconds, ``--quiet-s`` apart, drawn at random. Nothing inside a throttled run sees
it: its cores are not busy, no other process runs, no steal is counted. The example's ``--knob`` configuration runs
``--runs`` times as the tuner runs a race's run (``TrialRunner.run``). Each run is counted quiet (no stretch touched
it), read slow (below ``--low`` of the quiet runs' median throughput) or touched but not read slow; for each, how
many the reading flagged (``CoreSpeed.slow``). Needs root and the cgroup CPU controller (v1 or v2).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.files import write_atomic
from autotune.runner import TrialRunner
from autotune.trial.runner import end_shared_fork_server
from benchmarks.common import announce_machine, knob_values, settings_for

RESULTS = Path(__file__).resolve().parent / "results" / "slow_cores.json"
PERIOD_US = 2000  # the shortest period that takes a quota of half a core (1 ms, the least quota)
V1, V2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Run:
    """One run: when it started and ended (s from the start), the seconds of it that were throttled, its
    throughput (None: failed), what the reading around it said (its slowdown, and whether it was flagged) and the
    window's own 95 % interval of throughput (batch means), low and high, as multiples of its throughput (None: no
    interval, or no upper bound)."""

    start_s: float
    end_s: float
    throttled_s: float
    throughput: float | None
    slowdown: float | None
    flagged: bool
    ci_low: float | None = None
    ci_high: float | None = None


class Throttle:
    """A cgroup of its own for this process, whose CPU quota ``set`` switches on (``quota`` of a core) and off."""

    def __init__(self, quota: float) -> None:
        self.v1 = (V1 / "cpu.cfs_quota_us").exists()
        self.group = (V1 if self.v1 else V2) / "autotune-slow-cores"
        self.quota_us = int(quota * PERIOD_US)
        self.on_since: float | None = None
        self.stretches: list[tuple[float, float]] = []

    @contextmanager
    def joined(self):
        self.group.mkdir(exist_ok=True)
        parent = self.group.parent
        try:
            (self.group / "cgroup.procs").write_text(str(os.getpid()))
            yield self
        finally:
            self.set(False)
            (parent / "cgroup.procs").write_text(str(os.getpid()))
            time.sleep(0.5)  # the trials' processes have ended; the group empties
            self.group.rmdir()

    def set(self, on: bool) -> None:
        now = time.monotonic()
        if self.v1:
            (self.group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.group / "cpu.cfs_quota_us").write_text(str(self.quota_us if on else -1))
        else:
            (self.group / "cpu.max").write_text(f"{self.quota_us if on else 'max'} {PERIOD_US}")
        if on and self.on_since is None:
            self.on_since = now
        elif not on and self.on_since is not None:
            self.stretches.append((self.on_since, now))
            self.on_since = None

    def overlap_s(self, start: float, end: float) -> float:
        spans = [*self.stretches, *([(self.on_since, time.monotonic())] if self.on_since is not None else [])]
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in spans)


def switch(throttle: Throttle, slow_s: tuple[float, float], quiet_s: tuple[float, float], stop: threading.Event, seed):
    """Throttle for a random ``slow_s`` stretch, ``quiet_s`` apart, until ``stop``."""
    draw = random.Random(seed)
    while not stop.wait(draw.uniform(*quiet_s)):
        throttle.set(True)
        stop.wait(draw.uniform(*slow_s))
        throttle.set(False)


def measure(runner: TrialRunner, knobs: dict, count: int, throttle: Throttle) -> list[Run]:
    """``knobs`` run ``count`` times, one after another, each with the seconds ``throttle`` held it back."""
    runs, begin = [], time.monotonic()
    for index in range(count):
        start = time.monotonic()
        result = runner.run(knobs, f"run-{index}")
        end = time.monotonic()
        speed, throughput = result.core_speed, result.timing.throughput if result.ok else None
        read = (speed.slowdown, speed.slow) if speed else (None, False)
        interval = (result.timing.throughput_ci95_low, result.timing.throughput_ci95_high) if result.ok else ()
        within = [bound / throughput if bound is not None else None for bound in interval]
        runs.append(Run(start - begin, end - begin, throttle.overlap_s(start, end), throughput, *read, *within))
        print(runs[-1], flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--quota", type=float, default=0.5, help="of a core, while throttled")
    parser.add_argument("--slow-s", type=float, nargs=2, default=(4.0, 12.0))
    parser.add_argument("--quiet-s", type=float, nargs=2, default=(10.0, 30.0))
    parser.add_argument("--low", type=float, default=0.85, help="a run below this of the quiet median read slow")
    parser.add_argument("--knob", nargs="*", default=["num_workers=2", "num_threads=1"], metavar="NAME=VALUE")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    machine = announce_machine()
    settings = settings_for("mymodel", [])
    knobs = {**settings.baseline, **knob_values(args.knob)}
    throttle, stop = Throttle(args.quota), threading.Event()
    switcher = threading.Thread(target=switch, args=(throttle, args.slow_s, args.quiet_s, stop, args.seed))
    with tempfile.TemporaryDirectory() as tmp, throttle.joined():
        runner = TrialRunner(settings, "cpu", Path(tmp))
        switcher.start()
        try:
            runs = measure(runner, knobs, args.runs, throttle)
        finally:
            stop.set()
            switcher.join()
            runner.close()
            end_shared_fork_server()  # its server, in the group, would keep the group from being removed
    arguments = {**vars(args), "results": str(args.results)}
    write_atomic(
        args.results, json.dumps({"machine": machine, "arguments": arguments, "runs": [asdict(r) for r in runs]})
    )
    report(runs, args.low)


def report(runs: list[Run], low: float) -> None:
    """Print the runs by kind (quiet, read slow, touched but not read slow) and how many of each were flagged."""
    measured = [r for r in runs if r.throughput is not None]
    untouched = [r.throughput for r in measured if r.throttled_s == 0]
    if not untouched:
        print("no run measured untouched by a stretch: nothing to judge the others by (longer --quiet-s)")
        return
    median = statistics.median(untouched)
    slow = [r for r in measured if r.throughput < low * median]
    kinds = {
        "quiet (no stretch touched it)": [r for r in measured if r.throttled_s == 0 and r not in slow],
        f"read below {low:g}x the quiet runs' median": slow,
        "touched by a stretch, not read slow": [r for r in measured if r.throttled_s > 0 and r not in slow],
    }
    for name, kind in kinds.items():
        print(f"{name}: {len(kind)} runs, {sum(r.flagged for r in kind)} flagged")
    quiet = kinds["quiet (no stretch touched it)"]
    slowdowns = sorted(r.slowdown for r in quiet if r.slowdown is not None)
    if slowdowns:
        print(f"quiet runs' slowdown readings: median {statistics.median(slowdowns):.3f}, max {slowdowns[-1]:.3f}")


if __name__ == "__main__":
    main()
