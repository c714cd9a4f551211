"""mode=profile's advice as a second review of it asked: a restart of workers that do not persist costs once an epoch,
and is known from the steps that began one, not guessed from long waits; a GPU trace without kernels reads the host's
overhead, said so, not a device idle throughout; and one pair of single runs counts as no gain only where it read
2 % slower or more."""

from __future__ import annotations

import pytest

from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import COMPUTE_BOUND, DATA_BOUND, OVERHEAD_BOUND, figures, verdict
from autotune.results.remedies import MIN_EXPECTED_GAIN, advise
from autotune.results.remedy_model import Tried
from tests.results.profile_records import hot, profile_result
from tests.results.test_profile_advice_review import KNOBS, LOADING_S, REST_S, WORKERS, restarting

RESTART_S = 0.250  # one wait of workers starting again
STEADY_S = 0.001  # every other step's wait


def persist_advice(result: ProfileResult) -> list:
    return [a for a in advise(result, DATA_BOUND, WORKERS, 8, None) if a.knob == "persistent_workers"]


def one_restart(epoch: int | None, at: int = 12, steps: int = 30) -> ProfileResult:
    """``steps`` timed steps waiting 1 ms for data, but ``RESTART_S`` at step ``at``, which began an epoch of
    ``epoch`` steps (None: a stream without a length)."""
    waits = [STEADY_S] * steps
    waits[at] = RESTART_S
    return restarting(waits, [at], dataset_len=16 * epoch if epoch else None)


def test_a_restart_costs_once_an_epoch_not_once_a_window_shorter_than_one():
    assert not persist_advice(one_restart(1000)), "220 ms beyond loading once in 1000 steps: 1.01x, under 2 %"
    result = one_restart(40)
    (persist,) = persist_advice(result)
    # A long run's step: the other steps' (the rest and their steady wait), and what the restart waited beyond
    # that wait once in 40 steps.
    step = REST_S + STEADY_S + (RESTART_S - STEADY_S) / 40
    assert figures(result).loop_s == pytest.approx(step), "the step the verdict and the advice read"
    assert persist.gain == pytest.approx(step / (step - (RESTART_S - LOADING_S) / 40))
    assert persist.why.startswith("1 of the 30 timed steps began an epoch and waited 250 ms for data")
    assert persist.effect.endswith("once an epoch of 40 steps")
    # Where a stream has no length its epoch is unknown: as often as the timed steps held them, and said so.
    (stream,) = persist_advice(one_restart(None))
    assert stream.effect.endswith("as often as the timed steps held them")


def test_every_gain_is_reckoned_from_a_step_that_pays_a_restart_once_an_epoch():
    waits = [STEADY_S] * 30
    waits[12] = RESTART_S
    result = restarting(waits, [12], dataset_len=16 * 40, functions=[hot("time.sleep", 1.0)])
    (sleep,) = [a for a in advise(result, DATA_BOUND, WORKERS, 8, None) if "time.sleep" in a.why]
    step = REST_S + STEADY_S + (RESTART_S - STEADY_S) / 40  # a long run's: the restart's excess once in 40 steps
    # Sleeping cost nothing: the steady wait (batches passed between processes) stays, and the restart, a batch's
    # loading shorter, counts beyond it once in 40 steps.
    assert sleep.gain == pytest.approx(step / (REST_S + STEADY_S + (RESTART_S - LOADING_S - STEADY_S) / 40))


def test_long_waits_where_no_epoch_began_are_no_restarts_however_regular():
    shards = [0.001] * 30
    for step in (5, 15, 25):  # a stream opening its next file every 10th batch
        shards[step] = 0.200
    assert not persist_advice(restarting(shards, [], dataset_len=None))


def test_of_long_waits_around_an_epochs_start_only_the_step_that_began_it_is_a_restart():
    waits = [0.001] * 32
    waits[10], waits[11] = 0.300, 0.120  # the longest wait one step before the epoch's start: a steady wait
    (persist,) = persist_advice(restarting(waits, [11], dataset_len=16 * 4))
    assert persist.why.startswith("1 of the 32 timed steps began an epoch and waited 120 ms for data")


def test_a_gpu_trace_without_kernels_reads_the_hosts_overhead_and_says_so_not_a_gpu_idle_throughout():
    # The profiler without CUPTI: every device time 0. The host's own work is 20 % of the model step.
    result = profile_result(device_busy=0.0, small_operators=0.2)
    assert result.operators.device == "cuda" and not result.operators.kernels_recorded
    found = figures(result)
    assert found.device_busy_share is None and found.step_overhead_share == pytest.approx(0.2)
    decided, rules = verdict(result)
    assert decided == COMPUTE_BOUND, "neither overhead-bound on a GPU read idle, nor memory-bound on no kernel time"
    said = "(no GPU kernel recorded: read on the host)"
    assert said in str(rules[1]) and said in str(rules[2])
    (compile_advice,) = [
        a for a in advise(result, OVERHEAD_BOUND, {**KNOBS, "set_to_none": True}, 8, None) if a.knob == "compile"
    ]
    rest = found.loop_s - found.wait_s
    assert compile_advice.gain == pytest.approx(found.loop_s / (found.loop_s - 0.2 * rest)), "not loop over wait"
    (batch,) = [a for a in advise(result, OVERHEAD_BOUND, KNOBS, 8, None) if a.knob == "batch_size"]
    assert batch.why.startswith("20% of the model step is per-step overhead (the host's own work: the trace recorded")
    assert (
        profile_result(device_busy=0.3).operators.kernels_recorded and not profile_result().operators.kernels_recorded
    )


@pytest.mark.parametrize(
    ("ratios", "no_gain"),
    [
        ([1.01], False),
        ([1.00], False),
        ([0.99], False),  # one pair of single runs, which vary by 6 to 20 %: no small gain nor loss told from none
        ([0.98], True),
        ([0.90], True),
        ([1.01, 1.00], True),  # two pairs or more: their median no faster beyond the race's 3 % of noise
        ([1.03, 1.02], True),
        ([1.05, 1.03], False),
    ],
)
def test_one_pair_counts_as_no_gain_only_where_it_read_2_percent_slower_or_more(ratios, no_gain):
    assert Tried("s", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": ratios}).no_gain("amp", "off", "bf16") is no_gain


def test_advice_one_pair_read_level_keeps_its_rank_and_one_it_read_slower_says_its_bound_was_not_borne_out():
    result = profile_result(wait_share=0.6, functions=[hot("PIL.Image.resize", 1.0)])

    def workers_advice(ratio: float):
        tried = Tried("s", {"num_workers": [0, 2]}, recommended={}, twins={"num_workers=0->2": [ratio]})
        advice = advise(result, DATA_BOUND, KNOBS, 4, tried)
        return advice, next(a for a in advice if a.knob == "num_workers")

    advice, level = workers_advice(1.00)
    assert advice[0] is level and not level.measured_no_gain and level.effect.startswith("up to 2.50x")
    assert "1.00x the same settings with num_workers=0 (one pair of single runs)" in level.tried
    assert "a bound from this profile" not in level.effect
    advice, slower = workers_advice(0.97)
    assert advice[-1] is slower and slower.measured_no_gain and slower.gain >= MIN_EXPECTED_GAIN
    assert slower.effect.endswith(
        "; but a bound from this profile, which the study's measurement did not bear out: the change read 0.97x the "
        "same settings with num_workers=0 (one pair of single runs)"
    )
