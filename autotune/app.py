"""One autotune run, top to bottom: check the pipeline, open the study, measure, tune, report."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.storages import BaseStorage

from autotune.config.settings import STALE_BEATS, Settings
from autotune.errors import AutotuneError, BaselineFailedError, StudyAbortedError, stop_signal
from autotune.knobs import SearchContext, accumulated_to, costly, costly_values
from autotune.knobs.num_workers import SPLIT_STREAM
from autotune.measure.environment import machine_id, thread_variables
from autotune.measure.recorder import WindowPlan
from autotune.pipeline.facts import Inspection
from autotune.records import BASELINE_LABEL, StudyDescription, TrialRecord, study_machines
from autotune.redact import redact_url
from autotune.report import write_reports
from autotune.report.console import format_not_measured, format_probe, format_result, print_summary
from autotune.report.profiles import print_tuned_profile
from autotune.results.advice import batch_advice
from autotune.results.finalist import round_of, run_name
from autotune.results.model import load_results
from autotune.results.profile import ProfileRecord
from autotune.results.race_rules import MAX_FINALISTS
from autotune.results.summary import summarise
from autotune.results.tuner_time import LEFT_TO_OTHERS_STEP, PROBE_STEP, SEARCH_TRIAL_STEP, TAKEN_OVER_STEP
from autotune.runner import (
    TrialRunner,
    inspect_run,
    other_thread_variables,
    pinned,
    remedy,
    search_context,
    study_slots,
)
from autotune.study.clock import SEARCH, Kept, RunClock, span
from autotune.study.disturbed import again_if_disturbed, first_stands_words
from autotune.study.forecast import forecast, race_round_s
from autotune.study.guide import Guide, guide_from_record
from autotune.study.lock import one_tuner
from autotune.study.probe_model import capped_probe_s, expected_probe_s, probe_once, probe_plan, stored_probe
from autotune.study.profiles import profile_tuned, profiles_left
from autotune.study.run_race import run_race
from autotune.study.search_state import Proposal, counted_trials, search_left
from autotune.study.sharing import Turn, finishing, never
from autotune.study.space import SearchSpace, build_space
from autotune.study.start import open_study
from autotune.study.storage import StorageFaultError, is_server, is_shared, open_storage
from autotune.study.trial_outcome import RunFn, TrialEvent
from autotune.study.trim import run_trim, trim_ahead
from autotune.study.tuner import StopReason, ensure_baseline, tune_in_slots
from autotune.trial.placement import Slot, refuse_mixed_gpus
from autotune.trial.result import TrialResult
from autotune.trial.runner import end_shared_fork_server, signals_held
from autotune.words import counted


def run(settings: Settings, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Tune ``settings.pipeline`` and write the reports into ``output_dir``; returns the files written. A study
    another tuner is tuning in the same SQLite file is refused (``one_tuner``); on a shared storage, tuners on this
    and other machines join it (``autotune/study/sharing.py``), the reports covering this machine's results."""
    # The run's time, and its budget, from here to its reports, waiting for another tuner's lock included.
    measure = settings.measure
    clock = RunClock(
        settings.study.budget_s, measure.repeats, measure.plan, measure.trial_timeout_s, measure.screen_plan
    )
    with one_tuner(settings.study.storage, settings.study.name):
        # A database server that cannot be reached is refused before the pipeline's code runs (the inspection:
        # seconds); a file (SQLite, a journal) is created only once the input is known good.
        storage = open_storage(settings.study.storage) if is_server(settings.study.storage) else None
        return _tune(settings, output_dir, out, clock, storage)


@dataclass(frozen=True)
class _Opened:
    """What a run knows before it measures: the pipeline's facts, the slots its trials run in, the search's context
    and space, and the study it stores into, of this ``machine``."""

    facts: Inspection
    places: list[Slot]
    ctx: SearchContext
    space: SearchSpace
    machine: str
    study: optuna.Study


