"""fp16's loss scaler skipping steps: counted from two reads of its scale, and a trial that mostly skipped is
incorrect. Run on the CPU with torch.amp.GradScaler("cpu") and gradients forced to infinity."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.profiler import Profiler
from autotune.measure.recorder import WINDOW
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.setup import ScaleReading, Trainer, skipped_problem, skipped_steps
from autotune.trial.result import FailureKind, TrialResult
from autotune.trial.worker import measure_training
from tests.conftest import NEUTRAL_KNOBS, trial_request

FP16 = {"amp": "fp16"}  # the amp knob's GradScaler, on whatever device the trial runs (here the CPU)


def halving(scale: float, steps: int) -> ScaleReading:
    """A reading of a scaler whose skipped step halves its scale (PyTorch's default backoff factor)."""
    return ScaleReading(scale, steps, backoff_factor=0.5)


def _trainer(model: str = "tiny.TinyCNN", **knobs) -> Trainer:
    request = trial_request(model=model)
    values = {**NEUTRAL_KNOBS, "batch_size": 8, **knobs}
    return Trainer(build_pipeline(request.pipeline), values, torch.device("cpu"))


def _steps(trainer: Trainer, count: int) -> None:
    batches = trainer.batches()
    for _ in range(count):
        trainer.train_step(trainer.to_device(next(batches)))
    batches.close()


@pytest.mark.parametrize(
    ("before", "after", "skipped"),
    [
        (halving(65536.0, 10), halving(65536.0, 40), 0),  # nothing overflowed
        (halving(65536.0, 10), halving(2.0**-14, 40), 30),  # every step halved it
        (halving(1024.0, 0), halving(256.0, 30), 2),  # two skips
        (halving(1024.0, 0), halving(1024.0, 3000), 0),  # a skip and a growth (2000 steps): at least none
        (halving(1024.0, 0), halving(4096.0, 5000), 0),  # grew twice
        (halving(2.0**-100, 0), halving(0.0, 100), 50),  # fell to zero: 50 halvings, at least
        (halving(0.0, 0), halving(0.0, 100), 100),  # a scale at zero skips every step
    ],
)
def test_skipped_steps_are_counted_from_the_scale_at_the_windows_edges(before, after, skipped):
    assert skipped_steps(before, after) == skipped


@pytest.mark.parametrize(
    ("before", "after", "left_out", "skipped"),
    [
        (halving(65536.0, 10), halving(2.0**-14, 40), 5, 25),  # every step halved it: the window's 25 too
        (halving(1024.0, 0), halving(256.0, 30), 5, 0),  # two skips, both maybe among the 5 left out
        (halving(1024.0, 0), halving(64.0, 30), 2, 2),  # four skips, two at least in the window
        (halving(0.0, 0), halving(0.0, 100), 20, 80),  # a scale at zero skips every step
    ],
)
def test_skips_are_counted_over_the_windows_steps_not_those_left_out_of_its_start(before, after, left_out, skipped):
    # A window trimmed to start just after a stall (StepRecorder.trimmed_steps) starts after the scale's first read.
    assert skipped_steps(before, after, left_out) == skipped


def test_skips_are_counted_by_the_scalers_own_backoff_factor():
    quartering = ScaleReading(1024.0, 0, backoff_factor=0.25), ScaleReading(64.0, 30, backoff_factor=0.25)
    assert skipped_steps(*quartering) == 2, "1024 -> 64 is two quarterings"
    trainer = _trainer(model="inspection.OverflowingCNN", **FP16)
    trainer.setup.grad_scaler.set_backoff_factor(0.25)
    before = trainer.scale_reading()
    _steps(trainer, 2)
    after = trainer.scale_reading()
    assert (before.backoff_factor, after.backoff_factor) == (0.25, 0.25), "read from the scaler, not assumed"
    assert after.scale == before.scale / 16 and skipped_steps(before, after) == 2


def test_a_window_that_skipped_more_than_half_its_steps_has_a_problem():
    assert skipped_problem(0, 40) is None
    assert skipped_problem(20, 40) is None
    problem = skipped_problem(21, 40)
    assert problem.startswith("the fp16 loss scaler skipped 21 of the timed window's 40 optimizer steps")
    assert skipped_problem(0, 0) is None, "a window without an optimizer step (accumulating) has nothing to judge"


def test_a_cpu_grad_scaler_halves_its_scale_at_each_overflowing_step_and_the_trainer_counts_its_steps():
    trainer = _trainer(model="inspection.OverflowingCNN", **FP16)
    assert isinstance(trainer.setup.grad_scaler, torch.amp.GradScaler)
    before = trainer.scale_reading()
    weights = [p.detach().clone() for p in trainer.pipeline.model.parameters()]
    _steps(trainer, 5)
    after = trainer.scale_reading()
    assert after.steps - before.steps == 5
    assert skipped_steps(before, after) == 5
    unchanged = zip(weights, trainer.pipeline.model.parameters(), strict=True)
    assert all(torch.equal(w, p) for w, p in unchanged), "a skipped step does no optimizer work"


def test_without_a_loss_scaler_there_is_no_reading():
    assert _trainer().scale_reading() is None


def test_fp16_whose_scaler_skips_every_step_is_incorrect_though_its_loss_is_finite():
    result = measure_training(trial_request(model="inspection.OverflowingCNN", **FP16))
    assert result.failure is not None and result.failure.kind is FailureKind.INCORRECT, result.failure
    check = result.loss_check
    assert check.optimizer_steps == result.timing.steps > 0, "one optimizer step per window step"
    # Every step skipped; counted from the scale, at least until it fell to zero (about 150 halvings from 2**16).
    assert check.skipped_steps == check.optimizer_steps or check.skipped_steps >= 100
    assert f"skipped {check.skipped_steps} of the timed window's {check.optimizer_steps} optimizer steps" in (
        result.failure.message
    )
    assert result.measurement is not None, "the measurement is kept, as for any incorrect trial"
    assert TrialResult.from_dict(result.to_dict()) == result


def test_fp16_that_trains_is_not_marked():
    result = measure_training(trial_request(**FP16))
    assert result.ok, result.failure
    assert result.loss_check.skipped_steps == 0
    assert result.loss_check.optimizer_steps == result.timing.steps


def test_the_scale_is_read_only_outside_the_timed_window(monkeypatch):
    # On CUDA each read waits for the device: inside the window it would stall the queue the loop keeps full.
    phases = []
    profilers = []
    original_init, original_read = Profiler.__init__, Trainer.scale_reading

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        profilers.append(self)

    def read(trainer):
        phases.append(profilers[-1].recorder.phase)
        return original_read(trainer)

    monkeypatch.setattr(Profiler, "__init__", init)
    monkeypatch.setattr(Trainer, "scale_reading", read)
    measure_training(trial_request(**FP16))
    assert WINDOW not in phases
