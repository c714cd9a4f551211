"""The command line: Hydra composes the config, errors become one line and an exit code.

Set AUTOTUNE_DEBUG=1 to get full tracebacks instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import hydra
import optuna
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from autotune import app, benchmark, check, rerender, selfcheck
from autotune.config.load import did_you_mean, is_report, load_report_study, load_settings
from autotune.errors import AutotuneError, ConfigError
from autotune.files import write_atomic
from autotune.knobs import KNOBS
from autotune.records import redact_url

# Signals that stop a run in order, as Ctrl-C does: Slurm, Kubernetes and systemd send SIGTERM; a closed terminal
# SIGHUP. The run ends as an interrupted one (trial stopped and marked, reports written), exiting 128 + the signal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_RECORD_HEADER = "# the configuration of this run, as composed by Hydra (study.storage redacted)\n"
CONFIG_DIR = Path(__file__).resolve().parent.parent / "conf"
USAGE = """usage: python -m autotune [-cd DIR] pipeline=NAME [key=value ...]

Measures the pipeline as configured (the baseline), tunes its knobs in isolated trials, and writes
recommended.yaml, report.md, report.html, report.json and trials.csv into Hydra's run directory.

  pipeline=NAME        conf/pipeline/NAME.yaml, or DIR/pipeline/NAME.yaml with -cd DIR
                       (shipped: {pipelines})
  study.n_trials=N     tuning trials after the baseline (default 8; 0 = baseline only)
  search.KNOB=[a,b]    candidates for a knob (a one-element list fixes it; default: derived from the machine)
  hydra.run.dir=DIR    where the reports go
  mode=selfcheck       time the baseline and the study's recommendation by autotune and by a plain training
                       loop, interleaved, and say whether the two agree (selfcheck.json)
  mode=report study.name=NAME
                       render every report of a stored study again, from the study alone
  mode=benchmark recommended=PATH
                       the recommendation against the baseline, interleaved, with each change alone and
                       left out (benchmark.md, benchmark.json, benchmark.html)
  mode=check against=PATH/report.json [check.tolerance=0.10] [check.rounds=5]
                       a regression gate: the recommendation of a tuning run against the baseline again,
                       interleaved; exits 1 when its speedup fell beyond the tolerance and the noise (check.json)

Every key of conf/config.yaml can be overridden. AUTOTUNE_DEBUG=1 shows tracebacks. See README.md.

Knobs:
{knobs}"""


def main() -> None:
    """Entry point of ``autotune`` and ``python -m autotune``."""
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        pipelines = ", ".join(sorted(p.stem for p in (CONFIG_DIR / "pipeline").glob("*.yaml")))
        print(USAGE.format(pipelines=pipelines, knobs=describe_knobs()))
        return
    # Hydra would print composition errors itself and exit 1; this hands them to us instead.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # _target_ modules in the current directory, as with python -m
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    report_errors(_hydra_main)


class Stopped(KeyboardInterrupt):
    """A stop signal other than SIGINT, raised in the main thread so the run stops as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, frame) -> None:
    raise Stopped(signum)


def describe_knobs() -> str:
    """Every knob of the registry, its name and what it does, wrapped for a terminal."""
    return "\n".join(
        textwrap.fill(knob.description, width=110, initial_indent=f"  {name:<19}", subsequent_indent=" " * 21)
        for name, knob in KNOBS.items()
    )


def report_errors(func: Callable[[], None]) -> None:
    """Run ``func``; any exception becomes one line on stderr and its exit code (unless AUTOTUNE_DEBUG)."""
    try:
        func()
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        reason = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        _fail(reason, 128 + signum)
    except Exception as exc:
        if os.environ.get("AUTOTUNE_DEBUG", "") not in ("", "0"):
            raise
        error = as_autotune_error(exc)
        _fail(str(error), error.exit_code)


