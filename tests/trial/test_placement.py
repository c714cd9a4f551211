"""Where trials run when several run at once: one slot each, a GPU or a set of cores, refused where it would distort."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.runner import TrialRunner
from autotune.trial import runner
from autotune.trial.placement import CPUS_ENV, UNPINNED, Slot, refuse_mixed_gpus, slots
from autotune.trial.result import ProbePlan, TrialResult
from tests.conftest import fake_measurement, tiny_config

H100 = ("NVIDIA H100 80GB HBM3",)  # the names of the visible GPUs, as the inspection reads them


def test_one_trial_at_a_time_runs_unpinned_on_a_cpu_and_on_a_gpu():
    assert slots(1, None, "cpu", (), {0, 1}) == [UNPINNED]
    assert slots("auto", None, "cpu", (), {0, 1}) == [UNPINNED], "auto on a CPU: one, trials at once would distort"
    assert slots("auto", None, "cuda", H100, {0, 1}) == [UNPINNED]


def test_several_trials_on_a_cpu_are_refused_without_core_sets_naming_the_key():
    with pytest.raises(ConfigError, match=r"^study.parallel: 2 trials at once on a CPU would distort .*cpu_sets"):
        slots(2, None, "cpu", (), {0, 1})


def test_core_sets_pin_one_trial_each_and_must_be_disjoint_equal_and_usable():
    pinned = slots(2, [[0], [1]], "cpu", (), {0, 1})
    assert [slot.env for slot in pinned] == [{CPUS_ENV: "0"}, {CPUS_ENV: "1"}] and pinned[0].cores == (0,)
    assert len(slots("auto", [[0, 1], [2, 3]], "cpu", (), {0, 1, 2, 3})) == 2
    for sets, problem in [
        ([[0], [0]], "overlap"),
        ([[0], [1, 2]], "one size"),
        ([[0], [7]], r"cores \[7\] are not among"),
        ([[0]], "1 sets for study.parallel=2"),
    ]:
        with pytest.raises(ConfigError, match=f"^study.cpu_sets: .*{problem}"):
            slots(2, sets, "cpu", (), {0, 1, 2})


def test_gpus_get_one_trial_each_by_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [slot.env for slot in slots("auto", None, "cuda", H100 * 2, {0})] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b,GPU-c")
    assert [slot.name for slot in slots(2, None, "cuda", H100 * 3, {0})] == ["GPU GPU-a", "GPU GPU-b"]
    with pytest.raises(ConfigError, match=r"^study.parallel: 4 trials at once need 4 GPUs; 3 are visible"):
        slots(4, None, "cuda", H100 * 3, {0})
    with pytest.raises(ConfigError, match=r"^study.parallel: .*measure.device=cuda, not cuda:1"):
        slots(2, None, "cuda:1", H100 * 3, {0})
    assert slots("auto", None, "cuda:1", H100 * 3, {0}) == [UNPINNED], "auto on the one GPU named: one trial at a time"


def test_trials_at_once_on_gpus_of_different_models_are_refused_naming_the_key_and_the_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,0")
    mixed = ("NVIDIA H100", "Tesla T4", "Tesla T4")
    refused = r"^study.parallel: .*\(GPU 3 NVIDIA H100, GPU 1 Tesla T4, GPU 0 Tesla T4\).*, or set study.parallel=1$"
    places = slots("auto", None, "cuda", mixed, {0})
    assert len(places) == 3, "not refused where a mode runs one trial at a time, in the first slot (study_slot)"
    with pytest.raises(ConfigError, match=refused):
        refuse_mixed_gpus(places, "cuda", mixed)
    alike = ("Tesla T4", "Tesla T4", "NVIDIA H100")
    refuse_mixed_gpus(slots(2, None, "cuda", alike, {0}), "cuda", alike)  # the two it runs on are of one model
    refuse_mixed_gpus(slots(1, None, "cuda", mixed, {0}), "cuda", mixed)  # one at a time: nothing to compare
    refuse_mixed_gpus(slots(2, [[0], [1]], "cpu", mixed, {0, 1}), "cpu", mixed)  # trials on cores, not GPUs


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_trial_pins_itself_to_its_cores_with_one_torch_thread_and_compile_thread_each():
    # A trial forked from the fork server has Inductor imported (with torch._dynamo), its compile threads counted on
    # every core of the tuner; one that has not imports it later, and must not be made to import it here.
    code = (
        "import os, sys, torch; from autotune.trial.placement import pin_from_env; "
        "everywhere = os.sched_getaffinity(0); pin_from_env(); "
        "print(sorted(os.sched_getaffinity(0)), torch.get_num_threads(), 'torch._inductor.config' in sys.modules); "
        "os.sched_setaffinity(0, everywhere); import torch._inductor.config as config; "
        "print(config.compile_threads); pin_from_env(); print(config.compile_threads)"
    )
    env = {name: value for name, value in os.environ.items() if name != "TORCHINDUCTOR_COMPILE_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, CPUS_ENV: "0"}, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["[0]", "1", "False", str(min(32, len(os.sched_getaffinity(0)))), "1"]


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores to tell one from all")
def test_a_trial_pins_every_thread_started_before_it_pinned_itself():
    # A fresh trial's imports start threads (OpenBLAS's pool with numpy) before the worker pins it: an affinity is a
    # thread's, and they would keep every core.
    core = min(os.sched_getaffinity(0))
    code = (
        "import os, threading, numpy; from autotune.trial.placement import pin_from_env; "
        "started = threading.Event(); threading.Thread(target=started.wait, daemon=True).start(); pin_from_env(); "
        "print(sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir('/proc/self/task')}), "
        "len(os.listdir('/proc/self/task')) > 1)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, CPUS_ENV: str(core)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == [f"[({core},)]", "True"], "every thread on the trial's core"


def test_core_sets_on_a_gpu_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^study.cpu_sets: pins trials on a CPU"):
        slots(2, [[0], [1]], "cuda", H100, {0, 1})


def test_the_runs_where_one_decides_are_read_on_their_slots_cores_the_searchs_are_not(tmp_path, monkeypatch):
    given = {}

    def run_trial(request, timeout_s, workdir, name, budget=None, on_progress=None, launcher=None, gauge=None):
        given[name] = gauge
        return TrialResult({}, measurement=fake_measurement(100.0))

    monkeypatch.setattr("autotune.runner.run_trial", run_trial)  # check, probe
    monkeypatch.setattr(runner, "run_trial", run_trial)  # run, screen: through run_repeated
    settings = load_settings(tiny_config(measure={"core_speed": True}), "tiny")
    pinned = TrialRunner(settings, "cpu", tmp_path, Slot({CPUS_ENV: "1"}, (1,), "cores 1"), True)
    pinned.run({}, "run")
    pinned.screen({}, "screen")  # several slots' search trials run beside each other: a reading would read them
    pinned.check({}, "check", plain=False)
    pinned.probe(ProbePlan([], []))
    assert given["run"].cores == (1,) and given["check"] is given["run"]
    assert given["screen"] is None and given["probe"] is None
    assert TrialRunner(settings, "cpu", tmp_path).gauge.cores == tuple(sorted(os.sched_getaffinity(0)))
    assert TrialRunner(load_settings(tiny_config(), "tiny"), "cpu", tmp_path).gauge is None, "measure.core_speed"
    pinned.close()
