"""ProbeModel by the differential probe: the plan, the prediction, and the trials it puts first."""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import pytest

from autotune.knobs import KNOBS
from autotune.measure.environment import this_machine_id
from autotune.records import PROBE_ATTR, ProbeRecord, on_machine
from autotune.study.probe_model import ProbeModel, anchor_knobs, expected_probe_s, probe_once, probe_plan
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.trial.result import Failure, FailureKind, ProbeFailure, ProbeOutOfMemory, ProbeResult, TrialResult
from tests.conftest import NEUTRAL_KNOBS
from tests.study.test_tuner import META, settings

# The median of |log(a / b)| for two timings of one setting, in standard deviations of one timing's log.
MEDIAN_CHANGE = math.sqrt(2) * NormalDist().inv_cdf(0.75)
VARIED = {"batch_size": [16, 32], "num_workers": [0, 2], "num_threads": [1, 2], "amp": ["off", "bf16"]}
FIXED = {**NEUTRAL_KNOBS, "prefetch_factor": 2, "persistent_workers": True}
SPACE = SearchSpace({name: VARIED.get(name, [FIXED[name]]) for name in KNOBS})
BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16, "num_threads": 2}


def loader_rate(setting):
    return 100.0 if setting["num_workers"] == 0 else 300.0  # workers triple the loading rate


def compute_rate(knobs):
    rate = 200.0 * (1.5 if knobs["batch_size"] == 32 else 1.0)
    return rate * (0.5 if knobs["amp"] == "bf16" else 1.0) * (0.9 if knobs["num_threads"] == 1 else 1.0)


# What the probe's DataLoader raises where its workers' share of a stream holds too few samples for a batch.
NO_BATCH = "ValueError: the DataLoader yields no batch; cannot time it"


def loader_raised(plan, setting: dict) -> ProbeResult:
    """The probe's timings of ``plan`` at ``loader_rate`` and ``compute_rate``, but its DataLoader at ``setting``
    (batch size and workers), which raised ``NO_BATCH``."""
    no_batch = plan.loaders.index(setting)
    return ProbeResult(
        [None if i == no_batch else loader_rate(s) for i, s in enumerate(plan.loaders)],
        [compute_rate(k) for k in plan.computes],
        failed=[ProbeFailure("loader", no_batch, NO_BATCH)],
    )


def probe_model() -> ProbeModel:
    plan = probe_plan(SPACE, BASELINE)
    result = ProbeResult([loader_rate(s) for s in plan.loaders], [compute_rate(k) for k in plan.computes])
    return ProbeModel(plan, result)


def test_the_plan_times_every_loader_setting_and_each_compute_knob_around_the_anchor():
    plan = probe_plan(SPACE, BASELINE)
    assert plan.loaders == [{"batch_size": b, "num_workers": w} for b in (16, 32) for w in (0, 2)]
    anchor = anchor_knobs(SPACE, BASELINE)
    assert plan.computes[0] == anchor and anchor["compile"] == "off" and anchor["num_workers"] == 0
    assert len(plan.computes) == 1 + 1 + 2 + 2  # anchor, batch 32, one thread and bf16 at each batch size
    assert {(k["batch_size"], k["amp"]) for k in plan.computes} == {
        (16, "off"),
        (32, "off"),
        (16, "bf16"),
        (32, "bf16"),
    }
    optimizer_space = SearchSpace({**SPACE.candidates, "optimizer_impl": ["default", "foreach"]})
    foreach = [k for k in probe_plan(optimizer_space, BASELINE).computes if k["optimizer_impl"] == "foreach"]
    assert [k["batch_size"] for k in foreach] == [16], "the optimizer step does not depend on the batch size"


