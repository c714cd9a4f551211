"""The advice: the knob that fixes a bottleneck or the user's code to change, ranked by its expected effect."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.measurement import SystemReport
from autotune.measure.page_faults import PageFaults
from autotune.measure.profiling import CpuLoad, OperatorStat, ProfileResult
from autotune.records import ProbeRecord, TrialRecord
from autotune.results.diagnosis import COMPUTE_BOUND, DATA_BOUND, OVERHEAD_BOUND, figures, verdict
from autotune.results.finalist import Finalist
from autotune.results.profile import ProfileRecord
from autotune.results.race import Confirmation
from autotune.results.remedies import _with_tried, advise, first_to_follow
from autotune.results.remedy_model import Advice, Tried, loader_key
from autotune.results.tried import tries_of, twins, values_of
from autotune.trial.result import Failure, FailureKind, ProbePlan, ProbeResult, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement
from tests.results.profile_records import LOOP_S, hot, profile_result
from tests.results.test_summary import BASELINE, results_with, trial
from tests.study.test_tuner import fake_result

KNOBS = {**NEUTRAL_KNOBS, "batch_size": 16}


def test_a_data_bound_step_is_told_how_many_workers_keep_up_and_what_that_gains():
    # 60 ms of each 100 ms step waits for data; loading a batch takes 60 ms in one process, the rest 40 ms.
    result = profile_result(wait_share=0.6)
    (workers,) = advise(result, DATA_BOUND, KNOBS, 8, None)
    assert workers.action == "set num_workers=2" and workers.knob == "num_workers"
    assert workers.gain == pytest.approx(LOOP_S / 0.04) and "2.50x" in workers.effect
    assert workers.tried is None, "without a stored study the advice says nothing of it, the diagnosis once"
    record = ProfileRecord("mine", "cpu", "baseline", KNOBS, {"cpu_count": 8}, "mine", result)
    assert record.diagnosis.findings[-1] == (
        "no stored study 'mine' says whether the tuner tried the knobs advised: python -m autotune pipeline=mine "
        "measures them"
    )
    said = replace(record, tried=Tried("mine", {"num_workers": [0, 2]})).diagnosis
    assert not any("no stored study" in line for line in said.findings)


def test_a_stream_that_every_worker_reads_whole_is_told_to_split_before_it_takes_workers():
    result = replace(profile_result(wait_share=0.6), repeats_in_workers=True)
    (workers,) = advise(result, DATA_BOUND, KNOBS, 8, None)
    assert workers.action == (
        "split the stream across workers by torch.utils.data.get_worker_info(), then set num_workers=2"
    )
    assert workers.why.endswith("unsplit, the stream gives each of the 2 workers all its samples")
    said = _with_tried(workers, Tried("mine", {"num_workers": [0, 1]}), KNOBS)
    assert said.tried == "not tried by the tuner: study 'mine' measured num_workers at 0, 1"
    # loading 40 ms and the rest 60: one worker keeps up
    lighter = replace(profile_result(wait_share=0.4), repeats_in_workers=True)
    (one,) = advise(replace(lighter, stages=replace(lighter.stages, num_workers=0)), DATA_BOUND, KNOBS, 2, None)
    assert one.action == "set num_workers=1", "one worker reads the stream once: nothing to split"


def test_on_two_cores_at_most_two_workers_are_advised_and_the_sharing_said():
    # loading a batch takes 80 ms, the rest of the step 20 ms: four workers would keep up, two cores hold two. Those
    # two cores must hold 80 ms of loading and 20 of training a step: 50 ms at best, not the 40 of loading over two.
    (workers,) = advise(profile_result(wait_share=0.8), DATA_BOUND, KNOBS, 2, None)
    assert workers.action == "set num_workers=2" and workers.gain == pytest.approx(LOOP_S / 0.05)
    assert "share them" in workers.effect
    # on one core, a worker only takes turns with training: nothing to gain
    assert not [
        a for a in advise(profile_result(wait_share=0.6), DATA_BOUND, KNOBS, 1, None) if a.knob == "num_workers"
    ]


def test_loading_that_waits_more_than_it_works_is_told_to_take_more_workers_than_cores():
    # Loading a batch takes 80 ms and the rest of the step 20 ms: four workers keep up. The process tree used 0.3
    # cores: a core for the 20 ms of training, 10 ms of loading's 80: each worker busy 12.5 %, two cores hold 16.
    def advised(tree_cores, others=0.0):
        percent = (tree_cores + others) / 2 * 100  # the machine's two cores, busy with the tree and the others
        system = SystemReport(percent, [percent, percent], process_tree_cores=tree_cores)
        result = replace(profile_result(wait_share=0.8), cpu=CpuLoad(system, threads=1))
        return [a for a in advise(result, DATA_BOUND, KNOBS, 2, None) if a.knob == "num_workers"]

    (waiting,) = advised(0.3)
    assert waiting.action == "set num_workers=4" and waiting.gain == pytest.approx(LOOP_S / 0.02)
    assert "loading keeps a core busy 13% of its time (the rest it waits), so more workers than cores" in waiting.why
    (working,) = advised(1.0)
    assert working.action == "set num_workers=2", "loading on a core all its time: two cores hold two"
    (unknown,) = advised(0.2)  # 0 ms of loading on a core: under the reading's resolution, taken as all of it
    assert unknown.action == "set num_workers=2"
    # Other processes kept the cores busy: loading off a core may have waited for one, not for I/O.
    (crowded,) = advised(0.3, others=1.5)
    assert crowded.action == "set num_workers=2", "a busy machine cannot tell loading waiting"
    assert "share them" in working.effect and "num_threads" not in working.effect
    (full,) = advised(1.99)  # training's two threads and loading kept both cores busy: workers take them
    assert full.effect.endswith(
        "the profiled run kept 2.0 of the 2 cores busy already, so the workers take them from training's threads: "
        "this holds only with fewer of those (num_threads), which the tuner measures with it"
    )


def test_workers_beyond_the_cores_are_at_most_four_a_core():
    # Loading a batch takes 99 ms, the rest of the step 1 ms: 99 workers would keep up. The tree used 0.109 cores:
    # 1 ms of training and 9.9 ms of loading's 99 on a core, 10 %: two cores would hold 20.
    system = SystemReport(5.45, [5.45, 5.45], process_tree_cores=0.109)
    waiting = replace(profile_result(wait_share=0.99), cpu=CpuLoad(system, threads=1))
    (workers,) = [a for a in advise(waiting, DATA_BOUND, KNOBS, 2, None) if a.knob == "num_workers"]
    assert workers.action == "set num_workers=8"


def test_a_hot_function_that_waits_is_told_to_overlap_its_waiting():
    result = profile_result(wait_share=0.6, functions=[hot("time.sleep", 0.7), hot("data.py:__getitem__", 0.3)])
    (sleep,) = [a for a in advise(result, DATA_BOUND, KNOBS, 8, None) if "time.sleep" in a.why]
    assert sleep.action.startswith("loading waits in time.sleep (I/O, a sleep, a lock): more workers overlap")


def test_whether_the_tuner_tried_the_knob_comes_from_the_stored_study():
    tried = Tried("mine", {"num_workers": [0, 2]})
    (workers,) = advise(profile_result(wait_share=0.6), DATA_BOUND, KNOBS, 8, tried)
    assert workers.tried == "the tuner measured num_workers=2 (study 'mine')"
    (workers,) = advise(profile_result(wait_share=0.6), DATA_BOUND, KNOBS, 8, Tried("mine", {"num_workers": [0]}))
    assert workers.tried == "not tried by the tuner: study 'mine' measured num_workers at 0"


def test_advice_to_take_workers_is_bounded_by_the_dataloader_with_them_as_the_probe_read_it():
    """A step of 100 ms at batch 16 (160 samples/s) waits 60 ms for data: two workers would leave 40 ms (2.50x),
    were the DataLoader with them to yield 400 samples/s. Passing batches between processes can cost more."""

    def workers_advice(rate):
        tried = Tried("mine", {"num_workers": [0]}, loaders={} if rate is None else {loader_key(16, 2): rate})
        return [a for a in advise(profile_result(wait_share=0.6), DATA_BOUND, KNOBS, 8, tried) if a.knob]

    assert [a.gain for a in workers_advice(None)] == [pytest.approx(2.5)], "no probe reading: the profile's bound"
    assert [a.gain for a in workers_advice(1000.0)] == [pytest.approx(2.5)], "the loader keeps up"
    (bounded,) = workers_advice(200.0)
    assert bounded.gain == pytest.approx(1.25) and bounded.action == "set num_workers=2"
    assert bounded.effect == (
        "up to 1.25x: loading in 2 workers beside training (its DataLoader alone yields 200 samples/s: the study's "
        "probe)"
    )
    assert workers_advice(150.0) == [], "the DataLoader with 2 workers is slower than the step runs now"


def test_the_loaders_the_probe_read_are_what_the_study_tried():
    plan = ProbePlan([{"batch_size": 16, "num_workers": 0}, {"batch_size": 16, "num_workers": 2}], [KNOBS])
    probe = ProbeRecord(3.0, plan, ProbeResult([900.0, None], [500.0]), 900.0, 500.0)
    tried = tries_of(replace(results_with(), probe=probe))
    assert tried.loaders == {loader_key(16, 0): 900.0}, "a setting that did not run reads nothing"
    assert tries_of(results_with()).loaders == {}, "no probe"


def test_a_hot_library_function_gets_its_call_site_and_an_action_by_what_it_does():
    functions = [hot("PIL.Image.resize", 0.6), hot("PIL.ImageFile.load", 0.3), hot("tiny", 0.1)]
    result = profile_result(wait_share=0.6, functions=functions)
    advice = advise(result, DATA_BOUND, KNOBS, 8, None)
    resize, decode = (a for a in advice if a.location)
    assert resize.action.startswith("resize offline") and resize.location == "data.py:12"
    assert resize.why == "60% of loading time is PIL.Image.resize, called from data.py:12 (__getitem__)"
    assert decode.action.startswith("cache decoded samples")
    assert resize.gain > decode.gain, "ranked by the share of loading each takes"
    assert not [a for a in advice if "tiny" in a.why], "a function under the hot share is no advice"


def test_the_users_own_hot_function_is_bounded_by_what_it_costs_with_what_it_calls():
    """Done once, offline, a __getitem__'s loop goes with the math.sin calls it makes: 97 % of loading, not its 70 %
    self time (the step left is bounded by what removing all of it leaves)."""
    own = replace(hot("__getitem__", 0.7, own=True), cumulative_s=0.97)
    result = profile_result(wait_share=0.95, functions=[own, hot("math.sin", 0.27), hot("elsewhere", 0.03)])
    (advice,) = [a for a in advise(result, DATA_BOUND, KNOBS, 8, None) if a.action.startswith("make __getitem__")]
    assert advice.why == "97% of loading time is __getitem__ and what it calls"
    found = figures(result)
    assert advice.gain == pytest.approx(found.loop_s / (found.loop_s - found.loading_s * 0.97), rel=0.05)


def test_the_dataloaders_own_collate_is_no_work_to_do_offline():
    stack = hot("torch.utils.data._utils.collate.collate_tensor_fn → torch.stack", 0.6, call_site=None)
    result = profile_result(wait_share=0.6, functions=[stack, hot("PIL.Image.resize", 0.4)])
    advised = [a.action for a in advise(result, DATA_BOUND, KNOBS, 8, None)]
    assert not [a for a in advised if "collate_tensor_fn" in a] and any(a.startswith("resize offline") for a in advised)


def test_with_workers_that_keep_up_no_more_workers_are_advised():
    result = profile_result(wait_share=0.4, loading_s=0.05, num_workers=4)
    assert not [a for a in advise(result, DATA_BOUND, {**KNOBS, "num_workers": 4}, 8, None) if a.knob]


def test_an_overhead_bound_step_is_told_to_batch_more_and_compile():
    result = profile_result(small_operators=0.8, optimizer_share=0.2)
    decided, _ = verdict(result)
    advice = advise(result, decided, KNOBS, 8, None)
    assert decided == OVERHEAD_BOUND
    assert {a.knob for a in advice} == {"batch_size", "compile", "optimizer_impl"}
    assert [a.gain for a in advice] == sorted((a.gain for a in advice), reverse=True)
    assert next(a for a in advice if a.knob == "batch_size").action == "set batch_size=32"


def test_a_step_that_waits_on_no_core_is_not_told_to_compile_but_to_batch_more():
    # The model step sleeps: its time is outside operators, but the process used 0.02 cores: compile cannot cut it.
    waiting = profile_result(small_operators=0.8, optimizer_share=0.0)
    system = SystemReport(20.0, [20.0, 20.0], process_tree_cores=0.02)
    asleep = replace(waiting, cpu=CpuLoad(system, threads=2))
    assert {a.knob for a in advise(asleep, OVERHEAD_BOUND, KNOBS, 2, None)} == {"batch_size"}
    busy = replace(asleep, cpu=CpuLoad(replace(system, process_tree_cores=1.0), threads=2))
    assert {a.knob for a in advise(busy, OVERHEAD_BOUND, KNOBS, 2, None)} == {"batch_size", "compile"}


@pytest.mark.parametrize(
    ("options", "advised"), [(None, "foreach"), (["foreach", "fused"], "foreach"), (["fused"], "fused"), ([], None)]
)
def test_a_costly_optimizer_step_is_told_to_take_an_implementation_its_optimizer_has(options, advised):
    # A profile stored before the options were read: foreach; an optimizer that takes neither: nothing to set.
    result = replace(profile_result(small_operators=0.8, optimizer_share=0.2), optimizer_options=options)
    actions = [a.action for a in advise(result, OVERHEAD_BOUND, KNOBS, 8, None) if a.knob == "optimizer_impl"]
    assert actions == ([f"set optimizer_impl={advised}"] if advised else [])


@pytest.mark.parametrize(("options", "advised"), [(["foreach", "fused"], "fused"), (["foreach"], None), (None, None)])
def test_on_a_gpu_the_optimizer_advice_is_never_the_foreach_its_default_runs(options, advised):
    # PyTorch's default is foreach for CUDA parameters: setting it changes nothing; fused is the step left to take.
    gpu = profile_result(small_operators=0.8, optimizer_share=0.2, device_busy=0.2)
    result = replace(gpu, optimizer_options=options)
    advice = [a for a in advise(result, OVERHEAD_BOUND, KNOBS, 8, None) if a.knob == "optimizer_impl"]
    assert [a.action for a in advice] == ([f"set optimizer_impl={advised}"] if advised else [])
    assert all("run as foreach" in a.why for a in advice)


def test_a_leak_comes_first_and_gc_pauses_are_advised_with_their_share():
    result = profile_result(tree_mb=[300.0 + 5 * i for i in range(30)], gc_share=0.05)
    advice = advise(result, verdict(result)[0], KNOBS, 8, None)
    assert advice[0].action.startswith("find what keeps growing") and "a step" in advice[0].why
    gc = next(a for a in advice if "gc.freeze" in a.action)
    assert gc.gain == pytest.approx(1 / 0.95)


def test_a_step_that_faults_in_fresh_pages_is_told_to_keep_freed_memory_with_the_kernels_time_as_its_gain():
    faulting = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)  # 16 MiB a step
    advice = advise(profile_result(faults=faulting), "", KNOBS, 8, None)
    keep = next(a for a in advice if a.knob == "malloc")
    assert keep.action.startswith("set malloc=keep") and "16 MiB of fresh pages a step" in keep.why
    assert keep.gain == pytest.approx(1 / 0.8), "no workers: the kernel's share of the whole step, loading included"

    def malloc_advice(faults, knobs=KNOBS, glibc=True, workers=0, sample_bytes=1024):
        result = replace(profile_result(faults=faults, num_workers=workers), sample_bytes=sample_bytes)
        return [
            a for a in advise(result, "", {**knobs, "num_workers": workers}, 8, None, glibc=glibc) if a.knob == "malloc"
        ]

    assert not malloc_advice(faulting, {**KNOBS, "malloc": "keep"}), "already kept"
    assert not malloc_advice(faulting, glibc=False), "another C library: no malloc knob"
    assert not malloc_advice(replace(faulting, system_s=0.01)), "the kernel's time does not show the faults"
    # 16 samples of 1 MiB a batch from workers: the 16 MiB a step are the batch's own shared-memory block
    assert not malloc_advice(faulting, workers=2, sample_bytes=2**20)
    (with_workers,) = malloc_advice(faulting, workers=2, sample_bytes=2**10)
    wait = figures(profile_result(faults=faulting, num_workers=2)).wait_s
    assert with_workers.gain == pytest.approx(LOOP_S / (LOOP_S - 0.2 * (LOOP_S - wait))), "waiting, it faults nothing"


def test_slow_copies_to_a_gpu_are_told_to_pin_memory():
    result = profile_result(transfer_share=0.2, device_busy=0.9)
    advice = advise(result, verdict(result)[0], KNOBS, 8, None)
    assert any(a.knob == "pin_memory" for a in advice)
    assert not any(a.knob == "pin_memory" for a in advise(result, "", {**KNOBS, "pin_memory": True}, 8, None))


def test_costly_collating_is_advised_with_its_share_of_loading():
    advice = advise(profile_result(wait_share=0.6, collate_share=0.5), DATA_BOUND, KNOBS, 8, None)
    collate = next(a for a in advice if "collate" in a.action)
    assert collate.why == "collating takes 36% of loading (≥ 30%)" and collate.gain > 1
    assert not [a for a in advise(profile_result(wait_share=0.6), DATA_BOUND, KNOBS, 8, None) if "collate" in a.action]


def test_collating_samples_that_are_tensors_already_is_told_their_bytes_cost_not_their_types():
    stacking = hot("torch.utils.data._utils.collate.collate_tensor_fn → torch.stack", 0.4)
    result = profile_result(wait_share=0.6, collate_share=0.5, functions=[stacking, hot("data.py:__getitem__", 0.6)])
    (copy,) = [a for a in advise(result, DATA_BOUND, KNOBS, 8, None) if "collat" in a.action]
    assert copy.action.startswith("store samples smaller") and "tensors already" in copy.action
    assert copy.why == "collating takes 36% of loading (≥ 30%), 80% of it copying tensors into the batch (torch.stack)"


def test_where_workers_and_training_saturate_the_cores_cheaper_loading_is_advised_in_proportion():
    # a 100 ms step; a worker loads each batch for 160 ms (60 % of it decoding), training works 97 ms: 257 ms of work
    functions = [hot("PIL.ImageFile.load", 0.6), hot("numpy.asarray", 0.4)]
    result = profile_result(wait_share=0.03, loading_s=0.16, num_workers=2, functions=functions)
    decided, _ = verdict(result)
    decode = next(a for a in advise(result, decided, {**KNOBS, "num_workers": 2}, 2, None) if a.location)
    assert decode.action.startswith("cache decoded samples") and decode.gain == pytest.approx(0.257 / (0.257 - 0.096))
    assert not [a for a in advise(result, decided, {**KNOBS, "num_workers": 2}, 16, None) if a.location]


def test_workers_that_keep_up_while_the_loop_waits_for_their_batches_are_told_to_go():
    # a 100 ms step waits 57 ms, though its worker loads a batch in 9 ms: the wait is batches passing between processes
    result = profile_result(wait_share=0.57, loading_s=0.009, num_workers=1, functions=[hot("torch.rand", 1.0)])
    advice = advise(result, DATA_BOUND, {**KNOBS, "num_workers": 1}, 8, None)
    assert [a.action for a in advice] == ["set num_workers=0"], "faster loading would not shorten the wait"
    assert advice[0].gain == pytest.approx(0.1 / (0.043 + 0.009)) and "passed between processes" in advice[0].why
    slow_loader = Tried("mine", {"num_workers": [1]}, loaders={loader_key(16, 0): 240.0})  # 1.5x the step's 160
    (bounded,) = advise(result, DATA_BOUND, {**KNOBS, "num_workers": 1}, 8, slow_loader)
    assert bounded.gain == pytest.approx(1.5) and "its DataLoader alone yields 240 samples/s" in bounded.effect


def test_a_knob_advised_true_or_false_is_found_among_the_values_the_tuner_measured():
    tried = Tried("mine", {"channels_last": [False, True]}, {}, raced={"channels_last": [False, True]})
    advice = Advice("set channels_last=True", "convolutions", "measured by the tuner only", knob="channels_last")
    said = _with_tried(advice, tried, KNOBS).tried
    assert said == "the tuner measured channels_last=True and did not recommend it (study 'mine')"


def test_what_the_tuner_measured_of_an_advised_change_is_said_beside_it():
    """Configurations measured alike but for the advised knob, at the profiled value and the advised one: their
    ratio (single runs); workers' options come with their workers, and a pair at other values says nothing."""

    def record(label: str, throughput: float, **knobs) -> TrialRecord:
        return TrialRecord(label, TrialResult(knobs={**KNOBS, **knobs}, measurement=fake_measurement(throughput)))

    workers = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}
    measured = [
        record("0", 100.0),
        record("1", 80.0, malloc="keep"),
        record("2", 150.0, **workers),
        record("3", 90.0, **workers, malloc="keep"),
        record("4", 120.0, **{**workers, "num_workers": 1}),
    ]
    tried = Tried("mine", values_of([r.result.knobs for r in measured]), {}, twins(measured), raced={})
    assert tried.twins["malloc=default->keep"] == [0.8, 0.6] and tried.twins["num_workers=0->2"] == [1.5, 1.125]
    assert tried.says("malloc", "keep", "default") == (
        "the tuner measured malloc=keep at 0.70x the same settings with malloc=default (median of 2 pairs of single "
        "runs, 0.60x to 0.80x) and did not race it (study 'mine')"
    )
    assert tried.says("num_workers", 1, 0).startswith(
        "the tuner measured num_workers=1 at 1.20x the same settings with num_workers=0 (one pair of single runs)"
    )
    assert "1.31x the same settings with num_workers=0 (median of 2 pairs of single runs, 1.12x to 1.50x)" in (
        tried.says("num_workers", 2, 0)
    )
    assert tried.says("num_workers", 2, 4).endswith("(study 'mine')"), "2 against 4 workers was not measured"


