"""Fixed cost per trial: what a trial costs beyond its warm-up and timed window, forked and fresh.

    .venv/bin/python -m benchmarks.fixed_cost [--trials 5] [--pipeline mymodel] [override ...]

Runs the baseline of a pipeline as the tuner does, each trial its own process, alternating (in turn first) a trial
forked from the fork server and one started as a fresh interpreter, and splits each trial's wall time into: start
(the tuner's launch to the worker's main: interpreter start and imports, or the fork), pipeline build (+ knobs),
warm-up, timed window, and the rest (DataLoader shutdown, FLOP count, exit, result I/O). The fork server's own
start (once per run) is left out: it is timed apart.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autotune.trial.launch import ForkServer, FreshLauncher
from autotune.trial.runner import run_trial
from benchmarks.common import announce_machine
from benchmarks.repeatability import request_for

_PHASES = (
    "wall {:.2f} = start {:.2f} + build {:.2f} + warm-up {:.2f} + window {:.2f} + rest {:.2f}; fixed cost {:.2f} s"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    announce_machine()
    request = request_for(args.pipeline, args.overrides)
    server = ForkServer()
    launchers = {"forked": server, "fresh": FreshLauncher()}
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in launchers}
    with tempfile.TemporaryDirectory() as workdir:
        started = time.monotonic()
        run_trial(request, 600, Path(workdir), "server-start", launcher=server)
        print(f"fork server start and a first trial: {time.monotonic() - started:.2f} s", flush=True)
        for index in range(args.trials):
            order = list(launchers) if index % 2 == 0 else list(reversed(launchers))
            for name in order:
                result = run_trial(request, 600, Path(workdir), f"{name}{index}", launcher=launchers[name])
                if not result.ok:
                    raise SystemExit(f"trial failed: {result.failure}")
                rows[name].append(_phases(result))
                print(f"{name} trial {index + 1}: " + _PHASES.format(*rows[name][-1]), flush=True)
    server.close()
    for name, measured in rows.items():
        medians = [statistics.median(column) for column in zip(*measured, strict=True)]
        print(f"{name} median of {len(measured)}: " + _PHASES.format(*medians))


def _phases(result) -> tuple[float, ...]:
    timing = result.timing
    fixed = result.wall_s - timing.warmup_s - timing.window_s
    rest = fixed - result.startup_s - result.build_s
    return (result.wall_s, result.startup_s, result.build_s, timing.warmup_s, timing.window_s, rest, fixed)


if __name__ == "__main__":
    main()
