"""Why each is as fast as it is: a tuning run's baseline and recommendation, each taken apart after the race in a
profiling run of its own, the same run ``mode=profile`` makes of one configuration (``profile_configuration``).

A profiling run is a trial subprocess after every timed run of the study, never inside a timed window, so it
distorts no figure the tuner ranks. Its record (``TunedProfiles``) is stored in the study before anything renders
it; what limits each configuration and what to change are derived from it (``autotune/results/profile.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import optuna

from autotune.config.settings import Settings
from autotune.files import file_name
from autotune.knobs import accumulated_to
from autotune.measure.profiling import ProfilePlan
from autotune.records import PROFILES_ATTR, on_machine
from autotune.results.model import StudyResults
from autotune.results.profile import ProfileRecord, TunedProfiles
from autotune.results.remedy_model import Tried
from autotune.results.summary import summarise
from autotune.results.tried import tries_of
from autotune.trial.result import TrialRequest, TrialResult

# A tuning run profiles its two configurations with at most these many steps timed by stage, traced, and batches
# under cProfile: enough for the verdict's figures and the hot functions, in a few seconds a configuration (mode=profile
# takes 30, 5 and 10 by default, for a closer look).
TUNED_STEPS, TUNED_TRACE_STEPS, TUNED_BATCHES = 15, 3, 5

# What ``profile_tuned`` profiles of one side (``_sides``): its name, its knobs, and the profile the study holds of it.
Side = tuple[str, dict[str, Any], ProfileRecord | None]


class Runner(Protocol):
    """What runs a trial subprocess (``autotune.runner.TrialRunner``): its base ``request`` and ``trial``."""

    request: TrialRequest

    def trial(self, request: TrialRequest, name: str) -> TrialResult: ...


def profile_plan(settings: Settings, trace_file: Path) -> ProfilePlan:
    """A profiling run as ``settings.profile_*`` say, its trace written to ``trace_file``."""
    return ProfilePlan(
        trace_file=str(trace_file),
        steps=settings.profile_steps,
        trace_steps=settings.profile_trace_steps,
        hot_batches=settings.profile_batches,
    )


def profile_configuration(
    runner: Runner,
    settings: Settings,
    knobs: dict[str, Any],
    label: str,
    plan: ProfilePlan,
    tried: Tried | None,
    machine: dict[str, Any],
    name: str | None = None,
    channels_last_refused: str | None = None,
) -> ProfileRecord:
    """``knobs`` (the configuration called ``label``) taken apart in one profiling run of ``runner`` as ``plan``
    says, a trial named ``name`` (``label`` where None); the record says why where the run failed. ``tried``: what
    the stored study measured (None: no such study); ``machine``: the machine's description (``Inspection.machine``);
    ``channels_last_refused``: why the inspection found the model cannot go channels-last
    (``PipelineFacts.channels_last_refused``; None: it can), which the advice honours."""
    result = runner.trial(replace(runner.request, knobs=knobs, profile=plan), name or label)
    return ProfileRecord(
        pipeline=settings.pipeline.name,
        device=runner.request.device,
        label=label,
        knobs=knobs,
        machine=machine,
        study=settings.study.name,
        result=result.profile,
        failure=str(result.failure) if result.failure else None,
        tried=tried,
        wall_s=result.wall_s,
        effective_batch_size=accumulated_to(settings.batch_policy, settings.baseline),
        channels_last_refused=channels_last_refused,
    )


def reusable(before: ProfileRecord | None, knobs: dict[str, Any]) -> bool:
    """Whether ``profile_tuned`` reuses ``before``, the profile the study holds of a side (the baseline, or the
    recommendation), for a profile of ``knobs``: it is of the same configuration, and it ran."""
    return before is not None and before.knobs == knobs and before.result is not None


def profiles_left(results: StudyResults) -> int:
    """How many of the profiles ``profile_tuned`` makes of ``results`` it must measure: those it cannot reuse
    (``reusable``), which alone cost time."""
    return sum(not reusable(before, knobs) for _, knobs, before in _sides(results))


def _sides(results: StudyResults) -> list[Side]:
    """What ``profile_tuned`` profiles of ``results``: the baseline, and the recommendation where it is not the
    baseline; each its side's name, its knobs, and the profile the study holds of that side (None: none)."""
    summary, stored = summarise(results), results.profiles
    sides = [("baseline", summary.baseline.result.knobs, stored.baseline if stored else None)]
    if not summary.is_baseline:
        sides.append(("recommended", summary.recommended.result.knobs, stored.recommended if stored else None))
    return sides


