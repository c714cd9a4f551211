"""Which trials show that their batch size fits in memory (``batch_limit._trained``)."""

from __future__ import annotations

from autotune.records import TrialRecord
from autotune.results.batch_limit import _trained
from autotune.trial.result import Failure, FailureKind, TrialResult


def test_a_trial_stopped_after_its_first_steps_shows_its_batch_fits_whether_pruned_or_stopped_for_its_loss():
    knobs = {"batch_size": 128}
    pruned = Failure(FailureKind.PRUNED, "more than 25% below the best so far", reading=1695.8)
    nan = Failure(FailureKind.INCORRECT, "the loss is nan, not a finite number; more than 25% below", reading=1695.8)
    failed_first = Failure(FailureKind.INCORRECT, "the loss is nan, not a finite number")
    assert _trained(TrialRecord("0", TrialResult(knobs, failure=pruned)))
    assert _trained(TrialRecord("1", TrialResult(knobs, failure=nan))), "its steps ran before the pruner stopped it"
    assert not _trained(TrialRecord("2", TrialResult(knobs, failure=failed_first))), "nothing measured, no reading"
    assert not _trained(TrialRecord("3", TrialResult(knobs, failure=Failure(FailureKind.TIMEOUT, "timeout"))))


def test_a_trial_the_pruner_stopped_after_a_loss_that_was_not_finite_counts_its_values_as_tried():
    stopped = Failure(FailureKind.INCORRECT, "the loss is nan, not a finite number; more than 25% below", reading=12.0)
    assert stopped.ran_steps and Failure(FailureKind.PRUNED, "slow", reading=12.0).ran_steps
    assert not Failure(FailureKind.INCORRECT, "the loss is nan, not a finite number").ran_steps
