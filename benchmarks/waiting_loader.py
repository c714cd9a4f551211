"""Workers beyond the cores, where loading waits: the tuner's pick with its default worker counts (up to twice the
cores) against its pick searching no more workers than cores, each pick its own tune, then both picks re-measured
interleaved in fresh processes.

    .venv/bin/python -m benchmarks.waiting_loader [--rounds 5] [--wait-ms 4] [--workdir DIR]

The workload: mymodel's SmallCNN on ``benchmarks.workloads.WaitingImages`` (each sample waits ``--wait-ms``, a slow
disk or a network store; its pixels cost next to no CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.common import announce_machine, settings_for
from benchmarks.efficiency import run_tuner
from benchmarks.remeasure import ratio_interval, remeasure_interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wait-ms", type=float, default=4.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    machine = announce_machine()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="autotune-waiting-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dataset = [
        "pipeline.dataset._target_=benchmarks.workloads.WaitingImages",
        f"+pipeline.dataset.wait_ms={args.wait_ms}",
    ]
    common = [*dataset, "search.batch_size=[32,64]", "search.compile=[off]", "study.diagnose=false"]
    cores = len(os.sched_getaffinity(0))
    within = f"search.num_workers=[{','.join(str(n) for n in range(cores + 1))}]"
    tunes = {"default": run_tuner("default", "mymodel", common, workdir)}
    tunes["within_cores"] = run_tuner("within_cores", "mymodel", [*common, within], workdir)
    picks = {name: tune["recommended_knobs"] for name, tune in tunes.items()}
    settings = settings_for("mymodel", dataset)
    measured, failures = remeasure_interleaved(settings, picks, args.rounds, workdir, workdir / "compile-cache")
    ratio = ratio_interval(measured, "default", "within_cores")
    print(json.dumps({"picks": picks, "default / within_cores": ratio, "failures": failures}, indent=1))
    if args.results:
        record = {"machine": machine, "args": vars(args) | {"workdir": str(workdir)}, "tunes": tunes}
        record |= {"rounds": measured, "ratio": ratio, "failures": failures}
        args.results.write_text(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
