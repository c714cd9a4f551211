"""A configuration (or the probe) whose every run the budget's cap ended needs more than its longest such run: only a
run that can give it more runs it again (``RunClock.affords``, ``Proposal.capped_s``, ``ProbeRecord.capped_s``); one
that cannot leaves it owed, says so, and goes on without it. So each run of it gets more than the last, the same
budget never loops on it, and no tuner of the machine stores it as a fault for want of time."""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace

from optuna.trial import TrialState

from autotune import app
from autotune.config.load import load_settings
from autotune.measure.environment import this_machine_id
from autotune.records import CAPPED_ATTR, CONFIG_ATTR, config_key, interrupted
from autotune.results.tuner_time import PROBE_STEP
from autotune.study.clock import Kept, RunClock
from autotune.study.probe_model import capped_probe_s, probe_once
from autotune.study.search_state import counted_trials
from autotune.study.start import open_study
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import TrialResult
from tests.conftest import fake_measurement, tiny_config
from tests.study.test_budget_capped_trial import capped
from tests.study.test_tuner import BASELINE, META, SPACE, FakeMeasure, settings


def clock_with(left_s: float) -> RunClock:
    """A run's clock with ``left_s`` seconds of study.budget_s left and a run of 1 s measured (the budget applies)."""
    clock = RunClock(budget_s=left_s)
    clock.count(TrialResult(BASELINE, fake_measurement(100.0), wall_s=1.0))
    return clock


def fits(clock: RunClock):
    """The search's budget check (``app`` ``next_trial_fits``): a search trial's time, a capped one's need."""
    return lambda done, proposal: clock.affords(
        clock.screen_s(), "search trial", capped_s=proposal.capped_s if proposal is not None else None
    )


class Hangs(FakeMeasure):
    """The first configuration searched (kept in ``hung``, across runs) never finishes: the budget's cap ends each of
    its runs after all ``clock`` had left (each such time kept in ``given``); the others are measured."""

    def __init__(self, hung: list[str], clock: RunClock):
        super().__init__()
        self.hung, self.clock = hung, clock
        self.given: list[float] = []

    def __call__(self, knobs, name, on_progress=None):
        self.calls.append((name, dict(knobs)))
        self.hung[:] = self.hung or [config_key(knobs)]
        if config_key(knobs) in self.hung:
            self.given.append(self.clock.left_s())
            return capped(knobs, self.given[-1])
        return TrialResult(knobs, fake_measurement(100.0))


def one_run(study, tmp_path, hung, left_s, n_trials=2, **more):
    """A tuning run of ``left_s`` seconds of budget: its measure, its clock and its stop."""
    clock = clock_with(left_s)
    measure = Hangs(hung, clock)
    budget = settings(tmp_path, n_trials=n_trials, budget_s=left_s, **more)
    stop = tune(study, SPACE, budget, measure, lambda e: None, affords=fits(clock))
    return measure, clock, stop


def runs_of(study, key: str) -> list[float]:
    """How long each run of configuration ``key`` the cap ended ran, as its trials keep it (CAPPED_ATTR)."""
    return [
        t.user_attrs[CAPPED_ATTR]
        for t in study.trials
        if t.user_attrs.get(CONFIG_ATTR) == key and CAPPED_ATTR in t.user_attrs
    ]


def no_fault(study, key: str) -> bool:
    """Whether no trial of ``key`` is stored as its failure: each left for later (interrupted), none counted."""
    of_it = [t for t in study.trials if t.user_attrs.get(CONFIG_ATTR) == key]
    return all(interrupted(t) for t in of_it if t.state is TrialState.FAIL)


def test_a_run_capped_needs_more_than_it_ran_never_less_than_the_usual_estimate_and_says_so():
    clock = clock_with(100.0)
    assert clock.affords(1.0, "search trial", capped_s=79.0), "~99 s of 100 s: a quarter more than it ran"
    assert not clock.affords(1.0, "search trial of batch_size=32", capped_s=81.0), "~101 s of 100 s"
    (said,) = clock.left_out
    assert said.startswith("search trial of batch_size=32 (it ran 81 s, all the budget had left, and needs ~101 s; ")
    assert said.endswith(" s left)")
    assert not clock.affords(150.0, "another", capped_s=10.0), "never less than the usual estimate"


def test_a_run_capped_near_the_users_timeout_needs_no_more_than_its_processes_may_take():
    # Capped after 90 s with measure.trial_timeout_s=95: a run that can give it 95 s settles it, measured or timed out.
    clock = RunClock(budget_s=100.0, trial_timeout_s=95.0)
    clock.count(TrialResult(BASELINE, fake_measurement(100.0), wall_s=1.0))
    assert clock.affords(1.0, "search trial", capped_s=90.0), "~95 s of 99 s: not a quarter more, 112 s"
    assert not clock.affords(1.0, "search trial", capped_s=90.0, kept=Kept(10.0, "the race")), "95 s and 10 kept"