def _tune(
    settings: Settings, output_dir: Path, out: TextIO, clock: RunClock, storage: BaseStorage | None
) -> dict[str, Path]:
    """Open the study, measure the baseline, search and finish; whatever stopped it, end the trial servers, save the
    run's time and write the reports of what the study stored."""
    opened = _open(settings, output_dir, out, clock, storage)
    device, places = opened.facts.device, opened.places
    runners = [TrialRunner(settings, device, output_dir / "trials", slot, len(places) > 1, clock) for slot in places]
    if len(places) > 1:
        end_shared_fork_server()  # the inspection's: each slot forks from a server of its own
    lines, turn = _RunLines(out), _Turn()
    measured = runners[0].run  # the baseline, the probe and the race run in the first slot
    if settings.study.remeasure_disturbed:
        again = partial(_measured_again, lines, turn)
        measured = again_if_disturbed(runners[0].run, again, lines.note, clock.affords_again, lines.first_stands)
    baseline = _measure_baseline(opened, settings, measured, output_dir, lines, clock)
    stop = StopReason("interrupted", aborted=True)  # until the search, the race and what follows end
    try:
        stop = _search_and_finish(opened, settings, runners, measured, baseline, output_dir, lines, clock, turn)
    except AutotuneError as error:  # e.g. a storage fault: the summary names it, as the error line will
        stop = StopReason(str(error), aborted=True)
        raise
    finally:
        stopping = sys.exc_info()[1]
        if isinstance(stopping, KeyboardInterrupt) and (signum := stop_signal(stopping)) != signal.SIGINT:
            stop = StopReason(f"by {signum.name}", aborted=True)  # Ctrl-C's stays "interrupted"
        with signals_held():  # a stop signal now is delivered once the servers are ended and the reports written
            for each in runners:
                each.close()
            clock.save(finished=not stop.aborted)  # the run's time ends here: what follows renders what it stored
            files = _report(opened.study, opened.machine, output_dir, stop, out)
    if stop.aborted:
        raise StudyAbortedError(f"tuning stopped early: {stop.message}; the reports cover what was measured")
    return files


STREAM_NOTE = (
    "the dataset is a stream that gives every DataLoader worker the same samples, so at most one worker is searched; "
    f"{SPLIT_STREAM} to have more (docs/settings.md)"
)


def _open(settings: Settings, output_dir: Path, out: TextIO, clock: RunClock, storage: BaseStorage | None) -> _Opened:
    """Inspect the pipeline, check the baseline against the search's context, build the space and open the study;
    say so, and what the study already holds of this machine."""
    with clock.stage("inspect"):
        facts = inspect_run(settings, output_dir, clock)
    device = facts.device
    places = study_slots(settings, facts)
    refuse_mixed_gpus(places, device, facts.devices.cuda)
    cores = places[0].cores  # every slot's size: each run of the study is pinned alike
    ctx = search_context(settings, facts, cores)
    space = build_space(settings.search, ctx)
    described = pinned(facts.machine, cores)
    machine = machine_id(described)
    study = open_study(settings.study, _study_meta(settings, device, space), described, storage, facts.pipeline.code)
    clock.attach(study, machine)
    print(
        f"autotune: pipeline '{settings.pipeline.name}' on {device}; study '{settings.study.name}' in "
        f"{redact_url(settings.study.storage)}; {counted(space.size, 'configuration')}, up to "
        f"{counted(settings.study.n_trials, 'trial')}",
        file=out,
    )
    if facts.pipeline.repeats_in_workers:
        print(f"note: {STREAM_NOTE}", file=out)
    if stored := counted_trials(study, machine):
        print(
            f"resuming: {counted(stored, 'trial')} of this study stored {'is' if stored == 1 else 'are'} not "
            "measured again",
            file=out,
        )
    elif other := other_thread_variables(study_machines(study), described):
        print(
            f"note: the study holds this machine's results under other thread variables ({other}); they are kept "
            f"apart (torch's default thread count is theirs) and measured again under these "
            f"({thread_variables(described) or 'none set'})",
            file=out,
        )
    return _Opened(facts, places, ctx, space, machine, study)


