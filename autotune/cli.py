"""The command line: Hydra composes the config, errors become one line and an exit code.

Set AUTOTUNE_DEBUG=1 to get full tracebacks instead.

What it reads of its arguments before Hydra does is ``autotune/hydra_args.py``; how an error becomes one line,
``autotune/cli_errors.py``; which pipeline choices it refuses, ``autotune/pipeline_choice.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
import optuna
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from autotune import app, benchmark, check, diagnose, rerender, selfcheck
from autotune.cli_errors import fail, one_line, report_errors
from autotune.config.load import is_report, load_report_study, load_settings
from autotune.config.settings import Settings
from autotune.errors import AutotuneError, ConfigError, Stopped
from autotune.files import write_atomic
from autotune.hydra_args import flags_first, mask_override
from autotune.knobs import KNOBS
from autotune.pipeline_choice import (
    CONFIG_DIR,
    refuse_pipeline_folder_given,
    refuse_pipeline_list,
    refuse_pipeline_path,
    refuse_shadowed_pipeline,
)
from autotune.recommendation import read_recommended
from autotune.redact import RedactedStream, Secrets
from autotune.words import counted

# Signals that stop a run in order, as Ctrl-C does: Slurm, Kubernetes and systemd send SIGTERM; a closed terminal
# SIGHUP. The run ends as an interrupted one (trial stopped and marked, reports written), exiting 128 + the signal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_RECORD_HEADER = "# the configuration of this run, as composed by Hydra (passwords redacted)\n"
# The passwords of the URLs this run was given (study.storage, or any key): Hydra, which prints the overrides and
# saves them, gets the URLs masked; the run gets them back once Hydra composed the config (_unmasked); the console
# shows them masked, in every mode, debug tracebacks included (main).
_SECRETS = Secrets()
# The jobs of a multirun (-m) run in this process that failed, by number, with their exit codes: one job's failure
# does not stop the others (an overnight sweep over pipelines keeps going); the sweep exits with the first's code
# once all have run.
_FAILED_JOBS: dict[int, int] = {}
_IN_THIS_PROCESS = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"  # Hydra's launcher of -m's jobs
# The folder this run writes into (hydra.run.dir; under -m, hydra.sweep.dir) and those of its parents that did not
# exist before Hydra made them for this run (NewFolders): refused input removes these alone, where it left them
# empty; a folder that was there before stays, empty or not (the user's own, the current directory).
_NEW_FOLDERS: list[Path] = []
USAGE = """usage: python -m autotune [-cd DIR] pipeline=NAME [key=value ...]

Measures the pipeline as configured (the baseline), tunes its knobs in isolated trials, and writes
recommended.yaml, report.md, report.html, report.json and trials.csv into Hydra's run directory.

  pipeline=NAME        conf/pipeline/NAME.yaml, or DIR/pipeline/NAME.yaml with -cd DIR
                       (shipped: {pipelines})
  study.n_trials=N     tuning trials after the baseline (default 8; 0 = baseline only)
  study.budget_s=S     bound the whole run to S seconds; the reports say what it left out
  search.KNOB=[a,b]    candidates for a knob (a one-element list fixes it; default: derived from the machine)
  hydra.run.dir=DIR    where the reports go
  mode=selfcheck [selfcheck.rounds=5] [recommended=PATH]
                       time the baseline and the study's recommendation (or PATH's) by autotune and by a plain
                       training loop, interleaved, and say whether the two agree (selfcheck.json)
  mode=report study.name=NAME
                       render every report of a stored study again, from the study alone
  mode=benchmark recommended=PATH [benchmark.rounds=5]
                       the recommendation against the baseline, interleaved, with each change alone and
                       left out (benchmark.md, benchmark.json, benchmark.html)
  mode=check against=PATH/report.json [check.tolerance=0.10] [check.rounds=5]
                       a regression gate: the recommendation of a tuning run against the baseline again,
                       interleaved; exits 1 when its speedup fell beyond the tolerance and the noise (check.json);
                       against=PATH/check.json: against the speedup a check that held measured
  mode=profile [++pipeline.baseline.KNOB=VALUE]
                       the baseline taken apart in one process: where each step's time goes, hot functions of the
                       data pipeline, a profiler trace; what limits it and what to change (profile.md, profile.json,
                       profile.html)

Every key of conf/config.yaml can be overridden (docs/settings.md lists them). AUTOTUNE_DEBUG=1 shows tracebacks.
See README.md.

