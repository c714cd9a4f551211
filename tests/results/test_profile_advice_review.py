"""mode=profile's verdict and advice as a review of them asked: workers starting again each epoch told from steady
waits, a larger batch that honours gradient accumulation, one 2 % rule for every advice with a gain, overhead on a GPU
read from its idle kernels, a measured change that outranks the profile's bound, the batch's gain of the whole step,
no operator time counted twice, and a file's reads taken for I/O."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.page_faults import PageFaults
from autotune.measure.profiling import OperatorStat, ProfileResult, StageTiming
from autotune.results.diagnosis import COMPUTE_BOUND, DATA_BOUND, OVERHEAD_BOUND, figures, verdict
from autotune.results.remedies import MIN_EXPECTED_GAIN, advise, first_to_follow
from autotune.results.remedy_model import Tried
from tests.conftest import NEUTRAL_KNOBS
from tests.results.profile_records import hot, profile_result

KNOBS = {**NEUTRAL_KNOBS, "batch_size": 16}
WORKERS = {**KNOBS, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}
LOADING_S, REST_S, EPOCH = 0.030, 0.017, 8  # a batch loaded in one process; the rest of the step; steps an epoch


def restarting(
    waits: list[float], starts: list[int] | None, dataset_len: int | None = 16 * EPOCH, functions=None
) -> ProfileResult:
    """Two workers that load a batch in ``LOADING_S`` behind a step that does the rest in ``REST_S``, the loop
    waiting ``waits`` for data, one a step, the steps ``starts`` beginning an epoch (None: not recorded); epochs of
    ``dataset_len`` samples (16 a batch)."""
    steps = len(waits)
    stages = StageTiming(
        steps=steps,
        batch_size=16,
        num_workers=2,
        wall_s=sum(waits) + steps * REST_S,
        wait_s=waits,
        transfer_s=[0.0] * steps,
        forward_s=[0.3 * REST_S] * steps,
        optimizer_s=[0.05 * REST_S] * steps,
        step_s=[REST_S] * steps,
        fetch_s=[0.95 * LOADING_S] * steps,
        collate_s=[0.05 * LOADING_S] * steps,
        epoch_starts=starts,
    )
    base = profile_result(num_workers=2, loading_s=LOADING_S, functions=functions)
    return replace(base, stages=stages, dataset_len=dataset_len)


def epoch_starts(steps: int = 32, first: int = 3) -> list[int]:
    """The steps that begin an epoch, every ``EPOCH`` steps from ``first``."""
    return list(range(first, steps, EPOCH))


def epoch_waits(steps: int = 32, first: int = 3) -> list[float]:
    """1 ms a step, but 120 ms where an epoch starts (``epoch_starts``) and 40 ms the step after, the second worker's
    first batch: a steady wait, not a step that began an epoch."""
    waits = [0.001] * steps
    for start in epoch_starts(steps, first):
        waits[start] = 0.120
        if start + 1 < steps:
            waits[start + 1] = 0.040
    return waits


def test_workers_starting_again_each_epoch_are_told_to_persist_with_the_gain_their_waits_cost():
    result = restarting(epoch_waits(), epoch_starts())
    assert verdict(result)[0] == DATA_BOUND
    advice = advise(result, DATA_BOUND, WORKERS, 8, None)
    (persist,) = [a for a in advice if a.knob == "persistent_workers"]
    assert persist.action == "set persistent_workers=True"
    assert persist.why.startswith(
        "4 of the 32 timed steps began an epoch and waited 120 ms for data, against a median wait of 1.0 ms"
    )
    assert persist.effect.endswith("once an epoch of 8 steps")
    found = figures(result)
    beyond_loading = (0.120 - LOADING_S) / EPOCH  # an epoch's first batch still loads
    assert persist.gain == pytest.approx(found.loop_s / (found.loop_s - beyond_loading))
    assert advice[0] is persist, "the largest gain here"


def test_waits_of_workers_starting_again_are_no_handoff_so_cheaper_loading_still_gains():
    """Booked as batches passed between processes, the restarts' waits left cheaper loading gaining nothing; each
    restart waits for its batch's loading, which a cheaper function shortens."""
    functions = [hot("time.sleep", 0.9), hot("data.py:__getitem__", 0.1)]
    result = restarting(epoch_waits(), epoch_starts(), functions=functions)
    advice = advise(result, DATA_BOUND, WORKERS, 8, None)
    (sleep,) = [a for a in advice if "time.sleep" in a.why]
    found, saved = figures(result), 0.9 * LOADING_S
    steady = (24 * 0.001 + 4 * 0.040) / 28  # the other steps' waits: batches passed between processes
    restarts = (0.120 - saved - steady) / EPOCH  # an epoch's start, its excess over them once an epoch
    assert sleep.gain == pytest.approx(found.loop_s / (REST_S + steady + restarts))
    assert sleep.gain >= MIN_EXPECTED_GAIN


