"""study.budget_s: a step of a run starts only where its expected time fits in what is left (``RunClock.affords``);
the search, the race, the trim and the profiles stop there, and the reports say what the budget left out."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

from autotune import app
from autotune.config.load import load_settings
from autotune.config.settings import StudySettings
from autotune.knobs import KNOBS, costly
from autotune.measure.environment import this_machine_id
from autotune.measure.recorder import WindowPlan
from autotune.records import TRIM_ATTR, config_key, on_machine
from autotune.report.headline import headline
from autotune.report.recommended import recommendation
from autotune.report.tuner_time import budget_lines
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.results.tuner_time import LEFT_TO_OTHERS_STEP, TAKEN_OVER_STEP, RunTime, TunerTime
from autotune.study import clock as clock_module
from autotune.study.clock import RunClock, span
from autotune.study.run_race import run_race
from autotune.study.search_state import Proposal, counted_trials
from autotune.study.sharing import searching
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.storage import load_study, open_storage
from autotune.study.trim import run_trim
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config
from tests.study.test_trim import WINNER, tuned
from tests.study.test_tuner import BASELINE, FIXED, META, SPACE, FakeMeasure, raced, settings


def measured(wall_s: float, startup_s: float = 0.0, batch_size: int = 16, step_s: float = 0.1) -> TrialResult:
    """A process of ``wall_s`` seconds, ``startup_s`` of them its start, whose window timed 10 steps of ``step_s``."""
    measurement = fake_measurement(100.0)
    timing = replace(measurement.timing, window_s=10 * step_s, mean_step_s=step_s, median_step_s=step_s)
    knobs = {**NEUTRAL_KNOBS, "batch_size": batch_size}
    return TrialResult(knobs, replace(measurement, timing=timing), wall_s=wall_s, startup_s=startup_s)


def test_a_step_fits_where_its_expected_time_fits_in_what_is_left(monkeypatch):
    stopped = SimpleNamespace(monotonic=lambda: 1000.0, time=lambda: 1.7e9)  # "10 s left" on however slow a host
    monkeypatch.setattr(clock_module, "time", stopped)
    clock = RunClock(budget_s=10.0)
    assert clock.affords(1e9, "anything"), "before the first measured run (the baseline) every step fits"
    for wall_s, batch_size in ((1.0, 16), (2.0, 32), (30.0, 64)):
        clock.count(measured(wall_s, batch_size=batch_size))
    assert clock.run_s() == 2.0, "the median: one slow run does not inflate the estimate of an unmeasured one"
    assert clock.screen_s() == 2.0, "no search trial yet: the full windows stand for them"
    with clock.stage("search"):
        clock.count(measured(0.5, batch_size=8))
    assert (clock.run_s(), clock.screen_s()) == (2.0, 0.5), "a search trial's shorter window apart"
    small, unmeasured = {**NEUTRAL_KNOBS, "batch_size": 16}, {**NEUTRAL_KNOBS, "batch_size": 128}
    assert clock.affords_round([small, unmeasured], "a round") and clock.left_out == [], "1 + 2 s"
    assert not clock.affords_round([small, {**NEUTRAL_KNOBS, "batch_size": 64}], "a slow one's round")
    assert clock.left_out == ["a slow one's round (~31 s needed, 10 s left)"]
    assert not clock.affords_round([small, {**NEUTRAL_KNOBS, "batch_size": 64}], "a slow one's round")
    assert len(clock.left_out) == 1, "a step passed over again is said once"
    assert RunClock(budget_s=None).affords(1e9, "x"), "no budget: everything fits"
    assert clock.record().left_out == clock.left_out and clock.record().budget_s == 10.0


def test_a_configuration_is_expected_to_run_as_long_as_it_ran_or_its_search_trial_says_it_will():
    plan = WindowPlan(min_steps=30, min_time_s=4.0, max_time_s=30.0)
    clock = RunClock(budget_s=60.0, plan=plan)
    clock.count(measured(3.0, startup_s=2.9), drew=True)  # it started the fork server: a new draw's cost
    clock.count(measured(6.0, startup_s=0.1))
    clock.count(measured(7.0, startup_s=0.1))
    assert clock.draw_s() == pytest.approx(2.8), "a server's start beyond the usual (a fork's) start-up"
    assert clock.run_of_s({**NEUTRAL_KNOBS, "batch_size": 16}) == pytest.approx(6.0), "its own median, start apart"
    with clock.stage("search"):  # a slow step's search trial: 10 steps of 0.5 s in its 5 s window, 9 s in all
        clock.count(measured(9.0, startup_s=0.1, batch_size=128, step_s=0.5))
    slow = {**NEUTRAL_KNOBS, "batch_size": 128}
    assert clock.run_of_s(slow) == pytest.approx(9.0 - 5.0 + 30 * 0.5), "its full window: 30 steps of 0.5 s"
    assert clock.slowest_s() == clock.run_of_s(slow)
    baseline, variant = {**NEUTRAL_KNOBS, "batch_size": 16}, {**NEUTRAL_KNOBS, "batch_size": 64}
    assert clock.round_s([baseline, slow]) == pytest.approx(2.8 + 6.0 + 19.0), "a new draw, then each"
    assert clock.round_s([baseline], unknown=2) == pytest.approx(2.8 + 6.0 + 2 * 19.0), "those to come: the slowest"
    assert clock.round_s([baseline, variant]) == pytest.approx(2.8 + 6.0 + 6.0), "unmeasured: its round's slowest"
    assert clock.run_of_s(variant) == clock.run_s(), "unmeasured, on its own: the median"


def test_a_search_trial_timed_over_whole_epochs_is_expected_to_run_as_many_as_the_full_window_takes():
    plan = WindowPlan(min_steps=15, min_time_s=2.0, max_time_s=30.0)
    clock = RunClock(budget_s=60.0, plan=plan)
    trial = measured(5.0, batch_size=128)
    timing = replace(trial.timing, steps=14, window_s=1.4, epochs=2)  # 2 epochs of 7 steps of 0.1 s
    with clock.stage("search"):
        clock.count(replace(trial, measurement=replace(trial.measurement, timing=timing)))
    full = 3 * 7 * 0.1  # 3 epochs: the fewest past 15 steps and 2 s
    assert clock.run_of_s({**NEUTRAL_KNOBS, "batch_size": 128}) == pytest.approx(5.0 - 1.4 + full)


def test_each_repeat_after_the_first_is_a_new_draw_and_fresh_trials_draw_nothing():
    repeated = RunClock(budget_s=60.0, repeats=3)
    for _ in range(3):  # run_repeated: each process from a new server
        repeated.count(measured(5.0, startup_s=3.0), drew=True)
    assert (repeated.draw_s(), repeated.run_of_s(NEUTRAL_KNOBS | {"batch_size": 16})) == (3.0, 2.0)
    both = [NEUTRAL_KNOBS | {"batch_size": 16}] * 2
    assert repeated.round_s(both) == 3 * (2.0 + 2.0) + (1 + 2 * 2) * 3.0, "the round's draw and four repeats'"
    fresh = RunClock(budget_s=60.0)
    for wall_s in (5.0, 6.0):
        fresh.count(measured(wall_s, startup_s=2.0))  # each a new interpreter: its start is in every run
    assert fresh.draw_s() == 0.0 and fresh.round_s(both) == pytest.approx(2 * 5.5)


def test_a_run_of_several_repeats_and_a_resumed_run_are_expected_alike():
    live = RunClock(budget_s=10.0, repeats=3)
    for _ in range(3):
        live.count(measured(2.0, startup_s=0.1))
    assert not live.affords_round([NEUTRAL_KNOBS, NEUTRAL_KNOBS], "two runs"), "three 2 s processes each: 12 s"
    assert live.screen_s() == 6.0
    resumed = RunClock(budget_s=10.0, repeats=3)
    resumed.expect(measured(6.0, startup_s=0.1))  # the stored baseline (its three processes): none of this run's
    assert resumed.run_s() == 2.0 and resumed.record().processes == {}
    assert resumed.run_of_s(NEUTRAL_KNOBS | {"batch_size": 16}) == pytest.approx(1.9), "as live's, start-up apart"
    assert live.run_of_s(NEUTRAL_KNOBS | {"batch_size": 16}) == pytest.approx(2.0)
    resumed.expect(measured(15.0, startup_s=0.1, batch_size=128, step_s=0.5), screened=True)  # a stored trial
    stored = resumed.run_of_s(NEUTRAL_KNOBS | {"batch_size": 128})
    assert stored == pytest.approx(5.0 - 0.1 - 5.0 + WindowPlan().min_steps * 0.5), (
        "its stored search trial's, as a full window"
    )
    old = RunClock(budget_s=10.0)
    old.expect(measured(0.0))  # stored without a wall time: says nothing
    assert old.run_s() == 0.0


def test_the_search_stops_where_the_next_trial_does_not_fit(tmp_path):
    study = open_study(settings(tmp_path, n_trials=5), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    asked = []
    fits = lambda done, knobs: asked.append(done) or done < 2  # noqa: E731
    stop = tune(study, SPACE, settings(tmp_path, n_trials=5, budget_s=60.0), measure, lambda e: None, affords=fits)
    assert counted_trials(study) == 2 and asked[-1] == 2
    said = "study.budget_s=60: the next search trial does not fit in what is left (the reports list what it needed)"
    assert stop.message == said and not stop.aborted


def test_where_no_plain_trial_fits_the_search_stops_before_the_proposal_or_optuna_is_asked(tmp_path):
    study = open_study(settings(tmp_path, n_trials=5), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    proposed = next(knobs for knobs in SPACE.configurations() if knobs["batch_size"] == 32)
    asked = []
    fits = lambda done, knobs: asked.append(knobs) and False  # noqa: E731  (nor does a plain trial fit)
    propose = lambda *seen: Proposal(proposed)  # noqa: E731
    budget = settings(tmp_path, n_trials=5, budget_s=60.0)
    stop = tune(study, SPACE, budget, measure, lambda e: None, propose, None, fits)
    assert asked == [None], "no plain trial fits: nor does the proposal, which takes no less (left out once)"
    assert stop.message.startswith("study.budget_s=60: the next search trial does not fit")
    assert len(study.trials) == 0 and counted_trials(study) == 0, "no trial asked of Optuna, none measured"


def test_a_proposal_that_does_not_fit_where_a_plain_trial_does_is_passed_over_for_the_next(tmp_path):
    study = open_study(settings(tmp_path, n_trials=2), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    dear = next(knobs for knobs in SPACE.configurations() if knobs["batch_size"] == 32)
    proposed = []

    def guide(seen, taken, ran_out):  # the dear configuration first, then the first not taken
        untaken = (knobs for knobs in [dear, *SPACE.configurations()] if config_key(knobs) not in taken)
        proposed.append(next(untaken))
        return Proposal(proposed[-1])

    fits = lambda done, proposal: proposal is None or proposal.knobs != dear  # noqa: E731
    tune(study, SPACE, settings(tmp_path, n_trials=2, budget_s=60.0), measure, lambda e: None, guide, None, fits)
    assert proposed[0] == dear and counted_trials(study) == 2, "passed over, and two others measured"
    assert dear not in [knobs for _, knobs in measure.calls[1:]] and proposed.count(dear) == 1, "not proposed again"


def test_a_search_the_guide_ended_is_converged_not_cut_by_the_budget(tmp_path):
    study = open_study(settings(tmp_path, n_trials=5), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    nothing_fits = lambda done, knobs: False  # noqa: E731
    converged = lambda *seen: None  # noqa: E731  (the guide predicts nothing faster)
    budget = settings(tmp_path, n_trials=5, budget_s=60.0)
    stop = tune(study, SPACE, budget, measure, lambda e: None, converged, None, nothing_fits)
    assert stop.message.startswith("converged:"), "nothing was left to search: the budget cut nothing"


def test_a_draw_of_the_sampler_that_does_not_fit_is_left_to_a_later_run_which_measures_it_first(tmp_path):
    study = open_study(settings(tmp_path, n_trials=2), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    drawn = []
    fits = lambda done, proposal: proposal is None or bool(drawn) or drawn.append(proposal.knobs)  # noqa: E731
    tune(study, SPACE, settings(tmp_path, n_trials=2, budget_s=60.0), measure, lambda e: None, affords=fits)
    assert counted_trials(study) == 2 and drawn[0] not in [knobs for _, knobs in measure.calls], "the others ran"
    runs_before = len(measure.calls)
    tune(study, SPACE, settings(tmp_path, n_trials=3), measure, lambda e: None)  # a later run, without a budget
    assert measure.calls[runs_before][1] == drawn[0] and counted_trials(study) == 3, "owed: measured first"


def test_nothing_measured_beside_the_baseline_is_reported_as_such(tmp_path):
    study = open_study(settings(tmp_path, n_trials=5), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    nothing_fits = lambda done, knobs: False  # noqa: E731
    stop = tune(
        study, SPACE, settings(tmp_path, n_trials=5, budget_s=60.0), measure, lambda e: None, affords=nothing_fits
    )
    assert stop.message.startswith("study.budget_s=60") and counted_trials(study) == 0
    assert summarise(load_results(study)).is_baseline, "reported: nothing measured beside the baseline"


def test_a_compile_trial_is_expected_as_the_longest_so_far_or_before_one_as_a_trial_may_take():
    clock = RunClock(budget_s=60.0, trial_timeout_s=300.0)
    clock.count(measured(6.0))
    compiled = {**NEUTRAL_KNOBS, "batch_size": 16, "compile": "default"}
    plain = {**compiled, "compile": NEUTRAL_KNOBS["compile"]}
    assert clock.trial_s(plain) == clock.screen_s() == 6.0
    assert clock.trial_s(compiled) == 300.0, "its compile time no measurement foretells"
    assert not clock.affords(clock.trial_s(compiled), "search trial 2 (compile=default)")
    with clock.stage("search"):
        clock.count(replace(measured(41.0), knobs=compiled))
    assert clock.trial_s(compiled) == 41.0, "the longest compiled trial so far"
    assert clock.trial_s(plain) == 6.0, "a compiled trial prices none of the others: none yet, the baseline's run"
    assert RunClock(budget_s=60.0).trial_s(compiled) == 0.0, "without a bound on a trial, nothing to expect"


def test_a_race_round_that_does_not_fit_is_not_run_and_a_race_without_one_recommends_nothing_unproven(tmp_path):
    steps = []
    one_round = lambda runs, step: steps.append((len(runs), step)) or len(steps) == 1  # noqa: E731
    single, re_runs = {16: 100.0, 32: 104.0}, {16: [100, 100, 100], 32: [104, 104, 104]}
    assert raced(tmp_path, single, re_runs)[0].rounds == 3, "without a budget, this close race runs three rounds"
    (tmp_path / "budget").mkdir()
    cut, names = raced(tmp_path / "budget", single, re_runs, affords=one_round)
    assert cut.rounds == 1 and cut.planned_rounds == 3 and len(names) == 2 and cut.cut
    assert steps == [(2, "confirm rounds 1 to 3"), (2, "confirm rounds 2 to 3")], "the baseline and the finalist"
    assert "or the run was stopped): a proof still counts the 3 rounds planned (a win in every round), not the 1" in (
        cut.describe()
    )
    assert "ended early" not in cut.describe()

    (tmp_path / "none").mkdir()
    study = open_study(settings(tmp_path / "none"), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    tune(study, SPACE, settings(tmp_path / "none", n_trials=2), measure, lambda e: None)
    assert run_race(study, load_results(study), 2, measure, lambda name, result: None) is not None
    runs_before = len(measure.calls)
    never = lambda runs, step: False  # noqa: E731
    left = run_race(study, load_results(study), 3, measure, lambda name, result: None, never)
    assert left.cut and left.rounds == 0 and len(measure.calls) == runs_before
    summary = summarise(load_results(study))
    assert summary.confirmation == left, "it replaces the stored race of 2 planned rounds"
    assert summary.is_baseline, "the fastest trial read 2x in its single run, but nothing is recommended unproven"
    said = headline(summary)
    assert said.lead == "Keep your current settings." and said.rest.startswith("study.budget_s left no time to ")
    assert "read 2.00x in a single run" in said.rest and "none is recommended unproven" in left.describe()


def test_a_race_the_budget_cut_short_goes_on_from_its_rounds_in_a_later_run(tmp_path):
    single, re_runs = {16: 100.0, 32: 104.0}, {16: [100] * 6, 32: [104] * 6}
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    cut, _ = raced(study_dir, single, re_runs, affords=lambda runs, step: "rounds 1" in step)
    study = open_study(settings(study_dir), META)
    assert load_results(study).confirmation.cut and cut.rounds == 1
    measure, notes = FakeMeasure(), []
    per_run = lambda configurations: 12.0 * len(configurations)  # noqa: E731
    again = run_race(study, load_results(study), 3, measure, lambda n, r: None, on_note=notes.append, round_s=per_run)
    assert not again.cut and again.rounds == 3 and again.baseline_throughputs[0] == cut.baseline_throughputs[0]
    assert {name.split("-")[1] for name, _ in measure.calls} == {"2", "3"}, "round 1 is not run again"
    assert notes == [
        "[race] trial 0 against the baseline: the 2 in turn for up to 2 rounds more after round 1 (about 24 s a round)",
        f"[race] {again.describe()}",
    ]
    assert load_results(study).confirmation == again


def test_a_race_going_on_after_a_cut_says_it_races_only_the_finalists_still_racing(tmp_path):
    # Trial 1 (batch 64) lags trial 0 (batch 32) by far in round 1 and leaves; the budget then cuts the race.
    single, re_runs = {16: 100.0, 32: 140.0, 64: 135.0}, {16: [100] * 6, 32: [140] * 6, 64: [100] * 6}
    cut, _ = raced(tmp_path, single, re_runs, affords=lambda runs, step: "rounds 1" in step)
    assert cut.cut and cut.rounds == 1 and [f.dropped is not None for f in cut.finalists] == [False, True]
    study, notes = open_study(settings(tmp_path), META), []
    nothing_timed = lambda configurations: 0.0  # noqa: E731 (a resumed run that timed no run yet)
    again = run_race(
        study, load_results(study), 3, FakeMeasure(), lambda n, r: None, None, None, notes.append, None, nothing_timed
    )
    assert notes == [
        "[race] trial 0 against the baseline: the 2 in turn for up to 2 rounds more after round 1",
        f"[race] {again.describe()}",
    ]


class StopsIn:
    """Runs as ``measure`` does, until the first run of a name starting with ``prefix``: there Ctrl-C."""

    def __init__(self, measure, prefix: str):
        self.measure, self.prefix = measure, prefix

    def __call__(self, knobs, name, on_progress=None):
        if name.startswith(self.prefix):
            raise KeyboardInterrupt
        return self.measure(knobs, name, on_progress)


def test_a_race_a_stopped_run_cut_short_keeps_its_rounds_and_goes_on_from_them(tmp_path):
    single = {16: 100.0, 32: 104.0}
    raced(tmp_path, single, {16: [100] * 3, 32: [104] * 3}, rounds=1)  # a race of other rounds, replaced below
    study = open_study(settings(tmp_path), META)
    with pytest.raises(KeyboardInterrupt):
        run_race(study, load_results(study), 3, StopsIn(FakeMeasure(), "confirm-2-"), lambda name, result: None)
    stopped = load_results(study).confirmation
    assert stopped.cut and stopped.rounds == 1 and stopped.planned_rounds == 3, "round 1 kept, as a race cut short"
    said = stopped.describe()
    assert "(a win in every round), not the 1 round run; the same command again goes on" in said
    in_race = TunerTime([RunTime(0.0, 30.0, {"search": 20.0, "race": 9.0}, {}, finished=False)])
    summary = summarise(replace(load_results(study), tuner_time=in_race))
    assert summary.confirmation is None and not summary.confirmed, "one round of a stopped race proves nothing"
    assert summary.stopped_before_race_end, "the headline says no race has re-measured it yet"
    measure = FakeMeasure()
    again = run_race(study, load_results(study), 3, measure, lambda name, result: None)
    assert measure.calls and all(name.startswith(("confirm-2-", "confirm-3-")) for name, _ in measure.calls)
    assert not again.cut and again.rounds >= 2 and again.baseline_throughputs[0] == stopped.baseline_throughputs[0]


def test_a_trim_race_a_stopped_run_cut_short_goes_on_from_its_rounds(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_trim(study, load_results(study), confirmation, StopsIn(pipeline, "trim-1-2-"), lambda name, result: None)
    (stopped,) = load_results(study).trim
    assert stopped.cut and stopped.rounds == 1, "its first round kept"
    runs_before = len(pipeline.names)
    again = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert not again[0].cut and again[0].rounds >= 2
    assert not any(name.startswith("trim-1-1-") for name in pipeline.names[runs_before:]), "round 1 not run again"
    assert summarise(load_results(study)).changed_knobs() == {"batch_size": (16, 64), "amp": ("off", "bf16")}


def test_a_trim_race_that_does_not_fit_is_left_out_and_the_winner_keeps_its_changes(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    runs_before = len(pipeline.names)
    never = lambda runs, step: False  # noqa: E731
    (left_out,) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None, never)
    assert left_out.cut and left_out.rounds == 0 and len(pipeline.names) == runs_before
    assert len(study.user_attrs[on_machine(TRIM_ATTR, load_results(study).machine_id)]) == 1, "stored, as cut"
    summary = summarise(load_results(study))
    assert summary.trim == [] and summary.recommended.result.knobs == WINNER, "no trim: its three changes stand"
    assert "Not every change was raced undone" in str(headline(summary)), "and the headline says so"
    assert recommendation(load_results(study), summary).untrimmed, "and recommended.yaml"
    trimmed = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert trimmed and not any(race.cut for race in trimmed), "a later run trims anew"
    assert "Not every change" not in str(headline(summarise(load_results(study))))


def test_a_trim_the_budget_cut_short_goes_on_from_the_race_it_cut(tmp_path):
    # channels_last and set_to_none=False do nothing: undoing either ties, so a second race undoes the other.
    study, confirmation, pipeline = tuned(tmp_path, {**WINNER, "channels_last": True})
    first_only = lambda runs, step: not step.startswith("trim-2")  # noqa: E731
    notes, skip = [], lambda name, result: None  # noqa: E731
    cut = run_trim(study, load_results(study), confirmation, pipeline, skip, first_only, None, notes.append)
    assert [race.cut for race in cut] == [False, True]
    assert notes == [
        "[trim] trim race 1: trial 0 against itself with each change undone (4 variants), the baseline too: the 6 in "
        "turn for up to 3 rounds",
        f"[trim] Trim race 1: {cut[0].describe(trim=True)}",
        f"[trim] Trim race 2: {cut[1].describe(trim=True)}",
    ], "the second race, which the budget left no time for, is not said to run"
    assert notes[-1].startswith("[trim] Trim race 2: study.budget_s left no time to race trial 0 without set_to_none")
    assert summarise(load_results(study)).untrimmed, "its first race's pick is recommended, not trimmed to its end"
    runs_before, notes = len(pipeline.names), []
    again = run_trim(study, load_results(study), confirmation, pipeline, lambda n, r: None, on_note=notes.append)
    assert again[0] == cut[0] and not again[1].cut, "the first race reused, the second run to its end"
    assert notes == [
        f"[trim, stored] Trim race 1: {cut[0].describe(trim=True)}",
        "[trim] trim race 2: trial 0 without set_to_none against itself with the change that tied in trim race 1 "
        "undone (1 variant), the baseline too: the 3 in turn for up to 3 rounds",
        f"[trim] Trim race 2: {again[1].describe(trim=True)}",
    ], "the second race, once it runs"
    assert not summarise(load_results(study)).untrimmed
    assert all(name.startswith("trim-2-") for name in pipeline.names[runs_before:]), pipeline.names[runs_before:]
    assert summarise(load_results(study)).changed_knobs() == {"batch_size": (16, 64), "amp": ("off", "bf16")}
    runs_before = len(pipeline.names)
    assert run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None) == again
    assert len(pipeline.names) == runs_before, "the same command again measures nothing"


def test_a_run_over_its_budget_measures_the_baseline_alone_and_says_what_it_left_out(tmp_path):
    fixed = {name: [value] for name, value in NEUTRAL_KNOBS.items() if value is not None}
    config = tiny_config(
        study={"n_trials": 3, "confirm_rounds": 2, "probe": True, "diagnose": True, "budget_s": 0.01},
        search={**fixed, "batch_size": [16, 32]},
    )
    settings_ = load_settings(config, "tiny")
    settings_ = replace(settings_, study=replace(settings_.study, storage=f"sqlite:///{tmp_path}/study.db"))
    out = io.StringIO()
    files = app.run(settings_, tmp_path / "out", out)
    report = json.loads(files["report.json"].read_text())
    (run,) = report["tuner_time"]["runs"]
    assert run["budget_s"] == 0.01
    assert [step.split(" (~")[0] for step in run["left_out"]] == [
        "the probe",
        "search trials 1 to 3",
        "the profiles (study.diagnose)",
    ]
    assert [row["trial"] for row in report["trials"]] == ["baseline"]
    assert "Stopped: study.budget_s=0.01: the next search trial does not fit in what is left" in out.getvalue()
    said = out.getvalue().rstrip().splitlines()[-1]
    assert said.startswith("study.budget_s=0.01 (") and " left out: the probe (~" in said
    assert "search trials 1 to 3" in said
    assert said in files["report.md"].read_text()
    lead = files["report.md"].read_text().splitlines()[2]
    assert lead.startswith("**No recommendation yet.** study.budget_s left time to measure the baseline"), lead
    assert "left out the probe (~" in lead and "the profiles" not in lead, "the search's steps, not the profiles"


@pytest.mark.slow
def test_a_run_over_its_budget_on_a_shared_study_leaves_its_end_to_the_tuner_of_its_machine_still_searching(tmp_path):
    """Another tuner of the machine searches (its claim held until released): a run whose budget is spent neither
    waits for it nor ends the study while it searches (the race must see its trials, and run alone); it writes its
    reports, says what its budget left out, and recommends nothing a race has not re-measured."""
    fixed = {name: [value] for name, value in NEUTRAL_KNOBS.items() if value is not None}
    config = tiny_config(study={"n_trials": 2, "budget_s": 0.01}, search=fixed)  # the default heartbeat: none dies
    settings_ = load_settings(config, "tiny")
    settings_ = replace(settings_, study=replace(settings_.study, storage=f"journal://{tmp_path}/study.log"))
    release, held = threading.Event(), threading.Event()

    def other() -> None:  # its claim alone: the study is made by the run, as the first tuner to open it
        study = SimpleNamespace(study_name=settings_.study.name, _storage=open_storage(settings_.study.storage))
        with searching(study, settings_.study, this_machine_id()):
            held.set()
            release.wait(120)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert held.wait(10)
        out = io.StringIO()
        files = app.run(settings_, tmp_path / "out", out)
        assert thread.is_alive(), "it did not wait for the other tuner"
    finally:
        release.set()
        thread.join()
    report = json.loads(files["report.json"].read_text())
    (run,) = report["tuner_time"]["runs"]
    assert [step.split(" (~")[0] for step in run["left_out"]] == ["search trials 1 to 2", LEFT_TO_OTHERS_STEP]
    assert f"[race] study.budget_s left out {LEFT_TO_OTHERS_STEP}" in out.getvalue()
    assert "[confirm" not in out.getvalue() and "[profile" not in out.getvalue(), "nothing of the study's end ran"
    study = load_study(settings_.study.name, settings_.study.storage)
    assert summarise(load_results(study, this_machine_id())).stopped_before_race_end, "its race undecided"


def test_what_is_left_out_is_named_by_its_steps():
    assert span("search trial", 3, 8) == "search trials 3 to 8" and span("search trial", 3, 3) == "search trial 3"


def test_a_run_within_its_budget_says_nothing_was_left_out():
    run = RunTime(0.0, 42.4, {}, {}, True, budget_s=60.0)
    assert budget_lines(TunerTime([run])) == ["study.budget_s=60 (42 s used): nothing left out"]
    assert budget_lines(TunerTime([replace(run, wall_s=75.2)])) == [
        "study.budget_s=60 (75 s used, 15 s over: a step took longer than expected): nothing left out"
    ]
    assert budget_lines(TunerTime([replace(run, budget_s=None)])) == []


def test_a_run_another_tuner_took_for_dead_says_so_not_that_the_budget_left_its_race_out():
    taken = RunTime(0.0, 42.4, {}, {}, True, budget_s=60.0, left_out=[TAKEN_OVER_STEP])
    assert taken.left_to_others
    assert budget_lines(TunerTime([taken])) == [
        f"the run left out {TAKEN_OVER_STEP}",
        "study.budget_s=60 (42 s used): nothing left out",
    ]
    assert budget_lines(TunerTime([replace(taken, budget_s=None)])) == [f"the run left out {TAKEN_OVER_STEP}"]


def test_a_resumed_run_expects_a_compile_trial_as_long_as_its_stored_ones():
    compiled = {**NEUTRAL_KNOBS, "batch_size": 16, "compile": "default"}
    live, resumed = RunClock(budget_s=120.0, trial_timeout_s=300.0), RunClock(budget_s=120.0, trial_timeout_s=300.0)
    live.count(measured(6.0))
    with live.stage("search"):
        live.count(replace(measured(41.0), knobs=compiled))
    resumed.expect(measured(6.0))
    resumed.expect(replace(measured(41.0), knobs=compiled), screened=True)  # the same trial, stored
    assert resumed.trial_s(compiled) == live.trial_s(compiled) == 41.0, "not measure.trial_timeout_s (300 s)"


def test_a_compile_draw_that_does_not_fit_is_left_for_later_and_the_plain_trials_that_fit_are_measured(tmp_path):
    varied = {"batch_size": [16, 32, 64], "compile": ["off", "default"]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    budget = StudySettings("s", f"sqlite:///{tmp_path}/study.db", n_trials=2, timeout_s=None, seed=3, budget_s=60.0)
    study = open_study(budget, {**META, "space": space.candidates})
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    plain_only = lambda done, proposal: proposal is None or not costly(proposal.knobs)  # noqa: E731 (compile: 300 s)
    events: list = []
    tune(study, space, budget, measure, events.append, affords=plain_only)  # its sampler draws a compile second
    assert counted_trials(study) == 2, "two plain configurations fit: measured, whatever the sampler drew"
    assert not any(costly(knobs) for _, knobs in measure.calls), "no compile trial ran"
    told = [(event.knobs["compile"], event.not_measured) for event in events if event.not_measured]
    assert told and set(told) == {("default", "left for a later run: it does not fit study.budget_s=60")}
    assert len(told) == len({config_key(event.knobs) for event in events if event.not_measured}), "each said once"


def test_a_probe_process_is_expected_to_add_the_baselines_start_and_build_not_its_warm_up_and_window():
    clock = RunClock(budget_s=60.0)
    baseline = measured(6.0, startup_s=1.5, step_s=0.3)  # a warm-up of 1 s and a window of 3 s
    clock.count(baseline)
    assert clock.unmeasured_s(baseline) == pytest.approx(2.0), "6 s less the 1 s warm-up and the 3 s window"
    assert clock.unmeasured_s(replace(baseline, wall_s=0.0)) == clock.run_s() == 6.0, "a run without its wall time"


def test_a_search_trial_of_a_larger_batch_is_expected_to_step_as_much_longer():
    clock = RunClock(budget_s=60.0, screen_plan=WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0))
    clock.count(measured(6.0, batch_size=16, step_s=0.1))  # the baseline
    with clock.stage("search"):
        clock.count(measured(3.0, batch_size=16, step_s=0.1))  # 8 steps to warm up in 1 s, 10 timed of 0.1 s
    small, big = ({**NEUTRAL_KNOBS, "batch_size": batch} for batch in (16, 256))
    assert clock.trial_s(small) == 3.0, "as measured"
    assert clock.trial_s(big) == pytest.approx(1.0 + 8 * 1.6 + 10 * 1.6), "as many steps, each 16 times longer"
    assert clock.trial_s({**small, "batch_size": 8}) == 3.0, "no shorter than measured"


def test_a_search_trial_of_fast_steps_is_expected_to_hold_its_window_by_its_seconds_not_its_steps():
    # 10 ms steps at batch 16: the 1.5 s window held 150 of them; at batch 128 (80 ms steps) it holds 19.
    clock = RunClock(budget_s=600.0, screen_plan=WindowPlan(min_steps=10, min_time_s=1.5, max_time_s=30.0))
    fast = replace(measured(3.0, batch_size=16, step_s=0.01), wall_s=3.0)
    timing = replace(fast.timing, steps=150, window_s=1.5, warmup_s=0.08, warmup_steps=8)
    clock.count(replace(fast, measurement=replace(fast.measurement, timing=timing)))  # the baseline
    with clock.stage("search"):
        clock.count(replace(fast, measurement=replace(fast.measurement, timing=timing)))
    expected = (3.0 - 0.08 - 1.5) + 8 * 0.08 + max(1.5, 10 * 0.08)
    assert clock.trial_s({**NEUTRAL_KNOBS, "batch_size": 128}) == pytest.approx(expected)


@pytest.mark.parametrize(("budget_s", "trims"), [(None, True), (1000.0, True), (10.0, False)])
def test_the_race_ends_at_its_verdict_only_where_the_trims_first_race_fits_the_budget(
    tmp_path, monkeypatch, budget_s, trims
):
    """The winner has three changes: the trim's first race is it, its three variants and the baseline, three rounds
    of five 2 s runs (30 s). Where that does not fit, the race runs its winner's rounds out itself."""
    study, confirmation, _ = tuned(tmp_path)
    told = []
    monkeypatch.setattr(app, "run_race", lambda *args, **kwargs: told.append(args[8:11:2]) or confirmation)
    monkeypatch.setattr(app, "run_trim", lambda *args, **kwargs: [])
    clock = RunClock(budget_s=budget_s)
    clock.count(measured(2.0))
    full = SimpleNamespace(study=replace(settings(tmp_path), confirm_rounds=3, diagnose=False, budget_s=budget_s))
    runner = SimpleNamespace(new_draw=lambda: None)
    app._finish(study, this_machine_id(), full, runner, None, tmp_path, print, io.StringIO(), clock)
    ((trimmed, park),) = told
    assert bool(trimmed(confirmation.winner)) is trims
    assert park is (budget_s is None), "under a budget every finalist races: the trim's fit is known at the verdict"