def test_advice_the_study_measured_slower_comes_last_whatever_its_estimate():
    faulting = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)
    result = profile_result(faults=faulting, gc_share=0.01)
    first = [a.knob for a in advise(result, "", KNOBS, 8, None)]
    assert first == ["amp", "malloc", "compile"], "by their estimates; compile has none"
    measured_slower = Tried("mine", {"malloc": ["default", "keep"]}, {}, {"malloc=default->keep": [0.72]})
    ranked = advise(result, "", KNOBS, 8, measured_slower)
    assert [a.knob for a in ranked] == ["amp", "compile", "malloc"], "after those without an estimate too"
    assert "0.72x the same settings with malloc=default" in ranked[-1].tried, "and says why"
    assert [a.measured_no_gain for a in ranked] == [False, False, True], "and is marked so"
    assert first_to_follow(ranked).knob == "amp" and first_to_follow(ranked[-1:]) is None, "never the one to follow"
    faster = Tried("mine", {"malloc": ["default", "keep"]}, {}, {"malloc=default->keep": [1.1]})
    assert [a.knob for a in advise(result, "", KNOBS, 8, faster)] == first


def test_advice_the_study_measured_within_noise_comes_last_and_is_not_followed_first():
    faulting = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)
    result = profile_result(faults=faulting, gc_share=0.01)
    assert [a.knob for a in advise(result, "", KNOBS, 8, None)][:2] == ["amp", "malloc"], "amp's estimate first"
    amp_alike = Tried("mine", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": [1.01, 0.99, 1.012]})
    ranked = advise(result, "", KNOBS, 8, amp_alike)
    assert [a.knob for a in ranked] == ["malloc", "compile", "amp"], "1.01x: within the race's 3 % of noise"
    assert ranked[-1].measured_no_gain and "1.01x the same settings with amp=off (median of 3 pairs" in ranked[-1].tried
    assert first_to_follow(ranked).knob == "malloc" and first_to_follow(ranked[-1:]) is None
    gained = Tried("mine", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": [1.03, 1.05]})
    assert advise(result, "", KNOBS, 8, gained)[0].knob == "amp", "4 % is beyond noise: its estimate ranks it"
    printed_as_gain = Tried("mine", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": [1.036, 1.037]})
    assert not advise(result, "", KNOBS, 8, printed_as_gain)[0].measured_no_gain, "1.04x as printed: beyond 3 %"
    printed_as_tie = Tried("mine", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": [1.031, 1.032]})
    assert advise(result, "", KNOBS, 8, printed_as_tie)[-1].measured_no_gain, "1.03x as printed: a tie"
    for small in (1.01, 0.99):
        one_pair = Tried("mine", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": [small]})
        assert advise(result, "", KNOBS, 8, one_pair)[0].knob == "amp", "one pair tells no small gain, nor loss"
    slower = Tried("mine", {"amp": ["off", "bf16"]}, {}, {"amp=off->bf16": [0.95]})
    assert advise(result, "", KNOBS, 8, slower)[-1].knob == "amp", "but one that read slower"


def test_sixteen_bits_are_credited_only_with_the_products_share_of_the_whole_model_step():
    result = profile_result(wait_share=0.0, compute_share=0.8)  # the operators fill the step: products 80 % of it
    ops = result.operators
    half = replace(result, operators=replace(ops, step_s=2 * ops.step_s, outside_operators_s=ops.step_s))
    gains = [next(a.gain for a in advise(r, COMPUTE_BOUND, KNOBS, 8, None) if a.knob == "amp") for r in (result, half)]
    assert gains == pytest.approx([1 / (1 - 0.4), 1 / (1 - 0.2)]), "operators half the step: products 40 % of it"


def test_no_worker_is_advised_beyond_one_a_core_or_where_loading_and_training_fill_the_cores():
    # 2 workers load a batch each in 250 ms, the rest of the step 60 ms: five would keep up, two cores hold two
    result = profile_result(wait_share=0.4, loading_s=0.25, num_workers=2)
    assert not [a for a in advise(result, DATA_BOUND, {**KNOBS, "num_workers": 2}, 2, None) if a.knob == "num_workers"]
    (more,) = [a for a in advise(result, DATA_BOUND, {**KNOBS, "num_workers": 2}, 8, None) if a.knob == "num_workers"]
    assert more.action == "set num_workers=5"


def test_a_compiled_step_is_not_told_to_compile_but_on_a_gpu_to_replay_cuda_graphs():
    result = profile_result(small_operators=0.8)
    advice = advise(result, OVERHEAD_BOUND, {**KNOBS, "compile": "default"}, 8, None)
    assert "compile" not in {a.knob for a in advice} and "batch_size" in {a.knob for a in advice}
    on_gpu = profile_result(small_operators=0.8, device_busy=0.2)
    (graphs,) = [
        a for a in advise(on_gpu, OVERHEAD_BOUND, {**KNOBS, "compile": "default"}, 8, None) if a.knob == "compile"
    ]
    assert graphs.action == "set compile=reduce-overhead"
    assert not [
        a
        for a in advise(on_gpu, OVERHEAD_BOUND, {**KNOBS, "compile": "reduce-overhead"}, 8, None)
        if a.knob == "compile"
    ]


@pytest.mark.parametrize(
    ("knobs", "effective_batch_size", "advised"),
    [
        ({**KNOBS, "set_to_none": True}, None, "set compile=reduce-overhead"),
        ({**KNOBS, "set_to_none": False}, None, "set compile=default"),  # gradients kept: no CUDA graphs
        ({**KNOBS, "set_to_none": True}, 32, "set compile=default"),  # micro-batches of 16 accumulated to 32
        ({**KNOBS, "set_to_none": False, "compile": "default"}, None, None),  # compiled as far as it can run
    ],
)
def test_on_a_gpu_the_compile_advice_is_a_mode_that_runs_beside_the_profiled_knobs(
    knobs, effective_batch_size, advised
):
    on_gpu = profile_result(small_operators=0.8, device_busy=0.2)
    advice = advise(on_gpu, OVERHEAD_BOUND, knobs, 8, None, effective_batch_size=effective_batch_size)
    assert [a.action for a in advice if a.knob == "compile"] == ([advised] if advised else [])
    graphs = [a for a in advice if a.action == "set compile=reduce-overhead"]
    assert all("CUDA graph" in a.why for a in graphs) and not any(
        "CUDA graph" in a.why for a in advice if a.knob == "compile" and a not in graphs
    )


def test_a_profiled_micro_batch_is_advised_the_compile_mode_that_runs_beside_its_accumulation():
    # The record keeps the batch the study accumulated gradients up to: CUDA graphs cannot run over micro-batches.
    on_gpu = profile_result(small_operators=0.8, device_busy=0.2)
    record = ProfileRecord("p", "cuda", "recommended", {**KNOBS, "batch_size": 16}, {}, "p", on_gpu)
    accumulated = replace(record, effective_batch_size=32)
    assert ProfileRecord.from_dict(accumulated.to_dict()) == accumulated

    def compile_advice(profiled: ProfileRecord) -> list[str]:
        return [a.action for a in profiled.diagnosis.advice if a.knob == "compile"]

    assert compile_advice(record) == ["set compile=reduce-overhead"]
    assert compile_advice(accumulated) == ["set compile=default"]


def test_on_one_core_fully_used_a_worker_that_costs_more_than_it_loads_is_told_to_go():
    result = profile_result(wait_share=0.5, loading_s=0.04, num_workers=1)
    (fewer,) = [a for a in advise(result, DATA_BOUND, {**KNOBS, "num_workers": 1}, 1, None) if a.knob == "num_workers"]
    assert fewer.action == "set num_workers=0"


def test_a_value_a_pruned_trial_ran_was_tried_but_a_failed_trials_was_not():
    pruned = TrialRecord(
        "1", TrialResult({**BASELINE, "num_workers": 2}, failure=Failure(FailureKind.PRUNED, "clearly slower", 50.0))
    )
    crashed = TrialRecord("2", TrialResult({**BASELINE, "num_workers": 4}, failure=Failure(FailureKind.TIMEOUT, "t")))
    tried = tries_of(results_with(trial("0", 120.0, num_workers=1), pruned, crashed))
    assert tried.values["num_workers"] == [BASELINE["num_workers"], 1, 2]
    assert tried.says("num_workers", 2).startswith("the tuner measured num_workers=2 and did not race it")


def test_a_value_the_recommendation_keeps_from_the_baseline_is_said_to_be_kept():
    # A profile of other settings than the baseline's (mode=profile ++pipeline.baseline.num_workers=2) is advised
    # back to no workers: the tuner did measure that, and recommends it by leaving it as it was.
    tried = tries_of(results_with(trial("0", 150.0, batch_size=64)))
    assert tried.recommended == {"batch_size": 64} and tried.kept["num_workers"] == BASELINE["num_workers"]
    workers = BASELINE["num_workers"]
    assert tried.says("num_workers", workers, 2) == (
        f"the tuner's recommendation keeps num_workers={workers} (study '{tried.study}')"
    )
    assert tried.says("batch_size", 64).startswith("the tuner recommends batch_size=64")
    twin = Tried(
        "mine", {"num_workers": [0, 2]}, {"batch_size": 64}, {"num_workers=2->0": [0.8]}, kept={"num_workers": 0}
    )
    assert twin.says("num_workers", 0, 2) == (
        "the tuner's recommendation keeps num_workers=0 (study 'mine'): 0.80x the same settings with num_workers=2 "
        "(one pair of single runs)"
    ), "with what it measured of the change"
    workers = tries_of(results_with(trial("0", 150.0, num_workers=4, prefetch_factor=2)))  # 2 fails here
    assert workers.recommended["num_workers"] == 4 and "prefetch_factor" not in workers.kept, "it comes with workers"
    keep = tries_of(results_with(trial("0", 90.0, batch_size=64)))
    assert keep.recommended == {} and keep.kept == BASELINE, "keeping the baseline keeps every value of it"


def test_a_change_the_trim_left_out_of_the_recommendation_is_not_advised_for_it():
    """The trim raced malloc=keep on the recommendation (paired rounds, no faster): the profile's estimate, an upper
    bound, does not advise it for the recommendation; for the baseline it is advised with what the trim found."""
    winner = trial("0", 200.0, num_threads=1, malloc="keep")
    knobs = winner.result.knobs
    proven = Confirmation([100.0] * 3, [Finalist("0", knobs, 2, 100.0, [200.0] * 3)], None, 3, trials=["0"])
    plain = {**knobs, "malloc": "default"}
    free = Finalist("0 without malloc", plain, 1, 90.0, [201.0, 199.0, 200.0], result=fake_result(plain, 200.0))
    race = Confirmation([100.0] * 3, [Finalist("0", knobs, 2, 100.0, [200.0] * 3), free], None, 3)
    tried = tries_of(replace(results_with(winner), confirmation=proven, trim=[race]))
    assert tried.recommended == {"num_threads": 1} and tried.left_out == {"malloc": "keep"}
    faulting = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)
    result = profile_result(faults=faulting, gc_share=0.01)
    assert "malloc" not in [a.knob for a in advise(result, "", plain, 8, tried)]
    (at_baseline,) = [a for a in advise(result, "", BASELINE, 8, tried) if a.knob == "malloc"]
    assert at_baseline.tried == (
        "the tuner raced malloc=keep with its recommendation's changes and left it out, no faster beyond noise "
        "(study 's')"
    )


def test_a_change_the_finalists_race_raced_on_its_winner_and_left_out_is_not_advised_for_the_recommendation():
    """The race raced the winner with malloc=keep added (a finalist tied with it, changing more): the profile's
    estimate does not advise malloc=keep for the recommendation. A finalist faster than the winner beyond noise (its
    third run failed, so it is not proven), one that changes two knobs more, one that raced no round, or a race the
    recommendation does not come from (a trial measured since), settles nothing."""
    knobs = {**BASELINE, "num_threads": 1}
    keeping = {**knobs, "malloc": "keep"}
    winner = Finalist("0", knobs, 1, 100.0, [200.0, 204.0, 198.0])
    trials = [trial("0", 200.0, num_threads=1), trial("1", 201.0, num_threads=1, malloc="keep")]

    def raced(other: Finalist, *later: TrialRecord) -> Tried:
        race = Confirmation([100.0] * 3, [winner, other], None, 3, trials=["0", "1"])
        return tries_of(replace(results_with(*trials, *later), confirmation=race))

    tied = Finalist("1", keeping, 2, 110.0, [203.0, 199.0, 199.0])
    tried = raced(tied)
    assert tried.recommended == {"num_threads": 1} and tried.left_out == {"malloc": "keep"}
    faulting = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)
    result = profile_result(faults=faulting, gc_share=0.01)
    assert "malloc" not in [a.knob for a in advise(result, "", knobs, 8, tried)]
    (at_baseline,) = [a for a in advise(result, "", BASELINE, 8, tried) if a.knob == "malloc"]
    assert at_baseline.tried.startswith("the tuner raced malloc=keep with its recommendation's changes")
    failed = replace(tied, throughputs=[230.0, 231.0], dropped="round 3 failed: signal: SIGKILL")
    assert raced(failed).left_out == {}, "faster than the winner in both rounds they both ran"
    assert raced(replace(tied, throughputs=[], dropped="round 1 failed")).left_out == {}, "it raced no round"
    two_more = Finalist("1", {**keeping, "channels_last": True}, 3, 110.0, [203.0, 199.0, 199.0])
    assert raced(two_more).left_out == {}, "two changes added: neither is measured alone"
    since = trial("2", 300.0, batch_size=64)
    assert raced(tied, since).recommended == {"batch_size": 64}, "the race is stale: trial 2 ran since"
    assert raced(tied, since).left_out == {}, "the recommendation does not come from that race"


@pytest.mark.parametrize(("ndim", "advised"), [(4, True), (3, False), (2, False), (None, False)])
def test_channels_last_is_advised_for_convolutions_only_where_the_inputs_can_go_channels_last(ndim, advised):
    result = profile_result(wait_share=0.0)
    ops = result.operators
    convolution = OperatorStat("aten::mkldnn_convolution", 10, ops.step_operators[0].self_cpu_s)
    convolved = replace(result, operators=replace(ops, step_operators=[convolution, *ops.step_operators]))
    profiled = replace(convolved, input_ndim=ndim)
    knobs = [a.knob for a in advise(profiled, COMPUTE_BOUND, KNOBS, 8, None)]
    assert ("channels_last" in knobs) is advised, knobs
    assert ProfileResult.from_dict(profiled.to_dict()) == profiled


def test_where_saturated_cores_are_freed_training_takes_no_less_than_its_work_on_the_cores_its_threads_use():
    # a 100 ms step on 2 cores: a worker loads each batch for 160 ms (60 % decoding), training works 97 ms; the cores'
    # 200 ms hold both, training's part 75.5 ms: on one thread it takes that alone, however little loading costs
    functions = [hot("PIL.ImageFile.load", 0.6), hot("numpy.asarray", 0.4)]
    saturated = profile_result(wait_share=0.03, loading_s=0.16, num_workers=2, functions=functions)

    def decode_gain(threads: int) -> float:
        result = replace(saturated, cpu=CpuLoad(SystemReport(99.0, [99.0, 99.0], 1.98), threads=threads))
        advice = advise(result, verdict(result)[0], {**KNOBS, "num_workers": 2}, 2, None)
        return next(a.gain for a in advice if a.location)

    assert decode_gain(threads=1) == pytest.approx(0.257 / (2 * 0.097)), "training's 75.5 ms on its one core"
    assert decode_gain(threads=2) == pytest.approx(0.257 / (0.257 - 0.096)), "on both cores: in proportion"


def test_where_workers_take_more_of_the_cores_than_loadings_time_says_cheaper_loading_still_gains():
    # 16 saturated cores, training on one thread: loading's 300 ms a batch against training's 90 ms puts training's
    # share of the cores' time above the 90 ms it took beside loading, a floor over the step measured.
    functions = [hot("PIL.ImageFile.load", 0.6), hot("numpy.asarray", 0.4)]
    saturated = profile_result(wait_share=0.1, loading_s=0.3, num_workers=8, functions=functions)
    busy = CpuLoad(SystemReport(99.0, [99.0] * 16, 15.9), threads=1)
    result = replace(saturated, cpu=busy)
    advice = advise(result, verdict(result)[0], {**KNOBS, "num_workers": 8}, 16, None)
    assert next(a.gain for a in advice if a.location) > 1.0


def test_on_a_gpu_whose_study_measured_fp16_and_no_bf16_the_amp_advice_sets_fp16_and_reads_what_it_measured():
    result = profile_result(wait_share=0.0, device_busy=0.9)
    fp16_only = Tried("s", {"amp": ["off", "fp16"]}, {"amp": "fp16"})
    (amp,) = [a for a in advise(result, COMPUTE_BOUND, KNOBS, 8, fp16_only) if a.knob == "amp"]
    assert amp.action == "set amp=fp16 (the study measured fp16, not bf16)"
    assert amp.tried == "the tuner recommends amp=fp16 (study 's')"
    both = Tried("s", {"amp": ["off", "bf16", "fp16"]}, {"amp": "bf16"})
    (amp,) = [a for a in advise(result, COMPUTE_BOUND, KNOBS, 8, both) if a.knob == "amp"]
    assert amp.action.startswith("set amp=bf16") and amp.tried == "the tuner recommends amp=bf16 (study 's')"
    on_cpu = profile_result(wait_share=0.0)
    (amp,) = [a for a in advise(on_cpu, COMPUTE_BOUND, KNOBS, 8, Tried("s", {"amp": ["off"]})) if a.knob == "amp"]
    assert amp.action.startswith("set amp=bf16"), "a CPU takes no fp16"


def test_a_transfer_stage_that_converts_to_channels_last_is_said_to_hold_the_conversion_beside_the_copy():
    result = profile_result(transfer_share=0.2, device_busy=0.9)
    (copy,) = [a for a in advise(result, COMPUTE_BOUND, KNOBS, 8, None) if a.knob == "pin_memory"]
    assert copy.why == "copying batches to the GPU takes 20% of the step (≥ 10%)"
    converted = {**KNOBS, "channels_last": True}
    (both,) = [a for a in advise(result, COMPUTE_BOUND, converted, 8, None) if a.knob == "pin_memory"]
    assert both.why == "copying batches to the GPU and converting them to channels_last take 20% of the step (≥ 10%)"
    assert both.effect.endswith("less what the layout conversion takes (pinning leaves it)")


def test_an_operator_whose_name_merely_holds_conv_gets_no_channels_last_advice():
    result = replace(profile_result(wait_share=0.0), input_ndim=4)
    ops = result.operators
    converting = OperatorStat("aten::_convert_indices_from_coo_to_csr", 10, ops.step_operators[0].self_cpu_s)
    sparse = replace(result, operators=replace(ops, step_operators=[converting, *ops.step_operators]))
    assert "channels_last" not in [a.knob for a in advise(sparse, COMPUTE_BOUND, KNOBS, 8, None)]