class _RunLines:
    """The lines a run prints as its runs end. A speedup is against the baseline, once measured (``baseline``); a
    race run's against its own round's baseline run where that ran before it (the race pairs runs by round, and the
    first baseline run is minutes and machine states away), and a round's baseline run that ran after some of its
    runs gives theirs. A run measured again is said as it is (``measured_again``), then the run measured again
    (``NAME-again``), which stands or says the first does (``first_stands``): each run once."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.baseline: TrialResult | None = None
        self._round_baselines: dict[str, TrialResult] = {}  # each race round's baseline run, once it ran
        self._before_baseline: dict[str, list[tuple[str, TrialResult]]] = {}  # a round's runs before its baseline's
        self._again: dict[str, TrialResult] = {}  # a run measured again, by name: the first, said

    def note(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def race_run(self, name: str, result: TrialResult) -> None:
        first = self._again.pop(name, None)
        line, ratios = self._race_line(name, result), self._stands(name, result)
        if result is not first:
            self.note(f"[{name}{'-again' if first else ''}] {line}{ratios}")
        elif ratios:  # the first, said as measured again, stands: its round's ratios to it are said now
            self.note(f"[{name}] the first run stands{ratios}")

    def baseline_run(self, result: TrialResult, stored: bool) -> None:
        """The baseline's first run (``BASELINE_LABEL``), measured, or read from the study (``stored``)."""
        first = self._again.pop(BASELINE_LABEL, None)
        if result is first:  # said as measured again, and to stand (``first_stands``)
            return
        again = "-again" if first is not None and not stored else ""  # stored: another tuner's run, not this one's
        self.note(f"[{BASELINE_LABEL}{again}{', stored' if stored else ''}] {format_result(result)}")

    def measured_again(self, name: str, result: TrialResult) -> None:
        self._again[name] = result
        self.note(f"[{name}] {self._race_line(name, result)}; measured again")

    def first_stands(self, name: str, result: TrialResult) -> None:
        self.note(f"[{name}] {self._race_line(name, result)}; {first_stands_words(result)}")

    def trial(self, event: TrialEvent) -> None:
        if event.not_measured is not None:  # no trial of the count: its number alone
            self.note(f"[trial {event.number}] {format_not_measured(event.knobs, self.baseline, event.not_measured)}")
            return
        line = f"dropped: {event.dropped}" if event.result is None else format_result(event.result, self.baseline)
        self.note(f"[trial {event.number}, {event.index} of {event.total}] {line}")

    def _race_line(self, name: str, result: TrialResult) -> str:
        """``name``'s figures, with its ratio to its round's baseline run where that ran before it."""
        against = self._round_baselines.get(round_of(name))
        return format_result(result, self.baseline, against, ratio=against is not None)

    def _stands(self, name: str, result: TrialResult) -> str:
        """Keep ``result`` as the run that stands for ``name``: a round's baseline run, for the runs after it; a run
        before its round's baseline run, for that one's line, whose words to follow it this returns ("; against it,
        this round's runs before it: trial-6 1.26x"); else empty."""
        prefix = round_of(name)
        if name != run_name(prefix, None):
            if prefix not in self._round_baselines:
                self._before_baseline.setdefault(prefix, []).append((name, result))
            return ""
        self._round_baselines[prefix] = result
        earlier = self._before_baseline.pop(prefix, [])
        ratios = [
            f"{before.removeprefix(prefix + '-')} {run.timing.throughput / result.timing.throughput:.2f}x"
            for before, run in earlier
            if run.ok and result.ok
        ]
        return f"; against it, this round's runs before it: {', '.join(ratios)}" if ratios else ""


def _measure_baseline(
    opened: _Opened, settings: Settings, measured: RunFn, output_dir: Path, lines: _RunLines, clock: RunClock
) -> TrialResult:
    """The baseline, measured or, in a resumed run, read from the study (whose runs then tell ``clock`` what this
    run's will take); a failed one ends the run, as there is nothing to tune."""
    study, machine = opened.study, opened.machine
    with clock.stage("baseline"):
        baseline, reused = ensure_baseline(study, settings.baseline, measured, machine)
    lines.baseline_run(baseline, reused)
    lines.baseline = baseline
    if reused:  # a resumed run: what it stored is what its runs are expected to take
        clock.expect(baseline)
        for record in load_results(study, machine).trials:
            clock.expect(record.result, screened=True)
    if not baseline.ok:
        raise BaselineFailedError(
            f"the baseline (pipeline.baseline) failed, so there is nothing to tune: {baseline.failure}. "
            f"{remedy(baseline.failure.message)}Log: {output_dir / 'trials' / 'baseline.log'}"
        )
    return baseline


