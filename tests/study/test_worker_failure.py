"""A dataset that cannot load in a DataLoader worker: two failures in workers rule out every configuration with
workers until one of them runs, as an out-of-memory rules out what needs as much memory."""

from __future__ import annotations

from autotune.knobs import KNOBS
from autotune.measure.environment import this_machine_id
from autotune.records import NOT_MEASURED_ATTR, PROBE_ATTR, ProbeRecord, on_machine
from autotune.results.model import load_results
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.trial_outcome import TrialEvent
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, ProbeFailure, ProbePlan, ProbeResult, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement
from tests.study.test_tuner import META, settings

BASE = {**NEUTRAL_KNOBS, "batch_size": 16}
VARIED = {"batch_size": [16, 32], "num_workers": [0, 2], "prefetch_factor": [2], "persistent_workers": [False]}
SPACE = SearchSpace({name: VARIED.get(name, [BASE[name]]) for name in KNOBS})
IN_A_WORKER = (
    "RuntimeError: Caught RuntimeError in DataLoader worker process 0: RuntimeError: this dataset cannot load in a "
    "worker"
)
WITH_WORKERS = {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}


def loads_only_in_the_training_process(calls: list, fails=lambda knobs: knobs["num_workers"] > 0):
    def run(knobs, name, on_progress):
        calls.append(knobs)
        if fails(knobs):
            return TrialResult(knobs, failure=Failure(FailureKind.EXCEPTION, IN_A_WORKER))
        return TrialResult(knobs, measurement=fake_measurement(10.0 * knobs["batch_size"]))

    return run


THREE_BATCHES = SearchSpace({name: {**VARIED, "batch_size": [16, 32, 64]}.get(name, [BASE[name]]) for name in KNOBS})


def test_two_failures_in_workers_rule_out_every_configuration_with_workers(tmp_path):
    # One failure may be a sample the other configurations never reach, or a passing fault: the second rules out.
    study = open_study(settings(tmp_path), META)
    calls: list = []
    ensure_baseline(study, BASE, loads_only_in_the_training_process(calls))
    for batch in (32, 16, 64, 64):  # as a sampler would, sooner or later, and again
        study.enqueue_trial({**WITH_WORKERS, "batch_size": batch})
    events: list[TrialEvent] = []
    reason = tune(
        study, THREE_BATCHES, settings(tmp_path, n_trials=20), loads_only_in_the_training_process(calls), events.append
    )
    assert [(k["batch_size"], k["num_workers"]) for k in calls if k["num_workers"]] == [(32, 2), (16, 2)]
    assert {(k["batch_size"], k["num_workers"]) for k in calls if not k["num_workers"]} == {(16, 0), (32, 0), (64, 0)}
    assert reason.message.startswith("all 6 configurations of the search space are measured or ruled out")
    second = next(t for t in study.trials if t.params.get("num_workers") == 2 and t.params["batch_size"] == 16)
    skipped = [t for t in study.trials if NOT_MEASURED_ATTR in t.user_attrs]
    why = (
        f"it loads in DataLoader workers, and trial {second.number} failed in one ({IN_A_WORKER}) while "
        "no configuration with workers ran; search.num_workers=[0] leaves them out"
    )
    assert [t.user_attrs[NOT_MEASURED_ATTR] for t in skipped] == [why], "proposed again: a duplicate of it"
    (told,) = [event for event in events if event.not_measured]  # on the console once
    assert (told.number, told.knobs["batch_size"], told.not_measured) == (skipped[0].number, 64, why)
    (listed,) = load_results(study).not_measured
    assert (listed.label, listed.reason) == (str(skipped[0].number), why)


def test_a_failure_in_a_worker_after_one_with_workers_ran_rules_nothing_out(tmp_path):
    # Workers load at batch 16 and fail at batch 32 (a sample the batch reaches, say): not the dataset refusing
    # workers, so the other configuration with workers is measured too.
    study = open_study(settings(tmp_path), META)
    calls: list = []
    at_32 = loads_only_in_the_training_process(calls, fails=lambda k: k["num_workers"] > 0 and k["batch_size"] == 32)
    ensure_baseline(study, BASE, at_32)
    study.enqueue_trial({**WITH_WORKERS, "batch_size": 16})
    study.enqueue_trial(WITH_WORKERS)
    tune(study, SPACE, settings(tmp_path, n_trials=20), at_32, print)
    assert sorted((k["batch_size"], k["num_workers"]) for k in calls) == [(16, 0), (16, 2), (32, 0), (32, 2)]
    assert not [t for t in study.trials if NOT_MEASURED_ATTR in t.user_attrs]


