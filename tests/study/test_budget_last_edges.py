"""study.budget_s's last edges: a run measured again inside a round leaves the rest of the round its time
(``RunClock.affords_again``); each of measure.repeats processes is capped by what the budget has left as it starts,
and one the cap ended says so; what a search trial keeps back for the race is said apart from its own time."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from autotune import app
from autotune.results.finalist import Finalist
from autotune.runner import TrialRunner
from autotune.study import clock as clock_module
from autotune.study.clock import Kept, RunClock, ended_by_budget
from autotune.study.disturbed import again_if_disturbed
from autotune.study.run_race import race
from autotune.trial import runner as trial_runner
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.study.test_budget import measured
from tests.study.test_disturbed import BASELINE, run_of
from tests.study.test_tuner_time import _settings

FAST = {**BASELINE, "batch_size": 32}


def stopped_clock(monkeypatch) -> list[float]:
    """The clock module's time, held at what the list returned says (seconds), moved on by hand."""
    now = [0.0]
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(monotonic=lambda: now[0], time=lambda: 1.7e9))
    return now


def test_a_run_measured_again_in_a_round_leaves_the_rest_of_the_round_its_time(monkeypatch):
    now = stopped_clock(monkeypatch)
    clock = RunClock(budget_s=200.0, trial_timeout_s=300.0)

    def run(knobs, name, on_progress=None):  # a 30 s process, ended where the budget's cap is shorter
        timeout_s = clock.timeout_s(300.0)
        if timeout_s < 30.0:
            now[0] += timeout_s
            failed = TrialResult(knobs, failure=Failure(FailureKind.TIMEOUT, f"timeout after {timeout_s:g} s"))
            result = clock.as_ended_by_budget(replace(failed, wall_s=timeout_s), timeout_s, 300.0)
        else:
            now[0] += 30.0
            slowed = name == "confirm-3-baseline"
            result = replace(run_of(110.0 if knobs == FAST else 100.0, slowed), knobs=knobs, wall_s=30.0)
        clock.count(result)
        return result

    measured_again = again_if_disturbed(run, lambda name, result: None, None, clock.affords_again)
    now[0] = 5.0
    clock.count(replace(run_of(100.0), wall_s=30.0))  # the baseline's 30 s
    now[0] = 15.0  # rounds 1 and 2 take 120 s: round 3 (~60 s) starts with 65 s left
    raced = race([Finalist("0", FAST, 1, 100.0)], BASELINE, {}, 3, "confirm", measured_again, lambda n, r: None,
                 affords=clock.affords_round)  # fmt: skip
    assert raced.rounds == 3 and not raced.cut, "round 3's slowed baseline run counted, the finalist's run had its time"
    assert raced.winner is not None and not raced.short_of_rounds(raced.finalists[0])
    assert clock.left_out == [
        "confirm-3-baseline measured again (slowed) (~30 s, and ~30 s kept back for the rest of its round; 35 s left)"
    ]
    assert clock.rest_of_round_s() == 0.0, "every run of the round ran: outside a round, a run again needs its own"
    assert not clock.affords_again(BASELINE, "baseline measured again (slowed)")
    assert clock.left_out[-1] == "baseline measured again (slowed) (~30 s needed, 5 s left)", "its own time alone"


def test_each_repeat_is_capped_by_what_the_budget_has_left_as_it_starts_and_one_the_cap_ended_says_so(
    tmp_path, monkeypatch
):
    now = stopped_clock(monkeypatch)
    given = []

    def run_trial(request, timeout_s, workdir, name, *rest, **more):  # 25 s a process, where its timeout allows
        given.append(timeout_s)
        if timeout_s < 25.0:
            now[0] += timeout_s
            failure = Failure(FailureKind.TIMEOUT, f"timeout after {timeout_s:g} s")
            return TrialResult(request.knobs, failure=failure, wall_s=timeout_s)
        now[0] += 25.0
        return replace(measured(25.0), knobs=request.knobs)

    monkeypatch.setattr(trial_runner, "run_trial", run_trial)
    settings = _settings(tmp_path)
    settings = replace(settings, measure=replace(settings.measure, repeats=3, trial_timeout_s=30.0))
    clock = RunClock(budget_s=100.0, repeats=3, trial_timeout_s=30.0)
    clock.count(measured(20.0))
    now[0] = 60.0  # 40 s left: the first process is given the user's 30 s, the second what is left then
    result = TrialRunner(settings, "cpu", tmp_path / "trials", clock=clock).run(BASELINE, "confirm-3-baseline")
    assert given == [30.0, 15.0] and now[0] <= 100.0, "no process runs the run past its budget"
    assert ended_by_budget(result), "the cap, not measure.trial_timeout_s=30, ended the second"
    assert str(result.failure).endswith("all that study.budget_s had left of its 100 s, not measure.trial_timeout_s=30")


def test_a_step_that_keeps_time_back_says_its_own_time_and_what_it_keeps_back_apart(monkeypatch):
    now = stopped_clock(monkeypatch)
    clock = RunClock(budget_s=200.0)
    clock.count(measured(30.0))
    now[0] = 45.0
    assert not clock.affords(30.0, "search trials 1 to 8", Kept(180.0, "the race's 3 planned rounds"), per="a trial")
    assert not clock.affords(160.0, "the probe", Kept(0.0, "no race"))
    assert clock.left_out == [
        "search trials 1 to 8 (~30 s a trial, and ~180 s kept back for the race's 3 planned rounds; 155 s left)",
        "the probe (~160 s needed, 155 s left)",
    ], "not ~210 s, as if a trial took it; nothing kept back: the step's own need"
    one = SimpleNamespace(study=SimpleNamespace(confirm_rounds=1))
    assert app._race_kept(one, clock, measured(30.0), 1) == (
        clock.round_s([BASELINE], unknown=1),
        "the race's 1 planned round",
    )