def _search_and_finish(
    opened: _Opened,
    settings: Settings,
    runners: list[TrialRunner],
    measured: RunFn,
    baseline: TrialResult,
    output_dir: Path,
    lines: _RunLines,
    clock: RunClock,
    hold: _Turn,
) -> StopReason:
    """The search, in every slot, then, unless it stopped the run, the race, the trim and the profiles (``_finish``)
    in the first slot alone, where this tuner's turn comes (``finishing``), its runs measured again only while it
    holds that turn (``hold``); why the search stopped."""
    study, machine, places, out = opened.study, opened.machine, opened.places, lines.out
    guide = _guide(study, opened.space, settings, opened.ctx, runners[0], baseline, machine, out, clock)
    if len(places) > 1:
        print(f"[parallel] {len(places)} trials at once: {', '.join(slot.name for slot in places)}", file=out)

    def next_trial_fits(done: int, proposal: Proposal | None) -> bool:  # and the race's planned rounds after it
        knobs = proposal.knobs if proposal is not None else None
        trial_s = clock.screen_s() if knobs is None else clock.trial_s(knobs)
        step = span(SEARCH_TRIAL_STEP, done + 1, settings.study.n_trials)
        if knobs is not None:  # a proposal that does not fit is passed over (``tuner._search``): named once
            named = costly_values(knobs) if costly(knobs) else {"batch_size": knobs["batch_size"]}
            step = f"{SEARCH_TRIAL_STEP} of {' '.join(f'{k}={v}' for k, v in named.items())}"
        several = knobs is None and done + 1 < settings.study.n_trials  # "search trials 3 to 8": a trial's time said
        kept = _race_kept(settings, clock, baseline, done + 1)
        capped_s = proposal.capped_s if proposal is not None else None  # the budget's cap ended its every run
        return clock.affords(trial_s, step, kept, per="a trial" if several else "", capped_s=capped_s)

    def others_awaited() -> bool:  # while the race after them fits: past the budget, they end the study
        return clock.fits(_race_s(settings, clock, baseline, settings.study.n_trials))

    def awaiting_others() -> bool:  # the search's wait for them (``sharing.await_others``), timed as waiting
        clock.awaited()
        return others_awaited()

    screens = [r.screen for r in runners]
    propose = guide.propose if guide else None
    foretell = _foretelling(settings, clock, baseline, len(places), opened.ctx.device, lines.note)

    def on_trial(event: TrialEvent) -> None:
        lines.trial(event)
        foretell(event)

    with clock.stage(SEARCH, len(places)):
        searched = tune_in_slots(
            study, opened.space, settings.study, screens, on_trial, propose, machine, next_trial_fits, awaiting_others
        )
    if searched.aborted:
        return searched
    for idle in runners[1:]:  # the race runs in the first slot alone
        idle.close()
    if searched.left_to_others:  # the others no longer wait for its search: its turn comes as theirs do
        print(f"[search] {_TAKEN_FOR_DEAD} while it searched: it ended its search, and races in its turn", file=out)
    with _finishing_timed(study, settings, machine, clock, others_awaited) as (turn, lost):
        if turn is Turn.LEFT:
            clock.leave_out(LEFT_TO_OTHERS_STEP)
            print(f"[race] study.budget_s left out {LEFT_TO_OTHERS_STEP}", file=out)
        else:
            if turn is Turn.AFTER_ANOTHER:
                print("[race] after another tuner of this machine: what it stored is reused", file=out)
            show = lines.race_run
            try:
                with hold.held(lost):
                    refused = opened.ctx.channels_last_refused
                    _finish(study, machine, settings, runners[0], measured, output_dir, show, out, clock, lost, refused)
            except _TurnTaken:
                _leave_to_others(clock, out, f"{_TAKEN_FOR_DEAD} and took its turn at it")
    return searched


@contextmanager
def _finishing_timed(
    study: optuna.Study, settings: Settings, machine: str, clock: RunClock, waits: Callable[[], bool]
) -> Iterator[tuple[Turn, Callable[[], bool]]]:
    """``finishing``, its wait for the turns of the other tuners of a shared study timed as waiting for them
    (``RunClock.waiting``); alone on its study, a tuner waits for no one."""
    with ExitStack() as stack:
        with clock.waiting() if is_shared(settings.study.storage) else nullcontext():
            held = stack.enter_context(finishing(study, settings.study, machine, waits))
        yield held


