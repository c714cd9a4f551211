"""The trial worker's loop, in this process."""

from __future__ import annotations

from autotune.measure.profiler import Profiler
from autotune.measure.recorder import DONE, StepRecorder
from autotune.trial.worker import measure_training
from tests.conftest import trial_request


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
