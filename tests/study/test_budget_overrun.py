"""No step runs a run past study.budget_s by a timeout: each process is given at most what the budget has left
(``RunClock.timeout_s``), its reason saying where that, not measure.trial_timeout_s, ended it; a round the budget
ran out in is not counted (the race is cut before it); a disturbed run is measured again only where the budget has
time for it; the profiles are asked of the budget only where some are still to be measured."""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace

from autotune import app
from autotune.measure.environment import this_machine_id
from autotune.records import PROFILES_ATTR, on_machine
from autotune.results.finalist import Finalist
from autotune.results.profile import ProfileRecord, TunedProfiles
from autotune.runner import TrialRunner
from autotune.study import clock as clock_module
from autotune.study.clock import RunClock, ended_by_budget
from autotune.study.disturbed import again_if_disturbed
from autotune.study.run_race import race
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.results.profile_records import profile_result
from tests.study.test_budget import measured
from tests.study.test_disturbed import BASELINE, Runs, run_of
from tests.study.test_trim import tuned
from tests.study.test_tuner import settings
from tests.study.test_tuner_time import _settings


def timed_out(timeout_s: float, words: str = "") -> TrialResult:
    """A run its timeout of ``timeout_s`` ended, its reason followed by ``words``."""
    failure = Failure(FailureKind.TIMEOUT, f"timeout after {timeout_s:g} s{words}")
    return TrialResult(BASELINE, failure=failure, wall_s=timeout_s)


def test_a_process_is_given_no_longer_than_the_budget_has_left_and_its_reason_says_the_budget_ended_it(
    tmp_path, monkeypatch
):
    now = [0.0]
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(monotonic=lambda: now[0], time=lambda: 1.7e9))
    given = []
    monkeypatch.setattr(  # each process's timeout as it starts (``TrialRunner._repeated``)
        "autotune.runner.run_repeated",
        lambda request, repeats, timeout_s, *rest: given.append(timeout_s()) or timed_out(given[-1]),
    )
    monkeypatch.setattr(
        "autotune.runner.run_trial",
        lambda request, timeout_s, *rest, **more: given.append(timeout_s) or timed_out(timeout_s),
    )
    settings_ = _settings(tmp_path)
    user_s = settings_.measure.trial_timeout_s
    clock = RunClock(budget_s=100.0, trial_timeout_s=user_s)
    runner = TrialRunner(settings_, "cpu", tmp_path / "trials", clock=clock)
    first = runner.run(BASELINE, "baseline")
    assert given == [user_s] and not ended_by_budget(first), "before a run was measured: the baseline always runs"
    now[0] = 20.0
    clock.count(measured(20.0))
    now[0] = 77.45
    for ran in (runner.run(BASELINE, "confirm-2-baseline"), runner.probe(None)):
        assert given[-1] == 22.5 < user_s, "what the budget has left, to a tenth of a second down"
        assert ended_by_budget(ran)
        assert str(ran.failure) == (
            f"timeout: timeout after 22.5 s: all that study.budget_s had left of its 100 s, not "
            f"measure.trial_timeout_s={user_s:g}"
        )
    roomy = RunClock(budget_s=10_000.0, trial_timeout_s=user_s)
    roomy.count(measured(20.0))
    ran = TrialRunner(settings_, "cpu", tmp_path / "trials", clock=roomy).run(BASELINE, "trial")
    assert given[-1] == user_s and not ended_by_budget(ran), "the user's timeout, where the budget has more"
    assert str(ran.failure) == f"timeout: timeout after {user_s:g} s"


