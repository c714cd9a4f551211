"""Efficiency: does the tuner find what an exhaustive grid finds, in a fraction of the time?

    .venv/bin/python -m benchmarks.efficiency [--pipelines images,transformer_lm,tabular_mlp] [--grid full|small]
        [--trials 8] [--confirm-rounds 3] [--rounds 6] [--top 3] [--best-case tabular_mlp]
        [--workdir outputs/efficiency] [--reuse-grids]

Run from the repository root. For each pipeline:

1. grid: the CLI with a finite search space over the six core knobs (batch size B, 2B, 4B; workers
   0, 1, 2; pin_memory off; amp off, bf16; channels_last both ways for images only; compile off,
   default) and every other knob fixed to one value (the baseline's, or PyTorch's default for worker
   options), with ``study.n_trials`` far above the space's size, no confirmation, no pruning, no probe
   and no screening windows: the tuner stops once every configuration is measured in full, so this is the
   exhaustive grid, measured by the same harness.
   Were it to stop short (its sampler giving up on finding the last unmeasured configurations), the
   same command is run again, which resumes the study, up to ``--grid-attempts`` times in all;
2. tuner: the same space with ``study.n_trials=--trials`` and ``--confirm-rounds`` confirmation rounds;
3. ground truth (``remeasure.py``): the grid's ``--top`` fastest configurations by single run and the tuner's
   recommendation are measured again, ``--rounds`` interleaved rounds in fresh trial processes (autotune's own
   runner). The grid's best is the fastest of them by geometric mean (one run each cannot separate
   configurations a few per cent apart). The ratio tuner / grid's best (1.0 where the tuner's pick is the best)
   says how much throughput the tuner left on the table; the rounds' paired ratios give a 95 % confidence
   interval: the quality target is met where its low end clears 0.97, missed where its high end is below, and
   unresolved where it spans 0.97;
4. for ``--best-case``: the tuner again, with the pipeline's baseline set to the grid's re-measured best: it
   should recommend keeping the baseline.

Targets: ratio >= 0.97 and tuner wall time <= 0.15 of the grid's. Everything measured is written to
WORKDIR/efficiency.json; each CLI run's output to WORKDIR/NAME.log and its reports to WORKDIR/NAME/.
``--quick`` shortens every measurement (smoke test only: its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotune.config.load import load_settings
from autotune.knobs import KNOBS
from autotune.study.space import SearchSpace
from benchmarks.common import announce_machine, compose_config
from benchmarks.remeasure import fastest, ratio_interval, remeasure_interleaved, runs_of, verdict

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
PIPELINES = ("images", "transformer_lm", "tabular_mlp")
QUICK_MEASURE = ["measure.min_time_s=1", "measure.min_steps=10", "measure.max_time_s=5"]
TARGET_RATIO, TARGET_FRACTION = 0.97, 0.15


def fixed_values(pipeline: str, measure: list[str]) -> dict[str, Any]:
    """The value each knob takes when it is not searched: the pipeline's baseline value; for a knob the
    baseline leaves inactive (worker options with num_workers=0), its value once workers exist."""
    baseline = load_settings(compose_config(pipeline, measure), pipeline).baseline
    with_workers = load_settings(compose_config(pipeline, [*measure, "++pipeline.baseline.num_workers=1"]), pipeline)
    return {name: baseline[name] if baseline[name] is not None else with_workers.baseline[name] for name in KNOBS}


def grid_candidates(pipeline: str, fixed: dict[str, Any], size: str) -> dict[str, list[Any]]:
    """The grid over the six core knobs; every other knob (num_threads included) fixed to one value."""
    base = fixed["batch_size"]
    core: dict[str, list[Any]] = {
        "batch_size": [base, 2 * base, 4 * base] if size == "full" else [base, 2 * base],
        "num_workers": [0, 1, 2] if size == "full" else [0, 2],
        "pin_memory": [False],
        "amp": ["off", "bf16"],
        "channels_last": [False, True] if pipeline == "images" else [False],
        "compile": ["off", "default"],
    }
    return {name: core.get(name, [fixed[name]]) for name in KNOBS}


def hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def search_overrides(candidates: dict[str, list[Any]]) -> list[str]:
    return [f"search.{name}=[{','.join(hydra_value(v) for v in values)}]" for name, values in candidates.items()]


def run_cli(name: str, pipeline: str, overrides: list[str], workdir: Path) -> dict[str, Any]:
    """``python -m autotune`` as its own study NAME (storage WORKDIR/NAME.db, reports in WORKDIR/NAME/):
    its exit code, wall time and the line saying why it stopped. Output is shown and kept in NAME.log."""
    command = [
        sys.executable,
        "-m",
        "autotune",
        f"pipeline={pipeline}",
        *overrides,
        f"study.name={name}",
        f"study.storage=sqlite:///{(workdir / f'{name}.db').resolve()}",
        f"hydra.run.dir={(workdir / name).resolve()}",
    ]
    stopped = None
    start = time.monotonic()
    with open(workdir / f"{name}.log", "a", encoding="utf-8") as log:
        log.write(" ".join(command) + "\n")
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(line)
            print(f"  {name}| {line}", end="", flush=True)
            if line.startswith("Stopped:") or line.startswith("autotune: error:"):
                stopped = line.strip()
        returncode = proc.wait()
    return {"returncode": returncode, "wall_s": time.monotonic() - start, "stopped": stopped}


def read_report(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "report.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def row_knobs(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in KNOBS}


def ranked_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's measured rows, fastest first."""
    complete = [row for row in report["trials"] if row["state"] == "complete" and row["throughput_sps"]]
    return sorted(complete, key=lambda row: -row["throughput_sps"])


