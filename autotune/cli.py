"""The command line: Hydra composes the config, errors become one line and an exit code.

Set AUTOTUNE_DEBUG=1 to get full tracebacks instead.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import signal
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
import optuna
import yaml
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, QuotedString
from hydra.errors import HydraException, MissingConfigException, OverrideParseException, SearchPathException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from autotune import app, benchmark, check, diagnose, rerender, selfcheck
from autotune.config.load import NO_PIPELINE, is_report, load_report_study, load_settings, unknown_key
from autotune.config.settings import Settings
from autotune.errors import AutotuneError, ConfigError, Stopped, stop_signal
from autotune.files import write_atomic
from autotune.knobs import KNOBS
from autotune.recommendation import read_recommended
from autotune.redact import RedactedStream, Secrets, redact_url
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
# What AUTOTUNE_DEBUG is set to where it asks for no tracebacks (in any case; unset or empty too).
_OFF = ("", "0", "false", "no", "off")
CONFIG_DIR = Path(__file__).resolve().parent.parent / "conf"
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
        _fail(
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


def flags_first(args: list[str]) -> list[str]:
    """``args`` with Hydra's flags (``-cd DIR``, ``-m``, ...) and their values moved before the overrides, in their
    order: Hydra's parser takes no flag after an override (``pipeline=mine -cd ./myconf`` fails with "unrecognized
    arguments")."""
    nargs = {
        option: action.nargs
        for action in get_args_parser()._actions  # Hydra's own parser: its flags, and the values each takes
        for option in action.option_strings
    }
    flags, overrides, without, index = [], [], [], 0
    while index < len(args):
        arg, index = args[index], index + 1
        name = arg.partition("=")[0]
        if name not in nargs:
            overrides.append(arg)
            continue
        following = args[index] if index < len(args) and "=" not in arg else None
        # An override (key=value) is never a flag's value: a flag missing its value goes last, to keep its own error.
        value = following is not None and "=" not in following and not following.startswith("-")
        if value and nargs[name] in (None, "?"):
            flags += [arg, following]
            index += 1
        else:
            (without if nargs[name] is None and "=" not in arg else flags).append(arg)
    return [*flags, *overrides, *without]


def mask_override(arg: str, secrets: Secrets) -> str:
    """The command-line argument ``arg`` with the password of every URL in its value masked (``secrets`` keeps the
    URL it stands for), written back in Hydra's override grammar."""
    if redact_url(arg) == arg:
        return arg
    try:
        override = OverridesParser.create().parse_override(arg)
    except HydraException:  # Hydra will report the override it cannot parse: as masked
        return secrets.add(arg)
    value = override.value()
    if isinstance(value, ChoiceSweep):
        masked = ",".join(_as_override_value(choice, secrets) for choice in value.list)
    elif isinstance(value, QuotedString | str | list | dict):
        masked = _as_override_value(value, secrets)
    else:  # a range, an interval, a glob: no value that is a URL
        return arg
    return f"{override.get_key_element()}={masked}"


def _as_override_value(value: Any, secrets: Secrets) -> str:
    """A value parsed from an override, in the override grammar again, its URLs masked."""
    if isinstance(value, QuotedString | str):
        return _quoted(secrets.add(getattr(value, "text", value)))
    if isinstance(value, list):
        return f"[{','.join(_as_override_value(item, secrets) for item in value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_as_override_value(item, secrets)}" for key, item in value.items()) + "}"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


