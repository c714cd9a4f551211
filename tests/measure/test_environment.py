"""The machine a figure was measured on: what tells machines apart for measuring, and what does not."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pynvml
import pytest
import torch

from autotune.measure import environment
from autotune.measure.environment import cgroup_cpu_quota, describe_machine, machine_fingerprint, machine_id
from autotune.runner import other_thread_variables


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
    current = [0]

    @contextlib.contextmanager
    def on_device(device):
        before, current[0] = current[0], torch.device(device).index
        yield
        current[0] = before

    monkeypatch.setattr(torch.cuda, "device", on_device)  # GPU B computes bf16 natively, GPU A only emulates it
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: current[0] == 1)
    assert environment.describe_machine("cuda:1")["gpu"] == "GPU B"
    assert environment.describe_machine("cuda:1")["gpu_bf16"] is True
    assert environment.describe_machine("cpu")["gpu"] == environment.describe_machine()["gpu"] == "GPU A"
    assert environment.describe_machine("cpu")["gpu_bf16"] is False


def cgroups(tmp_path, membership: str, files: dict[str, str]):
    """A fake /proc/self/cgroup saying ``membership`` and a cgroup file system of ``files`` (path → text)."""
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    (tmp_path / "cgroup").write_text(membership)
    return tmp_path / "cgroup", tmp_path / "fs"


@pytest.mark.parametrize(
    ("membership", "files", "cores"),
    [
        # cgroup v2: the smallest quota of the process's cgroup and those above it
        (
            "0::/pod/ctr\n",
            {"cpu.max": "max 100000", "pod/cpu.max": "150000 100000", "pod/ctr/cpu.max": "max 100000"},
            1.5,
        ),
        ("0::/pod/ctr\n", {"pod/cpu.max": "400000 100000", "pod/ctr/cpu.max": "50000 100000"}, 0.5),
        ("0::/a\n", {"a/cpu.max": "max 100000"}, None),
        # a container's cgroup namespace: the path is the host's, the mount the container's own cgroup
        ("0::/docker/abc\n", {"cpu.max": "200000 100000"}, 2.0),
        # cgroup v1, its cpu controller mounted with cpuacct
        (
            "4:memory:/x\n3:cpu,cpuacct:/x\n0::/\n",
            {"cpu,cpuacct/x/cpu.cfs_quota_us": "250000\n", "cpu,cpuacct/x/cpu.cfs_period_us": "100000\n"},
            2.5,
        ),
        ("1:cpu:/x\n", {"cpu/x/cpu.cfs_quota_us": "-1\n", "cpu/x/cpu.cfs_period_us": "100000\n"}, None),
        # what cannot be read says nothing
        ("1:cpu:/x\n", {"cpu/x/cpu.cfs_quota_us": "garbage\n"}, None),
        ("not a cgroup line\n", {}, None),
    ],
)
def test_the_cpu_quota_is_the_smallest_of_the_cgroup_and_those_above_it(tmp_path, membership, files, cores):
    assert cgroup_cpu_quota(*cgroups(tmp_path, membership, files)) == cores


def test_without_a_cgroup_file_there_is_no_quota(tmp_path):
    assert cgroup_cpu_quota(tmp_path / "missing", tmp_path) is None


@pytest.mark.parametrize(("quota", "cores"), [(None, 2), (0.5, 1), (1.5, 2), (8.0, 2)])
def test_the_usable_cores_are_the_affinitys_at_most_the_quota_rounded_up(monkeypatch, quota, cores):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(environment, "cgroup_cpu_quota", lambda: quota)
    assert environment.usable_cpu_count() == cores


def _cpu_cgroup_root() -> Path | None:
    """Where a cgroup of the CPU controller may be made here: cgroup v1's cpu mount, or v2's root with cpu enabled."""
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        return v1
    enabled = v2 / "cgroup.subtree_control"
    if enabled.exists() and "cpu" in enabled.read_text().split() and os.access(v2, os.W_OK):
        return v2
    return None


@pytest.mark.skipif(_cpu_cgroup_root() is None, reason="no cgroup CPU controller this test may write to")
def test_a_process_in_a_cgroup_with_half_a_core_of_quota_uses_one_core(tmp_path):
    mount = _cpu_cgroup_root()
    group = mount / f"autotune-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a cgroup here: {error}")
    try:
        if mount.name == "cpu":
            (group / "cpu.cfs_quota_us").write_text("50000")
        else:
            (group / "cpu.max").write_text("50000 100000")
        read = "from autotune.measure.environment import usable_cpu_count as u; print(u())"
        shell = f'echo $$ > {group / "cgroup.procs"} && exec "{sys.executable}" -c "{read}"'
        proc = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "1"
    finally:
        group.rmdir()
