"""The machine a figure was measured on: what tells machines apart for measuring, and what does not."""

from __future__ import annotations

import pynvml
import torch

from autotune.app import other_thread_variables
from autotune.measure import environment
from autotune.measure.environment import describe_machine, machine_fingerprint, machine_id


def test_machines_differing_in_what_throughput_depends_on_get_other_ids_and_hosts_alike_one():
    here = describe_machine()
    assert machine_id(here) == machine_id({**here, "hostname": "another-host", "memory_gb": 1.0}), "alike"
    for key, other in [("cpu_flags", ["avx512_bf16"]), ("cpu_count", 64), ("gpu", "H100"), ("gpu_driver", "1.0")]:
        assert machine_id({**here, key: other}) != machine_id(here), key
    assert set(machine_fingerprint(here)) == set(environment.MACHINE_KEYS)


def test_thread_variables_tell_machines_apart_and_none_keeps_the_name_a_machine_had_before_they_were_read():
    # Under OMP_NUM_THREADS=1 torch's default is one thread: the num_threads knob's null means another setting.
    bare = {key: value for key, value in describe_machine().items() if key != "thread_env"}
    unset = {**bare, "thread_env": {}}
    assert machine_id(unset) == machine_id(bare), "a study stored before thread variables were read keeps its name"
    assert machine_id({**bare, "thread_env": {"OMP_NUM_THREADS": "1"}}) != machine_id(unset)
    assert machine_fingerprint(unset)["thread_env"] is None


def test_the_gpu_driver_is_read_from_nvml_and_none_where_nvml_cannot_tell(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    assert environment._gpu_driver() == "550.54.15"

    def refused():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", refused)
    assert environment._gpu_driver() is None


def test_a_study_of_this_machine_under_other_thread_variables_is_named_by_them():
    here = {**describe_machine(), "thread_env": {}}
    omp = {**here, "thread_env": {"OMP_NUM_THREADS": "1"}}
    assert other_thread_variables({"a": omp}, here) == "OMP_NUM_THREADS=1"
    assert other_thread_variables({"b": here}, omp) == "none set"
    assert other_thread_variables({"a": omp}, omp) is None, "the same variables: the same machine"
    assert other_thread_variables({"c": {**omp, "cpu_count": 64}}, here) is None, "another machine, not its variables"


def test_a_measurement_names_the_gpu_its_device_names_not_the_first(monkeypatch):
    names = {0: "GPU A", 1: "GPU B"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(environment, "_gpu_driver", lambda: None)
    monkeypatch.setattr(
        torch.cuda, "get_device_name", lambda device=None: names[0 if device is None else torch.device(device).index]
    )
    assert environment.describe_machine("cuda:1")["gpu"] == "GPU B"
    assert environment.describe_machine("cpu")["gpu"] == environment.describe_machine()["gpu"] == "GPU A"
