"""What the search reads of the study for one machine, at once (``look``): the configurations measured there and what
Optuna was told of them, those being measured, what failed in a way that rules others out unmeasured, and what the
machine owes (``Proposal``: a configuration left unmeasured); whether a configuration of the space is left untried
(``search_left``); and what the guide is given of what was measured (``Observation``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.config.settings import StudySettings
from autotune.measure.environment import this_machine_id
from autotune.records import (
    CAPPED_ATTR,
    CONFIG_ATTR,
    DUPLICATE_ATTR,
    MACHINE_ATTR,
    PREDICTED_ATTR,
    OutOfMemory,
    WorkerFailure,
    baseline_record,
    config_key,
    interrupted,
    measured_trials,
    probe_record,
    workers_ran,
)
from autotune.study.sharing import measuring_now
from autotune.study.space import KnownFailure, SearchSpace, ruled_out
from autotune.study.trial_outcome import Measured, Outcome, known_outcomes
from autotune.trial.result import TrialResult

# Random draws tried for an untried configuration before they are listed: a draw takes ~15 µs, a list walks the
# whole space, which multiplies with every knob searched (tenths of a second for 70,000 configurations).
_UNTRIED_DRAWS = 200


@dataclass(frozen=True)
class Observation:
    """A measured configuration, for model the search: its knobs and throughput (a pruned trial's reading
    when it was stopped); ``feasible`` is False when it cannot be recommended (over the memory budget, wrong
    loss) though its speed is real."""

    knobs: dict[str, Any]
    throughput: float
    feasible: bool = True


@dataclass(frozen=True)
class Proposal:
    """The next configuration to measure, and its predicted throughput (None where unknown). ``capped_s``: where
    every run of it the machine stored was ended by study.budget_s's cap (owed: ``_owed``), the longest of them, in
    seconds: it needs more (``RunClock.affords``); None otherwise."""

    knobs: dict[str, Any]
    predicted: float | None = None
    capped_s: float | None = None


@dataclass(frozen=True)
class Seen:
    """What the study holds for one machine, read at once: what was told of each configuration measured there
    (``known``: the baseline's included, and those not measured for needing no less memory than one that ran out),
    how many trials measured one (``counted``), what ran out of memory, the trials measuring one now, what the
    machine owes (``owed``: ``_owed``), and whether trials wait in Optuna's queue (``waiting``: the user's)."""

    known: dict[str, Outcome]
    counted: int
    failed: list[KnownFailure]
    running: list[optuna.trial.FrozenTrial]
    owed: list[Proposal]
    waiting: bool

    @property
    def in_flight(self) -> set[str]:
        """The configurations being measured now (by another tuner of a shared study, or another slot)."""
        return {t.user_attrs[CONFIG_ATTR] for t in self.running}


def look(study: optuna.Study, settings: StudySettings, machine: str) -> Seen:
    """``Seen`` of ``machine`` now: the study's trials and attributes read once."""
    trials, attrs = study.get_trials(deepcopy=False), study.user_attrs
    measured = measured_trials(study, machine, trials)
    running = measuring_now(trials, machine)
    baseline = baseline_record(attrs, machine)
    failed = _known_failures(attrs, baseline, measured, machine)
    known = known_outcomes(baseline, trials, measured, settings, machine, failed)
    owed = _owed(trials, machine, set(known) | {t.user_attrs[CONFIG_ATTR] for t in running})
    waiting = any(t.state is TrialState.WAITING for t in trials)
    return Seen(known, len(measured), failed, running, owed, waiting)


def _owed(trials: list[optuna.trial.FrozenTrial], machine: str, taken: set[str]) -> list[Proposal]:
    """The configurations ``machine`` owes, oldest first: those its trials were measuring when their tuner died or was
    stopped, or that study.budget_s left for a later run (failed, marked interrupted), neither measured there since
    nor ``taken`` (measured, or in flight). Any tuner of the machine proposes them before anything new (where they
    fit its budget: one whose runs the budget's cap ended, ``Proposal.capped_s``, needs more than the longest), tuners
    of other machines do not, and a tuner that dies failing a trial loses nothing, as what is owed is read from the
    trials, not queued."""
    owed: dict[str, Proposal] = {}
    for trial in trials:
        kept = trial.user_attrs
        if (
            interrupted(trial)
            and kept.get(MACHINE_ATTR) == machine
            and kept.get(CONFIG_ATTR) not in taken | {None}
            and DUPLICATE_ATTR not in kept
        ):
            key = kept[CONFIG_ATTR]
            first = owed.setdefault(key, Proposal(json.loads(key), kept.get(PREDICTED_ATTR)))
            capped = [seconds for seconds in (first.capped_s, kept.get(CAPPED_ATTR)) if seconds is not None]
            owed[key] = replace(first, capped_s=max(capped, default=None))
    return list(owed.values())


