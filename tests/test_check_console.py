"""mode=check's lines on the terminal: the recommendation's changes said once, before the rounds, and each run's line
naming its configuration only, as mode=benchmark's do (``measure_rounds``)."""

from __future__ import annotations

import io

from autotune import check as check_mode
from autotune.config.load import load_settings
from autotune.measure.environment import describe_machine
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.trial.result import TrialResult
from tests.conftest import fake_measurement, tiny_config
from tests.test_check import report


def test_a_checks_configurations_are_said_once_and_each_run_by_its_label(tmp_path, monkeypatch):
    facts = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=describe_machine())

    def run_trial(request, *args, **kwargs):
        throughput = 150.0 if request.knobs["batch_size"] == 32 else 100.0
        return TrialResult(knobs=request.knobs, measurement=fake_measurement(throughput))

    monkeypatch.setattr(check_mode, "inspect_run", lambda settings, output_dir: facts)
    monkeypatch.setattr("autotune.runner.run_trial", run_trial)
    config = {**tiny_config(), "mode": "check", "against": str(report(tmp_path)), "check": {"rounds": 2}}
    out = io.StringIO()
    check_mode.run(load_settings(config, "tiny"), tmp_path / "out", out)
    shown = [line for line in out.getvalue().splitlines() if line.startswith("[") and not line.startswith("[time]")]
    assert shown == [
        "[baseline] the baseline's settings",
        "[recommended] batch_size=32",
        "[round 1 baseline] 100.0 samples/s, peak 100 MiB",
        "[round 1 recommended] 150.0 samples/s, peak 100 MiB",
        "[round 2 recommended] 150.0 samples/s, peak 100 MiB",
        "[round 2 baseline] 100.0 samples/s, peak 100 MiB",
    ]