# Why a tuner of a shared study leaves the study's end to another (``sharing.finishing``, ``sharing.searching``).
_TAKEN_FOR_DEAD = (
    f"another tuner took this one for dead, not hearing of it for {STALE_BEATS} heartbeats (paused, suspended, or its "
    "clock behind)"
)


class _TurnTaken(Exception):
    """Raised at ``_finish``'s next step once another tuner took this one's turn at ending the study: what this one
    would measure and store then would race beside that tuner's and overwrite it."""


class _Turn:
    """This tuner's hold on its turn at ending the study, as a run about to be measured again or ``_finish``'s next
    step asks it (``keep``): whether it was lost (``finishing``: ``lost``, or while ``held``), else never."""

    def __init__(self, lost: Callable[[], bool] = never) -> None:
        self._lost = lost

    @contextmanager
    def held(self, lost: Callable[[], bool]) -> Iterator[None]:
        """Ask ``lost`` while inside."""
        self._lost = lost
        try:
            yield
        finally:
            self._lost = never

    def keep(self) -> None:
        """Raise _TurnTaken where the turn was lost."""
        if self._lost():
            raise _TurnTaken


def _measured_again(lines: _RunLines, turn: _Turn, name: str, result: TrialResult) -> None:
    """Told of run ``name``, slowed, before it is measured again (``again_if_disturbed``): not where this tuner's turn
    was taken (the other tuner's runs beside it may have slowed it), else said."""
    turn.keep()
    lines.measured_again(name, result)


def _leave_to_others(clock: RunClock, out: TextIO, why: str) -> None:
    """Leave the study's end to the tuner that took this one for dead (``TAKEN_OVER_STEP``), saying ``why``."""
    clock.leave_out(TAKEN_OVER_STEP)
    print(f"[race] left out the race, trim and profiles: {why}", file=out, flush=True)


def _foretelling(
    settings: Settings, clock: RunClock, baseline: TrialResult, slots: int, device: str, note: Callable[[str], None]
) -> Callable[[TrialEvent], None]:
    """Told of each search trial, says once, after the first measured in this run, what the rest of the run is
    expected to take (``forecast``): until then nothing measured says how long a trial takes."""
    once = threading.Lock()  # taken by the first measured trial's slot, never given back: one line

    def foretell(event: TrialEvent) -> None:
        if event.result is None or not event.result.ok or not once.acquire(blocking=False):
            return
        expected = forecast(
            clock,
            baseline=TrialRecord(BASELINE_LABEL, baseline),
            first=TrialRecord(str(event.number), event.result),
            trials_left=event.total - event.index,
            rounds=settings.study.confirm_rounds,
            finalists=_finalists_to_be(settings, settings.study.n_trials),
            batch_policy=settings.batch_policy,
            device=device,
            slots=slots,
            profiles=settings.study.diagnose,
        )
        if said := expected.said(clock.left_s()):
            clock.foretell(expected.total_s)
            note(f"[time] {said}")

    return foretell


def _report(study: optuna.Study, machine: str, output_dir: Path, stop: StopReason, out: TextIO) -> dict[str, Path]:
    """Render what the study stored: the reports and the summary. Where the run stopped on an error (a storage fault,
    Ctrl-C) and the study cannot be read back (its database server down), say so instead, with the fault, which
    the error propagating may not name (Ctrl-C), unless it is what stopped the run."""
    stopping = sys.exc_info()[1] is not None
    try:
        results = load_results(study, machine)
    except StorageFaultError as fault:
        if not stopping:
            raise
        why = "" if str(fault) == stop.message else f": {fault}"
        print(f"Stopped: {stop.message}. The study could not be read back to write the reports{why}.", file=out)
        return {}
    summary = summarise(results)
    files = write_reports(results, summary, output_dir)
    status, advice = f"Stopped: {stop.message}", batch_advice(results, summary)
    print_summary(summary, files, status, out, results.profiles, results.tuner_time, advice)
    return files