def test_a_run_with_the_same_budget_leaves_a_capped_configuration_owed_and_measures_the_others(tmp_path):
    study, hung = open_study(settings(tmp_path), META), []
    ensure_baseline(study, BASELINE, FakeMeasure())
    first, _, _ = one_run(study, tmp_path, hung, 300.0)
    (key,) = hung
    assert len(first.given) == 1 and runs_of(study, key) == first.given, "the time it was given, kept typed"
    measure, clock, stop = one_run(study, tmp_path, hung, 300.0, n_trials=4, max_consecutive_failures=1)
    assert key not in [config_key(knobs) for _, knobs in measure.calls], "not measured again: no loop"
    assert not stop.aborted and counted_trials(study) == 4, "the others measured"
    assert no_fault(study, key), "still owed, no fault"
    (ran_s,) = runs_of(study, key)
    assert any(f" (it ran {ran_s:.0f} s, all the budget had left, and needs ~" in said for said in clock.left_out)


def test_a_run_with_a_larger_budget_measures_a_capped_configuration_first_with_more_time(tmp_path):
    study, hung = open_study(settings(tmp_path), META), []
    ensure_baseline(study, BASELINE, FakeMeasure())
    one_run(study, tmp_path, hung, 300.0)
    (key,) = hung
    measure, _, stop = one_run(study, tmp_path, hung, 400.0, n_trials=3, max_consecutive_failures=1)
    assert config_key(measure.calls[0][1]) == key, "measured first"
    assert not stop.aborted and no_fault(study, key), "ended by the cap again, with more time: still no fault"
    first, second = runs_of(study, key)
    assert second > first, "each run of it gets more time than the last"
    measure, _, _ = one_run(study, tmp_path, hung, 400.0, n_trials=4)
    assert key not in [config_key(knobs) for _, knobs in measure.calls], "400 s no longer gives it more"
    hung.clear()  # a larger budget: it ends, measured
    done = FakeMeasure()
    tune(
        study,
        SPACE,
        settings(tmp_path, n_trials=5, budget_s=600.0),
        done,
        lambda e: None,
        affords=fits(clock_with(600.0)),
    )
    assert config_key(done.calls[0][1]) == key and counted_trials(study) == 5, "measured first, and counted"


def test_two_tuners_cannot_store_a_capped_configuration_as_a_fault(tmp_path):
    """Tuner A's cap leaves X owed; tuner B of the machine, with less left than X ran, does not take it up (it did,
    with a plain trial's expected time, and its own cap ended X again); with more left, it gives X more."""
    study, hung = open_study(settings(tmp_path), META), []
    ensure_baseline(study, BASELINE, FakeMeasure())
    one_run(study, tmp_path, hung, 200.0)  # tuner A
    (key,) = hung
    b, _, stop = one_run(study, tmp_path, hung, 100.0, n_trials=3, max_consecutive_failures=1)  # tuner B
    assert key not in [config_key(knobs) for _, knobs in b.calls] and not stop.aborted
    c, _, stop = one_run(study, tmp_path, hung, 300.0, n_trials=4, max_consecutive_failures=1)  # tuner C
    assert config_key(c.calls[0][1]) == key and not stop.aborted
    assert no_fault(study, key) and len(runs_of(study, key)) == 2, "capped twice, each with more: owed, no fault"


def probe_guide(tmp_path, left_s: float, runs: list):
    """``app._guide`` of a study whose stored probe the budget's cap ended after 200 s, in a run of ``left_s``
    seconds left; its probes run are appended to ``runs``."""
    config = tiny_config(study={"n_trials": 3, "probe": True, "budget_s": left_s})
    loaded = load_settings(config, "tiny")
    loaded = replace(loaded, study=replace(loaded.study, storage=f"sqlite:///{tmp_path}/study.db"))
    study = open_study(settings(tmp_path), META)
    if capped_probe_s(study) is None:
        probe_once(study, SPACE, BASELINE, lambda plan: capped(BASELINE, 200.0), 100.0)
    baseline = TrialResult(loaded.baseline, fake_measurement(100.0), wall_s=1.0)
    runner = SimpleNamespace(device="cpu", probe=lambda plan: runs.append(plan) or capped(BASELINE, left_s))
    ctx = SimpleNamespace(cpu_count=4, torch_threads=4)
    clock = clock_with(left_s)
    app._guide(study, SPACE, loaded, ctx, runner, baseline, this_machine_id(), io.StringIO(), clock)
    return clock, study


def test_a_capped_probe_is_probed_again_only_by_a_run_that_can_give_it_more(tmp_path):
    runs: list = []
    clock, study = probe_guide(tmp_path, 200.0, runs)
    assert runs == [], "the same budget: the search goes on without it"
    (said,) = [s for s in clock.left_out if s.startswith(f"{PROBE_STEP} (")]
    assert said.startswith(f"{PROBE_STEP} (it ran 200 s, all the budget had left, and needs ~250 s")
    _, study = probe_guide(tmp_path, 400.0, runs)
    assert len(runs) == 1, "more budget: probed anew"
    assert capped_probe_s(study) > 200.0, "capped again with more time: left for a run that gives it more still"