def measured_in(report: dict[str, Any], space: SearchSpace) -> int:
    """Distinct configurations of ``space`` the report holds (failed ones included)."""
    keys = {json.dumps(row_knobs(row), sort_keys=True) for row in report["trials"]}
    return sum(1 for key in keys if space.contains(json.loads(key)))


def run_grid(pipeline: str, candidates: dict, common: list[str], workdir: Path, attempts: int) -> dict[str, Any]:
    space = SearchSpace(candidates)
    name = f"{pipeline}-grid"
    # No pruning, no probe and no screening: every configuration is measured in full (the window of the
    # baseline and the finalists' race), as an exhaustive search would.
    overrides = [*search_overrides(candidates), *common, "study.n_trials=10000", "study.confirm_rounds=0"]
    overrides += ["study.prune_margin=null", "study.probe=false"]
    overrides += ["measure.screen_min_steps=null", "measure.screen_min_time_s=null"]
    runs, report, measured = [], None, 0
    for _ in range(attempts):
        runs.append(run_cli(name, pipeline, overrides, workdir))
        report = read_report(workdir / name)
        measured = measured_in(report, space) if report else 0
        if report is None or measured >= space.size or runs[-1]["returncode"] != 0:
            break
        print(f"  {name}: {measured} of {space.size} configurations measured; running it again to resume")
    best = next(iter(ranked_rows(report)), None) if report else None
    return {
        "size": space.size,
        "measured": measured,
        "wall_s": sum(run["wall_s"] for run in runs),
        "runs": runs,
        "best_knobs": row_knobs(best) if best else None,
        "best_sps": best["throughput_sps"] if best else None,
        "best_trial": best["trial"] if best else None,
    }


def run_tuner(name: str, pipeline: str, overrides: list[str], workdir: Path) -> dict[str, Any]:
    run = run_cli(name, pipeline, overrides, workdir)
    report = read_report(workdir / name)
    rec = report["recommended"] if report else None
    return {
        **run,
        "measured_trials": len(report["trials"]) - 1 if report else None,
        "recommended_knobs": rec["knobs"] if rec else None,
        "recommended_trial": rec["trial"] if rec else None,
        "is_baseline": rec["is_baseline"] if rec else None,
        "claimed_speedup": report["speedup"] if report else None,
    }


def grid_top(run_dir: Path, count: int) -> list[dict[str, Any]]:
    """The grid's ``count`` fastest distinct configurations by their single run, fastest first."""
    report = read_report(run_dir)
    top: list[dict[str, Any]] = []
    for row in ranked_rows(report) if report else []:
        if row_knobs(row) not in top:
            top.append(row_knobs(row))
    return top[:count]