def test_only_the_waits_of_steps_that_began_an_epoch_of_workers_that_do_not_persist_are_restarts():
    def persist_advice(result: ProfileResult, knobs=WORKERS) -> list:
        return [a for a in advise(result, DATA_BOUND, knobs, 8, None) if a.knob == "persistent_workers"]

    later = restarting(epoch_waits(first=6), epoch_starts(first=6))
    assert persist_advice(later), "wherever in the epoch the timed steps begin"
    waits, starts = epoch_waits(), epoch_starts()
    assert not persist_advice(restarting(waits, starts), {**WORKERS, "persistent_workers": True}), "they persist"
    scattered = [0.001] * 32
    for step in (3, 9, 20):  # no epoch began there
        scattered[step] = 0.120
    assert not persist_advice(restarting(scattered, [])), "long waits elsewhere are steady waits that vary"
    short = [0.001] * 32
    for step in starts:
        short[step] = 0.9 * LOADING_S  # far above the median, but shorter than loading a batch: nothing to save
    assert not persist_advice(restarting(short, starts))
    assert not persist_advice(restarting(waits, None)), "a profile stored before the epochs' starts: unknown"


def test_under_a_fixed_effective_batch_a_larger_micro_batch_divides_it_and_beyond_it_is_a_new_baseline_batch():
    result = profile_result(small_operators=0.7)
    assert verdict(result)[0] == OVERHEAD_BOUND

    def batch_advice(effective: int | None):
        return [
            a
            for a in advise(result, OVERHEAD_BOUND, KNOBS, 8, None, effective_batch_size=effective)
            if "batch" in a.action
        ]

    (twice,) = batch_advice(64)
    assert twice.action == "set batch_size=32" and twice.knob == "batch_size"
    assert "micro-batches of 32, 2 to the effective batch of 64 (fewer accumulation steps" in twice.effect
    (divides,) = batch_advice(48)
    assert divides.action == "set batch_size=48", "32 does not divide 48: the next micro-batch that does"
    found = figures(result)
    overhead = found.step_overhead_share * (found.loop_s - found.wait_s)
    assert divides.gain == pytest.approx(3 * found.loop_s / (overhead + 3 * (found.loop_s - overhead)))
    (beyond,) = batch_advice(16)
    assert beyond.action.startswith("set pipeline.baseline.batch_size=32: a new baseline batch, beyond the effective")
    assert beyond.knob is None, "no value of the knob the tuner could try under fixed_effective"
    assert "scale the learning rate" in beyond.effect
    (free,) = batch_advice(None)
    assert free.action == "set batch_size=32" and free.knob == "batch_size"


def test_a_batch_twice_as_large_gains_on_the_whole_step_loading_and_waiting_included():
    result = profile_result(wait_share=0.2, small_operators=0.8)
    assert verdict(result)[0] == OVERHEAD_BOUND
    (batch,) = [a for a in advise(result, OVERHEAD_BOUND, KNOBS, 8, None) if a.knob == "batch_size"]
    found = figures(result)
    overhead = found.overhead_share * (found.loop_s - found.wait_s)
    assert batch.gain == pytest.approx(2 * found.loop_s / (2 * found.loop_s - overhead))


