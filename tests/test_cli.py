"""The command line end to end: in this process where a process of its own adds nothing (``cli_here``), in one
where it does (signals, a killed tuner, the installed script, a report rendered where the pipeline cannot import)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import optuna
import psutil
import pytest
import torch
import yaml

from autotune import app, benchmark, cli, selfcheck
from autotune.cli_errors import report_errors
from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.hydra_args import flags_first
from autotune.knobs import KNOBS
from autotune.pipeline_choice import CONFIG_DIR, refuse_pipeline_folder_given, refuse_shadowed_pipeline
from autotune.records import META_ATTR, measured_trials, study_machines
from autotune.runner import TrialRunner, remedy
from tests.conftest import (
    FAST_MEASURE,
    IMPORT_TIMES,
    REPO,
    TEST_CONF,
    fixed_search,
    imports_torch,
    processes_mentioning,
    run_cli,
    tiny_config,
)

TINY = [
    "-cd",
    str(TEST_CONF),
    "pipeline=tiny",
    *FAST_MEASURE,
    "search.compile=[off]",
    "study.confirm_rounds=1",
    "study.probe=false",
]


def read_outputs(out_dir):
    recommended = yaml.safe_load((out_dir / "recommended.yaml").read_text())
    report = json.loads((out_dir / "report.json").read_text())
    rows = list(csv.DictReader((out_dir / "trials.csv").open()))
    return recommended, report, rows


@pytest.mark.slow
def test_a_tuning_run_writes_consistent_reports(tmp_path, cli_here, monkeypatch):
    draws = []
    monkeypatch.setattr(TrialRunner, "new_draw", lambda runner: draws.append(1))
    proc = cli_here([*TINY, "study.n_trials=3", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rounds = {found[1] for found in re.finditer(r"^\[((confirm|trim-\d+)-\d+)-", proc.stdout, re.MULTILINE)}
    assert len(draws) == len(rounds), "each round of the race and of the trim a new draw of the process layout"
    out = tmp_path / "out"
    recommended, report, rows = read_outputs(out)
    assert (tmp_path / "autotune.db").exists(), "the study lives in the directory the command ran from"
    assert (out / "report.md").read_text().startswith("# autotune report: tiny")

    assert recommended["pipeline"] == "tiny"
    assert recommended["device"] == ("cuda" if torch.cuda.is_available() else "cpu"), "measure.device=auto"
    assert set(recommended["knobs"]) == set(recommended["baseline"]) == set(KNOBS)
    assert recommended["throughput"]["unit"] == "samples/s"
    assert recommended["throughput"]["speedup"] >= 1.0
    assert recommended["throughput"]["recommended"] == pytest.approx(report["recommended"]["throughput_sps"], abs=0.01)

    trimmed = [r for r in rows if " without " in r["trial"]]  # a variant of the winner with changes undone
    assert len(rows) == 4 + len(trimmed) and len(trimmed) <= 1 and {r["trial"] for r in rows} >= {"baseline"}
    assert len(recommended["no_difference"]) >= len(trimmed)
    chosen = next(r for r in rows if r["trial"] == report["recommended"]["trial"])
    assert {k: chosen[k] for k in KNOBS} == {k: "" if v is None else str(v) for k, v in recommended["knobs"].items()}
    assert all(r["state"] == "complete" and float(r["peak_memory_mb"]) > 0 for r in rows)

    for line in ("[baseline]", ", 1 of 3]", ", 3 of 3]", "recommended.yaml", "Stopped: study.n_trials=3"):
        assert line in proc.stdout
    fastest = max(float(r["throughput_sps"]) for r in rows if r not in trimmed)  # the search's single runs
    base = float(next(b for b in rows if b["trial"] == "baseline")["throughput_sps"])
    beaten = fastest > base  # by any margin: select_finalists races it, and the race tells a gain from noise
    assert ("[confirm-1-baseline]" in proc.stdout) == beaten, "a trial that beat the baseline is re-measured"
    if report["confirmation"] and report["confirmation"]["confirmed"]:
        basis = "one interleaved re-measurement; the speedup: the ratio of the two throughputs"
        assert recommended["throughput"]["method"] == basis
    elif beaten:
        assert recommended["knobs"] == recommended["baseline"], "an unconfirmed trial is not recommended"


@pytest.mark.slow
def test_trials_that_crash_are_recorded_and_the_study_completes(tmp_path, cli_here):
    args = [
        "-cd",
        str(TEST_CONF),
        "pipeline=crashy",
        *FAST_MEASURE,
        "measure.device=cpu",  # on CUDA, pin_memory and cudnn_benchmark would add configurations
        "study.n_trials=5",
        f"hydra.run.dir={tmp_path}/out",
    ]
    space = [*fixed_search(num_workers=[0, 1], channels_last=None), "study.probe=false"]
    proc = cli_here([*args, *space], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "all 4 configurations of the search space are measured" in proc.stdout
    recommended, report, rows = read_outputs(tmp_path / "out")
    failed = {(r["num_workers"], r["channels_last"]): r for r in rows if r["state"] == "failed"}
    assert failed[("0", "True")]["failure_kind"] == "signal" and "SIGABRT" in failed[("0", "True")]["failure_reason"]
    assert set(failed) == {("1", "False"), ("1", "True"), ("0", "True")}
    assert failed[("1", "False")]["failure_kind"] == "exception"
    assert "refuses to load in a worker" in failed[("1", "False")]["failure_reason"]
    assert recommended["knobs"] == recommended["baseline"]
    assert report["recommended"]["is_baseline"]


def test_a_space_of_the_baseline_alone_is_not_probed(tmp_path, cli_here):
    tiny = [a for a in TINY if a not in ("study.probe=false", "search.compile=[off]")]
    args = [*tiny, *fixed_search(), f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1 configurations" in proc.stdout and "[probe" not in proc.stdout
    assert "all 1 configurations of the search space are measured" in proc.stdout


def test_zero_trials_measures_the_baseline_alone(tmp_path, cli_here):
    proc = cli_here([*TINY, "study.n_trials=0", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    recommended, _, rows = read_outputs(tmp_path / "out")
    assert [r["trial"] for r in rows] == ["baseline"]
    assert recommended["throughput"]["speedup"] == 1.0


@pytest.mark.slow
def test_a_killed_study_resumes_where_it_stopped(tmp_path, cli_here):
    args = [*TINY, "study.n_trials=4", "study.confirm_rounds=0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    tuner = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args, f"hydra.run.dir={tmp_path}/first"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for line in tuner.stdout:
        if line.startswith("[trial ") and ", 2 of 4]" in line:
            break
    wait_for_file(tmp_path / "first" / "trials" / "trial-2.log", timeout_s=60)  # trial 3 has started
    tuner.send_signal(signal.SIGKILL)
    tuner.wait()
    # On a loaded host the kill may land after trial 3 is stored: the resumption starts from what the storage holds.
    stored = stored_trials(tmp_path / "autotune.db")
    assert 2 <= stored < 4, "killed mid-search"

    proc = cli_here([*args, f"hydra.run.dir={tmp_path}/second"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[baseline, stored]" in proc.stdout, "the baseline is not measured again"
    assert f"resuming: {stored} trials of this study stored are not measured again" in proc.stdout
    assert f", {stored + 1} of 4]" in proc.stdout
    assert not any(f", {done} of 4]" in proc.stdout for done in range(1, stored + 1)), "none measured again"
    _, _, rows = read_outputs(tmp_path / "second")
    assert len(rows) == 5, "baseline + 4 trials, each once"
    assert len({tuple(r[k] for k in KNOBS) for r in rows}) == 5


def stored_trials(db: Path) -> int:
    """The search trials the study of the tiny pipeline in ``db`` (of one machine) counts as measured."""
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{db}")
    (machine,) = study_machines(study)
    return len(measured_trials(study, machine))


@pytest.mark.slow
def test_running_a_finished_study_again_re_renders_without_measuring(tmp_path, cli_here):
    # Its two configurations measured: the search ended though study.n_trials allows more.
    args = [*TINY, *fixed_search(batch_size=[16, 32]), "study.n_trials=10", "study.confirm_rounds=0"]
    assert cli_here([*args, f"hydra.run.dir={tmp_path}/a"], cwd=tmp_path).returncode == 0
    probed = [arg for arg in args if arg != "study.probe=false"]  # no trial left to steer: nothing to probe either
    proc = cli_here([*probed, f"hydra.run.dir={tmp_path}/b"], cwd=tmp_path)
    assert proc.returncode == 0 and "[trial" not in proc.stdout and "[probe" not in proc.stdout, proc.stdout
    assert (tmp_path / "a" / "trials.csv").read_text() == (tmp_path / "b" / "trials.csv").read_text()


def test_a_failing_baseline_stops_with_exit_1(tmp_path, cli_here):
    args = ["-cd", str(TEST_CONF), "pipeline=crashy", *FAST_MEASURE, "+pipeline.baseline.num_workers=1"]
    proc = cli_here([*args, f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "the baseline (pipeline.baseline) failed" in proc.stderr
    assert "refuses to load in a worker" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_baseline_whose_model_returns_a_tuple_is_told_to_give_pipeline_step(tmp_path, cli_here):
    args = [
        "-cd",
        str(TEST_CONF),
        "pipeline=tiny",
        *FAST_MEASURE,
        "pipeline.model._target_=tests.fixtures.faults.TupleOutputCNN",
    ]
    proc = cli_here([*args, f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "must be Tensor, not tuple. A model output or batch input that is not a tensor" in proc.stderr
    assert "give pipeline.step, a function fn(model, batch, loss_fn) -> loss" in proc.stderr


def test_samples_of_different_shapes_are_told_to_give_pipeline_collate_fn():
    said = "RuntimeError: stack expects each tensor to be equal size, but got [13] at entry 0 and [8] at entry 1"
    assert remedy(said).startswith(
        "Samples of different shapes cannot be stacked into a batch: give pipeline.collate_fn"
    )
    assert remedy("ValueError: sample 5 is corrupt") == ""


BAD_INPUTS = [
    (["pipeline=nosuch"], "pipeline: no config named 'nosuch'; available: images, mymodel, tabular_mlp, trans"),
    ([], "pipeline: no pipeline chosen; add pipeline=NAME: e.g. python -m autotune pipeline=mymodel, or with mode=b"),
    (["mode=benchmark", "recommended=r.yaml"], "pipeline: no pipeline chosen; add pipeline=NAME"),
    (["pipeline=mymodel", "search.batch_size=[32"], "search.batch_size: cannot parse the override 'search.batch_siz"),
    (["pipeline=mymodel", "study.n_trails=3"], "study.n_trails: unknown key; did you mean study.n_trials?"),
    (["pipeline=mymodel", "search.flash=[true]"], "search.flash: unknown knob; expected one of: batch_size"),
    (["pipeline=mymodel", "+search.flash=[true]"], "search.flash: unknown knob; expected one of: batch_size"),
    (["pipeline=mymodel", "search.amp=[fp8]"], "search.amp: expected one of off, bf16, fp16, got 'fp8'"),
    (["pipeline=mymodel", "search.batch_size=[0]"], "search.batch_size: expected an integer >= 1, got 0"),
    (["pipeline=mymodel", "search.batch_size=[]"], "search.batch_size: the candidate list is empty"),
    (["pipeline=mymodel", "search.pin_memory=[true]"], "search.pin_memory: True is not worth a trial here"),
    (
        ["pipeline=mymodel", "pipeline.model._target_=nowhere.Net"],
        "pipeline.model._target_: cannot import 'nowhere.Net'",
    ),
    (["pipeline=mymodel", "pipeline.dataset.length=0"], "pipeline.dataset: SyntheticImages is empty (length 0)"),
    (["pipeline=1"], "pipeline: the name reads as a number in YAML, not as a config name: quote it"),
    (["pipeline=null"], "pipeline: the name reads as null in YAML"),
    (["pipeline=[mymodel,images]"], "pipeline: give one pipeline name, not a list ([mymodel,images]); to tune several"),
    (
        ["-cd", "tests/conf", "pipeline=tiny", "pipeline.model._target_=tests.fixtures.inspection.NeedsHidden"],
        "pipeline.model: tests.fixtures.inspection.NeedsHidden needs an argument the config does not give",
    ),
    (
        ["pipeline=mymodel", "pipeline.collate_fn={_target_:tests.fixtures.batches.collate_userdict}"],
        "pipeline.step: a batch is a UserDict of keys 'pixel_values', 'labels', not (input, target), which autotune's",
    ),
    (["-cd", "./nowhere", "pipeline=mine"], f"-cd: no folder {REPO}/nowhere; give the folder that holds"),
    (
        ["pipeline=mymodel", "pipeline.baseline.batch_size=100000"],
        "pipeline.baseline.batch_size: 100000 cannot run here: it is larger than the dataset",
    ),
    (["pipeline=mymodel", "study.storage=nosuchdb://x"], "study.storage: cannot open Optuna storage"),
    (["pipeline=mymodel", "study.name='a#b'"], "study.name: expected a printable name without '#', got 'a#b'"),
    # the study's name by default: '#' marks autotune's own studies beside it
    (["pipeline=mymodel", "pipeline.name='a#b'"], "pipeline.name: expected a printable name without '#', got 'a#b'"),
    # one file, one study: Hydra loads it by each spelling, which would each name a study
    (["pipeline=mymodel.yaml"], "pipeline: give pipeline=mymodel (its config's name, which names its study), not pip"),
    (["pipeline=../pipeline/images"], "pipeline: give pipeline=images (its config's name, which names its study)"),
    (["pipeline=./images"], "pipeline: give pipeline=images (its config's name, which names its study), not pipeli"),
    (["pipeline=mymodel", "study.n_trials=-1"], "study.n_trials: expected an integer >= 0, got -1"),
    (["pipeline=mymodel", "study.n_trials=many"], "study.n_trials: expected an integer >= 0, got 'many'"),
    (["pipeline=mymodel", "study.timeout_s=0"], "study.timeout_s: expected a number > 0 or null, got 0"),
    (["pipeline=mymodel", "study.timeout_s=nan"], "study.timeout_s: expected a number > 0 or null, got nan"),
    (["pipeline=mymodel", "measure.loss_tolerance=nan"], "measure.loss_tolerance: expected a number > 0, got nan"),
    (["pipeline=mymodel", "measure.max_time_s=inf"], "measure.max_time_s: expected a number > 0, got inf"),
    (["pipeline=mymodel", "study.seed=4294967296"], "study.seed: expected an integer >= 0 and <= 4294967295"),
    (["pipeline=mymodel", "study.memory_budget_mb=-5"], "study.memory_budget_mb: expected a number > 0 or null"),
    (["pipeline=mymodel", "measure.device=tpu"], "measure.device: expected one of auto, cpu, cuda, got 'tpu'"),
    (["pipeline=mymodel", "measure.device=cuda"], "measure.device: cuda was requested but"),
    (["pipeline=mymodel", "measure.min_time_s=10", "measure.max_time_s=1"], "measure.max_time_s: must be >= measure"),
    (
        ["pipeline=mymodel", "measure.warmup_min_steps=10", "measure.warmup_max_steps=5"],
        "measure.warmup_max_steps: must be >= measure.warmup_min_steps",
    ),
    (["pipeline=mymodel", "measure.trial_timeout_s=0"], "measure.trial_timeout_s: expected a number > 0, got 0"),
    (["pipeline=mymodel", "measure.trial_timeout_s=0.5"], "measure.trial_timeout_s: must be >= measure.min_time_s"),
    (["pipeline=mymodel", "study.heartbeat_s=1e-300"], "study.heartbeat_s: expected a number >= 0.01 and <= "),
    (["pipelin=mymodel"], "pipelin: unknown key; did you mean pipeline?"),
    (["pipeline.baseline.batch_size=64"], "pipeline: no pipeline chosen for the pipeline.* keys; add pipeline=NAME"),
    (["pipeline=mymodel", "search.num_workers=[-1]"], "search.num_workers: expected an integer >= 0, got -1"),
    (["pipeline=mymodel", "search.channels_last=[maybe]"], "search.channels_last: expected true or false, got 'maybe'"),
    (["pipeline=mymodel", "search.compile=[fast]"], "search.compile: expected one of off, default, reduce-overhead"),
    (["pipeline=mymodel", "pipeline.model._target_=null"], "pipeline.model._target_: expected a dotted import path"),
    (
        ["pipeline=mymodel", "+pipeline.optimizer.lrr=0.1"],
        "pipeline.optimizer: torch.optim.SGD does not take these arguments: got an unexpected keyword argument 'lrr'",
    ),
    (
        ["pipeline=mymodel", "+pipeline.model.num_classez=3"],
        "pipeline.model: examples.mymodel.SmallCNN does not take these arguments: got an unexpected keyword argument",
    ),
    (
        ["pipeline=mymodel", "+pipeline.model.num_classez=3"],
        "pipeline.model: examples.mymodel.SmallCNN does not take these arguments: got an unexpected keyword argument "
        "'num_classez'; did you mean pipeline.model.num_classes for num_classez?",
    ),
    (
        ["pipeline=mymodel", "pipeline.model._target_=examples.mymodle.SmallCNN"],
        "pipeline.model._target_: cannot import 'examples.mymodle.SmallCNN': ModuleNotFoundError: No module named "
        "'examples.mymodle'; did you mean 'examples.mymodel'?",
    ),
    (["pipeline=mymodel", "~pipeline.optimizer"], "pipeline.optimizer: is missing"),
    (
        ["pipeline=mymodel", "+pipeline.optimzer.lr=1"],
        "pipeline.optimzer: unknown key; did you mean pipeline.optimizer? expected",
    ),
    (["pipeline=mymodel", "pipeline.baseline.amp=fp8"], "pipeline.baseline.amp: expected one of off, bf16, fp16"),
    (["pipeline=mymodel", "+pipeline.baseline.turbo=true"], "pipeline.baseline.turbo: unknown key"),
    (["pipeline=mymodel", "pipeline.loss._target_=torch.nn.NoSuchLoss"], "pipeline.loss._target_: cannot import"),
    (["pipeline=mymodel", "pipeline.dataset.length=-5"], "pipeline.dataset: len() of SyntheticImages failed"),
    (["pipeline=mymodel", "hydra.run.dir=/proc/autotune-out"], "hydra.run.dir: cannot create or write /proc/autotune"),
    (["pipeline=mymodel", "mode=benchmark"], "recommended: mode=benchmark measures a recommendation"),
    (
        ["pipeline=mymodel", "mode=benchmark", "recommended=/nonexistent/recommended.yaml"],
        "recommended: /nonexistent/recommended.yaml: cannot read it",
    ),
    (
        ["pipeline=mymodel", "measure.warmup_min_time_s=301"],
        "measure.warmup_min_time_s: must be < measure.trial_timeout_s, but got warmup_min_time_s=301 >= trial_timeo",
    ),
    (["pipeline=mymodel", "study.heartbeat_s=1e10"], "study.heartbeat_s: expected a number >= 0.01 and <= 922337"),
    (["pipeline=mymodel", "measure.memory_interval_s=1e10"], "measure.memory_interval_s: expected a number >= 0.01"),
    (
        ["pipeline=modèle"],
        "pipeline: cannot parse the override 'pipeline=modèle': quote a value with a letter beyond ASCII or a "
        "character such as '#': pipeline=\"'modèle'\"",
    ),
    (["pipeline=mymodel", "study.name=a#b"], "study.name: cannot parse the override 'study.name=a#b': quote a value"),
    (["pipeline=mymodel", "hydra.run.dri=x"], "hydra.run.dri: unknown key; did you mean hydra.run.dir? expected one"),
    (["mode=report", "study.name=x", "measure.min_time_s=-1"], "measure.min_time_s: expected a number >= 0, got -1"),
    (["mode=report", "study.name=x", "search.amp=[fp8]"], "search.amp: expected one of off, bf16, fp16, got 'fp8'"),
    (  # resolved by the run, once Hydra made its folder
        ["pipeline=mymodel", "study.name=${oc.env:AUTOTUNE_TEST_UNSET}"],
        "study.name: KeyError raised while resolving interpolation: \"Environment variable 'AUTOTUNE_TEST_UNSET'",
    ),
]


VALID_WITH_CUDA = {"search.pin_memory: True is not worth a trial here", "measure.device: cuda was requested but"}


# Refused before any trial, so the command runs in this process (a subprocess would add only its start-up); the
# first few also run as a user runs them, in a process of their own.
END_TO_END = 3


@pytest.mark.parametrize(
    ("args", "message"), BAD_INPUTS, ids=[m.split(":")[0] + "-" + str(i) for i, (_, m) in enumerate(BAD_INPUTS)]
)
def test_bad_input_is_one_line_with_exit_2_before_any_trial(tmp_path, args, message, cli_here):
    if message in VALID_WITH_CUDA and torch.cuda.is_available():
        pytest.skip("valid input where CUDA exists")
    run_dir = [] if any(a.startswith("hydra.run.dir=") for a in args) else [f"hydra.run.dir={tmp_path}/out"]
    # A study of its own: cases run at once would otherwise lock one another out of the repository's autotune.db.
    storage = [] if any(a.startswith("study.storage=") for a in args) else [f"study.storage=sqlite:///{tmp_path}/s.db"]
    if BAD_INPUTS.index((args, message)) < END_TO_END:
        proc = run_cli([*args, *run_dir, *storage], cwd=REPO)
    else:  # its inspection, where it gets that far, is forked: what is checked is the message
        proc = cli_here([*args, *run_dir, *storage, "measure.fork_trials=true"], cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotune: error: {message}"), proc.stderr
    assert proc.stdout == "", "nothing else is printed"
    assert not (tmp_path / "out").exists(), "no trial ran, no empty run folder is left"
    assert not (tmp_path / "s.db").exists(), "nor a study file"


@pytest.mark.parametrize("storage", ["postgresql://bob:pw@127.0.0.1:1/db", "nosuchdb://x"])
def test_a_storage_that_cannot_be_opened_is_refused_before_the_pipelines_code_runs(
    tmp_path, storage, cli_here, monkeypatch
):
    # The inspection (a process of its own that builds the pipeline) takes seconds: a typo in the URL costs none.
    monkeypatch.setattr(app, "inspect_run", lambda *args: pytest.fail("the pipeline was inspected"))
    proc = cli_here(["pipeline=mymodel", f"study.storage={storage}", f"hydra.run.dir={tmp_path}/out"], cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("autotune: error: study.storage: cannot open"), proc.stderr


def test_input_refused_in_a_run_folder_used_before_leaves_that_runs_files_as_they_were(tmp_path, cli_here):
    earlier = tmp_path / "tuned"
    earlier.mkdir()
    files = {"config.yaml": b"# the config as run, in Latin-1: \xe9\n", "report.md": b"# autotune report: tiny\n"}
    for name, content in files.items():
        (earlier / name).write_bytes(content)
    bad = [*TINY, "pipeline.baseline.batch_size=100000", f"hydra.run.dir={earlier}"]  # refused after its record
    proc = cli_here([*bad, f"study.storage=sqlite:///{tmp_path}/s.db"], cwd=tmp_path)
    assert proc.returncode == 2 and "pipeline.baseline.batch_size" in proc.stderr, proc.stderr
    assert {path.name: path.read_bytes() for path in earlier.iterdir()} == files


@pytest.mark.parametrize("run_dir", ["given", "current"])
def test_refused_input_leaves_a_folder_that_was_there_before_the_run(tmp_path, cli_here, run_dir):
    mine = tmp_path / "mine"
    mine.mkdir()
    args = [*TINY, "study.n_trials=-1", f"hydra.run.dir={mine if run_dir == 'given' else '.'}"]
    proc = cli_here(args, cwd=mine)
    assert proc.returncode == 2 and proc.stderr.startswith("autotune: error: study.n_trials"), proc.stderr
    assert mine.is_dir() and not any(mine.iterdir()), "the user's folder, as it was"


def test_refused_input_leaves_no_folder_the_run_made(tmp_path, cli_here):
    # Hydra's defaults: outputs/DATE/TIME, and under -m multirun/DATE/TIME with its multirun.yaml
    assert cli_here([*TINY, "study.n_trials=-1"], cwd=tmp_path).returncode == 2
    assert cli_here(["-m", *TINY, "study.n_trials=-1,-2"], cwd=tmp_path).returncode == 2
    # a folder named by Hydra's own config, resolved only once Hydra has set it
    assert cli_here([*TINY, "study.n_trials=-1", "hydra.run.dir=out/${hydra:job.name}"], cwd=tmp_path).returncode == 2
    assert not any(tmp_path.iterdir())
    # a sweep folder the user made stays; the jobs' folders Hydra made in it go
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    args = ["-m", *TINY, "study.n_trials=-1,-2", f"hydra.sweep.dir={sweep}"]
    assert cli_here(args, cwd=tmp_path).returncode == 2
    assert [path.name for path in sweep.iterdir()] == ["multirun.yaml"]


def test_input_the_pipelines_facts_refuse_leaves_no_compile_cache(tmp_path, cli_here):
    # The cache's folder is relative to the current folder, and torch makes it as it imports: the inspection's must
    # not, as a run refused there leaves nothing it made.
    args = [*TINY, "pipeline.baseline.batch_size=100000", "measure.compile_cache_dir=.autotune-cache"]
    proc = cli_here([*args, f"hydra.run.dir={tmp_path}/out", f"study.storage=sqlite:///{tmp_path}/s.db"], cwd=tmp_path)
    said = "pipeline.baseline.batch_size: 100000 cannot run here: it is larger"
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir()), "no run folder, no study file, no compile cache"


@pytest.mark.parametrize("mode", ["benchmark", "selfcheck"])
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read it (No such file or directory)"),
        (b"\xff\xfe", "is not UTF-8 text (byte 0: invalid st"),
        (  # cut short after two of its knobs: the others would run at their defaults
            b"schema_version: 2\npipeline: tiny\nstudy: tiny\ndevice: cpu\nmachine: {}\nknobs:\n  batch_size: 32\n"
            b"  num_workers: 1\n",
            "baseline: missing, which autotune writes in every recommended.yaml of schema_version 2: the file was cut",
        ),
    ],
)
def test_a_recommendation_that_cannot_be_read_is_refused_before_the_pipeline_is_inspected(
    tmp_path, cli_here, monkeypatch, mode, content, problem
):
    for module in (benchmark, selfcheck):  # a process of its own that builds the pipeline, seconds
        monkeypatch.setattr(module, "inspect_run", lambda *args: pytest.fail("the pipeline was inspected"))
    path = tmp_path / "recommended.yaml"
    if content is not None:
        path.write_bytes(content)
    args = [*TINY, f"mode={mode}", f"recommended={path}", f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"autotune: error: recommended: {path}: {problem}"), proc.stderr


@pytest.mark.parametrize(
    ("value", "shown"), [("1", True), ("yes", True), ("0", False), ("false", False), ("No", False)]
)
def test_the_debug_switch_is_off_for_the_words_of_off(monkeypatch, capsys, value, shown):
    def refused() -> None:
        raise ConfigError("study.n_trials", "expected an integer >= 0, got -1")

    monkeypatch.setenv("AUTOTUNE_DEBUG", value)
    with pytest.raises(SystemExit):
        report_errors(refused)
    assert ("Traceback" in capsys.readouterr().err) == shown


@pytest.mark.slow
def test_the_debug_switch_shows_the_traceback_and_keeps_the_exit_code(tmp_path):
    proc = run_cli(
        ["pipeline=mymodel", "search.amp=[fp8]", f"hydra.run.dir={tmp_path}/out"], cwd=REPO, env={"AUTOTUNE_DEBUG": "1"}
    )
    assert proc.returncode == 2 and "Traceback" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("autotune: error: search.amp"), "its line, last"


def test_the_console_script_is_installed():
    script = Path(sys.executable).parent / "autotune"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, env={**os.environ, **IMPORT_TIMES})
    assert proc.returncode == 0 and "pipeline" in proc.stdout
    assert not imports_torch(proc.stderr), "the tuner's process (every module it loads) imports no torch"
    assert all(f"  {name} " in proc.stdout for name in KNOBS), "every knob, as the registry describes it"


@pytest.mark.slow
def test_a_pipeline_kept_in_the_users_own_repo(tmp_path):
    """-cd adds the user's config folder; their modules import from the current directory, in trials too."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "parts.py").write_text("from tests.fixtures.tiny import TinyCNN as Net, TinyImages as Data\n")
    (tmp_path / "myconf" / "pipeline").mkdir(parents=True)
    (tmp_path / "myconf" / "pipeline" / "mine.yaml").write_text(
        (TEST_CONF / "pipeline" / "tiny.yaml")
        .read_text()
        .replace("tests.fixtures.tiny.TinyCNN", "mypkg.parts.Net")
        .replace("tests.fixtures.tiny.TinyImages", "mypkg.parts.Data")
    )
    script = Path(sys.executable).parent / "autotune"
    env = {**os.environ, "PYTHONPATH": str(REPO), **IMPORT_TIMES}  # REPO for tests.fixtures; mypkg: the cwd's
    args = ["-cd", "./myconf", "pipeline=mine", *FAST_MEASURE, "study.n_trials=1", "search.compile=[off]"]
    args.append("study.confirm_rounds=0")
    args.append("study.probe=false")  # so that a trial surely runs (the probe's guide may find none worth it)
    proc = subprocess.run(
        [str(script), *args, "hydra.run.dir=out"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    recommended = yaml.safe_load((tmp_path / "out" / "recommended.yaml").read_text())
    assert recommended["pipeline"] == "mine"
    assert ", 1 of 1]" in proc.stdout and "FAILED" not in proc.stdout
    assert not imports_torch(proc.stderr), "torch is the trials' (the user's code's), never the tuner's"


def test_a_pipeline_of_the_users_folder_named_as_a_shipped_example_is_refused_not_replaced(tmp_path, cli_here):
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "mymodel.yaml").write_text((TEST_CONF / "pipeline" / "tiny.yaml").read_text())
    proc = cli_here(["-cd", str(tmp_path), "pipeline=mymodel", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = f"pipeline: {tmp_path}/pipeline/mymodel.yaml has the name of autotune's example 'mymodel'"
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists(), "nothing left of the refused run"


@pytest.mark.parametrize("name", ["mine", "mymodel"], ids=["own name", "an example's name"])
def test_the_pipeline_folder_given_as_the_config_folder_is_refused_naming_the_folder_above(
    tmp_path, cli_here, monkeypatch, name
):
    # Hydra reads DIR/pipeline/NAME.yaml: under the pipeline/ folder itself it finds none of the user's, so it found
    # no config, or autotune's example of that name, which would have been tuned in the user's file's place.
    monkeypatch.setattr(app, "run", lambda *args, **kwargs: pytest.fail("a pipeline was tuned"))
    folder = tmp_path / "myconf" / "pipeline"
    folder.mkdir(parents=True)
    (folder / f"{name}.yaml").write_text((TEST_CONF / "pipeline" / "tiny.yaml").read_text())
    proc = cli_here(["-cd", str(folder), f"pipeline={name}", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        f"autotune: error: -cd: {folder} holds {name}.yaml itself; give the folder that holds your pipeline/ folder: "
        f"-cd {tmp_path / 'myconf'}"
    )
    assert not (tmp_path / "out").exists(), "nothing left of the refused run"


def test_a_pipeline_named_config_is_tuned_not_refused_for_autotunes_own_config_yaml(tmp_path, cli_here, monkeypatch):
    # autotune's conf/ holds config.yaml, its own settings, beside no pipeline/config.yaml: no pipeline/ folder given.
    tuned = []
    monkeypatch.setattr(app, "run", lambda settings, *args, **kwargs: tuned.append(settings.pipeline.name))
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "config.yaml").write_text((TEST_CONF / "pipeline" / "tiny.yaml").read_text())
    proc = cli_here(["-cd", str(tmp_path), "pipeline=config", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 0 and tuned == ["config"], proc.stderr


def test_a_name_yaml_beside_a_folder_whose_pipeline_folder_holds_it_is_no_pipeline_folder_given(tmp_path):
    # -cd A, where A holds an unrelated mine.yaml; hydra.searchpath B, whose pipeline/mine.yaml Hydra loads.
    given, searched = tmp_path / "a", tmp_path / "b"
    (searched / "pipeline").mkdir(parents=True)
    given.mkdir()
    (given / "mine.yaml").write_text("")
    (searched / "pipeline" / "mine.yaml").write_text("")
    sources = [SimpleNamespace(path=str(folder), schema="file") for folder in (CONFIG_DIR, given, searched)]
    assert refuse_pipeline_folder_given("mine", sources) is None
    (searched / "pipeline" / "mine.yaml").unlink()  # no source holds it: A stood for the folder above it
    with pytest.raises(ConfigError, match=rf"^-cd: {given} holds mine.yaml itself; .*: -cd {tmp_path}$"):
        refuse_pipeline_folder_given("mine", sources)


def test_autotunes_own_conf_given_as_the_users_folder_shadows_nothing():
    own = SimpleNamespace(path=str(REPO / "conf"), schema="file", provider="command-line")
    assert refuse_shadowed_pipeline("mymodel", [own]) is None


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, cli_here):
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "broken.yaml").write_text("model: {_target_: x\nbaseline: [\n")
    proc = cli_here(["-cd", str(tmp_path), "pipeline=broken", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"autotune: error: {tmp_path}/pipeline/broken.yaml:2:9: YAML syntax error: expected ',' or '}}', but got ':'"
    )


BASELINE_AMP = "pipeline.baseline.amp"
OVERRIDE_MISTAKES = [
    # a knob the pipeline's file leaves unset is no typo: it is added with +
    (
        "tiny",
        [f"{BASELINE_AMP}=fp8"],
        f"{BASELINE_AMP}: not set in the pipeline's file; add it with +{BASELINE_AMP}=VALUE",
    ),
    (
        "tiny",
        ["pipeline.baseline.ampp=fp8"],
        "pipeline.baseline.ampp: unknown key; did you mean pipeline.baseline.amp? expected one of: " + ", ".join(KNOBS),
    ),
    (
        "with_amp",
        [f"+{BASELINE_AMP}=bf16"],
        f"{BASELINE_AMP}: already set; change it with {BASELINE_AMP}=VALUE (without the +), or "
        f"++{BASELINE_AMP}=VALUE sets it whether set or not",
    ),
    ("tiny", [f"~{BASELINE_AMP}"], f"{BASELINE_AMP}: not set, so ~{BASELINE_AMP} has nothing to remove"),
    (
        "with_amp",
        [f"~{BASELINE_AMP}=bf16"],
        f"{BASELINE_AMP}: is fp16, not bf16; ~{BASELINE_AMP} without a value removes it whatever it is",
    ),
    # the top-level sections written in a pipeline's file, or under pipeline. on the command line
    (
        "with_search",
        [],
        "pipeline.search: not a pipeline key: search is top-level; give it on the command line as search.KEY=VALUE",
    ),
    (
        "tiny",
        ["pipeline.search.num_workers=[0]"],
        "pipeline.search: not a pipeline key: search is top-level; give it on the command line as search.KEY=VALUE",
    ),
    (
        "with_study",
        [],
        "pipeline.study: not a pipeline key: study is top-level; give it on the command line as study.KEY=VALUE",
    ),
    (
        "tiny",
        ["search.flash=[true]"],
        "search.flash: unknown knob; expected one of: " + ", ".join([*KNOBS, "batch_policy"]),
    ),
]


@pytest.mark.parametrize(
    ("pipeline", "args", "message"),
    OVERRIDE_MISTAKES,
    ids=[" ".join([pipeline, *args]) for pipeline, args, _ in OVERRIDE_MISTAKES],
)
def test_an_override_of_a_key_set_or_unset_or_misplaced_says_so_in_one_line(
    tmp_path, pipeline, args, message, cli_here
):
    tiny = (TEST_CONF / "pipeline" / "tiny.yaml").read_text()
    (tmp_path / "pipeline").mkdir()
    for name, extra in [
        ("tiny", ""),
        ("with_amp", "  amp: fp16\n"),
        ("with_search", "search:\n  num_workers: [0, 2]\n"),
    ]:
        (tmp_path / "pipeline" / f"{name}.yaml").write_text(tiny + extra)
    (tmp_path / "pipeline" / "with_study.yaml").write_text(tiny + "study:\n  n_trials: 3\n")
    run = [f"study.storage=sqlite:///{tmp_path}/s.db", f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(["-cd", str(tmp_path), f"pipeline={pipeline}", *args, *run], cwd=tmp_path)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, f"autotune: error: {message}\n", "")
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.db").exists(), "refused before any trial"


def test_a_value_refused_is_said_before_a_stored_study_of_other_settings(tmp_path, cli_here):
    # a study whose stored settings differ from this run's: a run with them all valid is refused as the other study's
    storage = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(storage=storage, study_name="tiny", direction="maximize")
    study.set_user_attr(META_ATTR, {"fingerprint": "another run's", "measure": {"min_time_s": 9.0}})
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    args = [*TINY, f"study.storage={storage}", f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 2 and "study.name: study 'tiny' in the storage was created with other" in proc.stderr
    # with a value of its own refused, that value is what it says: it is checked before the study is compared
    proc = cli_here([*args, "search.batch_size=[100000]"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        2,
        "autotune: error: search.batch_size: 100000 cannot run here: it is larger than the dataset (256 samples), "
        "so no full batch exists; leave it out of the list\n",
    )


def test_a_corrupt_storage_file_is_named_and_never_replaced(tmp_path, cli_here):
    storage = tmp_path / "studies.db"
    storage.write_text("not a database")
    proc = cli_here([*TINY, f"study.storage=sqlite:///{storage}", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"autotune: error: study.storage: malformed database: cannot open Optuna storage 'sqlite:///{storage}': "
        "DatabaseError: file is not a database; restore it from a backup, or choose another study.storage (the file "
        "is left as it is)"
    )
    assert storage.read_text() == "not a database"


@pytest.mark.slow
def test_a_locked_storage_file_is_named(tmp_path, cli_here):
    storage = tmp_path / "studies.db"
    lock = sqlite3.connect(storage, isolation_level=None)
    lock.execute("CREATE TABLE t (x)")
    lock.execute("BEGIN EXCLUSIVE")
    try:
        proc = cli_here([*TINY, f"study.storage=sqlite:///{storage}", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    finally:
        lock.close()
    assert proc.returncode == 2
    assert f"study.storage: locked: cannot open Optuna storage 'sqlite:///{storage}'" in proc.stderr
    assert "database is locked" in proc.stderr


def test_a_multirun_job_that_fails_leaves_the_others_running_and_the_sweep_exits_with_its_code(tmp_path, cli_here):
    args = ["-m", *TINY, "study.n_trials=-1,0", f"hydra.sweep.dir={tmp_path}/multi"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "autotune: error: study.n_trials: expected an integer >= 0, got -1 (multirun job #0)" in lines
    assert lines[-1] == "autotune: error: 1 multirun job failed: #0 (each said why above)"
    assert (tmp_path / "multi" / "1" / "report.json").exists(), "job #1 ran after #0 failed"


def test_hydras_flags_may_come_after_the_overrides(tmp_path, cli_here):
    # Hydra's parser refuses them there ("unrecognized arguments"): a user writes mode=benchmark -cd ./myconf ...
    proc = cli_here(["pipeline=tiny", "study.n_trials=-1", "-cd", str(TEST_CONF), "--config-name=config"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("autotune: error: study.n_trials: expected an integer")
    assert flags_first(["pipeline=mine", "-cd"]) == ["pipeline=mine", "-cd"], "argparse's own: expected a value"
    assert flags_first(["a=1", "-m", "--cfg", "job", "--info", "config", "b=2", "--info"]) == [
        "-m",
        "--cfg",
        "job",
        "--info",
        "config",
        "--info",
        "a=1",
        "b=2",
    ]


def test_a_storage_password_is_never_shown(tmp_path, cli_here):
    url = "postgresql://tuner:s3cret@127.0.0.1:1/studies"
    proc = cli_here([*TINY, f"study.storage={url}", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2
    assert "postgresql://tuner:***@127.0.0.1:1/studies" in proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout
    assert not (tmp_path / "out").exists(), "refused input leaves no run folder"
    assert all("s3cret" not in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_stop_signal_stops_the_trial_writes_the_reports_and_exits_128_plus_it(tmp_path):
    """SIGTERM in a tuner of its own; Ctrl-C and SIGHUP take the same path (KeyboardInterrupt), checked below."""
    tuner = start_long_trial(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tuner.send_signal(signal.SIGTERM)
    stdout, stderr = tuner.communicate(timeout=60)
    assert tuner.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip().endswith("autotune: error: stopped by SIGTERM")
    assert "Stopped: by SIGTERM." in stdout, "the summary names the signal, as the error line does"
    _, _, rows = read_outputs(tmp_path / "out")
    assert [r["trial"] for r in rows] == ["baseline"], "the interrupted trial is not reported as measured"
    assert processes_mentioning(str(tmp_path)) == [], "the running trial and its workers are gone"


@pytest.mark.parametrize("signum, says", [(signal.SIGHUP, "stopped by SIGHUP"), (signal.SIGINT, "interrupted")])
def test_sighup_and_ctrl_c_stop_a_run_as_sigterm_does(tmp_path, cli_here, monkeypatch, signum, says):
    """A closed terminal's SIGHUP takes SIGTERM's path (a real tuner stopped above), and so does Ctrl-C, Python's
    own KeyboardInterrupt, checked in this process."""

    def signalled() -> None:
        os.kill(os.getpid(), signum)
        time.sleep(10)  # the handler raises first
        pytest.fail("the signal did not stop the run")

    def not_handled(*_) -> None:
        pytest.fail(f"the command line left {signal.Signals(signum).name} to this test's handler")

    monkeypatch.setattr(cli, "_hydra_main", signalled)
    # SIGINT raises as in a terminal (a shell's background job inherits it ignored): the command line keeps Python's.
    before = signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else not_handled)
    try:
        proc = cli_here(["pipeline=tiny"], cwd=tmp_path)
    finally:
        signal.signal(signum, before)
    assert proc.returncode == 128 + signum
    assert proc.stderr.strip() == f"autotune: error: {says}"


@pytest.mark.parametrize("where", ["write_reports", "close"])
@pytest.mark.slow
def test_a_stop_signal_as_the_run_ends_stops_it_once_its_reports_are_written(tmp_path, cli_here, monkeypatch, where):
    owner = app if where == "write_reports" else TrialRunner
    unpatched = getattr(owner, where)

    def signalled_midway(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # held until the servers are ended and the reports written
        return unpatched(*args)

    monkeypatch.setattr(owner, where, signalled_midway)
    args = [*TINY, "study.n_trials=0", f"study.storage=sqlite:///{tmp_path}/s.db", f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.strip().endswith("autotune: error: stopped by SIGTERM")
    assert {"report.md", "report.json", "recommended.yaml"} <= {p.name for p in (tmp_path / "out").iterdir()}
    assert "Stopped:" in proc.stdout, "and its summary printed"


@pytest.mark.slow
def test_kill_9_of_the_tuner_leaves_no_orphaned_trial(tmp_path):
    tuner = start_long_trial(tmp_path, stdout=subprocess.DEVNULL)
    helpers = psutil.Process(tuner.pid).children()  # the fork server among them
    assert processes_mentioning("trial-0.log"), "the trial is running"
    tuner.kill()
    tuner.wait()
    deadline = time.monotonic() + 10
    while (processes_mentioning(str(tmp_path)) or _living(helpers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(tmp_path)) == [], "the orphaned trial notices its tuner died and exits"
    assert _living(helpers) == [], "the fork server ends with its tuner"


def _living(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [proc for proc in processes if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE]


def start_long_trial(tmp_path, **popen) -> subprocess.Popen:
    """Start the tuner on the tiny pipeline and return once its first trial (a window of >= 30 s; the baseline's is
    short) is running."""
    args = [*TINY, "study.n_trials=5", "measure.max_time_s=60", "measure.screen_min_time_s=30"]
    args += ["study.prune_margin=null", f"hydra.run.dir={tmp_path}/out"]  # a pruned trial would not be long
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # A shell's background jobs inherit SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
    # start the tuner with the default disposition, as from a terminal, whatever ran the tests.
    tuner = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args], cwd=tmp_path, env=env, preexec_fn=_default_sigint, **popen
    )
    wait_for_file(tmp_path / "out" / "trials" / "trial-0.log", timeout_s=120)
    deadline = time.monotonic() + 30
    while not processes_mentioning(str(tmp_path / "out" / "trials" / "trial-0.log")):
        assert time.monotonic() < deadline, "the trial never started"
        time.sleep(0.05)
    return tuner


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_file(path, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_multi_objective_study_has_a_pareto_front_and_no_probe(tmp_path, cli_here):
    args = [*TINY, "study.probe=true", "study.n_trials=2", "study.objectives=[throughput,peak_memory]"]
    args.append("study.confirm_rounds=0")  # what is checked is the front and the probe's absence
    proc = cli_here([*args, "search.num_threads=[1]", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[probe]" not in proc.stdout, "the probe steers a throughput search only: TPE explores the front"
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## Pareto front: throughput against peak memory" in markdown
    assert "differential probe" not in markdown


@pytest.mark.slow
def test_probe_and_fixed_effective_batches(tmp_path, cli_here):
    args = [*TINY, "study.probe=true", "study.n_trials=2", "search.batch_policy=fixed_effective"]
    args += [*fixed_search(batch_size=None), f"hydra.run.dir={tmp_path}/out"]  # the probe times the batch sizes
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The probe ran; its timings may be discarded as contradicting the baseline, or as drifting, when another test
    # loads the machine (study/probe_model.py, CONTRADICTION, DRIFT): either outcome is printed and reported.
    said = proc.stdout
    assert "[probe] at the baseline the DataLoader alone gives" in said or "contradict" in said or "drifted" in said
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## Where the time goes (differential probe)" in markdown
    recommended = yaml.safe_load((tmp_path / "out" / "recommended.yaml").read_text())
    assert recommended["training"]["batch_policy"] == "fixed_effective"
    assert recommended["knobs"]["batch_size"] in (2, 4, 8, 16), "micro-batches divide the baseline's 16"
    batch = recommended["knobs"]["batch_size"]
    assert recommended["training"]["gradient_accumulation_steps"] == 16 // batch


@pytest.mark.slow
def test_selfcheck_times_the_baseline_and_the_studys_pick_by_autotune_and_by_a_plain_loop(
    tmp_path, cli_here, describes_no_machine, monkeypatch
):
    slow_baseline = [
        *TINY,
        "pipeline.model._target_=tests.fixtures.tiny.StepBoundCNN",
        "pipeline.baseline.batch_size=2",  # slower than batch 64 however busy the machine: the study picks it
        *fixed_search(batch_size=[64]),  # one trial, batch 64 alone: a random draw of the other knobs could lose
        "study.n_trials=1",
        "study.confirm_rounds=0",
    ]
    tune = cli_here([*slow_baseline, f"hydra.run.dir={tmp_path}/tune"], cwd=tmp_path)
    assert tune.returncode == 0, tune.stderr
    check = [*slow_baseline, "mode=selfcheck", "selfcheck.rounds=2", f"hydra.run.dir={tmp_path}/check"]
    draws = []
    monkeypatch.setattr(TrialRunner, "new_draw", lambda runner: draws.append(1))
    proc = cli_here(check, cwd=tmp_path)
    assert len(draws) == 2, "each round a new draw of the process layout"
    record = json.loads((tmp_path / "check" / "selfcheck.json").read_text())
    # Two rounds on a busy machine may read the loops apart: exit 1 says so (HarnessDisagreesError), as documented
    disagree = any(c["verdict"] == "disagree" for c in record["configurations"])
    assert proc.returncode == (1 if disagree else 0), proc.stderr
    labels = [c["label"] for c in record["configurations"]]
    assert labels == ["baseline", "recommended (trial 0)"], f"the study picked no trial:\n{tune.stdout}"
    for configuration in record["configurations"]:
        runs = configuration["harness"] + configuration["plain"]
        assert len(runs) == 4 and all(value > 0 for value in runs), "two rounds, each loop once a round"
        assert configuration["interval"]["n"] == 2 and configuration["verdict"] in ("agree", "disagree", "unresolved")
    assert "Self-check of 'tiny'" in proc.stdout and "harness / plain loop" in proc.stdout
    assert len(list((tmp_path / "check" / "selfcheck").glob("*.result.json"))) == 8


@pytest.mark.slow
def test_benchmark_measures_the_recommendation_and_each_changes_share(tmp_path, cli_here, describes_no_machine):
    baseline = {**{name: knob.baseline_default for name, knob in KNOBS.items()}, "batch_size": 16}
    recommendation = {**baseline, "batch_size": 32, "set_to_none": False}
    path = tmp_path / "recommended.yaml"
    document = {"schema_version": 1, "pipeline": "mymodel", "knobs": recommendation, "baseline": baseline}
    path.write_text(yaml.safe_dump(document))
    args = [*TINY, "mode=benchmark", f"recommended={path}", "benchmark.rounds=2", f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"note: {path} was tuned for pipeline 'mymodel', measured here on 'tiny'" in proc.stdout
    record = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    labels = [entry["label"] for entry in record["entries"]]
    assert labels == [
        "baseline",
        "recommended",
        "baseline + batch_size",
        "recommended - batch_size",
        "baseline + set_to_none",
        "recommended - set_to_none",
    ]
    for entry in record["entries"]:
        assert len(entry["throughputs"]) == 2 and all(value > 0 for value in entry["throughputs"])
    assert record["entries"][0]["verdict"] is None, "the baseline is not judged against itself"
    for entry in record["entries"][1:]:
        assert entry["verdict"] in ("gain", "loss", "within noise") and entry["interval"]["n"] == 2
    page = (tmp_path / "out" / "benchmark.html").read_text()
    assert "Each change&#x27;s share" in page and "recommended - set_to_none" in page
    assert "| recommended " in (tmp_path / "out" / "benchmark.md").read_text()  # "(... slowed ...)" on a busy host
    assert "[round 2 recommended - batch_size]" in proc.stdout and "x the baseline" in proc.stdout


@pytest.mark.slow
def test_mode_report_renders_a_stored_study_without_its_pipelines_code(tmp_path, cli_here):
    """Tuned where the user's package imports; re-rendered where it does not, from the study alone."""
    (tmp_path / "repo" / "mypkg").mkdir(parents=True)
    (tmp_path / "repo" / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "repo" / "mypkg" / "parts.py").write_text(
        "from tests.fixtures.tiny import TinyCNN as Net, TinyImages as Data\n"
    )
    (tmp_path / "repo" / "pipeline").mkdir()
    (tmp_path / "repo" / "pipeline" / "mine.yaml").write_text(
        (TEST_CONF / "pipeline" / "tiny.yaml")
        .read_text()
        .replace("tests.fixtures.tiny.TinyCNN", "mypkg.parts.Net")
        .replace("tests.fixtures.tiny.TinyImages", "mypkg.parts.Data")
    )
    storage = f"study.storage=sqlite:///{tmp_path}/studies.db"
    tune = ["-cd", str(tmp_path / "repo"), "pipeline=mine", *TINY[3:], "study.n_trials=1", "study.confirm_rounds=0"]
    assert cli_here([*tune, storage, f"hydra.run.dir={tmp_path}/tuned"], cwd=tmp_path / "repo").returncode == 0
    (tmp_path / "elsewhere").mkdir()
    report = ["mode=report", "study.name=mine", storage, f"hydra.run.dir={tmp_path}/again"]
    proc = run_cli(report, cwd=tmp_path / "elsewhere")
    assert proc.returncode == 0, proc.stderr
    tuned, again = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("tuned", "again"))
    assert again == tuned and "rendered from storage" in proc.stdout
    assert not (tmp_path / "again" / "trials").exists(), "nothing measured"
    missing = cli_here(["mode=report", "study.name=nope", storage, f"hydra.run.dir={tmp_path}/x"], cwd=tmp_path)
    assert (
        missing.returncode == 2
        and f"study.name: no study 'nope' in sqlite:///{tmp_path}/studies.db; it holds mine" in (missing.stderr)
    )
    for url in (f"sqlite:///{tmp_path}/none.db", f"journal:///{tmp_path}/none.log"):
        missing = cli_here(["mode=report", "study.name=mine", f"study.storage={url}"], cwd=tmp_path)
        assert missing.returncode == 2 and "study.name: no study 'mine'" in missing.stderr
        assert "; it holds none" in missing.stderr
    assert not list(tmp_path.glob("none.*")), "no storage made where there was none"


def test_a_budget_given_to_a_mode_it_does_not_bound_is_said_to_be_unused():
    settings = load_settings(tiny_config(study={"budget_s": 60}), "tiny")
    assert cli.unused_notes(settings) == [], "a tuning run: bounded"
    notes = cli.unused_notes(replace(settings, mode="benchmark"))
    assert notes == ["autotune: study.budget_s=60 bounds a tuning run only: mode=benchmark runs to its end"]
    assert cli.unused_notes(replace(settings, mode="check", study=replace(settings.study, budget_s=None))) == []


def test_a_recommendation_or_a_report_given_to_a_mode_that_does_not_read_it_is_said_to_be_unused():
    settings = load_settings(tiny_config(), "tiny")
    given = replace(settings, recommended="tuned/recommended.yaml", against="tuned/report.json")
    assert cli.unused_notes(given) == [
        "autotune: recommended= is read by mode=benchmark and mode=selfcheck only: mode=tune does not use it",
        "autotune: against= is read by mode=check only: mode=tune does not use it",
    ]
    assert cli.unused_notes(replace(given, mode="selfcheck")) == [
        "autotune: against= is read by mode=check only: mode=selfcheck does not use it"
    ]
    assert cli.unused_notes(replace(given, mode="check", recommended=None)) == []


def test_a_step_that_calls_backward_itself_and_a_model_without_parameters_are_told_what_to_change():
    import torch  # torch's own words, as a trial's failure carries them

    model = torch.nn.Linear(2, 1)
    loss = model(torch.ones(1, 2)).sum()
    loss.backward()  # the user's step did this, then autotune's calls backward() again
    with pytest.raises(RuntimeError) as twice:
        loss.backward()
    said = remedy(f"RuntimeError: {twice.value}")
    assert said.startswith("A step that calls loss.backward() (or optimizer.step()) itself, or a model that keeps")
    with pytest.raises(ValueError) as empty:
        torch.optim.SGD([], lr=0.1)
    said = remedy(f"ValueError: {empty.value}")
    assert said.startswith("A model without parameters, or an optimizer factory that keeps none")


def test_a_pipeline_not_found_without_cd_says_where_a_pipeline_of_ones_own_goes(monkeypatch):
    from hydra.errors import MissingConfigException

    from autotune.cli_errors import as_autotune_error

    missing = MissingConfigException("not found", "pipeline/textcls", ["images", "mymodel"])
    monkeypatch.setattr(sys, "argv", ["autotune", "pipeline=textcls"])
    error = as_autotune_error(missing)
    assert str(error) == (
        "pipeline: no config named 'textcls'; available: images, mymodel; a pipeline of your own: -cd DIR, "
        "DIR/pipeline/textcls.yaml"
    )
    monkeypatch.setattr(sys, "argv", ["autotune", "-cd", "conf", "pipeline=textcls"])  # a folder given: no hint
    assert str(as_autotune_error(missing)).endswith("available: images, mymodel")