Knobs:
{knobs}"""


def main() -> None:
    """Entry point of ``autotune`` and ``python -m autotune``."""
    # before Hydra reads them
    sys.argv = [sys.argv[0], *(mask_override(arg, _SECRETS) for arg in flags_first(sys.argv[1:]))]
    sys.stdout, sys.stderr = RedactedStream(sys.stdout, _SECRETS), RedactedStream(sys.stderr, _SECRETS)
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        pipelines = ", ".join(sorted(p.stem for p in (CONFIG_DIR / "pipeline").glob("*.yaml")))
        try:
            print(USAGE.format(pipelines=pipelines, knobs=describe_knobs()), flush=True)
        except BrokenPipeError:  # read in part (``| head``): Python's recipe, so that the exit's flush is quiet too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
        return
    # Hydra would print composition errors itself and exit 1; this hands them to us instead.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # _target_ modules in the current directory, as with python -m
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    report_errors(_hydra_main)
    if _FAILED_JOBS:
        jobs = ", ".join(f"#{job}" for job in _FAILED_JOBS)
        fail(
            f"{counted(len(_FAILED_JOBS), 'multirun job')} failed: {jobs} (each said why above)",
            next(iter(_FAILED_JOBS.values())),
        )


def _stop(signum: int, frame) -> None:
    raise Stopped(signum)


class NewFolders(Callback):
    """Hydra's callback (conf/config.yaml: hydra.callbacks) that notes, before Hydra makes them, which of the run's
    folder (a multirun's: the sweep's) and its parents do not exist yet (``_NEW_FOLDERS``); at a multirun's end, it
    removes a sweep folder this run made that its jobs, each refused, left holding nothing but Hydra's
    multirun.yaml."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _note_new_folders(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _note_new_folders(config, "hydra.sweep.dir")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not _NEW_FOLDERS:
            return
        sweep = _NEW_FOLDERS[0]  # the deepest: the sweep's folder itself
        record = sweep / "multirun.yaml"
        with contextlib.suppress(OSError):
            if [path.name for path in sweep.iterdir()] == [record.name]:
                record.unlink()
        _remove_new_folders(sweep)


def _note_new_folders(config: DictConfig, key: str) -> None:
    """Note the folder at ``key`` and its parents that do not exist yet (none where it cannot be resolved: Hydra says
    why next). Hydra's own config is set first, as Hydra sets it before it makes the folder: a folder named by
    ``${hydra:...}`` resolves only then."""
    _NEW_FOLDERS.clear()
    HydraConfig.instance().set_config(config)
    folder = OmegaConf.select(config, key, throw_on_resolution_failure=False)
    if folder is not None:
        path = Path(os.path.abspath(str(folder)))
        _NEW_FOLDERS.extend(path for path in (path, *path.parents) if not path.exists())


def _made_by_this_run(folder: Path) -> bool:
    """Whether ``folder`` is one this run made (``_NEW_FOLDERS``), or lies in one."""
    return any(folder == new or new in folder.parents for new in _NEW_FOLDERS)


def _remove_new_folders(folder: Path, own: bool = False) -> None:
    """Remove ``folder`` and its parents, from the deepest, while each is one this run made and is empty; with
    ``own``, ``folder`` is taken to be this run's whatever was noted (a multirun job's, which Hydra makes for the job,
    in whichever process its launcher runs it)."""
    for index, path in enumerate((folder, *folder.parents)):
        if not (own and index == 0) and not _made_by_this_run(path):
            return
        try:
            path.rmdir()
        except OSError:  # not empty
            return


def describe_knobs() -> str:
    """Every knob of the registry, its name and what it does, wrapped for a terminal."""
    return "\n".join(
        textwrap.fill(knob.description, width=110, initial_indent=f"  {name:<19}", subsequent_indent=" " * 21)
        for name, knob in KNOBS.items()
    )


@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    # Errors are reported here: past this function Hydra would print its own line about them.
    hydra_config = HydraConfig.get()
    if hydra_config.mode != RunMode.MULTIRUN or hydra_config.launcher.get("_target_") != _IN_THIS_PROCESS:
        report_errors(lambda: _run(cfg))  # a launcher's job of its own (SLURM) fails as a job, its launcher says so
        return
    job = hydra_config.job.num
    try:
        report_errors(lambda: _run(cfg), where=f" (multirun job #{job})")
    except SystemExit as failed:
        if failed.code >= 128:  # a stop signal stops the sweep
            raise
        _FAILED_JOBS[job] = failed.code


def _run(cfg: DictConfig) -> None:
    runtime = HydraConfig.get().runtime
    output_dir = Path(runtime.output_dir)
    record, earlier = output_dir / "config.yaml", None
    with contextlib.suppress(OSError):
        earlier = record.read_bytes()  # of a run in the folder before
    choice = runtime.choices.get("pipeline")
    try:
        data = _resolved(cfg)
        refuse_pipeline_list(HydraConfig.get().overrides.task)
        refuse_pipeline_path(choice)
        refuse_pipeline_folder_given(choice, runtime.config_sources)
        refuse_shadowed_pipeline(choice, runtime.config_sources)
        _run_mode(data, choice, output_dir)
    except OSError as exc:
        if not exc.filename:
            raise
        # A file of the run's, past its input's checks and the run's record: a failure, not refused input.
        raise AutotuneError(f"cannot write {exc.filename}: {exc.strerror or exc}") from exc
    except AutotuneError as refused:
        if refused.exit_code != 2:  # not refused input: the record stays with what ran
            raise
        if earlier is None:
            _discard_unused(output_dir)
        else:  # refused input leaves the folder's earlier run as it was
            write_atomic(record, earlier)
        raise