def test_a_round_the_budget_ran_out_in_is_not_counted_and_the_race_is_cut_before_it():
    finalist = Finalist("0", {**BASELINE, "batch_size": 32}, 1, 100.0)
    by_name = {
        "confirm-1-baseline": run_of(100.0),
        "confirm-1-trial-0": run_of(110.0),
        "confirm-2-trial-0": run_of(111.0, disturbed=True),  # round 2 runs the finalist first
        "confirm-2-baseline": RunClock(budget_s=60.0).as_ended_by_budget(timed_out(3.0), 3.0, 600.0),
    }
    asked = []
    affords = lambda runs, step: asked.append(step) or True  # noqa: E731 (each round expected to fit)
    cut = race([finalist], BASELINE, {}, 3, "confirm", Runs(by_name), lambda n, r: None, affords=affords)
    assert cut.cut and cut.failure is None, "cut by the budget, not ended by a failed baseline run"
    assert cut.baseline_throughputs == [100.0] and cut.finalists[0].throughputs == [110.0], "round 2 taken back"
    assert cut.finalists[0].dropped is None and cut.disturbed == {}, "nor its slowed run counted"
    assert asked == ["confirm rounds 1 to 3", "confirm rounds 2 to 3", "confirm rounds 2 to 3"], "said left out"
    again = Runs(
        {f"confirm-{r}-{who}": run_of(v) for r in (2, 3) for who, v in (("baseline", 100.0), ("trial-0", 110.0))}
    )
    went_on = race([finalist], BASELINE, {}, 3, "confirm", again, lambda n, r: None, start=cut)
    assert again.names[0].startswith("confirm-2-") and went_on.rounds == 3 and went_on.winner is not None


def test_a_disturbed_run_is_measured_again_only_where_the_budget_has_time_for_it():
    told, asked = [], []
    runs = Runs({"baseline": run_of(50.0, disturbed=True), "baseline-again": run_of(100.0)})
    spent = again_if_disturbed(runs, lambda n, r: told.append(n), None, lambda k, s: asked.append(s) and False)
    assert spent(BASELINE, "baseline").timing.throughput == 50.0, "the first run counted, though slowed"
    assert runs.names == ["baseline"] and told == [] and asked == ["baseline measured again (slowed)"]
    runs = Runs({"baseline": run_of(50.0, disturbed=True), "baseline-again": run_of(100.0)})
    roomy = again_if_disturbed(runs, lambda n, r: told.append(n), None, lambda k, s: True)
    assert roomy(BASELINE, "baseline").timing.throughput == 100.0 and told == ["baseline"]


def test_a_run_measured_again_is_expected_to_take_what_its_configurations_processes_take():
    clock = RunClock(budget_s=10.0, repeats=2)
    clock.count(measured(6.0))
    assert clock.again_s(BASELINE | {"batch_size": 16}) == 12.0, "its two processes"
    assert not clock.affords(clock.again_s(BASELINE | {"batch_size": 16}), "baseline measured again (slowed)")


def test_the_profiles_are_asked_of_the_budget_only_where_some_are_still_to_be_measured(tmp_path, monkeypatch):
    study, confirmation, _ = tuned(tmp_path)
    monkeypatch.setattr(app, "run_race", lambda *args, **kwargs: confirmation)
    monkeypatch.setattr(app, "run_trim", lambda *args, **kwargs: [])
    profiled = []
    monkeypatch.setattr(app, "profile_tuned", lambda *args: profiled.append(args[1]))
    full = SimpleNamespace(study=replace(settings(tmp_path), confirm_rounds=3, diagnose=True), batch_policy="free")
    runner = SimpleNamespace(new_draw=lambda: None)
    spent = RunClock(budget_s=0.0)  # nothing left: no profile would fit
    spent.count(measured(2.0))
    app._finish(study, this_machine_id(), full, runner, None, tmp_path, print, io.StringIO(), spent)
    assert profiled == [] and spent.left_out[0].startswith("the profiles (study.diagnose) (~4 s needed"), "two to do"

    def record(label, knobs):
        return ProfileRecord("p", "cpu", label, knobs, {}, "s", profile_result())

    stored = TunedProfiles(
        record("baseline", BASELINE | {"batch_size": 16}), record("recommended", confirmation.winner.knobs)
    )
    study.set_user_attr(on_machine(PROFILES_ATTR, this_machine_id()), stored.to_dict())
    clock = RunClock(budget_s=0.0)
    clock.count(measured(2.0))
    app._finish(study, this_machine_id(), full, runner, None, tmp_path, print, io.StringIO(), clock)
    assert len(profiled) == 1 and clock.left_out == [], "both stored: nothing to measure, nothing left out"
