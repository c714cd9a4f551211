"""Fixed cost per trial: what a trial costs beyond its warm-up and timed window.

    .venv/bin/python -m benchmarks.fixed_cost [--trials 5] [override ...]

Runs the baseline of a pipeline as the tuner does (fresh subprocess each) and splits each trial's
wall time into: interpreter start + imports, pipeline build (+ knobs), warm-up, timed window, and
the rest (spawning the process, DataLoader shutdown, interpreter exit, result I/O).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from autotune.trial.runner import run_trial
from benchmarks.repeatability import request_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    request = request_for(args.pipeline, args.overrides)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(args.trials):
            result = run_trial(request, 600, Path(workdir), f"trial{index}")
            if not result.ok:
                raise SystemExit(f"trial failed: {result.failure}")
            timing = result.timing
            fixed = result.wall_s - timing.warmup_s - timing.window_s
            rest = fixed - result.startup_s - result.build_s
            phases = (result.startup_s, result.build_s, timing.warmup_s, timing.window_s, rest)
            rows.append((result.wall_s, *phases, fixed))
            print("trial {}: wall {:.2f} = startup+imports {:.2f} + build {:.2f} + warm-up {:.2f} + window {:.2f}"
                  " + rest {:.2f}; fixed cost {:.2f} s".format(index + 1, *rows[-1]), flush=True)  # fmt: skip
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    print("median: wall {:.2f} = startup+imports {:.2f} + build {:.2f} + warm-up {:.2f} + window {:.2f}"
          " + rest {:.2f}; fixed cost {:.2f} s".format(*medians))  # fmt: skip


if __name__ == "__main__":
    main()
