"""That the budget's cap ended a run is a typed fact (``Failure.budget_cut``), set by ``RunClock.as_ended_by_budget``
and read by ``ended_by_budget``: it survives every way a result is stored, and no words in a failure's message, the
user's own exception text included, make a run count as ended by the budget."""

from __future__ import annotations

import json

from autotune.study.clock import BUDGET_CUT, RunClock, ended_by_budget
from autotune.trial.result import Failure, FailureKind, TrialResult

KNOBS = {"batch_size": 32}


def timed_out(after_s: float, words: str = "") -> TrialResult:
    """A run its timeout ended after ``after_s``, its reason followed by ``words``."""
    return TrialResult(
        KNOBS, failure=Failure(FailureKind.TIMEOUT, f"timeout after {after_s:g} s{words}"), wall_s=after_s
    )


def test_a_failure_whose_message_holds_the_budgets_words_is_not_ended_by_the_budget():
    raised = Failure(FailureKind.EXCEPTION, f"ValueError: used {BUDGET_CUT} of its 60 s")  # the user's own text
    assert not ended_by_budget(TrialResult(KNOBS, failure=raised))
    assert not ended_by_budget(timed_out(30.0, f": {BUDGET_CUT} of its 60 s")), "a timeout that only says so"


def test_the_budgets_cap_marks_the_run_and_keeps_the_words_the_user_reads():
    cut = RunClock(budget_s=100.0).as_ended_by_budget(timed_out(22.5), 22.5, 300.0)
    assert ended_by_budget(cut) and cut.failure.budget_cut
    assert str(cut.failure) == (
        "timeout: timeout after 22.5 s: all that study.budget_s had left of its 100 s, not measure.trial_timeout_s=300"
    )


def test_the_users_own_timeout_is_not_marked():
    user = RunClock(budget_s=100.0).as_ended_by_budget(timed_out(300.0), 300.0, 300.0)
    assert not ended_by_budget(user) and str(user.failure) == "timeout: timeout after 300 s"


def test_the_mark_survives_a_stored_result_read_back():
    cut = RunClock(budget_s=100.0).as_ended_by_budget(timed_out(22.5), 22.5, 300.0)
    stored = TrialResult.from_dict(json.loads(json.dumps(cut.to_dict())))
    assert stored == cut and ended_by_budget(stored)


def test_a_result_stored_before_the_mark_existed_reads_as_not_ended_by_the_budget():
    stored = {"knobs": KNOBS, "failure": {"kind": "timeout", "message": "timeout after 5 s", "reading": None}}
    assert not ended_by_budget(TrialResult.from_dict(stored))
