"""A trial whose first step breaks the loss is recorded as INCORRECT even where the pruner stops it as slower before
it writes its result: the worker reports the first step's loss problem on its progress channel at once."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

from autotune.trial.result import FailureKind, LossCheck
from autotune.trial.runner import _ProgressReader, run_trial
from tests.conftest import processes_mentioning
from tests.trial.test_runner import request

NAN_LOSS = "the loss is nan, not a finite number"


def _always_slower(steps: int, throughput: float) -> str:
    return "clearly slower"


def test_a_trial_stopped_as_slower_after_its_first_loss_was_wrong_is_incorrect_with_both_reasons(tmp_path):
    check = LossCheck(math.nan, 2.3)
    points = [{"loss_problem": NAN_LOSS, "loss_check": asdict(check)}, {"steps": 5, "throughput": 10.0}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(point) + "\n" for point in points))
    reader = _ProgressReader(tmp_path / "p.jsonl", _always_slower)
    failure = reader.check()
    assert failure.kind is FailureKind.INCORRECT and failure.message == f"{NAN_LOSS}; clearly slower"
    assert failure.reading == 10.0, "the running reading it was stopped at, for the pictures"
    assert math.isnan(reader.first_loss.first_loss) and reader.first_loss.fp32_loss == 2.3


def test_a_pruned_trial_whose_first_loss_was_nan_is_recorded_as_breaking_the_loss(tmp_path, server):
    # Progress is reported from 1 s of the window on: the pruner stops it at its first report, long before its end.
    nan = replace(request(model="faults.NanCNN"), plan=replace(request().plan, min_time_s=2, max_time_s=60))
    result = run_trial(nan, 120, tmp_path, "nan", on_progress=_always_slower, launcher=server)
    assert result.failure.kind is FailureKind.INCORRECT, result.failure
    assert result.failure.message == f"{NAN_LOSS}; clearly slower"
    assert result.failure.reading > 0 and result.measurement is None
    assert math.isnan(result.loss_check.first_loss), "the evidence is kept"
    assert not processes_mentioning(str(tmp_path / "nan.log"))