def _guide(
    study: optuna.Study,
    space: SearchSpace,
    settings: Settings,
    ctx: SearchContext,
    runner: TrialRunner,
    baseline: TrialResult,
    machine: str,
    out: TextIO,
    clock: RunClock,
) -> Guide | None:
    """The probe's guide to the search, the probe run once per study and machine; None where the search is not
    steered by it: the probe is off or left out by study.budget_s, nothing is to be searched (or nothing is left to:
    ``search_left``), or the study has two objectives (a front explored with TPE)."""
    searching = space.size > 1 and search_left(study, settings.study, space, machine)
    if not settings.study.probe or not searching or settings.study.multi_objective:
        return None
    stored = stored_probe(study, machine) is not None
    # The probe is of use only with a trial to steer and the race's planned rounds after it.
    race = _race_kept(settings, clock, baseline, 1)
    then = Kept(clock.screen_s() + race.seconds, "a search trial" + (f" and {race.what}" if race.seconds else ""))
    timing = baseline.timing
    plan = probe_plan(space, settings.baseline)
    effective = accumulated_to(settings.batch_policy, settings.baseline)
    expected = expected_probe_s(plan, clock.unmeasured_s(baseline), timing.compute_s / timing.samples, effective)
    if not stored and not clock.affords(expected, PROBE_STEP, then, capped_s=capped_probe_s(study, machine)):
        return None  # said in the budget's list of what it left out: a capped probe's, that it needs more
    with clock.stage("probe"):
        again = lambda: clock.affords(expected, f"{PROBE_STEP} run again (its timings drifted)", then)  # noqa: E731
        probe = probe_once(study, space, settings.baseline, runner.probe, baseline.timing.throughput, machine, again)
    print(f"[probe{', stored' if stored else ''}] {format_probe(probe)}", file=out, flush=True)
    cores = ctx.cpu_count if runner.device == "cpu" else None
    return guide_from_record(probe, space, settings.baseline, cores, runner.device, ctx.torch_threads, ctx.cpu_count)


def _finalists_to_be(settings: Settings, trials: int) -> int:
    """How many finalists a round of the race races once ``trials`` trials are measured: as many, MAX_FINALISTS at
    most; none without a race."""
    return min(MAX_FINALISTS, trials) if settings.study.confirm_rounds else 0


def _race_round_s(settings: Settings, clock: RunClock, baseline: TrialResult, trials: int) -> float:
    """What a round of the race is expected to take once ``trials`` trials are measured: the baseline and
    ``_finalists_to_be``, none of them known yet, each as long as the slowest configuration measured that may race
    (``RunClock.round_s``: its run beat the baseline's), else as the baseline (0 without a race)."""
    return race_round_s(clock, baseline, _finalists_to_be(settings, trials))


def _race_s(settings: Settings, clock: RunClock, baseline: TrialResult, trials: int) -> float:
    """What the race is expected to take once ``trials`` trials are measured: its planned rounds
    (study.confirm_rounds) of ``_race_round_s``. The search and the probe keep it back: a race the budget cut short
    proves only what its planned rounds would (``Confirmation.proof_rounds``), so a budget buys fewer trials, not an
    unproven pick. Nothing is kept back for the trim: without it the race's winner stands, proven, its changes
    untrimmed (said so), and whether there is a trim, and of how many variants, is known only once the race has a
    winner; the race ends at its verdict for the trim's first race only where that race fits (``trim_ahead``)."""
    return settings.study.confirm_rounds * _race_round_s(settings, clock, baseline, trials)


def _race_kept(settings: Settings, clock: RunClock, baseline: TrialResult, trials: int) -> Kept:
    """``_race_s``, as what a search trial or the probe keeps back (``RunClock.affords``), named for the list of what
    was left out: the race's planned rounds (none without a race)."""
    rounds = counted(settings.study.confirm_rounds, "planned round")
    return Kept(_race_s(settings, clock, baseline, trials), f"the race's {rounds}")