def as_owed(seen: Seen, key: str, knobs: dict[str, Any]) -> Proposal:
    """The sampler's draw ``knobs`` (configuration ``key``) as the machine owes it, with the time a capped run of it
    took (``Proposal.capped_s``), or a plain proposal where it owes none."""
    return next((owed for owed in seen.owed if config_key(owed.knobs) == key), Proposal(knobs))


def counted_trials(study: optuna.Study, machine: str | None = None) -> int:
    """Trials that measured a new configuration on ``machine`` (None: this one; complete, failed or pruned; not
    repeats, not interrupted, not those left unmeasured as out of memory): ``measured_trials``."""
    return len(measured_trials(study, machine or this_machine_id()))


def exhausted(space: SearchSpace, taken: set[str], failed: list[KnownFailure]) -> bool:
    """Whether no configuration of ``space`` is left untried (``_untried``)."""
    return next(_untried(space, taken, failed), None) is None


def draw_untried(space: SearchSpace, taken: set[str], failed: list[KnownFailure], rng: random.Random) -> dict[str, Any]:
    """A configuration drawn at random from ``_untried`` (there must be one): drawn from the whole space until one
    is untried, or, where nearly all are tried, chosen from the list of those that are not."""
    for _ in range(_UNTRIED_DRAWS):
        knobs = space.draw(rng)
        if knobs is not None and _is_untried(knobs, taken, failed):
            return knobs
    return rng.choice(list(_untried(space, taken, failed)))


def search_left(study: optuna.Study, settings: StudySettings, space: SearchSpace, machine: str) -> bool:
    """Whether ``tune`` would start a trial on ``machine``: the study's trials measured and running there are fewer
    than study.n_trials, and a configuration of ``space`` is left untried (as its loop reads them)."""
    seen = look(study, settings, machine)
    if seen.counted + len(seen.running) >= settings.n_trials:
        return False
    return not exhausted(space, set(seen.known) | seen.in_flight, seen.failed)


def _untried(space: SearchSpace, taken: set[str], failed: list[KnownFailure]) -> Iterator[dict[str, Any]]:
    """The configurations of ``space`` neither ``taken`` (measured, or being measured) nor ruled out by one of
    ``failed`` (``ruled_out``)."""
    return (knobs for knobs in space.configurations() if _is_untried(knobs, taken, failed))


def _is_untried(knobs: dict[str, Any], taken: set[str], failed: list[KnownFailure]) -> bool:
    return config_key(knobs) not in taken and not ruled_out(knobs, failed)


def _known_failures(
    attrs: dict[str, Any], baseline: TrialResult | None, measured: Measured, machine: str
) -> list[KnownFailure]:
    """What failed on ``machine`` in a way that rules out configurations unmeasured (``ruled_out``): what ran out of
    memory, the probe's settings (in the study's ``attrs``) then the trials' (of ``measured``); and, from two trials'
    exceptions raised in DataLoader workers on, the second, while no configuration with workers loaded a batch: not
    the baseline, not the probe's DataLoader alone, not a trial (``workers_ran``)."""
    probe = probe_record(attrs, machine)
    found: list[KnownFailure] = [*(probe.out_of_memory if probe else [])]
    found += [entry for trial, result in measured if (entry := OutOfMemory.of_trial(trial.number, result))]
    results = [result for _, result in measured] + ([baseline] if baseline is not None else [])
    if (probe is not None and probe.workers_ran) or any(map(workers_ran, results)):
        return found
    in_workers = [entry for trial, result in measured if (entry := WorkerFailure.of_trial(trial.number, result))]
    return found + in_workers[1:2]  # the second: one may be a sample the others never reach, or a passing fault
