"""The trial worker's loop, in this process."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

from autotune.measure.profiler import Profiler
from autotune.measure.recorder import DONE, Progress, StepRecorder, WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.pipeline.setup import ScaleReading
from autotune.trial import worker
from autotune.trial.result import LossCheck
from autotune.trial.worker import _skipped_steps, measure_training, run_request
from tests.conftest import trial_request

WHOLE_EPOCHS_PLAN = WindowPlan(min_steps=12, min_time_s=0.1, max_time_s=10.0, warmup=WarmupPolicy(min_steps=3))


def test_flops_are_counted_after_the_window_as_a_step_before_it_would_change_what_follows(monkeypatch):
    # A step the loop would not run, run before the window, changed the speed of the steps after it by the
    # allocator's state it left (docs/measurement.md): 1.18x a plain loop for one configuration.
    phases = []
    count = Profiler.count_flops
    monkeypatch.setattr(
        Profiler, "count_flops", lambda prof, *args: phases.append(prof.recorder.phase) or count(prof, *args)
    )
    result = measure_training(trial_request())
    assert phases == [DONE]
    assert result.measurement.compute.flops_per_sample > 0


def test_a_trial_uses_up_untimed_what_its_dataloaders_workers_load_ahead(monkeypatch):
    prepared, drained = [], []
    wrap, drain = Profiler.wrap, StepRecorder.drain
    monkeypatch.setattr(Profiler, "wrap", lambda prof, batches, n: prepared.append(n) or wrap(prof, batches, n))
    monkeypatch.setattr(StepRecorder, "drain", lambda recorder, steps: drained.append(steps) or drain(recorder, steps))
    knobs = {"num_workers": 2, "prefetch_factor": 3, "persistent_workers": True}
    result = measure_training(trial_request(**knobs))
    assert result.ok, result.failure
    assert prepared == [6], "two workers, three batches each"
    assert len(drained) == 1 and 1 <= drained[0] <= 6
    assert result.measurement.timing.warmup_steps >= 2 + drained[0]


def test_the_harness_times_whole_epochs_of_a_loader_with_workers_where_one_is_short_and_not_without_workers():
    request = trial_request(length=64)  # 4 steps an epoch at batch 16, milliseconds each
    workers = {**request.knobs, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
    result = run_request(replace(request, plan=WHOLE_EPOCHS_PLAN, knobs=workers))
    assert result.ok, result.failure
    assert result.timing.epochs >= 3 and result.timing.steps == 4 * result.timing.epochs, "12 steps at least"
    result = run_request(replace(request, plan=WHOLE_EPOCHS_PLAN))
    assert result.ok and result.timing.epochs == 0, "without workers an epoch starts without a stall"


def test_the_steps_a_window_left_out_of_its_start_are_not_counted_as_its_optimizer_steps():
    # Trimmed once it ended (StepRecorder.trimmed_steps), the window's first 10 steps ran after the scale's first
    # read: they are not the window's, nor is a skip among them (one halving: at most one of theirs).
    start, end = ScaleReading(2.0**16, 10, backoff_factor=0.5), ScaleReading(2.0**15, 110, backoff_factor=0.5)
    check, problem = _skipped_steps(LossCheck(first_loss=1.0), start, end, left_out=10)
    assert (check.optimizer_steps, check.skipped_steps, problem) == (90, 0, None)


def test_a_progress_point_is_written_only_where_it_holds_steps_the_last_did_not(tmp_path, monkeypatch):
    # A window of whole epochs is judged at an epoch's end only: Optuna takes a step once and warns at a repeat.
    monkeypatch.setattr(worker, "_PROGRESS_INTERVAL_S", 0.0)
    judged = [Progress(20, 2.0, 10.0), Progress(20, 2.0, 10.0), Progress(40, 4.0, 10.0)]
    prof = SimpleNamespace(recorder=SimpleNamespace(progress_to_judge=lambda compiling: judged.pop(0)))
    path = tmp_path / "progress.jsonl"
    report = worker._progress_writer(path, after_s=1.0, compiling=False)
    for _ in range(3):
        report(prof)
    assert [json.loads(line)["steps"] for line in path.read_text().splitlines()] == [20, 40]