def _finish(
    study: optuna.Study,
    machine: str,
    settings: Settings,
    runner: TrialRunner,
    measured: RunFn,
    output_dir: Path,
    show: Callable[[str, TrialResult], None],
    out: TextIO,
    clock: RunClock,
    lost: Callable[[], bool] = never,
    channels_last_refused: str | None = None,
) -> None:
    """The end of a study on ``machine``: the finalists' race and the trim of the winner's changes, their runs by
    ``measured`` (``study.remeasure_disturbed``), and the profiles of the baseline and the recommendation
    (``study.diagnose``; their advice honours the inspection's ``channels_last_refused``), each stored in the study
    and timed by ``clock``. Once ``lost()`` (another tuner took the turn: ``finishing``), it raises _TurnTaken at its
    next step: before each stage, round and run (a run measured again too: ``_measured_again``), and after each run,
    before what it measured is stored."""

    keep_turn = _Turn(lost).keep

    def measured_in_turn(knobs: dict[str, Any], name: str, on_progress=None) -> TrialResult:
        keep_turn()
        return measured(knobs, name, on_progress)

    def affords(configurations: list[dict[str, Any]], step: str) -> bool:
        keep_turn()
        return clock.affords_round(configurations, step)

    def shown(name: str, result: TrialResult) -> None:
        show(name, result)
        keep_turn()

    def profiled(record: ProfileRecord, stored: bool) -> None:
        print_tuned_profile(record, stored, out=out)
        keep_turn()

    with clock.stage("race"):
        rounds = settings.study.confirm_rounds
        note = partial(print, file=out, flush=True)
        results = load_results(study, machine)
        ahead = partial(trim_ahead, results, rounds=rounds, fits=lambda runs: clock.fits(rounds * clock.round_s(runs)))
        in_turn, draw = measured_in_turn, runner.new_draw
        # Under study.budget_s every finalist races: whether the trim fits is known only at the race's verdict.
        park = settings.study.budget_s is None
        race = run_race(study, results, rounds, in_turn, shown, affords, draw, note, ahead, clock.round_s, park)
    keep_turn()
    with clock.stage("trim"):
        trim_results = load_results(study, machine)
        run_trim(study, trim_results, race, measured_in_turn, shown, affords, runner.new_draw, note, clock.round_s)
    if not settings.study.diagnose:
        return
    # What limits each, profiled after every timed run: the budget asked only of those still to be measured.
    found = load_results(study, machine)
    left = profiles_left(found)
    if not left or clock.affords(clock.profiles_s(left), "the profiles (study.diagnose)"):
        keep_turn()
        with clock.stage("profiles"):
            profile_tuned(study, found, runner, settings, output_dir / "profile", profiled, channels_last_refused)


def _window(plan: WindowPlan) -> dict:
    """A window's settings, without what each trial sets for itself (``step_multiple``: its accumulation;
    ``epoch_steps``: its loader's)."""
    return {name: value for name, value in asdict(plan).items() if name not in ("step_multiple", "epoch_steps")}


def _study_meta(settings: Settings, device: str, space: SearchSpace) -> dict[str, Any]:
    """The description of what this run tunes, as its study stores it (``StudyDescription.to_dict``)."""
    # Each trial is held to the memory budgets as it is measured (killed or ruled out over them): a study resumed
    # under others would rank trials judged by two rules. Unset ones are left out, but the record is kept even empty:
    # a study made before budgets were kept has none (``start._alike``), and resumes under any. Settings that change
    # no stored figure stay out, so that a study resumes under any of them: study.prune_margin (which trials a later
    # search stops early, not what a measured one read), measure.fork_trials (a forked trial reads what a fresh one
    # does), measure.core_speed and study.remeasure_disturbed (which runs are read again, not what a run reads).
    budgets = {
        "memory_budget_mb": settings.study.memory_budget_mb,
        "host_memory_budget_mb": settings.study.host_memory_budget_mb,
    }
    set_budgets = {key: float(value) for key, value in budgets.items() if value is not None}  # 500 is 500.0
    return StudyDescription(
        pipeline=settings.pipeline,
        baseline=settings.baseline,
        batch_policy=settings.batch_policy,
        objectives=list(settings.study.objectives),
        device=device,
        space=space.candidates,
        measure={
            **_window(settings.measure.plan),
            "screen": _window(settings.measure.screen_plan),
            "trial_timeout_s": settings.measure.trial_timeout_s,
            "repeats": settings.measure.repeats,
            "loss_tolerance": settings.measure.loss_tolerance,
        },
        memory_budgets=set_budgets,
    ).to_dict()