def as_autotune_error(exc: Exception) -> AutotuneError:
    """Any exception as an AutotuneError with a one-line message; config problems exit 2."""
    if isinstance(exc, AutotuneError):
        return exc
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, _, name = (exc.missing_cfg_file or "pipeline/").partition("/")
        return ConfigError(group, f"no config named '{name}'; available: {', '.join(exc.options) or 'none'}")
    if isinstance(exc, OverrideParseException):
        key = exc.override.partition("=")[0].lstrip("+~")
        return ConfigError(key, f"cannot parse the override {exc.override!r}: {_one_line(exc.message)}")
    if isinstance(exc, (HydraException, OmegaConfBaseException)):
        return _composition_error(exc)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return ConfigError(f"{mark.name}:{mark.line + 1}:{mark.column + 1}", f"YAML syntax error: {exc.problem}")
    if isinstance(exc, OSError) and exc.filename:
        # Raised before the run starts, this is Hydra creating the output directory.
        return ConfigError("hydra.run.dir", f"cannot create or write {exc.filename}: {exc.strerror}")
    return AutotuneError(
        f"internal error: {type(exc).__name__}: {_one_line(str(exc))} (set AUTOTUNE_DEBUG=1 for the traceback)"
    )


def _composition_error(exc: Exception) -> ConfigError:
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    key = getattr(cause, "full_key", None)
    message = _one_line(str(exc))
    if "You must specify 'pipeline'" in message:
        return ConfigError("pipeline", "no pipeline chosen; run e.g. python -m autotune pipeline=mymodel")
    if key and "not in struct" in str(cause):
        parent = getattr(cause, "parent_node", None)
        section, _, name = key.rpartition(".")
        hint = did_you_mean(name, [str(k) for k in parent], section) if isinstance(parent, DictConfig) else ""
        advice = hint.strip() or f"check the spelling, or add a key the file lacks with +{key}=VALUE"
        return ConfigError(key, f"unknown key; {advice}")
    return ConfigError(key or "", message)


@hydra.main(version_base=None, config_path=str(CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    # Errors are reported here: past this function Hydra would print its own line about them.
    report_errors(lambda: _run(cfg))


def _run(cfg: DictConfig) -> None:
    runtime = HydraConfig.get().runtime
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(getattr(exc, "full_key", "") or "", _one_line(str(exc))) from exc
    output_dir = Path(runtime.output_dir)
    try:
        _run_mode(data, runtime.choices.get("pipeline"), output_dir)
    except ConfigError:
        _discard_unused(output_dir)
        raise


def _run_mode(data: dict, pipeline_choice: str | None, output_dir: Path) -> None:
    if is_report(data):
        name, storage = load_report_study(data)
        write_atomic(output_dir / "config.yaml", _config_record(data, storage))
        rerender.run(name, storage, output_dir)
        return
    settings = load_settings(data, pipeline_choice)
    write_atomic(output_dir / "config.yaml", _config_record(data, settings.study.storage))
    modes = {"tune": app.run, "selfcheck": selfcheck.run, "benchmark": benchmark.run, "check": check.run}
    modes[settings.mode](settings, output_dir)


def _discard_unused(output_dir: Path) -> None:
    """Remove the run folder Hydra made for input that was refused, if nothing is in it but the config record this
    run wrote."""
    record = output_dir / "config.yaml"
    with contextlib.suppress(OSError):
        if [p.name for p in output_dir.iterdir()] == [record.name] and record.read_text().startswith(_RECORD_HEADER):
            record.unlink()
        output_dir.rmdir()  # only if empty


def _config_record(data: dict, storage: str) -> str:
    """The composed config as run, storage password redacted (Hydra's own copy is switched off for that)."""
    record = {**data, "study": {**data["study"], "storage": redact_url(storage)}}
    return _RECORD_HEADER + yaml.safe_dump(record, sort_keys=False)


def _fail(message: str, code: int) -> None:
    print(f"autotune: error: {message}", file=sys.stderr)
    sys.exit(code)


def _one_line(text: str) -> str:
    return " ".join(text.split())