def check_quality(
    pipeline: str, grid_best: list[dict], tuner_knobs: dict, rounds: int, measure: list[str], workdir: Path
) -> dict[str, Any]:
    """The grid's top configurations (``grid_best``, fastest single run first) and the tuner's pick (one of them,
    or added), re-measured interleaved (``remeasure.remeasure_interleaved``). The grid's best is the fastest of them
    by geometric mean, the tuner's pick included (it is a configuration of the grid too); ratio: the tuner's pick
    over that best, by medians and round by round with a 95 % confidence interval (1.0 where the pick is the best)."""
    configs = {f"grid{index}": knobs for index, knobs in enumerate(grid_best, 1)}
    tuner = next((label for label, knobs in configs.items() if knobs == tuner_knobs), None)
    if tuner is None:
        tuner, configs["tuner"] = "tuner", tuner_knobs
    settings = load_settings(compose_config(pipeline, measure), pipeline)
    cache = workdir.parent / "compile-cache" / workdir.name
    measured, failures = remeasure_interleaved(settings, configs, rounds, workdir, cache)
    best = fastest(measured, list(configs))
    medians = {label: statistics.median(runs_of(measured, label)) for label in configs if runs_of(measured, label)}
    is_best = best == tuner
    ratio, interval = (1.0, None) if is_best else (None, None)
    if not is_best and best is not None and tuner in medians:
        ratio, interval = medians[tuner] / medians[best], ratio_interval(measured, tuner, best)
    return {
        "configs": configs,
        "tuner_label": tuner,
        "best_label": best,
        "best_knobs": configs[best] if best else None,
        "tuner_is_best": is_best,
        "medians": medians,
        "rounds": measured,
        "ratio": ratio,
        "interval": interval,
        "failures": failures,
    }


def ratio_verdict(check: dict[str, Any] | None) -> str | None:
    """met (the tuner's pick measured fastest of all, or the ratio's interval clears TARGET_RATIO), missed or
    unresolved (``remeasure.verdict``); None if not measured."""
    if check is None:
        return None
    return "met" if check["tuner_is_best"] else verdict(check["interval"], TARGET_RATIO)


def knob_text(knobs: dict[str, Any] | None, names: list[str]) -> str:
    return " ".join(f"{name}={knobs[name]}" for name in names) if knobs else "-"


def number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_pipeline(pipeline: str, entry: dict[str, Any]) -> None:
    grid, tuner, check = entry["grid"], entry["tuner"], entry["check"]
    shown = entry["varied_knobs"]
    rows = [
        ("grid size", f"{grid['size']} configurations ({grid['measured']} measured)"),
        ("grid wall", f"{grid['wall_s']:.1f} s"),
        ("grid best, 1 run", f"{number(grid['best_sps'], '.1f')} samples/s  {knob_text(grid['best_knobs'], shown)}"),
        ("tuner wall", f"{number(tuner['wall_s'], '.1f')} s"),
        ("tuner trials", str(tuner["measured_trials"])),
        (
            "tuner recommends",
            f"{knob_text(tuner['recommended_knobs'], shown)}{' (keep the baseline)' if tuner['is_baseline'] else ''}",
        ),
    ]
    if check:
        for label, knobs in check["configs"].items():
            median = number(check["medians"].get(label), ".1f")
            marks = [mark for mark, who in (("best", "best_label"), ("tuner", "tuner_label")) if check[who] == label]
            rows.append(
                (f"re-measured {label}", f"median {median}  {knob_text(knobs, shown)}  {' '.join(marks)}".rstrip())
            )
    rows += [
        ("ratio of medians", number(entry["ratio"], ".3f")),
        ("paired ratio", _interval_text(check)),
        ("wall-time fraction", number(entry["fraction"], ".3f")),
        (
            "targets met",
            f"ratio >= {TARGET_RATIO}: {entry['ratio_verdict'] or '-'}; fraction <= {TARGET_FRACTION}: "
            f"{_yes(entry['fraction_ok'])}",
        ),
    ]
    print(f"\n== {pipeline}")
    for label, text in rows:
        print(f"  {label:<20} {text}")


