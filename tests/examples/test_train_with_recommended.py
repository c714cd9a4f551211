"""The example training script applies a recommended.yaml as autotune writes it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO


def trained(tmp_path, knobs, training) -> tuple[str, str]:
    """The example script run for 4 steps on a recommended.yaml of ``knobs`` and ``training`` (a baseline of batch 8):
    its output, and its line of what it applied."""
    path = tmp_path / "recommended.yaml"
    baseline = {"batch_size": 8, "num_workers": 0}
    document = {"pipeline": "mymodel", "device": "cpu", "knobs": knobs, "baseline": baseline, "training": training}
    path.write_text(yaml.safe_dump(document))
    proc = subprocess.run(
        [sys.executable, "examples/train_with_recommended.py", "--recommended", str(path), "--steps", "4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("applied: ")]
    return proc.stdout, line


@pytest.mark.parametrize(
    "knobs, applied",
    [
        (
            {
                "batch_size": 16,
                "num_workers": 0,
                "pin_memory": False,
                "channels_last": False,
                "amp": "off",
                "compile": "off",
            },
            "workers=0 batch=16 precision=fp32 layout=nchw optimizer=default lr=0.02",
        ),
        (
            {
                "batch_size": 16,
                "num_workers": 1,
                "prefetch_factor": 4,
                "persistent_workers": True,
                "pin_memory": False,
                "num_threads": 1,
                "channels_last": True,
                "amp": "bf16",
                "compile": "off",
                "cudnn_benchmark": False,
                "optimizer_impl": "fused",
                "set_to_none": False,
                "malloc": "keep",
            },
            "threads=1 workers=1 batch=16 precision=torch.bfloat16 layout=channels_last optimizer=fused lr=0.02",
        ),
    ],
)
@pytest.mark.slow
def test_the_script_trains_with_every_knob_applied(tmp_path, knobs, applied):
    training = {"gradient_accumulation_steps": 1, "learning_rate": {"baseline": 0.01, "suggested": 0.02}}
    output, line = trained(tmp_path, knobs, training)
    assert "samples/s" in output and f"batch_size 8 -> {knobs['batch_size']}" in output
    assert "None ->" not in output, "a knob left unset reads 'default', as the reports say"
    assert line.endswith(applied), "as torch reports it in the script's process"


@pytest.mark.slow
def test_the_script_accumulates_gradients_where_the_batch_policy_keeps_the_effective_batch(tmp_path):
    knobs = {"batch_size": 4, "num_workers": 0, "pin_memory": False, "channels_last": False, "amp": "off"}
    training = {
        "batch_policy": "fixed_effective",
        "gradient_accumulation_steps": 2,
        "learning_rate": {"baseline": 0.01, "suggested": 0.01},
    }
    output, line = trained(tmp_path, knobs, training)
    assert line.endswith("batch=4 precision=fp32 layout=nchw optimizer=default lr=0.01"), line
    assert "device=cpu steps=4 loss=" in output, "two optimizer steps of two micro-batches each"


# The example with a model whose constructor sets torch's threads, as some models' do.
_MODEL_SETS_THREADS = """
import sys, torch
sys.argv = ["train_with_recommended.py", *sys.argv[1:]]
import examples.train_with_recommended as example
class ThreadSetting(example.SmallCNN):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        torch.set_num_threads(3)
example.SmallCNN = ThreadSetting
example.main()
"""


@pytest.mark.slow
def test_the_process_settings_are_applied_after_the_model_is_built_as_a_trial_applies_them(tmp_path):
    # A trial builds the model and the dataset, then applies every knob: the threads measured are the recommended 1.
    path = tmp_path / "recommended.yaml"
    knobs = {"batch_size": 8, "num_workers": 0, "num_threads": 1}
    document = {"pipeline": "mymodel", "device": "cpu", "knobs": knobs, "baseline": {"batch_size": 8}, "training": {}}
    path.write_text(yaml.safe_dump(document))
    command = [sys.executable, "-c", _MODEL_SETS_THREADS, "--recommended", str(path), "--steps", "2"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "applied: threads=1 " in proc.stdout, proc.stdout
