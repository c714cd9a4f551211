"""Ground truth for the efficiency benchmark: configurations measured again, interleaved, in fresh trial processes.

One run per configuration (an exhaustive grid's) cannot separate configurations a few per cent apart on a machine
whose runs vary 6-12 %: the fastest of 36-72 single runs is partly the luckiest (the winner's curse). So the grid's
top few and the tuner's pick are measured again in rounds, each round every configuration once, in an order that
rotates from round to round; the grid's best is then the fastest by geometric mean over the rounds, and the tuner's
pick is compared with it round by round (``ratio_interval``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune.config.settings import Settings
from autotune.measure.stats import ratio_interval as paired_interval
from autotune.trial.result import TrialRequest
from autotune.trial.runner import run_trial

Rounds = list[dict[str, float | None]]  # per round, each label's samples/s (None: that run failed)


def remeasure_interleaved(
    settings: Settings, configs: dict[str, dict[str, Any]], rounds: int, workdir: Path, compile_cache: Path
) -> tuple[Rounds, list[str]]:
    """``configs`` (label -> knobs), each once per round for ``rounds`` rounds, round r starting r places further
    along the labels, each run a fresh trial process with the full measurement window (logs in ``workdir``).
    Returns the rounds' throughputs and a line per failed run."""
    m = settings.measure
    labels = list(configs)
    measured: Rounds = []
    failures = []
    for index in range(rounds):
        shift = index % len(labels)
        throughputs: dict[str, float | None] = {}
        for label in labels[shift:] + labels[:shift]:
            request = TrialRequest(
                settings.pipeline,
                configs[label],
                device="cpu",
                plan=m.plan,
                memory_interval_s=m.memory_interval_s,
                loss_tolerance=m.loss_tolerance,
                compile_cache_dir=str(compile_cache),
            )
            result = run_trial(request, m.trial_timeout_s, workdir, f"round{index + 1}-{label}")
            throughputs[label] = result.timing.throughput if result.ok else None
            shown = f"{result.timing.throughput:.1f} samples/s" if result.ok else f"FAILED {result.failure}"
            print(f"  re-measure round {index + 1} {label}: {shown}", flush=True)
            if not result.ok:
                failures.append(f"round {index + 1} {label}: {result.failure}")
        measured.append(throughputs)
    return measured, failures


def runs_of(measured: Rounds, label: str) -> list[float]:
    return [r[label] for r in measured if r.get(label) is not None]


def fastest(measured: Rounds, labels: list[str]) -> str | None:
    """The label with the highest geometric mean over the rounds, among those that never failed."""
    complete = [label for label in labels if measured and len(runs_of(measured, label)) == len(measured)]
    return max(complete, key=lambda label: statistics.fmean(map(math.log, runs_of(measured, label))), default=None)


def ratio_interval(measured: Rounds, numerator: str, denominator: str) -> dict[str, float] | None:
    """The geometric mean of the rounds' ``numerator``/``denominator`` ratios and its 95 % confidence interval
    (``autotune.measure.stats.ratio_interval``). None with fewer than two rounds where both ran."""
    interval = paired_interval(
        [
            r[numerator] / r[denominator]
            for r in measured
            if r.get(numerator) is not None and r.get(denominator) is not None
        ]
    )
    return asdict(interval) if interval else None


def verdict(interval: dict[str, float] | None, target: float) -> str | None:
    """met (the interval's low end clears ``target``), missed (its high end is below it), or unresolved (the
    interval spans it: this many rounds cannot tell); None without an interval."""
    if interval is None:
        return None
    if interval["low"] >= target:
        return "met"
    return "missed" if interval["high"] < target else "unresolved"