def _resolved(cfg: DictConfig) -> dict:
    """``cfg`` as plain data, its interpolations resolved (ConfigError naming the key of one that cannot be), its
    passwords (from a config file or ${oc.env:VAR}) learnt for the console."""
    try:
        data = OmegaConf.to_container(_unmasked(cfg), resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(getattr(exc, "full_key", "") or "", one_line(str(exc))) from exc
    for text in _strings(data):
        _SECRETS.add(text)
    return data


def _run_mode(data: dict, pipeline_choice: str | None, output_dir: Path) -> None:
    if is_report(data):
        name, storage = load_report_study(data)
        _write_record(data, output_dir)
        rerender.run(name, storage, output_dir, out=sys.stdout)
        return
    settings = load_settings(data, pipeline_choice)
    _refuse_unusable_recommendation(settings)
    _write_record(data, output_dir)
    modes = {"tune": app.run, "selfcheck": selfcheck.run, "benchmark": benchmark.run, "check": check.run}
    modes["profile"] = diagnose.run
    for note in unused_notes(settings):
        print(note, file=sys.stdout, flush=True)
    modes[settings.mode](settings, output_dir, out=sys.stdout)  # the redacted stream: defaults were bound before


# The keys that some modes read and the others do not, and those modes.
_READ_BY = {"recommended": ("benchmark", "selfcheck"), "against": ("check",)}


def unused_notes(settings: Settings) -> list[str]:
    """What to say of keys given that the mode does not use: study.budget_s (it bounds a tuning run only), and
    recommended= and against= (``_READ_BY``)."""
    notes = []
    if settings.study.budget_s is not None and settings.mode != "tune":
        notes.append(
            f"autotune: study.budget_s={settings.study.budget_s:g} bounds a tuning run only: mode={settings.mode} "
            "runs to its end"
        )
    for key, modes in _READ_BY.items():
        if getattr(settings, key) and settings.mode not in modes:
            readers = " and ".join(f"mode={mode}" for mode in modes)
            notes.append(f"autotune: {key}= is read by {readers} only: mode={settings.mode} does not use it")
    return notes


def _refuse_unusable_recommendation(settings: Settings) -> None:
    """Read recommended= in a mode that reads it, before that mode reads the pipeline's facts (seconds, in a process
    of its own): a file that cannot be used (missing, not UTF-8, malformed) is refused at once, naming the key."""
    if settings.recommended and settings.mode in _READ_BY["recommended"]:
        try:
            read_recommended(settings.recommended)
        except ConfigError as exc:
            raise ConfigError("recommended", str(exc)) from exc


def _write_record(data: dict, output_dir: Path) -> None:
    """The run's config.yaml: the first file of the run folder, so one that cannot be written is the folder's."""
    try:
        write_atomic(output_dir / "config.yaml", _config_record(data))
    except OSError as exc:
        raise ConfigError("hydra.run.dir", f"cannot create or write {exc.filename}: {exc.strerror}") from exc


def _discard_unused(output_dir: Path) -> None:
    """Remove what this run left for input that was refused: the config record it wrote where nothing else is in the
    run folder, then the folders it made (``_remove_new_folders``)."""
    record = output_dir / "config.yaml"
    with contextlib.suppress(OSError):
        if [p.name for p in output_dir.iterdir()] == [record.name] and record.read_text().startswith(_RECORD_HEADER):
            record.unlink()
    _remove_new_folders(output_dir, own=HydraConfig.get().mode == RunMode.MULTIRUN)


def _config_record(data: dict) -> str:
    """The composed config as run, passwords redacted."""
    return _RECORD_HEADER + yaml.safe_dump(_map_strings(data, _SECRETS.redact), sort_keys=False)


def _unmasked(cfg: DictConfig) -> DictConfig:
    """``cfg`` with every URL masked by mask_override given back, interpolations still unresolved."""
    return OmegaConf.create(_map_strings(OmegaConf.to_container(cfg), _SECRETS.unmask))


def _map_strings(data: Any, func: Callable[[str], str]) -> Any:
    if isinstance(data, dict):
        return {key: _map_strings(value, func) for key, value in data.items()}
    if isinstance(data, list):
        return [_map_strings(value, func) for value in data]
    return func(data) if isinstance(data, str) else data


def _strings(data: Any) -> Iterator[str]:
    if isinstance(data, dict | list):
        for value in data.values() if isinstance(data, dict) else data:
            yield from _strings(value)
    elif isinstance(data, str):
        yield data
