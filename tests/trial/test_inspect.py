"""The facts of the devices and the pipeline, read in a trial subprocess: the tuner's own process runs no user code
and no CUDA; bf16 counts only where native; measure.device=cuda:N. CUDA is faked here (no GPU): its calls are
monkeypatched where a process of this test reads them, and the subprocess paths run on the CPU."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import replace

import pytest
import torch

from autotune import app
from autotune.config.load import load_settings
from autotune.errors import BaselineFailedError, ConfigError
from autotune.knobs import KNOBS
from autotune.measure.environment import describe_machine, has_16_bit_units
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts, Refusal
from autotune.pipeline.inspect import read_facts, resolve_device
from autotune.runner import TrialRunner, inspect_run, search_context
from autotune.study.space import build_space
from autotune.trial.result import TrialResult
from autotune.trial.worker import run_request, training_device
from tests.conftest import tiny_config

T4, A100 = "Tesla T4", "NVIDIA A100-SXM4-80GB"


def settings_with(dataset: str = "tests.fixtures.tiny.TinyImages", timeout_s: float = 120, **dataset_args):
    config = tiny_config(measure={"trial_timeout_s": timeout_s})
    config["pipeline"]["dataset"] = {"_target_": dataset, "length": 256, **dataset_args}
    return load_settings(config, "tiny")


class FakeCuda:
    """torch.cuda's device queries for GPUs named ``names``, of which those in ``native`` compute bf16 natively (the
    others emulate it: ``is_bf16_supported()`` says True for them unless asked without emulation)."""

    def __init__(self, monkeypatch, names: list[str], native: set[str]) -> None:
        self.names, self.native, self.current = names, native, 0
        monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(names))
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(names))
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: names[self.index(device)])
        monkeypatch.setattr(torch.cuda, "device", self.device)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", self.is_bf16_supported)

    @contextlib.contextmanager
    def device(self, device):
        before, self.current = self.current, torch.device(device).index or 0
        yield
        self.current = before

    def index(self, device) -> int:
        """The index ``device`` names as torch.cuda takes it: an int, a device or its name, or None (the current)."""
        if device is None:
            return self.current
        return device if isinstance(device, int) else torch.device(device).index or 0

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return including_emulation or self.names[self.current] in self.native


def test_the_facts_of_a_cpu_machine_and_the_pipeline():
    facts = read_facts(settings_with().pipeline, "auto")
    assert "tests.fixtures.tiny" in facts.pipeline.code, "the pipeline's own module, by a digest of its source"
    assert replace(facts, machine={}, pipeline=replace(facts.pipeline, code={})) == Inspection(
        DeviceFacts(),
        "cpu",
        PipelineFacts(256, 4, frozenset({"for_loop", "foreach", "fused"}), optimizer_default="for_loop"),
        refused=None,
        machine={},
    )
    assert facts.machine == describe_machine(), "the machine as the subprocess describes it, for the tuner"


def test_on_a_gpu_that_emulates_bf16_it_is_not_native(monkeypatch):
    FakeCuda(monkeypatch, [A100, T4], native={A100})
    spec = settings_with().pipeline
    t4 = read_facts(spec, "cuda:1")
    assert t4.devices == DeviceFacts((A100, T4)) and t4.device == "cuda:1"
    assert t4.machine["gpu_bf16"] is False, "a T4 emulates bf16: is_bf16_supported() alone says True"
    assert t4.machine["gpu"] == T4, "the machine is named by the GPU the trials run on"
    assert t4.machine["gpu_bf16"] is False and not has_16_bit_units(t4.machine, "cuda:1"), "no bf16 advice on it"
    assert describe_machine("cuda:0")["gpu_bf16"] is True, "the machine's own description reads the GPU it names"
    assert read_facts(spec, "cuda").machine["gpu_bf16"] is True, "cuda is the first visible GPU, an A100"
    assert read_facts(spec, "auto").device == "cuda"
    assert t4.pipeline.optimizer_options == {"for_loop", "foreach", "fused"}, (
        "test parameters that cannot go on the (faked) GPU: what the optimizer accepts stands"
    )


def test_the_amp_knob_offers_bf16_only_where_the_subprocess_found_it_native(monkeypatch, tiny_settings):
    t4 = Inspection(
        DeviceFacts((T4,)),
        "cuda",
        PipelineFacts(256, 4),
        machine={"cpu_count": 2, "torch_threads": 2, "gpu": T4, "gpu_bf16": False},
    )
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: pytest.fail("CUDA read in the tuner"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("CUDA read in the tuner"))
    ctx = search_context(tiny_settings, t4)
    assert (ctx.device, ctx.bf16_supported) == ("cuda", False)
    space = build_space(dict.fromkeys(KNOBS), ctx)
    assert space.candidates["amp"] == ["off", "fp16"]
    a100 = replace(t4, devices=DeviceFacts((A100,)), device="cuda:0", machine={**t4.machine, "gpu_bf16": True})
    ctx = search_context(tiny_settings, a100)
    assert ctx.device == "cuda", "knobs decide by the kind of device"
    assert build_space(dict.fromkeys(KNOBS), ctx).candidates["amp"] == ["off", "bf16", "fp16"]


def test_measure_device_names_a_visible_gpu(monkeypatch):
    two = DeviceFacts((A100, T4))
    assert [resolve_device(two, name) for name in ("auto", "cpu", "cuda", "cuda:0", "cuda:1")] == [
        "cuda",
        "cpu",
        "cuda",
        "cuda:0",
        "cuda:1",
    ]
    with pytest.raises(ConfigError, match=r"^measure.device: cuda:2 was requested but the visible CUDA devices are "):
        resolve_device(two, "cuda:2")
    with pytest.raises(ConfigError, match=r"^measure.device: cuda:1 was requested but torch.cuda.is_available\(\)"):
        resolve_device(DeviceFacts(), "cuda:1")
    assert resolve_device(DeviceFacts(), "auto") == "cpu"


def test_cuda_n_passes_the_config_and_other_names_are_refused_naming_the_key():
    assert load_settings(tiny_config(measure={"device": "cuda:1"}), "tiny").measure.device == "cuda:1"
    for bad in ("cuda:x", "cuda:", "gpu:0", "cuda:-1"):
        with pytest.raises(ConfigError, match=r"^measure.device: expected one of auto, cpu, cuda, got .*; or cuda:N"):
            load_settings(tiny_config(measure={"device": bad}), "tiny")


def test_a_trial_on_cuda_n_makes_that_gpu_the_current_device(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert training_device("cuda:1") == torch.device("cuda", 1)
    assert training_device("cpu") == torch.device("cpu") and training_device("cuda") == torch.device("cuda")
    assert chosen == [torch.device("cuda", 1)], "CUDA events and graphs use the current device"


def test_an_inspect_request_is_answered_by_the_worker_and_travels_as_json(tiny_settings):
    request = replace(TrialRunner(tiny_settings, "auto", None).request, inspect=True)
    result = run_request(request)
    assert result.ok and result.inspection.device == "cpu" and result.inspection.pipeline.dataset_len == 256
    assert TrialResult.from_dict(result.to_dict()) == result
    refusal = Refusal("pipeline.dataset", "TinyImages is empty (length 0)")
    refused = Inspection(DeviceFacts((T4,)), refused=refusal, machine=describe_machine())
    assert Inspection.from_dict(refused.to_dict()) == refused


def test_the_facts_are_read_in_a_subprocess_not_in_the_tuner(tmp_path):
    record = tmp_path / "pids"
    settings = settings_with("tests.fixtures.inspection.PidRecordingImages", record=str(record))
    facts = inspect_run(settings, tmp_path / "out")
    assert facts.device == "cpu" and facts.pipeline.dataset_len == 256
    pids = {int(line) for line in record.read_text().split()}
    assert len(pids) == 1 and os.getpid() not in pids, "the user's dataset was built once, in another process"
    assert not (tmp_path / "out").exists(), "nothing is left where the reports go"


@pytest.mark.slow
def test_a_tuning_run_runs_the_users_code_only_in_subprocesses(tmp_path):
    record = tmp_path / "pids"
    config = tiny_config(study={"n_trials": 0, "storage": f"sqlite:///{tmp_path}/studies.db"})
    config["pipeline"]["dataset"] = {"_target_": "tests.fixtures.inspection.PidRecordingImages", "record": str(record)}
    app.run(load_settings(config, "tiny"), tmp_path / "out", out=io.StringIO())
    pids = [int(line) for line in record.read_text().split()]
    assert len(pids) == 2 and os.getpid() not in pids, "the facts' subprocess, then the baseline's"


def test_a_config_problem_found_there_is_the_same_one_line_error_with_its_exit_code(tmp_path):
    with pytest.raises(ConfigError) as error:
        inspect_run(settings_with(length=0), tmp_path / "out")
    assert str(error.value) == "pipeline.dataset: TinyImages is empty (length 0)"
    assert error.value.exit_code == 2 and error.value.key == "pipeline.dataset"
    with pytest.raises(ConfigError, match=r"^pipeline.dataset: len\(\) of TinyImages failed: "):
        inspect_run(settings_with(length=-5), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_crash_there_is_one_line_naming_the_pipeline_and_its_signal(tmp_path):
    with pytest.raises(BaselineFailedError) as error:
        inspect_run(settings_with("tests.fixtures.inspection.SegfaultingImages"), tmp_path / "out")
    message = str(error.value)
    assert message.startswith("pipeline 'tiny': reading its facts (its modules, the devices, the dataset's length")
    assert "signal: killed by SIGSEGV (Fatal Python error: Segmentation fault)" in message
    assert "\n" not in message and error.value.exit_code == 1
    log = tmp_path / "out" / "trials" / "inspect.log"
    assert message.endswith(f"Log: {log}") and "Segmentation fault" in log.read_text()


@pytest.mark.slow
def test_a_hang_there_is_stopped_at_the_trial_timeout(tmp_path):
    hung = r"in a subprocess failed: timeout: timeout after 4 s, in tests/fixtures/inspection\.py:\d+ __len__\. Log: "
    with pytest.raises(BaselineFailedError, match=hung):
        inspect_run(settings_with("tests.fixtures.inspection.HangingLengthImages", timeout_s=4), tmp_path / "out")


@pytest.mark.parametrize(
    ("component", "node", "refusal"),
    [
        (
            "model",
            {"_target_": "collections.OrderedDict"},
            Refusal(
                "pipeline.model._target_",
                "'collections.OrderedDict' is a class but not a torch.nn.Module: name the module's class, or a "
                "function that returns one",
            ),
        ),
        (
            "step",
            {"_target_": "tests.fixtures.batches.collate_pair"},
            Refusal(
                "pipeline.step",
                "tests.fixtures.batches.collate_pair cannot be called as step(model, batch, loss_fn): too many "
                "positional arguments",
            ),
        ),
        (
            "collate_fn",
            {"_target_": "tests.fixtures.batches.step_pair"},
            Refusal(
                "pipeline.collate_fn",
                "tests.fixtures.batches.step_pair cannot be called as collate_fn(samples): missing a required "
                "argument: 'batch'",
            ),
        ),
    ],
    ids=["model-not-a-module", "step-of-one-argument", "collate-of-three"],
)
def test_a_component_that_cannot_play_its_part_is_refused_before_any_trial(component, node, refusal):
    config = tiny_config()
    config["pipeline"][component] = node
    assert read_facts(load_settings(config, "tiny").pipeline, "cpu").refused == refusal


@pytest.mark.parametrize("step", ["step_pair", "decorated_step"], ids=["plain", "decorated"])
def test_a_step_or_collate_function_taking_the_arguments_it_is_called_with_passes(step):
    # A decorator's wrapper shows the wrapped function's signature, whose arguments it may supply itself.
    config = tiny_config()
    config["pipeline"]["step"] = {"_target_": f"tests.fixtures.batches.{step}"}
    config["pipeline"]["collate_fn"] = {"_target_": "tests.fixtures.batches.collate_pair"}
    facts = read_facts(load_settings(config, "tiny").pipeline, "cpu")
    assert facts.refused is None, facts.refused


def test_bf16_in_hardware_is_one_fact_for_the_knobs_and_a_cpu_without_its_units_still_measures_bf16(tiny_settings):
    for flags, native in ((["avx2"], False), (["avx2", "avx512_bf16"], True)):
        machine = {"cpu_count": 2, "torch_threads": 2, "cpu_flags": flags}
        ctx = search_context(tiny_settings, Inspection(DeviceFacts(), "cpu", PipelineFacts(256, 4), machine=machine))
        assert ctx.bf16_supported is native and has_16_bit_units(machine, "cpu") is native
        assert "bf16" in build_space(dict.fromkeys(KNOBS), ctx).candidates["amp"], "the trials tell whether it pays"