def profile_tuned(
    study: optuna.Study,
    results: StudyResults,
    runner: Runner,
    settings: Settings,
    trace_dir: Path,
    on_profile: Callable[[ProfileRecord, bool], None],
    channels_last_refused: str | None = None,
) -> TunedProfiles:
    """Profile the baseline and the recommendation of ``results`` (the study after its race and trim; the baseline
    alone where it is recommended), each trace written into ``trace_dir``, and store each in ``study`` for its
    machine as soon as it is made (``_made_so_far``). Each run is ``settings.profile_*``'s, shortened to
    ``TUNED_*``. A stored profile of the same configuration that ran is reused (a resumed run), with what the study
    tried now and this run's inspection's ``channels_last_refused`` (``profile_configuration``);
    ``on_profile(record, stored)`` is told of each."""
    tried = tries_of(results)
    effective = accumulated_to(settings.batch_policy, settings.baseline)

    def one(knobs: dict[str, Any], label: str, before: ProfileRecord | None) -> ProfileRecord:
        reused = reusable(before, knobs)
        if reused:  # with the batch accumulated to and the refusal, which a profile stored before they were kept lacks
            record = replace(
                before, tried=tried, effective_batch_size=effective, channels_last_refused=channels_last_refused
            )
        else:
            plan = _tuned_plan(settings, trace_dir, label)
            record = profile_configuration(
                runner, settings, knobs, label, plan, tried, results.machine, f"profile-{label}", channels_last_refused
            )
        on_profile(record, reused)
        return record

    sides = _sides(results)
    made: list[ProfileRecord] = []
    for label, knobs, before in sides:
        made.append(one(knobs, label, before))
        # Stored as soon as made: a run stopped or refused while it profiles the next side keeps this one for its
        # resumption to reuse, rather than measure it again.
        profiles = _made_so_far(made, sides)
        study.set_user_attr(on_machine(PROFILES_ATTR, results.machine_id), profiles.to_dict())
    return profiles


def _tuned_plan(settings: Settings, trace_dir: Path, label: str) -> ProfilePlan:
    """A tuning run's profiling run of its side ``label``: ``settings.profile_*``'s, shortened to ``TUNED_*``, its
    trace written into ``trace_dir``."""
    plan = profile_plan(settings, trace_dir / f"{file_name(settings.pipeline.name)}-{label}.pt.trace.json")
    return replace(
        plan,
        steps=min(plan.steps, TUNED_STEPS),
        trace_steps=min(plan.trace_steps, TUNED_TRACE_STEPS),
        hot_batches=min(plan.hot_batches, TUNED_BATCHES),
    )


def _made_so_far(made: list[ProfileRecord], sides: list[Side]) -> TunedProfiles:
    """What the study holds once the first of ``sides`` (``_sides``) are profiled as ``made``: each side not yet made
    is the profile the study held of it where still ``reusable``, else None. A recommendation so left None, of a
    study that recommends a change, is not yet profiled: ``TunedProfiles.about`` finds these not of it, so no report
    shows them, and ``profiles_left`` counts it."""
    held = [before if reusable(before, knobs) else None for _, knobs, before in sides[len(made) :]]
    return TunedProfiles(*made, *held)