def _interval_text(check: dict[str, Any] | None) -> str:
    if check and check["tuner_is_best"]:
        return "the tuner's pick is the best"
    interval = check.get("interval") if check else None
    if interval is None:
        return "-"
    return f"{interval['geomean']:.3f} (95 % CI {interval['low']:.3f}-{interval['high']:.3f}, {interval['n']} rounds)"


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "NO"


def benchmark_pipeline(pipeline: str, args, measure: list[str], workdir: Path) -> dict[str, Any]:
    fixed = fixed_values(pipeline, measure)
    candidates = grid_candidates(pipeline, fixed, args.grid)
    config = compose_config(pipeline, measure)
    common = list(measure)
    if "compile_cache_dir" in config["measure"]:  # keep torch.compile's cache out of the repository
        common.append(f"measure.compile_cache_dir={(workdir / 'compile-cache').resolve()}")
    grid = args.previous_grids.get(pipeline) or run_grid(pipeline, candidates, common, workdir, args.grid_attempts)
    tuner_overrides = [
        *search_overrides(candidates),
        *common,
        f"study.n_trials={args.trials}",
        f"study.confirm_rounds={args.confirm_rounds}",
    ]
    tuner = run_tuner(f"{pipeline}-tune", pipeline, tuner_overrides, workdir)
    check = None
    top = grid_top(workdir / f"{pipeline}-grid", args.top)
    if top and tuner["recommended_knobs"]:
        knobs = tuner["recommended_knobs"]
        check = check_quality(pipeline, top, knobs, args.rounds, measure, workdir / f"{pipeline}-check")
    ratio = check["ratio"] if check else None
    fraction = tuner["wall_s"] / grid["wall_s"] if grid["wall_s"] else None
    return {
        "candidates": candidates,
        "varied_knobs": [name for name, values in candidates.items() if len(values) > 1],
        "grid": grid,
        "tuner": tuner,
        "check": check,
        "ratio": ratio,
        "fraction": fraction,
        "ratio_verdict": ratio_verdict(check),
        "fraction_ok": None if fraction is None else fraction <= TARGET_FRACTION,
        "tuner_overrides": tuner_overrides,
    }


