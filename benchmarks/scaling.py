"""Trials per hour with one tuner and with two sharing one study (a journal file), on this machine.

    .venv/bin/python -m benchmarks.scaling [--rounds 3] [override ...]

Each round tunes a new study twice, the order alternating: once with one tuner on every core, once with two tuner
processes joining the study, each pinned to half the cores (``taskset``). The study is ``mymodel``'s in ``SPACE``,
the baseline and 7 trials: every configuration measured once (no probe, race or pruning; the study ends when none is
left), so that both layouts do the same trials whatever the sampler draws: a space larger than the trials would let
noise in the first trials steer TPE to other configurations, slower or faster to measure, from one round to the
next. A figure is measured trials per hour of wall time, from the tuners' start to the last one's end (the baseline
included, as a user's run has one). Results go to benchmarks/results/scaling.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from autotune.files import write_atomic
from autotune.knobs import KNOBS
from autotune.measure.stats import ratio_interval
from autotune.records import measured_trials, study_machines
from autotune.study.storage import load_study
from benchmarks.common import announce_machine
from benchmarks.efficiency import search_overrides

RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"
# Eight configurations of an image pipeline (the baseline's batch 32 without channels_last among them), every other
# knob at its default, without workers (whose options then do not apply).
SPACE = {"batch_size": [16, 32, 64, 128], "channels_last": [False, True]}
CANDIDATES = {
    name: SPACE.get(name, [0 if name == "num_workers" else knob.baseline_default])
    for name, knob in KNOBS.items()
    if knob.active({"num_workers": 0})
}
REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    machine = announce_machine()
    cores = sorted(os.sched_getaffinity(0))
    halves = [cores[: len(cores) // 2], cores[len(cores) // 2 :]]
    layouts = {"1 tuner": [cores], "2 tuners": halves}
    rates: dict[str, list[float]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = list(layouts) if index % 2 == 0 else list(reversed(layouts))
            for name in order:
                rate = trials_per_hour(layouts[name], args, Path(tmp) / f"{index}-{name.replace(' ', '-')}")
                rates[name].append(rate)
                print(f"round {index + 1} {name}: {rate:.0f} trials/hour")
    summary = {name: statistics.median(values) for name, values in rates.items()}
    ratios = [two / one for two, one in zip(rates["2 tuners"], rates["1 tuner"], strict=True)]  # paired by round
    gain = ratio_interval(ratios)
    record = {"machine": machine, "args": vars(args), "rates": rates, "ratios": ratios}
    write_atomic(RESULTS, json.dumps({**record, "interval": asdict(gain) if gain else None}, indent=1))
    said = f"{gain.geomean:.2f}x ({gain.low:.2f}-{gain.high:.2f})" if gain else "one round: no interval"
    print(f"median trials/hour: {summary}; 2 tuners / 1, round by round: {said}")


def trials_per_hour(core_sets: list[list[int]], args: argparse.Namespace, folder: Path) -> float:
    """Tune a new study with one tuner per core set, all joining it; measured trials per hour of wall time."""
    folder.mkdir(parents=True)
    storage, name = f"journal://{folder}/study.log", f"scaling-{uuid.uuid4().hex[:8]}"
    overrides = [
        "pipeline=mymodel",
        *search_overrides(CANDIDATES),
        f"study.n_trials={math.prod(map(len, SPACE.values()))}",
        "study.probe=false",
        "study.confirm_rounds=0",
        "study.diagnose=false",
        "study.prune_margin=null",
        f"study.storage={storage}",
        f"study.name={name}",
        *args.overrides,
    ]
    start = time.monotonic()
    tuners = [
        subprocess.Popen(
            [
                "taskset",
                "-c",
                ",".join(map(str, cores)),
                sys.executable,
                "-m",
                "autotune",
                *overrides,
                f"hydra.run.dir={folder}/tuner-{index}",
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for index, cores in enumerate(core_sets)
    ]
    codes = [tuner.wait() for tuner in tuners]
    wall_s = time.monotonic() - start
    if any(codes):
        raise SystemExit(f"a tuner failed ({codes}); logs in {folder}")
    study = load_study(name, storage)
    measured = sum(len(measured_trials(study, machine)) for machine in study_machines(study))
    return measured / wall_s * 3600


if __name__ == "__main__":
    main()
