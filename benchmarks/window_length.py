"""Window length: how a race's paired ratio (a configuration over the baseline, one round) varies with the timed
window's ``measure.min_steps`` and ``measure.min_time_s`` (and the warm-up's ``measure.warmup_min_steps``, where a
window gives it), and what each run costs.

    .venv/bin/python -m benchmarks.window_length [--rounds 8] [--windows 30:4 10:4] [--pipeline mymodel]
        [--knob batch_size=128 --knob num_workers=2 ...]

Each round runs the baseline and the configuration (the baseline with ``--knob``s) once per window, every run a
fresh trial process (a race's runs are forked, which reads the same: docs/benchmarks.md section 5), the order
rotating from round to round. Per window: the geometric mean of the
rounds' ratios with its 95 % interval, the standard deviation of their logarithms (what a race must see through:
the fewer steps, the cheaper a run, but a noisier ratio needs more rounds for the same verdict) and the mean seconds
a run took. Without ``--knob``, the README's recommendation for ``mymodel``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.measure.stats import ratio_interval
from autotune.trial.result import TrialRequest
from autotune.trial.runner import run_trial
from benchmarks.common import announce_machine, knob_values, settings_for

README_RECOMMENDATION = [
    "batch_size=128",
    "num_workers=2",
    "prefetch_factor=2",
    "persistent_workers=true",
    "num_threads=1",
    "channels_last=true",
    "amp=bf16",
    "set_to_none=false",
]


def requests(pipeline: str, knobs: dict[str, Any], windows: list[str]) -> dict[tuple[str, str], TrialRequest]:
    """The baseline's and the configuration's trial request for each window of ``windows``, each
    ``MIN_STEPS:MIN_TIME_S`` or ``MIN_STEPS:MIN_TIME_S:WARMUP_MIN_STEPS``."""
    found = {}
    for window in windows:
        keys = ("measure.min_steps", "measure.min_time_s", "measure.warmup_min_steps")
        given = window.split(":")
        overrides = [f"{key}={value}" for key, value in zip(keys[: len(given)], given, strict=True)]
        settings = settings_for(pipeline, overrides)
        measure = settings.measure
        for label, values in (("baseline", settings.baseline), ("configuration", settings.baseline | knobs)):
            found[label, window] = TrialRequest(
                settings.pipeline, values, "cpu", measure.plan, measure.memory_interval_s
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--windows", nargs="+", default=["30:4", "10:4"], help="MIN_STEPS:MIN_TIME_S[:WARMUP_STEPS]")
    parser.add_argument("--knob", action="append", help="NAME=VALUE of the configuration (repeat)")
    args = parser.parse_args()
    announce_machine()
    runs = requests(args.pipeline, knob_values(args.knob or README_RECOMMENDATION), args.windows)
    throughputs: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    seconds: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    keys = list(runs)
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(args.rounds):
            shift = index % len(keys)
            for label, window in keys[shift:] + keys[:shift]:
                start = time.monotonic()
                result = run_trial(runs[label, window], 600, Path(workdir), f"round{index + 1}-{label}-{window}")
                if not result.ok:
                    raise SystemExit(f"round {index + 1}, {label}, window {window}: {result.failure}")
                seconds[label, window].append(time.monotonic() - start)
                throughputs[label, window].append(result.timing.throughput)
                print(f"round {index + 1} {label} window {window}: {result.timing.throughput:.1f} samples/s, "
                      f"{result.timing.warmup_steps} + {result.timing.steps} steps, "
                      f"{seconds[label, window][-1]:.1f} s", flush=True)  # fmt: skip
    for window in args.windows:
        pairs = zip(throughputs["configuration", window], throughputs["baseline", window], strict=True)
        ratios = [configuration / baseline for configuration, baseline in pairs]
        interval = ratio_interval(ratios)
        spread = statistics.stdev(math.log(ratio) for ratio in ratios)
        cost = statistics.fmean(seconds["baseline", window] + seconds["configuration", window])
        print(
            f"window {window}: ratio {interval.geomean:.3f} ({interval.low:.3f}-{interval.high:.3f}), "
            f"SD of log ratio {spread:.3f}, medians {statistics.median(throughputs['configuration', window]):.1f} "
            f"and {statistics.median(throughputs['baseline', window]):.1f} samples/s, {cost:.1f} s a run (baseline "
            f"{statistics.fmean(seconds['baseline', window]):.1f}, configuration "
            f"{statistics.fmean(seconds['configuration', window]):.1f})"
        )


if __name__ == "__main__":
    main()