def baseline_is_best(pipeline: str, entry: dict[str, Any], args, workdir: Path) -> dict[str, Any]:
    """The tuner with the pipeline's baseline set to the grid's best (as re-measured, where it was): does it keep
    the baseline?"""
    best = (entry["check"] or {}).get("best_knobs") or entry["grid"]["best_knobs"]
    overrides = [
        *entry["tuner_overrides"],
        *(f"++pipeline.baseline.{name}={hydra_value(value)}" for name, value in best.items()),
    ]
    run = run_tuner(f"{pipeline}-bestcase", pipeline, overrides, workdir)
    return {"pipeline": pipeline, "baseline_knobs": best, **run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", default=",".join(PIPELINES), help="comma-separated subset")
    parser.add_argument("--grid", choices=("full", "small"), default="full", help="small: batch B,2B; workers 0,2")
    parser.add_argument("--trials", type=int, default=8, help="tuner trials (study.n_trials)")
    parser.add_argument("--confirm-rounds", type=int, default=3, help="the tuner's study.confirm_rounds")
    parser.add_argument("--rounds", type=int, default=6, help="re-measurement rounds of the grid's top and tuner pick")
    parser.add_argument("--top", type=int, default=3, help="the grid's fastest (single runs) re-measured")
    parser.add_argument("--best-case", default="tabular_mlp", help="pipeline for 'baseline already best', or none")
    parser.add_argument("--grid-attempts", type=int, default=3, help="runs of the grid command to complete it")
    parser.add_argument("--workdir", type=Path, default=REPO / "outputs" / "efficiency")
    parser.add_argument("--quick", action="store_true", help="short measurements, for smoke tests only")
    parser.add_argument(
        "--reuse-grids",
        action="store_true",
        help="take each grid (its figures and wall time) from WORKDIR/efficiency.json of an earlier run with the "
        "same grid, instead of measuring it again: to re-run only the tuner side after a tuner change",
    )
    args = parser.parse_args()
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    unknown = [p for p in pipelines if not (CONF / "pipeline" / f"{p}.yaml").exists()]
    if unknown:
        parser.error(f"no conf/pipeline/NAME.yaml for: {', '.join(unknown)}")
    workdir = args.workdir.resolve()
    measure = QUICK_MEASURE if args.quick else []
    args.previous_grids = _previous_grids(workdir, args) if args.reuse_grids else {}
    _clear_previous(workdir, pipelines, keep_grids=bool(args.previous_grids))
    output = workdir / "efficiency.json"
    arguments = {key: value for key, value in vars(args).items() if key != "previous_grids"}
    data: dict[str, Any] = {
        "machine": announce_machine(),
        "arguments": {**arguments, "workdir": str(workdir)},
        "pipelines": {},
        "best_case": None,
    }
    start = time.monotonic()
    for pipeline in pipelines:
        print(f"\n#### {pipeline}: grid ({args.grid}), then tuner ({args.trials} trials)", flush=True)
        data["pipelines"][pipeline] = benchmark_pipeline(pipeline, args, measure, workdir)
        output.write_text(json.dumps(data, indent=2), encoding="utf-8")
    best_case = args.best_case if args.best_case != "none" else None
    if best_case and best_case in data["pipelines"] and data["pipelines"][best_case]["grid"]["best_knobs"]:
        print(f"\n#### {best_case}: baseline already best", flush=True)
        data["best_case"] = baseline_is_best(best_case, data["pipelines"][best_case], args, workdir)
    elif best_case:
        data["best_case"] = {"pipeline": best_case, "skipped": "its grid was not run (or measured nothing)"}
    data["total_wall_s"] = time.monotonic() - start
    output.write_text(json.dumps(data, indent=2), encoding="utf-8")

    for pipeline, entry in data["pipelines"].items():
        print_pipeline(pipeline, entry)
    case = data["best_case"]
    if case and "skipped" not in case:
        verdict = "kept the baseline" if case["is_baseline"] else "recommended a change"
        shown = data["pipelines"][case["pipeline"]]["varied_knobs"]
        changed = "" if case["is_baseline"] else f" to {knob_text(case['recommended_knobs'], shown)}"
        print(f"\nbaseline already best ({case['pipeline']}, baseline = grid best): the tuner {verdict}{changed}")
    elif case:
        print(f"\nbaseline already best ({case['pipeline']}): skipped, {case['skipped']}")
    print(f"\n{data['total_wall_s']:.0f} s in all; results in {output}")


def _previous_grids(workdir: Path, args) -> dict[str, dict[str, Any]]:
    """The grids of an earlier run's efficiency.json, if it used the same grid and measurement."""
    path = workdir / "efficiency.json"
    if not path.exists():
        return {}
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if (earlier["arguments"]["grid"], earlier["arguments"]["quick"]) != (args.grid, args.quick):
        return {}
    return {pipeline: {**entry["grid"], "reused": True} for pipeline, entry in earlier["pipelines"].items()}


def _clear_previous(workdir: Path, pipelines: list[str], keep_grids: bool = False) -> None:
    """Remove this benchmark's earlier studies of these pipelines: a resumed study measures nothing,
    and its wall time would mean nothing. ``keep_grids`` keeps the grids being reused."""
    workdir.mkdir(parents=True, exist_ok=True)
    for pipeline in pipelines:
        for suffix in ("tune", "bestcase", "check") if keep_grids else ("grid", "tune", "bestcase", "check"):
            name = f"{pipeline}-{suffix}"
            (workdir / f"{name}.db").unlink(missing_ok=True)
            (workdir / f"{name}.log").unlink(missing_ok=True)
            shutil.rmtree(workdir / name, ignore_errors=True)
            shutil.rmtree(workdir / "compile-cache" / name, ignore_errors=True)  # every run compiles cold


if __name__ == "__main__":
    main()