def _quoted(text: str) -> str:
    """``text`` as a quoted string of Hydra's override grammar, which unescapes backslashes before a quote only."""
    return "'" + re.sub(r"(\\*)('|\Z)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), text) + "'"


def describe_knobs() -> str:
    """Every knob of the registry, its name and what it does, wrapped for a terminal."""
    return "\n".join(
        textwrap.fill(knob.description, width=110, initial_indent=f"  {name:<19}", subsequent_indent=" " * 21)
        for name, knob in KNOBS.items()
    )


def report_errors(func: Callable[[], None], where: str = "") -> None:
    """Run ``func``; any exception becomes one line on stderr (``where`` appended) and its exit code, after its
    traceback where AUTOTUNE_DEBUG is set (the exit code stays: a script tells a refused input, 2, from a failure, 1,
    either way)."""
    try:
        func()
    except KeyboardInterrupt as exc:
        signum = stop_signal(exc)
        _fail("interrupted" if signum == signal.SIGINT else f"stopped by {signum.name}", 128 + signum)
    except Exception as exc:
        if os.environ.get("AUTOTUNE_DEBUG", "").strip().lower() not in _OFF:
            traceback.print_exc()
        error = as_autotune_error(exc)
        _fail(str(error) + where, error.exit_code)


def as_autotune_error(exc: Exception) -> AutotuneError:
    """Any exception as an AutotuneError with a one-line message; config problems exit 2."""
    if isinstance(exc, AutotuneError):
        return exc
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, _, name = (exc.missing_cfg_file or "pipeline/").partition("/")
        given = _config_dir(sys.argv[1:])
        if group == "pipeline" and given and (refusal := _pipeline_folder_given(name, [Path(given)])):
            return refusal
        return ConfigError(group, f"no config named '{name}'; available: {', '.join(exc.options) or 'none'}")
    if isinstance(exc, SearchPathException) and (folder := re.search(r"directory '(.*)' not found", str(exc))):
        return ConfigError("-cd", f"no folder {folder[1]}; give the folder that holds your pipeline/ configs")
    if isinstance(exc, ValueError) and (kind := _GROUP_VALUE.match(str(exc))):
        group, value = _group_given_no_name(sys.argv[1:])
        return ConfigError(
            group,
            f"the name reads as {_YAML_READS.get(kind[1], kind[1])} in YAML, not as a config name: quote it "
            f"({group}=\"'{value}'\"), or leave it out where the mode needs none",
        )
    if isinstance(exc, OverrideParseException):
        return _parse_error(exc)
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


def _parse_error(exc: OverrideParseException) -> ConfigError:
    """The refusal of an override Hydra cannot parse, naming its key; where its value holds a character that Hydra's
    grammar takes only inside quotes (a letter beyond ASCII, '#') and parses once quoted, how to quote it."""
    name, _, value = exc.override.partition("=")
    problem = _one_line(exc.message)
    # Hydra's lexer finds no token for a character that only a quoted value holds
    if exc.message.startswith("LexerNoViableAltException") and _parses(f"{name}={_quoted(value)}"):
        problem = f"quote a value with a letter beyond ASCII or a character such as '#': {name}=\"{_quoted(value)}\""
    return ConfigError(name.lstrip("+~"), f"cannot parse the override {exc.override!r}: {problem}")


def _parses(override: str) -> bool:
    try:
        OverridesParser.create().parse_override(override)
    except HydraException:
        return False
    return True


def _group_given_no_name(args: list[str]) -> tuple[str, str]:
    """The config group (``pipeline``, ``hydra/job_logging``) an override gives a value YAML reads as no name, and
    that value."""
    for arg in args:
        key, equals, value = arg.partition("=")
        if equals and "." not in key and not isinstance(_yaml_value(value), (str, list)):
            return key.lstrip("+~"), value
    return "pipeline", "NAME"


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# Hydra's refusal of a config group's value that YAML reads as other than a name (pipeline=1, =true, =null).
_GROUP_VALUE = re.compile(r"^Config group override must be a string or a list\. Got (\w+)")
_YAML_READS = {"int": "a number", "float": "a number", "bool": "true or false", "NoneType": "null"}

# Hydra's refusals of an override that adds (+) or removes (~) a key, which it raises without a cause to read the key
# from (hydra/_internal/config_loader_impl.py): its message, and what to say instead.
_OVERRIDE_REFUSALS = (
    (
        re.compile(r"^Could not append to config\. An item is already at '(?P<key>[^']+)'\."),
        "already set; change it with {key}=VALUE (without the +), or ++{key}=VALUE sets it whether set or not",
    ),
    (
        re.compile(r"^Could not delete from config\. '(?P<key>[^']+)' does not exist\.$"),
        "not set, so ~{key} has nothing to remove",
    ),
    (
        re.compile(
            r"^Could not delete from config\. The value of '(?P<key>[^']+)' is (?P<value>.*) and not (?P<given>.*)\.$"
        ),
        "is {value}, not {given}; ~{key} without a value removes it whatever it is",
    ),
)


# OmegaConf's refusal of a key a mapping lacks: one of the config's (in struct mode), or one of a structured config's
# (Hydra's own: "Key 'dri' not in 'RunDir'").
_NOT_IN = re.compile(r"Key '.*' (is not in struct|not in '\w+')")


def _composition_error(exc: Exception) -> ConfigError:
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    key = getattr(cause, "full_key", None)
    message = _one_line(str(exc))
    if "You must specify 'pipeline'" in message:
        return ConfigError("pipeline", NO_PIPELINE)
    for refusal, problem in _OVERRIDE_REFUSALS:
        if found := refusal.search(message):
            return ConfigError(found["key"], problem.format(**found.groupdict()))
    if key and _NOT_IN.search(str(cause)):
        section, _, name = key.rpartition(".")
        if name == "pipeline" and not section:
            return ConfigError("pipeline", "no pipeline chosen for the pipeline.* keys; add pipeline=NAME before them")
        parent = getattr(cause, "parent_node", None)
        return unknown_key(section, name, [str(k) for k in parent] if isinstance(parent, DictConfig) else [])
    return ConfigError(key or "", message)


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
        _refuse_pipeline_list(HydraConfig.get().overrides.task)
        _refuse_pipeline_path(choice)
        _refuse_pipeline_folder_given(choice, runtime.config_sources)
        _refuse_shadowed_pipeline(choice, runtime.config_sources)
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
        raise ConfigError(getattr(exc, "full_key", "") or "", _one_line(str(exc))) from exc
    for text in _strings(data):
        _SECRETS.add(text)
    return data


def _refuse_pipeline_list(overrides: list[str]) -> None:
    """Refuse ``pipeline=[a,b]``: Hydra merges the files into one config that is none of them."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "pipeline" and value.startswith("["):
            raise ConfigError(
                "pipeline",
                f"give one pipeline name, not a list ({value}); to tune several, one run each: --multirun "
                f"pipeline={value.strip('[]')}",
            )


def _refuse_pipeline_path(choice: str | None) -> None:
    """Refuse a pipeline chosen by other than its config's name: NAME.yaml, or a path through a folder
    (../pipeline/NAME, ./NAME). Hydra loads the file all the same (NAME.yaml from autotune's examples first, where one
    has the name), while the choice names the study: one file would be tuned in a study of each spelling."""
    if choice is None:
        return
    path = posixpath.normpath(posixpath.join("pipeline", choice.removesuffix(".yaml")))
    name = path.removeprefix("pipeline/")
    if name == path:  # outside pipeline/
        raise ConfigError(
            "pipeline",
            f"pipeline={choice} leaves the pipeline/ folder; give a config of it by its name: pipeline=NAME for "
            "pipeline/NAME.yaml",
        )
    if name != choice:
        raise ConfigError(
            "pipeline", f"give pipeline={name} (its config's name, which names its study), not pipeline={choice}"
        )


def _refuse_pipeline_folder_given(choice: str | None, sources: list) -> None:
    """Refuse a run whose config folder (``-cd``, ``hydra.searchpath``) is the pipeline/ folder itself, holding the
    chosen NAME.yaml (``_pipeline_folder_given``): Hydra looks for pipeline/NAME.yaml under it, so it found
    autotune's example of that name."""
    if choice is None:
        return
    refusal = _pipeline_folder_given(choice, [Path(source.path) for source in sources if source.schema == "file"])
    if refusal:
        raise refusal


def _pipeline_folder_given(name: str, folders: list[Path]) -> ConfigError | None:
    """The refusal, naming ``-cd``, of the first of the user's ``folders`` (autotune's own, ``_is_autotunes``, left
    out) that holds NAME.yaml, where none holds pipeline/NAME.yaml: the pipeline/ folder given for the folder above
    it, which Hydra reads the pipeline/ folder of. Where one holds pipeline/NAME.yaml, that is the file loaded (one
    an example of autotune's shadows: ``_refuse_shadowed_pipeline``), and a NAME.yaml beside it is no pipeline's."""
    theirs = [folder for folder in folders if not _is_autotunes(folder)]
    if any((folder / "pipeline" / f"{name}.yaml").exists() for folder in theirs):
        return None
    for folder in theirs:
        if (folder / f"{name}.yaml").is_file():
            above = Path(os.path.abspath(folder)).parent
            return ConfigError(
                "-cd",
                f"{folder} holds {name}.yaml itself; give the folder that holds your pipeline/ folder: -cd {above}",
            )
    return None


def _is_autotunes(folder: Path) -> bool:
    """Whether ``folder`` is autotune's own config folder (CONFIG_DIR, whose config.yaml is no pipeline) or its
    pipeline/ folder of examples (one given as a user's folder loads the example the user named)."""
    return folder.resolve() in (CONFIG_DIR, CONFIG_DIR / "pipeline")


def _config_dir(args: list[str]) -> str | None:
    """The config folder the command line ``args`` give (``-cd DIR``, ``--config-dir DIR``), None where none."""
    return get_args_parser().parse_known_args(args)[0].config_dir


def _refuse_shadowed_pipeline(choice: str | None, sources: list) -> None:
    """Refuse a pipeline of the user's config folder (``-cd``, ``hydra.searchpath``) that one of autotune's examples
    of the same name shadows: Hydra searches autotune's conf/ first, so the example would be tuned in its place."""
    shipped = CONFIG_DIR / "pipeline" / f"{choice}.yaml"
    if choice is None or not shipped.exists():
        return
    for source in sources:
        theirs = Path(source.path) / "pipeline" / f"{choice}.yaml"
        if source.schema == "file" and theirs.exists() and theirs.resolve() != shipped.resolve():
            raise ConfigError(
                "pipeline",
                f"{theirs} has the name of autotune's example {choice!r}, which would be loaded in its place; "
                "rename your file and give its new name",
            )


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


def _fail(message: str, code: int) -> None:
    print(f"autotune: error: {message}", file=sys.stderr)
    sys.exit(code)


def _one_line(text: str) -> str:
    return " ".join(text.split())