def test_workers_that_loaded_anywhere_keep_a_later_failure_in_a_worker_from_ruling_them_out(tmp_path):
    # The baseline loads with 2 workers at batch 16, a trial at batch 32 fails in one (a sample it reaches, say): the
    # dataset loads in workers, so batch 64 with workers is measured.
    space = SearchSpace({name: {**VARIED, "batch_size": [16, 32, 64]}.get(name, [BASE[name]]) for name in KNOBS})
    study = open_study(settings(tmp_path), META)
    calls: list = []
    at_32 = loads_only_in_the_training_process(calls, fails=lambda k: k["num_workers"] > 0 and k["batch_size"] == 32)
    ensure_baseline(study, {**BASE, **WITH_WORKERS, "batch_size": 16}, at_32)
    study.enqueue_trial(WITH_WORKERS)
    study.enqueue_trial({**WITH_WORKERS, "batch_size": 64})
    tune(study, space, settings(tmp_path, n_trials=2), at_32, print)
    assert [(k["batch_size"], k["num_workers"]) for k in calls[1:]] == [(32, 2), (64, 2)]


def test_a_configuration_ruled_out_by_failures_in_workers_is_tried_once_workers_have_loaded(tmp_path):
    # (32, 2) and (64, 2) fail in a worker and rule out (16, 2); then workers are seen loading (here the probe's,
    # stored for the machine): (16, 2) is untried again, not a configuration the study already knows.
    study = open_study(settings(tmp_path), META)
    calls: list = []
    above_16 = loads_only_in_the_training_process(calls, fails=lambda k: k["num_workers"] > 0 and k["batch_size"] > 16)
    ensure_baseline(study, BASE, above_16)
    for batch in (32, 64, 16):
        study.enqueue_trial({**WITH_WORKERS, "batch_size": batch})
    tune(study, THREE_BATCHES, settings(tmp_path, n_trials=3), above_16, print)
    (ruled,) = [t for t in study.trials if NOT_MEASURED_ATTR in t.user_attrs]
    assert ruled.params["batch_size"] == 16 and ruled.params["num_workers"] == 2
    assert [n.label for n in load_results(study).not_measured] == [str(ruled.number)]
    study.set_user_attr(on_machine(PROBE_ATTR, this_machine_id()), probe_of_workers_loading().to_dict())
    before = len(calls)
    study.enqueue_trial({**WITH_WORKERS, "batch_size": 16})
    tune(study, THREE_BATCHES, settings(tmp_path, n_trials=4), above_16, print)
    assert [(k["batch_size"], k["num_workers"]) for k in calls[before:]] == [(16, 2)]
    assert load_results(study).not_measured == [], "measured since: no longer listed as not measured"


def probe_of_workers_loading(rates=(500.0, 900.0)) -> ProbeRecord:
    loaders = [{"batch_size": 16, "num_workers": w} for w in (0, 2)]
    failed = [ProbeFailure("loader", 1, IN_A_WORKER)] if rates[1] is None else []
    return ProbeRecord(10.0, ProbePlan(loaders, [BASE]), ProbeResult(list(rates), [100.0], failed=failed))


def test_the_probes_loader_failing_in_a_worker_rules_nothing_out_and_its_workers_loading_counts(tmp_path):
    # The probe reads the dataset in its own process before it forks its workers, as no trial does: a handle opened
    # there may fail in them where a trial's workers load. Its loaders that ran with workers show workers load.
    assert not probe_of_workers_loading((500.0, None)).workers_ran
    loaded = probe_of_workers_loading()
    assert loaded.workers_ran
    study = open_study(settings(tmp_path), META)
    calls: list = []
    at_32 = loads_only_in_the_training_process(calls, fails=lambda k: k["num_workers"] > 0 and k["batch_size"] == 32)
    ensure_baseline(study, BASE, at_32)
    study.set_user_attr(on_machine(PROBE_ATTR, this_machine_id()), loaded.to_dict())
    study.enqueue_trial(WITH_WORKERS)
    study.enqueue_trial({**WITH_WORKERS, "batch_size": 16})
    tune(study, SPACE, settings(tmp_path, n_trials=2), at_32, print)
    assert [(k["batch_size"], k["num_workers"]) for k in calls[1:]] == [(32, 2), (16, 2)]
