"""A profile's verdict and its advice read the same waits: the other steps' steady wait, and what the steps that began
an epoch of a DataLoader with workers waited beyond it once an epoch, as a long run pays it, not as often as the timed
steps happened to hold them (``autotune/results/epochs.py``); the verdict's rule, and a share of the step in the
advice, say so where that differs from the timed steps' share; the saturated cores' finding reads the timed steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.measurement import SystemReport
from autotune.measure.profiling import CpuLoad, ProfileResult
from autotune.results.diagnosis import (
    COMPUTE_BOUND,
    DATA_BOUND,
    DATA_BOUND_WAIT,
    figures,
    saturation_finding,
    verdict,
)
from autotune.results.loading_remedies import _loading_busy
from autotune.results.profile import ProfileRecord
from autotune.results.remedies import advise
from autotune.results.step_remedies import _idle_s
from tests.results.profile_records import hot, profile_result
from tests.results.test_profile_advice_review import LOADING_S, REST_S, WORKERS, restarting

STEPS, AT = 30, 12  # timed steps; the one that began an epoch
STEADY_S = 0.001  # every other step's wait for data


def one_epoch_start(wait_s: float, epoch: int, functions=None):
    """``STEPS`` timed steps of two workers waiting ``STEADY_S`` for data, but ``wait_s`` at step ``AT``, which began
    an epoch of ``epoch`` steps."""
    waits = [STEADY_S] * STEPS
    waits[AT] = wait_s
    return restarting(waits, [AT], dataset_len=16 * epoch, functions=functions)


def long_run_share(wait_s: float, epoch: int, steady_s: float = STEADY_S) -> float:
    """The wait's share of a long run's step: every step waits ``steady_s``, and once in ``epoch`` steps an epoch's
    start waits ``wait_s`` instead (no less than the others)."""
    wait = steady_s + max(0.0, wait_s - steady_s) / epoch
    return wait / (REST_S + wait)


def with_epoch_start(result: ProfileResult, wait_s: float = 0.5, at: int = 3) -> ProfileResult:
    """``result`` whose timed step ``at`` began an epoch (of ``dataset_len // 16`` steps) and waited ``wait_s``, its
    collections timed over the same steps."""
    stages = result.stages
    waits = list(stages.wait_s)
    waits[at] = wait_s
    wall = stages.wall_s + wait_s - stages.wait_s[at]
    stages = replace(stages, wait_s=waits, wall_s=wall, epoch_starts=[at])
    return replace(result, stages=stages, gc=replace(result.gc, wall_s=wall))


def test_an_epoch_start_in_a_short_window_does_not_make_the_verdict_data_bound_where_a_long_run_is_not():
    result = one_epoch_start(0.250, epoch=1000)
    assert result.stages.wait_share >= DATA_BOUND_WAIT, "the timed steps alone read data-bound"
    assert long_run_share(0.250, 1000) < DATA_BOUND_WAIT
    decided, rules = verdict(result)
    assert decided == COMPUTE_BOUND
    assert rules[0].value == pytest.approx(long_run_share(0.250, 1000))
    assert str(rules[0]).startswith(
        "waiting for data, of a long run's step (epoch starts' waits once an epoch): 6.8% < 30%"
    )
    assert rules[0].gist == "waiting for data 7% of a long run's step", "the share beside the timed steps' says so"


def test_the_verdict_states_the_wait_share_the_advice_reckons_its_gains_from():
    record = ProfileRecord("p", "cpu", "baseline", WORKERS, {"cpu_count": 8}, "p", one_epoch_start(0.250, epoch=40))
    diagnosis = record.diagnosis
    share = long_run_share(0.250, 40)
    assert diagnosis.rules[0].startswith(
        f"waiting for data, of a long run's step (epoch starts' waits once an epoch): {share:.1%} < 30%"
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
    # The steady wait (batches passed between processes) stays; the refill, a batch's loading shorter, counts
    # beyond it once in 40 steps.
    after = REST_S + STEADY_S + (refill - LOADING_S - STEADY_S) / 40
    assert sleep.gain == pytest.approx(figures(result).loop_s / after)
    assert figures(result).loop_s == pytest.approx(REST_S + STEADY_S + (refill - STEADY_S) / 40)


def test_a_window_with_no_epoch_start_or_none_recorded_reads_as_timed_and_says_nothing_of_epochs():
    waits = [STEADY_S] * STEPS
    waits[AT] = 0.250
    for starts in ([], None):  # none began there; a profile stored before the starts were recorded
        result = restarting(waits, starts, dataset_len=16 * 1000)
        decided, rules = verdict(result)
        assert (decided, rules[0].value) == (DATA_BOUND, result.stages.wait_share)
        assert str(rules[0]).startswith("waiting for data, of the step: ")


def test_an_epoch_start_that_waited_as_long_as_every_other_step_changes_nothing():
    """A loop waiting 30.5 % of every step read 29.8 % and compute-bound once one step was marked an epoch's start:
    the start's steady wait was dropped from the long run's step. The excess over the steady wait is what counts."""
    # Two workers loading a batch in 200 ms behind steps that do the rest in 69.5 ms: every step waits 30.5 ms.
    unmarked = profile_result(wait_share=0.305, num_workers=2, loading_s=0.2, functions=[hot("time.sleep", 1.0)])
    marked = with_epoch_start(unmarked, wait_s=unmarked.stages.wait_s[0])
    assert verdict(unmarked)[0] == verdict(marked)[0] == DATA_BOUND
    rule = verdict(marked)[1][0]
    assert rule.value == pytest.approx(unmarked.stages.wait_share) and rule.value == pytest.approx(0.305)
    assert str(rule).startswith("waiting for data, of the step: 30.5% ≥ 30%"), "no long run to name"
    assert not figures(marked).long_run

    def sleep_gain(result: ProfileResult) -> float:
        (sleep,) = [a for a in advise(result, DATA_BOUND, WORKERS, 8, None) if "time.sleep" in a.why]
        return sleep.gain

    assert sleep_gain(marked) == pytest.approx(sleep_gain(unmarked)), "the advice alike"
    assert not [a for a in advise(marked, DATA_BOUND, WORKERS, 8, None) if a.knob == "persistent_workers"]


def test_an_epoch_start_that_waited_less_than_the_other_steps_never_reads_the_share_below_theirs():
    steady = 0.010
    waits = [steady] * STEPS
    waits[AT] = 0.001
    result = restarting(waits, [AT], dataset_len=16 * 40)
    share = verdict(result)[1][0].value
    assert share == pytest.approx(long_run_share(0.001, 40, steady)) == pytest.approx(steady / (REST_S + steady))


def test_shares_of_a_long_runs_step_beside_the_timed_steps_say_so_and_the_collections_gain_reads_it_too():
    gpu = profile_result(
        device_busy=0.8,
        num_workers=2,
        wait_share=0.01,
        loading_s=0.005,
        transfer_share=0.15,
        optimizer_share=0.15,
        gc_share=0.05,
    )
    gpu = replace(gpu, optimizer_options=["foreach", "fused"])
    for result, of in ((gpu, "the step"), (with_epoch_start(gpu), "a long run's step")):
        found = figures(result)
        assert found.long_run is (of != "the step")
        advice = {a.knob or a.action[:14]: a for a in advise(result, COMPUTE_BOUND, WORKERS, 8, None)}
        transfer = found.transfer_s / found.loop_s
        assert advice["pin_memory"].why == f"copying batches to the GPU takes {transfer:.0%} of {of} (≥ 10%)"
        optimizer = found.optimizer_s / found.loop_s
        assert advice["optimizer_impl"].why.startswith(f"the optimizer step takes {optimizer:.0%} of {of} (≥ 10%)")
        # Collections paused each timed step for their total over the timed steps; a long run's step holds them too.
        paused = result.gc.total_s / result.stages.steps
        assert advice["call gc.freeze"].gain == pytest.approx(found.loop_s / (found.loop_s - paused))


def test_saturated_cores_are_said_of_the_timed_step_over_which_they_were_read():
    result = replace(one_epoch_start(0.250, epoch=1000), cpu=CpuLoad(SystemReport(97.0, [96.0, 98.0], 1.9), threads=2))
    assert figures(result).loop_s < 0.8 * result.stages.loop_s, "a long run's step is shorter"
    line = saturation_finding(result, 2)
    assert f"each {result.stages.loop_s * 1e3:.0f} ms step, a worker loads a batch for 30 ms" in line


def test_the_cores_read_over_the_timed_steps_are_reckoned_against_the_timed_step_not_a_long_runs():
    result = replace(one_epoch_start(0.250, epoch=1000), cpu=CpuLoad(SystemReport(60.0, [50.0, 70.0], 0.5), threads=2))
    stages, found = result.stages, figures(result)
    assert found.loop_s < 0.8 * stages.loop_s, "a long run's step is shorter"
    idle = stages.loop_s * (1 - 0.5) - stages.mean("wait_s")
    assert idle > 0 and _idle_s(result) == pytest.approx(idle)
    busy = (1.2 * stages.loop_s - (stages.loop_s - stages.mean("wait_s"))) / found.loading_s  # 1.2 cores busy
    assert 0 < busy < 1 and _loading_busy(result, found) == pytest.approx(busy)