def test_a_configuration_raised_where_the_probe_saw_its_exact_model_step_setting_raise():
    plan = probe_plan(SPACE, BASELINE)
    bf16_32 = plan.computes.index({**plan.computes[0], "batch_size": 32, "amp": "bf16"})
    one_thread_32 = plan.computes.index({**plan.computes[0], "batch_size": 32, "num_threads": 1})
    result = ProbeResult(
        [loader_rate(s) for s in plan.loaders],
        [None if i in (bf16_32, one_thread_32) else compute_rate(k) for i, k in enumerate(plan.computes)],
        [ProbeOutOfMemory("compute", one_thread_32, "CUDA out of memory")],
        [ProbeFailure("compute", bf16_32, "RuntimeError: no bf16 kernel at batch 32")],
    )
    s = ProbeModel(plan, result)
    bf16_at_32 = {**BASELINE, "batch_size": 32, "amp": "bf16"}
    with_workers = {**bf16_at_32, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    assert s.raised(bf16_at_32) == s.raised(with_workers) == "RuntimeError: no bf16 kernel at batch 32"
    assert s.raised({**bf16_at_32, "batch_size": 16}) is None, "another batch size ran"
    assert s.raised({**bf16_at_32, "num_threads": 1}) is None, "two knobs changed at once: never timed"
    assert s.raised({**bf16_at_32, "compile": "default"}) is None, "the probe never compiles"
    assert s.raised({**BASELINE, "batch_size": 32, "num_threads": 1}) is None, "out of memory is bounded elsewhere"


def test_a_configuration_of_a_batch_size_at_which_every_probed_model_step_raised_is_taken_to_raise():
    plan = probe_plan(SPACE, BASELINE)
    at_32 = [i for i, k in enumerate(plan.computes) if k["batch_size"] == 32]
    failures = [ProbeFailure("compute", i, "RuntimeError: batch 32 too big") for i in at_32]
    rates = [None if i in at_32 else compute_rate(k) for i, k in enumerate(plan.computes)]
    s = ProbeModel(plan, ProbeResult([loader_rate(p) for p in plan.loaders], rates, [], failures))
    two_changes = {**BASELINE, "batch_size": 32, "amp": "bf16", "num_threads": 1}
    assert len(at_32) > 1 and s.raised(two_changes) == "RuntimeError: batch 32 too big", "never timed, yet known"
    assert s.raised({**two_changes, "batch_size": 16}) is None
    ran = at_32[-1]
    rates[ran] = compute_rate(plan.computes[ran])
    one_ran = ProbeModel(plan, replace(s.result, compute_throughputs=rates, failed=failures[:-1]))
    assert one_ran.raised(two_changes) is None, "a setting at batch 32 ran: the others may too"


def test_a_configuration_raised_where_the_probe_saw_its_loader_setting_raise():
    plan = probe_plan(SPACE, BASELINE)
    s = ProbeModel(plan, loader_raised(plan, {"batch_size": 32, "num_workers": 2}))
    error = NO_BATCH
    with_workers = {**BASELINE, "batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    assert s.raised(with_workers) == s.raised({**with_workers, "amp": "bf16", "prefetch_factor": 4}) == error
    assert s.raised({**with_workers, "num_workers": 0, "prefetch_factor": None, "persistent_workers": None}) is None
    assert s.raised({**with_workers, "batch_size": 16}) is None


def bf16_pays_at_batch_32(knobs):
    rate = 200.0 * (1.5 if knobs["batch_size"] == 32 else 1.0)
    return rate * ({16: 0.8, 32: 1.4}[knobs["batch_size"]] if knobs["amp"] == "bf16" else 1.0)


def test_a_knob_whose_gain_depends_on_the_batch_size_is_predicted_with_the_gain_at_that_size():
    plan = probe_plan(SPACE, BASELINE)
    s = ProbeModel(
        plan, ProbeResult([loader_rate(x) for x in plan.loaders], [bf16_pays_at_batch_32(k) for k in plan.computes])
    )
    assert s.compute({**BASELINE, "amp": "bf16"}) == pytest.approx(200 * 0.8)
    assert s.compute({**BASELINE, "batch_size": 32, "amp": "bf16"}) == pytest.approx(300 * 1.4)
    assert s.told_apart("amp", "bf16")
    assert not s.told_apart("num_threads", 1), "timed at batch 32 too, it is compared with the anchor at batch 32"


def with_anchor_timings(plan, rates, *anchor_timings):
    """A probe of ``plan`` whose model step settings read ``rates`` and whose anchor read ``anchor_timings``: first,
    before each knob's settings, and last."""
    first, *repeats, again = anchor_timings
    result = ProbeResult([loader_rate(x) for x in plan.loaders], [first, *rates[1:]], anchor_again=again)
    return ProbeModel(plan, replace(result, anchor_repeats=repeats))


def scaled(plan, knob, value, factor):
    """``compute_rate`` of every setting of ``plan``, those with ``knob`` at ``value`` ``factor`` times as fast as
    the same setting at the anchor's value; ``factor`` may be a function of the batch size."""
    anchor = plan.computes[0]
    by_batch = factor if callable(factor) else lambda _: factor
    return [
        compute_rate({**k, knob: anchor[knob]}) * (by_batch(k["batch_size"]) if k[knob] == value else 1.0)
        for k in plan.computes
    ]


def swinging(count, k):
    """``count`` anchor timings swinging k times above and below 200 samples/s in turn: the machine's speed
    unchanged from one knob's settings to the next (each between a high and a low timing: 200), its noise
    2 log k / MEDIAN_CHANGE, each setting's level as uncertain as a move of 2 log k makes it."""
    return [200.0 * k ** (-1) ** i for i in range(count)]


def test_a_knob_is_told_apart_only_beyond_the_noise_of_the_anchors_own_timings():
    space = SearchSpace({name: {**VARIED, "set_to_none": [True, False]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    assert len(plan.anchor_before) == 3 and plan.computes[plan.anchor_before[-1]]["set_to_none"] is False
    steady, noisy = swinging(5, 1.005), swinging(5, 1.07)  # the last: one factor's 95 % bound +47 %, -32 %

    def told(factor, anchor_timings, knob="set_to_none", value=False):
        return with_anchor_timings(plan, scaled(plan, knob, value, factor), *anchor_timings).told_apart(knob, value)

    noise = with_anchor_timings(plan, scaled(plan, "amp", "bf16", 1.0), *noisy).noise
    assert noise == pytest.approx(2 * math.log(1.07) / MEDIAN_CHANGE)
    assert told(1.2, steady), "20 % faster, the anchor's own timings within 1 %"
    assert not told(1.02, steady), "2 % faster: under 3 %, not worth a trial"
    assert not told(1.2, noisy), "20 % faster, the anchor's own timings 20 % apart"
    assert told(1.6, noisy) and told(0.6, noisy), "beyond that noise, faster or slower"
    assert told(0.5, noisy, "amp", "bf16"), "half as fast at both batch sizes"


def test_a_knob_is_told_apart_by_its_factors_mean_over_the_batch_sizes_or_by_one_of_them():
    plan = probe_plan(SPACE, BASELINE)
    # Noise 0.102: bounds one of two factors at +38 % (batch 16) and +53 % (Bonferroni's), their mean at +26 %.
    anchor_timings = swinging(4, 1.05)

    def told(at_16, at_32):
        rates = scaled(plan, "amp", "bf16", lambda batch: {16: at_16, 32: at_32}[batch])
        return with_anchor_timings(plan, rates, *anchor_timings).told_apart("amp", "bf16")

    assert told(0.4, 0.4)
    assert told(1.3, 1.3), "+30 % at both: their mean lies beyond the noise"
    assert not told(1.2, 0.9), "+20 % at one, -10 % at the other: within it"
    assert told(1.45, 0.7), "+45 % at the anchor's batch size: beyond the noise"


def test_the_machines_drift_through_the_probe_is_taken_out_of_each_knobs_factor():
    # The machine runs 1.5x as fast from the amp settings on (the anchor too): bf16, which changes nothing, read
    # 1.5x the anchor as timed.
    plan = probe_plan(SPACE, BASELINE)
    first_amp = plan.anchor_before[1]
    rates = [rate * (1.5 if i >= first_amp else 1.0) for i, rate in enumerate(scaled(plan, "amp", "bf16", 1.0))]
    drifted = with_anchor_timings(plan, rates, 200.0, 200.0, 300.0, 300.0)
    bf16 = {**plan.computes[0], "amp": "bf16"}
    assert drifted.compute(bf16) / drifted.compute(plan.computes[0]) == pytest.approx(1.0)
    stored_before = ProbeModel(plan, replace(drifted.result, anchor_repeats=[]))  # no anchor timings between knobs
    assert stored_before.compute(bf16) / stored_before.compute(plan.computes[0]) == pytest.approx(1.5)


def test_one_move_of_the_machines_speed_counts_for_the_settings_timed_in_it_not_as_every_timings_noise():
    # Found on the example: the anchor's first timing read 648 samples/s, its six others 967-974; taken as every
    # timing's noise (0.116), it hid channels_last's 1.38x. The move is counted for the settings timed in it alone.
    space = SearchSpace({name: {**VARIED, "set_to_none": [True, False]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    moved_once = [130.0, 200.0, 201.0, 199.0, 200.0]  # before the anchor's other batch size, threads, amp, set_to_none

    def told(knob, value, factor):
        return with_anchor_timings(plan, scaled(plan, knob, value, factor), *moved_once).told_apart(knob, value)

    assert with_anchor_timings(plan, scaled(plan, "amp", "bf16", 1.0), *moved_once).noise < 0.02
    assert told("set_to_none", False, 1.15), "timed while the machine held its speed: 15 % is beyond its noise"
    assert not told("set_to_none", False, 1.02), "under 3 %: not worth a trial"
    assert told("amp", "bf16", 1.15), "at the anchor's batch size, timed while the machine held its speed"
    at_32 = plan.computes.index({**plan.computes[0], "batch_size": 32})
    assert plan.anchor_before[0] > at_32, "the anchor at batch 32 is timed in the move"
    # Taken as timed at the move's middle, it reads 1.24x too fast, and bf16 at batch 32 0.81x against it: within
    # the move, not beyond the noise of the timings around the others.
    assert not told("amp", "bf16", 1.0)


def test_a_probe_without_three_anchor_timings_tells_a_knob_apart_beyond_3_percent():
    plan = probe_plan(SPACE, BASELINE)
    stored = ProbeModel(plan, ProbeResult([loader_rate(x) for x in plan.loaders], scaled(plan, "amp", "bf16", 1.04)))
    assert stored.noise is None and stored.told_apart("amp", "bf16")
    within = replace(stored.result, compute_throughputs=scaled(plan, "amp", "bf16", 1.02))
    assert not ProbeModel(plan, within).told_apart("amp", "bf16")


def test_a_value_that_ran_where_the_anchors_value_ran_out_of_memory_is_told_apart():
    plan = probe_plan(SPACE, BASELINE)
    anchor_32 = plan.computes.index({**plan.computes[0], "batch_size": 32})
    rates = [None if i == anchor_32 else rate for i, rate in enumerate(scaled(plan, "amp", "bf16", 1.0))]
    out_of_memory = [ProbeOutOfMemory("compute", anchor_32, "out of memory")]
    s = ProbeModel(plan, ProbeResult([loader_rate(x) for x in plan.loaders], rates, out_of_memory))
    assert s.told_apart("amp", "bf16"), "no faster at batch 16, yet the only way to batch 32"


def test_a_probe_record_from_before_per_batch_timing_predicts_with_the_anchor_batch_factor():
    plan = probe_plan(SPACE, BASELINE)
    anchor_at_32 = {**plan.computes[0], "batch_size": 32}
    stored = replace(plan, computes=[k for k in plan.computes if k["batch_size"] == 16 or k == anchor_at_32])
    s = ProbeModel(
        stored, ProbeResult([loader_rate(x) for x in plan.loaders], [bf16_pays_at_batch_32(k) for k in stored.computes])
    )
    assert s.compute({**BASELINE, "batch_size": 32, "amp": "bf16"}) == pytest.approx(300 * 0.8)


def test_a_value_the_probe_did_not_time_at_a_batch_size_as_far_slower_is_predicted_with_the_anchor_batch_factor():
    plan = probe_plan(SPACE, BASELINE)
    rates = [compute_rate({**k, "amp": "off"}) * (0.1 if k["amp"] == "bf16" else 1.0) for k in plan.computes]
    skipped = [i for i, k in enumerate(plan.computes) if k["amp"] == "bf16" and k["batch_size"] == 32]
    timed = [None if i in skipped else rate for i, rate in enumerate(rates)]
    s = ProbeModel(plan, ProbeResult([loader_rate(x) for x in plan.loaders], timed))
    assert skipped and s.compute({**BASELINE, "batch_size": 32, "amp": "bf16"}) == pytest.approx(300 * 0.1)
    assert s.told_apart("amp", "bf16")
    assert s.compute({**BASELINE, "batch_size": 32}) == pytest.approx(300), "the anchor there was timed"


def test_prediction_combines_loading_and_compute():
    s = probe_model()
    serial = {**BASELINE}  # no workers: load, then compute
    assert s.predict(serial) == pytest.approx(1 / (1 / 100 + 1 / 200))
    overlapped = {**BASELINE, "num_workers": 2, "batch_size": 32, "num_threads": 1}
    assert s.predict(overlapped) == pytest.approx(min(300.0, 200 * 1.5 * 0.9))


def test_on_a_gpu_the_host_loads_the_next_batch_while_the_device_computes_even_without_workers():
    s = replace(probe_model(), device="cuda")
    assert s.predict({**BASELINE}) == pytest.approx(min(100, 200))


def run_probe(plan):
    result = ProbeResult([loader_rate(s) for s in plan.loaders], [compute_rate(k) for k in plan.computes])
    return TrialResult(knobs=BASELINE, probe=result, wall_s=1.0)


def test_the_probe_runs_once_per_study_and_its_record_rebuilds_the_model(tmp_path):
    study = open_study(settings(tmp_path), META)
    calls = []
    record = probe_once(study, SPACE, BASELINE, lambda plan: calls.append(plan) or run_probe(plan), 90.0)
    assert record.baseline_loader_sps == 100.0 and record.baseline_compute_sps == 200.0
    assert probe_once(study, SPACE, BASELINE, run_probe, 90.0) == record and len(calls) == 1
    assert ProbeRecord.from_dict(study.user_attrs[on_machine(PROBE_ATTR, this_machine_id())]) == record
    rebuilt = ProbeModel.from_record(record)
    knobs = {**BASELINE, "num_workers": 2, "batch_size": 32}
    assert rebuilt.predict(knobs) == probe_model().predict(knobs)


def test_the_stored_probe_keeps_the_noise_its_anchor_timings_showed(tmp_path):
    def with_repeats(plan):
        result = run_probe(plan)
        timings = swinging(len(plan.anchor_before) + 2, 1.1)
        probe = replace(result.probe, anchor_repeats=timings[1:-1], anchor_again=timings[-1])
        return replace(result, probe=replace(probe, compute_throughputs=[timings[0], *probe.compute_throughputs[1:]]))

    record = probe_once(open_study(settings(tmp_path), META), SPACE, BASELINE, with_repeats, 90.0)
    assert record.timing_noise == pytest.approx(2 * math.log(1.1) / MEDIAN_CHANGE)
    assert record.timing_move == pytest.approx(1.1**2 - 1)
    assert ProbeRecord.from_dict(record.to_dict()) == record
    (tmp_path / "other").mkdir()
    stored_before = open_study(settings(tmp_path / "other"), META)  # a probe without anchor timings between knobs
    assert probe_once(stored_before, SPACE, BASELINE, run_probe, 90.0).timing_noise is None


def test_a_failed_probe_is_recorded(tmp_path):
    study = open_study(settings(tmp_path), META)
    failed = TrialResult(knobs=BASELINE, failure=Failure(FailureKind.TIMEOUT, "timeout after 300 s"))
    record = probe_once(study, SPACE, BASELINE, lambda plan: failed, 90.0)
    assert record.failure == "timeout: timeout after 300 s"
    assert not study.get_trials()


def test_a_probe_that_contradicts_the_measured_baseline_is_recorded_as_failed(tmp_path):
    study = open_study(settings(tmp_path), META)
    # the loader alone gave 100 samples/s at the baseline's settings: a baseline measured at 210 cannot be
    record = probe_once(study, SPACE, BASELINE, run_probe, 210.0)
    assert record.failure.startswith("its timings contradict the baseline's: the DataLoader alone gave 100.0")
    assert (
        record.wall_s == 1.0
        and ProbeRecord.from_dict(study.user_attrs[on_machine(PROBE_ATTR, this_machine_id())]) == record
    )
    (tmp_path / "other").mkdir()
    other = open_study(settings(tmp_path / "other"), META)
    assert probe_once(other, SPACE, BASELINE, run_probe, 190.0).ok, "within 2x of the baseline: noise"


def drifting(*agains: float):
    """Probes whose first model step setting reads 200 samples/s, then each of ``agains`` in turn once the others
    are timed."""
    runs = iter(agains)

    def probe(plan):
        result = run_probe(plan)
        return replace(result, probe=replace(result.probe, anchor_again=next(runs)))

    return probe


def test_a_probe_whose_machine_changed_speed_runs_again_and_twice_fails(tmp_path):
    # The machine slowed by half while the first ran (a burst of other work): its factors mix two speeds.
    steady = probe_once(open_study(settings(tmp_path), META), SPACE, BASELINE, drifting(100.0, 190.0), 90.0)
    assert steady.ok and steady.result.anchor_again == 190.0 and steady.wall_s == 2.0, "the second run is kept"
    (tmp_path / "other").mkdir()
    unsteady = probe_once(open_study(settings(tmp_path / "other"), META), SPACE, BASELINE, drifting(100.0, 90.0), 90.0)
    assert unsteady.failure == (
        "its timings drifted twice: its first model step setting read 200.0 then 90.0 samples/s; the machine "
        "slowed while it ran"
    )
    (tmp_path / "short").mkdir()
    calls = []

    def counted(plan):
        calls.append(plan)
        return drifting(100.0, 190.0)(plan)

    short = open_study(settings(tmp_path / "short"), META)
    no_time = probe_once(short, SPACE, BASELINE, counted, 90.0, affords_again=lambda: False)
    assert len(calls) == 1 and no_time.failure.startswith("its timings drifted and study.budget_s left no time"), (
        "no second run past the budget"
    )
    kept = ProbeRecord.from_dict(short.user_attrs[on_machine(PROBE_ATTR, this_machine_id())])
    assert kept.retry and not kept.ok, "stored, its out-of-memory settings counted, but to be run again"
    later = probe_once(short, SPACE, BASELINE, drifting(190.0), 90.0)
    assert later.ok and not later.retry, "a later run, the machine steady, probes anew"
    assert probe_once(short, SPACE, BASELINE, counted, 90.0) == later and len(calls) == 1, "then it stands"
    (tmp_path / "warm").mkdir()
    warmer = probe_once(open_study(settings(tmp_path / "warm"), META), SPACE, BASELINE, drifting(400.0), 90.0)
    assert warmer.ok and warmer.wall_s == 1.0, "faster last: a process's model step speeds up as it warms"


def test_only_a_half_timed_with_the_baselines_settings_can_contradict_it(tmp_path):
    def fast_loader(plan):
        return TrialResult(BASELINE, probe=ProbeResult([1000.0] * len(plan.loaders), [200.0] * len(plan.computes)))

    for name, baseline, contradicted in (
        ("same", BASELINE, True),  # the model step alone (200) under half the whole (450)
        ("default_threads", {**BASELINE, "num_threads": None}, False),  # timed at 1 thread, not torch's default
        ("compiled", {**BASELINE, "compile": "default"}, False),  # the probe times the step uncompiled
    ):
        (tmp_path / name).mkdir()
        record = probe_once(open_study(settings(tmp_path / name), META), SPACE, baseline, fast_loader, 450.0)
        assert (not record.ok) == contradicted, name
        assert not contradicted or "the model step alone gave 200.0" in record.failure


def test_a_faster_model_step_raises_the_prediction_only_where_compute_limits():
    s = probe_model()
    compute_bound = {**BASELINE, "num_workers": 2}  # loading 300, compute 200
    assert s.predict(compute_bound, compute_scale=2.0) == pytest.approx(300.0), "now the loader limits"
    assert s.predict(compute_bound) == pytest.approx(200.0)


def test_on_a_cpu_workers_and_compute_threads_share_the_cores():
    s = replace(probe_model(), cores=2)
    two_threads = {**BASELINE, "num_workers": 2}
    # 2 workers leave no core free, so compute counts as 1 thread (180 samples/s); loading takes 1/100
    # CPU-s per sample (timed without workers); both share 2 cores
    assert s.predict(two_threads) == pytest.approx(1 / ((1 / 100 + 1 / 180) / 2))
    assert s.predict(two_threads) < probe_model().predict(two_threads), "sharing the cores costs throughput"
    serial = {**BASELINE}
    assert s.predict(serial) == probe_model().predict(serial), "without workers nothing runs at the same time"


def test_compute_threads_the_workers_leave_no_core_for_gain_nothing():
    s = replace(probe_model(), cores=3)
    one, two = ({**BASELINE, "num_workers": 2, "num_threads": t} for t in (1, 2))
    assert s.predict(two) == pytest.approx(s.predict(one)), "2 workers leave 1 of 3 cores: a 2nd thread gains nothing"
    assert s.predict({**two, "num_workers": 0}) > s.predict({**one, "num_workers": 0}), "no workers: threads count"


def test_without_a_timed_thread_count_oversubscribed_compute_is_scaled_down_with_the_free_cores():
    space = SearchSpace({name: {**VARIED, "num_threads": [2]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)

    def fast_loader(setting):
        return 10 * loader_rate(setting)  # compute-bound: loading is ten times faster than the model step

    s = ProbeModel(plan, ProbeResult([fast_loader(x) for x in plan.loaders], [compute_rate(k) for k in plan.computes]))
    s = replace(s, cores=2)
    workers = {**BASELINE, "num_workers": 2}
    # 2 workers leave 1 of 2 cores: 2 threads count as 1, and 1 thread was never timed, so 200 * 1/2
    assert s.predict(workers) == pytest.approx(1 / max(1 / 3000, 1 / 100, (1 / 1000 + 1 / 100) / 2))
    assert s.predict(workers) < s.predict(BASELINE), "workers that starve the compute threads do not help"


def test_the_probes_expected_time_grows_with_the_model_steps_time_at_each_batch_size():
    plan = probe_plan(SPACE, BASELINE)  # 0.25 s a setting; at least 2 steps after 1 untimed one
    again = 2 + len(plan.anchor_before)  # the first model step setting again: first, before each knob's, last
    settings = len(plan.loaders) + len(plan.computes) + again
    assert expected_probe_s(plan, 10.0, sample_compute_s=1e-6) == pytest.approx(10.0 + 2 * 0.25 * settings, abs=1e-3)
    slow = expected_probe_s(plan, 10.0, sample_compute_s=0.01)  # a step of 16 samples takes 0.16 s, of 32 0.32 s
    anchor = plan.computes[0]
    steps = sum(3 * 0.01 * knobs["batch_size"] for knobs in [*[anchor] * again, *plan.computes])
    assert slow == pytest.approx(10.0 + 2 * 0.25 * len(plan.loaders) + 0.25 * (len(plan.computes) + again) + steps)


def test_under_accumulation_the_probes_expected_time_counts_whole_optimizer_steps():
    # A setting is 2 timed steps (0.25 s at least) after 1 untimed; accumulated to 64, micro-batches of 16 take 4 a
    # cycle (4 untimed, 4 timed) and of 32 take 2 (2 untimed, 2 timed).
    plan = probe_plan(SPACE, BASELINE)
    anchor = plan.computes[0]
    timed = [*[anchor] * (2 + len(plan.anchor_before)), *plan.computes]

    def setting_s(batch: int, untimed: int, steps: int) -> float:
        return max(0.25, steps * 0.01 * batch) + untimed * 0.01 * batch + 0.25

    cycles = {16: (4, 4), 32: (2, 2)}
    more = sum(setting_s(k["batch_size"], *cycles[k["batch_size"]]) - setting_s(k["batch_size"], 1, 2) for k in timed)
    plain = expected_probe_s(plan, 10.0, sample_compute_s=0.01)
    assert expected_probe_s(plan, 10.0, sample_compute_s=0.01, effective_batch_size=64) == pytest.approx(plain + more)
    assert more > 0


def test_torch_default_threads_are_its_own_count_not_one_per_logical_core():
    # 8 logical cores where torch starts 4 threads (one per physical core): 4 workers leave the 4 it runs free.
    varied = {"batch_size": [16], "num_workers": [0, 4], "num_threads": [1, 2, None, 8]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    baseline = {**BASELINE, "num_threads": None}
    plan = probe_plan(space, baseline)
    loading = [100.0 if s["num_workers"] == 0 else 1000.0 for s in plan.loaders]
    result = ProbeResult(loading, [400.0] * len(plan.computes))
    four_workers = {**baseline, "num_workers": 4, "prefetch_factor": 2, "persistent_workers": True}
    model = ProbeModel(plan, result, cores=8, default_threads=4)
    assert model.free_threads(four_workers) is None, "4 threads and 4 workers fit 8 cores"
    # the model step's 4 threads and the loading's CPU time share the 8 cores: (0.01 + 4 / 400) / 8 s a sample
    assert model.predict(four_workers) == pytest.approx(400.0)
    assert ProbeModel(plan, result, cores=8).predict(four_workers) == pytest.approx(200.0), "None as 8 threads"


def test_a_setting_timed_at_a_batch_where_the_anchor_ran_out_of_memory_is_predicted_from_its_own_timing():
    varied = {"batch_size": [64, 256], "amp": ["off", "bf16"], "channels_last": [False, True]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    baseline = {**BASELINE, "batch_size": 64}
    plan = probe_plan(space, baseline)

    def rate(knobs):  # fp32 at 256 ran out of memory; bf16 fits there and runs 3x the batch of 64
        if knobs["batch_size"] == 256:
            return 300.0 if knobs["amp"] == "bf16" and not knobs["channels_last"] else None
        return 125.0 if knobs["channels_last"] else 100.0

    model = ProbeModel(plan, ProbeResult([1e6] * len(plan.loaders), [rate(k) for k in plan.computes]), device="cuda")
    anchor = plan.computes[0]
    assert model.compute({**anchor, "batch_size": 256, "amp": "bf16"}) == pytest.approx(300.0)
    layout = {**anchor, "batch_size": 256, "amp": "bf16", "channels_last": True}  # its factor: the anchor batch's
    assert model.compute(layout) == pytest.approx(300.0 * 1.25)
    with pytest.raises(ValueError):  # fp32 at 256 ran out: nothing to predict it from
        model.compute({**anchor, "batch_size": 256})


def test_a_torch_default_thread_count_the_probe_did_not_time_is_predicted_at_the_core_count():
    # 12 logical cores, torch starting 6 threads: the candidates (powers of two and the count) hold no 6 and no None.
    varied = {"batch_size": [16], "num_workers": [0, 4], "num_threads": [1, 2, 4, 8, 12]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    baseline = {**BASELINE, "num_threads": None}
    plan = probe_plan(space, baseline)
    result = ProbeResult([100.0] * len(plan.loaders), [400.0] * len(plan.computes))
    assert ProbeModel(plan, result, cores=12, default_threads=6).compute(baseline) == pytest.approx(400.0)


@pytest.mark.parametrize(
    ("busy_within", "four_workers"),
    [(0.8, 500.0), (1.0, 500.0), (1.6, 250.0), (None, 250.0)],
)
def test_workers_beyond_the_cores_are_predicted_faster_only_as_far_as_the_idle_cores_allow(busy_within, four_workers):
    # 2 cores. 2 workers load 250 samples/s keeping `busy_within` cores busy; 4 workers were timed at 500. Loading
    # half waiting (1 core busy) may double with every core busy; at 1.6 of 2 cores it computes: no faster than 2.
    varied = {"batch_size": [16], "num_workers": [0, 2, 4]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    rates = {0: 125.0, 2: 250.0, 4: 500.0}
    cpu = [None if busy_within is None else busy_within / 250.0 for _ in plan.loaders]
    result = ProbeResult([rates[s["num_workers"]] for s in plan.loaders], [1000.0] * len(plan.computes))
    result = replace(result, loader_cpu=cpu, loader_others_cores=0.0)
    model = ProbeModel(plan, result, device="cuda", host_cores=2)
    assert model._loading(16, 4) == pytest.approx(four_workers)
    assert model._loading(16, 2) == 250.0, "within the cores: as timed"
