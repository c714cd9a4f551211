"""A profile's verdict and its advice read the same waits: those of the steps that began an epoch of a DataLoader with
workers once an epoch, as a long run pays them, not as often as the timed steps happened to hold them
(``autotune/results/epochs.py``); the verdict's rule says so where that differs from the timed steps' share."""

from __future__ import annotations

import pytest

from autotune.results.diagnosis import COMPUTE_BOUND, DATA_BOUND, DATA_BOUND_WAIT, figures, verdict
from autotune.results.profile import ProfileRecord
from autotune.results.remedies import advise
from tests.results.profile_records import hot
from tests.results.test_profile_advice_review import LOADING_S, REST_S, WORKERS, restarting

STEPS, AT = 30, 12  # timed steps; the one that began an epoch
STEADY_S = 0.001  # every other step's wait for data


def one_epoch_start(wait_s: float, epoch: int, functions=None):
    """``STEPS`` timed steps of two workers waiting ``STEADY_S`` for data, but ``wait_s`` at step ``AT``, which began
    an epoch of ``epoch`` steps."""
    waits = [STEADY_S] * STEPS
    waits[AT] = wait_s
    return restarting(waits, [AT], dataset_len=16 * epoch, functions=functions)


def long_run_share(wait_s: float, epoch: int) -> float:
    """The wait's share of a long run's step: the epoch's start once in ``epoch`` steps."""
    wait = (STEPS - 1) * STEADY_S / STEPS + wait_s / epoch
    return wait / (REST_S + wait)


def test_an_epoch_start_in_a_short_window_does_not_make_the_verdict_data_bound_where_a_long_run_is_not():
    result = one_epoch_start(0.250, epoch=1000)
    assert result.stages.wait_share >= DATA_BOUND_WAIT, "the timed steps alone read data-bound"
    assert long_run_share(0.250, 1000) < DATA_BOUND_WAIT
    decided, rules = verdict(result)
    assert decided == COMPUTE_BOUND
    assert rules[0].value == pytest.approx(long_run_share(0.250, 1000))
    assert str(rules[0]).startswith("waiting for data, of the step (epoch starts' waits once an epoch): 6.7% < 30%")
    assert rules[0].gist == "waiting for data 7%"


def test_the_verdict_states_the_wait_share_the_advice_reckons_its_gains_from():
    record = ProfileRecord("p", "cpu", "baseline", WORKERS, {"cpu_count": 8}, "p", one_epoch_start(0.250, epoch=40))
    diagnosis = record.diagnosis
    share = long_run_share(0.250, 40)
    assert diagnosis.rules[0].startswith(
        f"waiting for data, of the step (epoch starts' waits once an epoch): {share:.1%} < 30%"
    )
    (persist,) = [a for a in diagnosis.advice if a.knob == "persistent_workers"]
    loop = REST_S / (1 - share)  # the step the verdict's share is of (the rest of it as timed)
    assert persist.gain == pytest.approx(loop / (loop - (0.250 - LOADING_S) / 40))


def test_workers_that_persist_refill_from_empty_at_an_epochs_start_and_that_wait_counts_once_an_epoch_too():
    """A batch's loading at the epoch's start, no batch loaded ahead: the verdict needs no knobs to read it, and the
    advice for workers that persist reckons from the same step, with no advice to keep them."""
    refill = 0.060
    result = one_epoch_start(refill, epoch=40, functions=[hot("time.sleep", 1.0)])
    assert verdict(result)[1][0].value == pytest.approx(long_run_share(refill, 40))
    advice = advise(result, DATA_BOUND, {**WORKERS, "persistent_workers": True}, 8, None)
    assert not [a for a in advice if a.knob == "persistent_workers"]
    (sleep,) = [a for a in advice if "time.sleep" in a.why]
    steady = (STEPS - 1) * STEADY_S / STEPS  # batches passed between processes
    assert sleep.gain == pytest.approx(figures(result).loop_s / (REST_S + steady + (refill - LOADING_S) / 40))
    assert figures(result).loop_s == pytest.approx(REST_S + steady + refill / 40)


def test_a_window_with_no_epoch_start_or_none_recorded_reads_as_timed_and_says_nothing_of_epochs():
    waits = [STEADY_S] * STEPS
    waits[AT] = 0.250
    for starts in ([], None):  # none began there; a profile stored before the starts were recorded
        result = restarting(waits, starts, dataset_len=16 * 1000)
        decided, rules = verdict(result)
        assert (decided, rules[0].value) == (DATA_BOUND, result.stages.wait_share)
        assert str(rules[0]).startswith("waiting for data, of the step: ")
