"""``mode=profile``: one configuration (the baseline, ``pipeline.baseline.KNOB=...`` to change it) taken apart in a
profiling run: where each step's time goes, the profiler's trace, the data pipeline's hot functions, memory and
garbage collection; then what limits it and what to change.

The run is a trial subprocess of its own (``autotune/trial/profiling.py``), never a tuning trial's timed window, so
profiling distorts no figure the tuner ranks. The record is saved to profile.json before anything is rendered from
it; a stored study of the pipeline says which knobs the tuner tried. (The module is not ``autotune/profile.py``:
that name would replace ``autotune.profile()``, the public profiler of a user's own loop, once imported.)
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from autotune.config.settings import Settings
from autotune.errors import BaselineFailedError
from autotune.files import file_name
from autotune.measure.profiling import ProfilePlan
from autotune.records import stored_description
from autotune.report.diagnosis import print_profile, write_profile
from autotune.results.model import load_results
from autotune.results.remedy_model import Tried
from autotune.results.tried import tries_of
from autotune.runner import inspect_run, study_machine, study_machine_id, study_runner
from autotune.study.profiles import profile_configuration, profile_plan
from autotune.study.storage import load_study

LABEL = "baseline"


def run(settings: Settings, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Profile ``settings.baseline`` and write profile.json, .md and .html (and the trace) into ``output_dir``; a
    profiling run that fails is reported and raises BaselineFailedError (exit 1)."""
    facts = inspect_run(settings, output_dir)
    device = facts.device
    print(
        f"autotune profile: pipeline '{settings.pipeline.name}' on {device}; the {LABEL}'s configuration taken apart "
        f"in one process ({settings.profile_steps} steps by stage, more to fill {ProfilePlan.min_time_s:g} s, "
        f"{settings.profile_steps} for memory, "
        f"{settings.profile_trace_steps} traced, {settings.profile_batches} batches under cProfile)",
        file=out,
        flush=True,
    )
    workdir = output_dir / "profile"
    runner = study_runner(settings, facts, workdir)
    plan = profile_plan(settings, workdir / f"{file_name(settings.pipeline.name)}.pt.trace.json")
    tried = stored_tries(settings, study_machine_id(settings, facts))
    machine = study_machine(settings, facts)
    refused = facts.pipeline.channels_last_refused
    record = profile_configuration(
        runner, settings, settings.baseline, LABEL, plan, tried, machine, channels_last_refused=refused
    )
    record = replace(record, tune_command=tune_command(sys.argv[1:]))
    files = write_profile(record, output_dir)
    print_profile(record, files, out)
    if record.result is None:
        raise BaselineFailedError(f"the profiling run failed: {record.failure}. Log: {workdir / (LABEL + '.log')}")
    return files


def tune_command(argv: list[str]) -> str:
    """The command that tunes the pipeline ``argv`` (mode=profile's arguments, secrets masked by the CLI) profiles:
    the same arguments (its -cd, study.storage, study.name, pipeline overrides) without the mode, the profile's
    settings and its run directory."""
    kept = [arg for arg in argv if not arg.startswith(("mode=", "profile.", "hydra.run.dir="))]
    return shlex.join(["python", "-m", "autotune", *kept])


def stored_tries(settings: Settings, here: str) -> Tried | None:
    """What the stored study of this pipeline measured on this machine (``here``, its id), per knob, and what it
    recommends; None where there is no such study (or it tuned another pipeline, whose tries say nothing of this
    one), or where it measured nothing on this machine: another machine's tries and recommendation are not this
    one's, and the profile then says that no stored study says what the tuner tried, and how to tune here."""
    try:
        study = load_study(settings.study.name, settings.study.storage)
    except KeyError:
        return None
    described = stored_description(study)
    if described is None or not described.describes(settings.pipeline):
        return None
    results = load_results(study, here)
    return tries_of(results) if results.records else None