def test_no_advice_with_a_gain_under_the_minimum_is_listed_whatever_gives_it():
    # Random numbers make the arithmetic: the products 16 bits halve are 2 % of the operators' work.
    result = profile_result(compute_share=0.8)
    step_ops = [
        OperatorStat("aten::mm", 10, 0.004),
        OperatorStat("aten::bernoulli_", 10, 0.12),
        OperatorStat("aten::add", 10, 0.056),
    ]
    sampled = replace(result, operators=replace(result.operators, step_operators=step_ops, top=step_ops))
    decided, _ = verdict(sampled)
    assert decided == COMPUTE_BOUND
    assert not [a for a in advise(sampled, decided, KNOBS, 4, None) if a.knob == "amp"], "amp at 1.01x"
    # A malloc gain of 1.015, which prints as 1.02x.
    faults = PageFaults(10, 10 * 5000, 1.0, 0.08, 4096)
    loading = profile_result(wait_share=0.8, num_workers=2, loading_s=0.15, faults=faults)
    advice = advise(loading, DATA_BOUND, {**KNOBS, "num_workers": 2}, 2, None)
    assert not [a for a in advice if a.knob == "malloc"]
    for case in (sampled, loading, profile_result(small_operators=0.7), profile_result(device_busy=0.3)):
        decided, _ = verdict(case)
        assert all(a.gain is None or a.gain >= MIN_EXPECTED_GAIN for a in advise(case, decided, KNOBS, 4, None))


def test_on_a_gpu_the_overhead_advice_gains_on_the_kernels_idle_share():
    result = profile_result(device_busy=0.3, small_operators=0.0)  # no host overhead the CPU's rule would read
    decided, _ = verdict(result)
    assert decided == OVERHEAD_BOUND
    advice = {a.knob: a for a in advise(result, decided, {**KNOBS, "set_to_none": True}, 8, None)}
    found = figures(result)
    idle = 0.7 * (found.loop_s - found.wait_s)
    assert advice["batch_size"].gain == pytest.approx(2 * found.loop_s / (2 * found.loop_s - idle))
    assert advice["batch_size"].why.startswith("70% of the model step is per-step overhead (the GPU idle")
    assert advice["compile"].gain == pytest.approx(found.loop_s / (found.loop_s - idle))
    assert found.step_overhead_share == pytest.approx(0.7)


def test_a_change_the_study_measured_slower_by_one_pair_comes_last_and_says_its_bound_was_not_borne_out():
    result = profile_result(wait_share=0.6, functions=[hot("PIL.Image.resize", 1.0)])
    for ratio in (0.98, 0.90):
        tried = Tried("s", {"num_workers": [0, 2]}, recommended={}, twins={"num_workers=0->2": [ratio]})
        advice = advise(result, DATA_BOUND, KNOBS, 4, tried)
        workers = advice[-1]
        assert workers.knob == "num_workers" and workers.measured_no_gain
        assert workers.effect.startswith("up to 2.50x")
        assert workers.effect.endswith(
            "; but a bound from this profile, which the study's measurement did not bear out: the change read "
            f"{ratio:.2f}x the same settings with num_workers=0 (one pair of single runs)"
        )
        assert first_to_follow(advice).action.startswith("resize offline")


def test_operator_time_counted_as_host_overhead_is_not_counted_again_as_memory_traffic():
    # 45 % of the model step in calls of 2 µs: host overhead; of the rest of the operators' time, 70 % products.
    result = profile_result(small_operators=0.45, compute_share=0.7)
    found = figures(result)
    assert found.overhead_share == pytest.approx(0.45)
    assert (found.compute_share, found.operator_share) == pytest.approx((0.7, 0.55))
    assert verdict(result)[0] == COMPUTE_BOUND, "not memory-bound on the dispatch it counted as overhead"


@pytest.mark.parametrize(
    ("name", "waits"),
    [
        ("_io.BufferedReader.read", True),
        ("numpy.lib.npyio.load → _io.FileIO.readinto", True),
        ("posix.read", True),
        ("_io.BytesIO.read", False),  # in memory: the bytes a decoder reads
        ("PIL.ImageFile.load → ImagingDecoder.decode", False),
    ],
)
def test_reading_a_file_is_a_wait_for_io_not_decoding(name, waits):
    result = profile_result(wait_share=0.6, functions=[hot(name, 1.0)])
    (function,) = [a for a in advise(result, DATA_BOUND, KNOBS, 8, None) if a.location]
    assert function.action.startswith("loading waits in") == waits
    assert function.action.startswith("cache decoded samples") != waits
