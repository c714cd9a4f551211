"""study.budget_s buys fewer trials, not an unproven pick: the search keeps back the race's planned rounds
(``app._race_s``), and a race the budget cuts short proves only by the wins its planned rounds need."""

from __future__ import annotations

import io
from types import SimpleNamespace

from autotune import app
from autotune.report.headline import headline
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.results.tuner_time import WAITING
from autotune.study import clock as clock_module
from autotune.study.clock import SEARCH, RunClock
from autotune.study.run_race import run_race
from autotune.study.start import open_study
from autotune.study.tuner import StopReason
from autotune.trial.placement import UNPINNED
from tests.study.test_budget import measured
from tests.study.test_tuner import BASELINE, META, NoisyMeasure, raced, settings


def test_a_search_trial_starts_only_where_the_races_planned_rounds_fit_after_it(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(monotonic=lambda: now[0], time=lambda: 1.7e9))
    clock = RunClock(budget_s=600.0)
    baseline = measured(20.0)
    with clock.stage("baseline"):
        now[0] += 20.0
        clock.count(baseline)
    with clock.stage(SEARCH):
        now[0] += 10.0
        clock.count(measured(10.0, batch_size=32))
    told = {}

    def search(*args):  # tune_in_slots: what the search is told of the budget
        told["fits"], waits = args[7], args[8]
        assert waits(), "the race after the others' trials fits: it waits for them"
        now[0] += 5.0  # waiting for another tuner's trial
        return StopReason("stopped here", aborted=True)

    monkeypatch.setattr(app, "tune_in_slots", search)
    study = SimpleNamespace(confirm_rounds=3, n_trials=100, probe=False, multi_objective=False, diagnose=False)
    opened = SimpleNamespace(
        study=None, machine="m", places=[UNPINNED], space=SimpleNamespace(size=1), ctx=SimpleNamespace(device="cpu")
    )
    runners = [SimpleNamespace(screen=None)]
    lines = app._RunLines(io.StringIO())
    settings_ = SimpleNamespace(study=study, batch_policy="free")
    app._search_and_finish(opened, settings_, runners, None, baseline, None, lines, clock, app._Turn())
    assert clock.record().processes[SEARCH][WAITING] == 5.0, "the search's wait for other tuners, timed as such"
    fits = told["fits"]
    trial_s, round_s = clock.screen_s(), clock.round_s([baseline.knobs], unknown=3)
    now[0] = 600.0 - (trial_s + 2 * round_s)  # the trial and one round fit, not the race's three
    assert not fits(3, None), "the race's first round alone is not what the search keeps back"
    kept, left = 3 * round_s, trial_s + 2 * round_s
    assert clock.left_out == [  # a trial's time and the race's kept back, said apart
        f"search trials 4 to 100 (~{trial_s:.0f} s a trial, and ~{kept:.0f} s kept back for the race's 3 planned "
        f"rounds; {left:.0f} s left)"
    ]
    now[0] = 600.0 - (trial_s + 3 * round_s) - 1.0
    assert fits(3, None), "the trial and the race's three rounds fit"


def test_a_race_the_budget_left_one_round_keeps_the_baseline_and_the_same_command_proves_it_from_there(tmp_path):
    single, re_runs = {16: 100.0, 32: 120.0}, {16: [100.0] * 6, 32: [110.0] * 6}
    first_round_only = lambda runs, step: "rounds 1" in step  # noqa: E731 (study.budget_s)
    cut, _ = raced(tmp_path, single, re_runs, affords=first_round_only)
    assert cut.cut and cut.rounds == 1 and cut.planned_rounds == 3
    assert cut.winner is None, "one round won of three planned proves nothing"
    study = open_study(settings(tmp_path), META)
    summary = summarise(load_results(study))
    assert summary.is_baseline and not summary.confirmed
    said = headline(summary)
    assert said.lead == "Keep your current settings." and "study.budget_s left the race too few rounds" in said.rest
    again = run_race(study, load_results(study), 3, NoisyMeasure(re_runs), lambda name, result: None)
    assert not again.cut and again.rounds == 3 and again.winner is not None, "rounds 2 and 3 run, then it is proven"
    proven = summarise(load_results(study))
    assert proven.recommended.result.knobs == {**BASELINE, "batch_size": 32} and proven.confirmed
