"""Repeatability: the coefficient of variation of the throughput reported for one configuration.

    .venv/bin/python -m benchmarks.repeatability [--measurements 10] [--repeats 1] [--min-time-s 4]

Each measurement runs the configuration as the tuner does (a fresh trial subprocess) ``--repeats``
times and takes the median. The spread of the ``--measurements`` results is what a ranking must
see through. Also prints the plain single-run spread and the time each measurement costs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autotune.measure.stats import coefficient_of_variation
from autotune.trial.result import TrialRequest
from autotune.trial.runner import run_trial
from benchmarks.common import announce_machine, describe, settings_for


def request_for(pipeline: str, overrides: list[str]) -> TrialRequest:
    settings = settings_for(pipeline, overrides)
    measure = settings.measure
    return TrialRequest(settings.pipeline, settings.baseline, "cpu", measure.plan, measure.memory_interval_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="mymodel")
    parser.add_argument("--measurements", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per measurement (median)")
    parser.add_argument("--min-time-s", type=float, default=4.0)
    parser.add_argument("--min-steps", type=int, default=30)
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. pipeline.baseline.num_workers=2")
    args = parser.parse_args()
    announce_machine()
    overrides = [f"measure.min_time_s={args.min_time_s}", f"measure.min_steps={args.min_steps}", *args.overrides]
    request = request_for(args.pipeline, overrides)
    singles, medians, costs = [], [], []
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(args.measurements):
            start = time.monotonic()
            runs = [run_trial(request, 600, Path(workdir), f"run{index}-{r}") for r in range(args.repeats)]
            failed = [run.failure for run in runs if not run.ok]
            if failed:
                raise SystemExit(f"a run failed: {failed[0]}")
            values = [run.timing.throughput for run in runs]
            singles += values
            medians.append(statistics.median(values))
            costs.append(time.monotonic() - start)
            print(f"measurement {index + 1}: {medians[-1]:.1f} samples/s from {values}", flush=True)
    print(f"single runs:  {describe(singles)}")
    print(f"measurements: {describe(medians)} (median of {args.repeats} run(s) each)")
    print(f"CV of measurements: {coefficient_of_variation(medians):.2%}")
    print(f"time per measurement: {statistics.fmean(costs):.1f} s")


if __name__ == "__main__":
    main()
