"""GPU readings degrade cleanly without a GPU; with one, they report (skipped here with a reason)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pynvml
import pytest
import torch

from autotune.measure.gpu import DeviceTimeline, GpuReading, Nvml, cuda_peaks_mb, reset_cuda_peaks, synchronize
from autotune.measure.measurement import SystemReport
from tests.measure.conftest import tree_tasks
from tests.measure.test_profiler import host_slowness

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
UUID = "8932f937-d72c-4106-c12f-20bd9faed9f6"
OTHER = "a1b2c3d4-0000-1111-2222-333344445555"


class FakeNvml:
    """pynvml's calls for one device known by ``uuids``: its utilisation (None: not supported, as on a MIG instance),
    memory used, and the PIDs computing on it (None: no permission to list them)."""

    def __init__(self, monkeypatch, uuids, pids=None, utilization=40, cuda_uuid=UUID):
        self.uuids, self.pids, self.utilization = set(uuids), pids, utilization
        self.asked: list[str] = []
        monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", self.handle)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", self.rates)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda handle: SimpleNamespace(used=512 * 2**20))
        monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", self.processes)
        # A real GPU's machine description reads the name, and cuDNN's first version check the capability.
        properties = SimpleNamespace(uuid=cuda_uuid, name="Fake GPU", major=9, minor=0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def handle(self, uuid):
        self.asked.append(uuid)
        if uuid not in self.uuids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return f"handle of {uuid}"

    def rates(self, handle):
        if self.utilization is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=self.utilization)

    def processes(self, handle):
        if self.pids is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in self.pids]


def handle_of(device=CUDA0):
    nvml = Nvml(device)
    return nvml._handle, nvml.reason


def test_cuda_calls_are_no_ops_on_a_cpu_device():
    synchronize(CPU)
    reset_cuda_peaks(CPU)
    assert cuda_peaks_mb(CPU) == (None, None)


def test_a_cpu_pipeline_never_reads_nvml_even_beside_a_gpu(monkeypatch):
    FakeNvml(monkeypatch, [UUID])  # a GPU NVML would find
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: pytest.fail("NVML initialised for a CPU pipeline"))
    nvml = Nvml(CPU)
    assert not nvml.available and nvml.read() is None
    assert nvml.reason == "NVML not read: the pipeline runs on cpu"
    nvml.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-driver path")
def test_nvml_without_a_driver_reports_why_and_never_raises():
    nvml = Nvml(torch.device("cuda"))
    assert not nvml.available
    assert nvml.reason.startswith("NVML unavailable")
    assert nvml.read() is None
    nvml.close()


@needs_gpu
def test_cuda_peaks_and_nvml_on_a_gpu():
    device = torch.device("cuda")
    reset_cuda_peaks(device)
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    synchronize(device)
    allocated, reserved = cuda_peaks_mb(device)
    assert allocated >= 64 and reserved >= allocated
    nvml = Nvml(device)
    assert nvml.available and nvml.read().memory_used_mb >= 64
    nvml.close()
    del block


@needs_gpu
def test_profile_on_a_gpu_synchronises_and_reports_gpu_memory_which_limits_the_run():
    import autotune
    from autotune.measure.recorder import WindowPlan
    from autotune.measure.warmup import WarmupPolicy
    from autotune.trial.result import TrialResult

    model = torch.nn.Linear(256, 256).cuda()
    warmup = WarmupPolicy(min_steps=2, max_steps=4, min_time_s=0.0)  # 64 short steps: no second of warm-up
    with autotune.profile(device="cuda", plan=WindowPlan.unbounded(warmup)) as prof:
        for x in prof.wrap(torch.randn(64, 32, 256).unbind(0)):
            x = x.cuda()
            prof.transferred()
            model(x).sum().backward()
            prof.step()
    assert prof.result.memory.cuda_peak_allocated_mb > 0
    assert prof.result.timing.transfer_s > 0
    memory = prof.result.memory
    assert memory.limiting == "gpu" and memory.limiting_peak_mb == memory.cuda_peak_reserved_mb > 0
    result = TrialResult(knobs={}, measurement=prof.result)
    assert result.peak_memory_mb == memory.cuda_peak_reserved_mb and result.host_peak_memory_mb == memory.peak_mb


@pytest.mark.parametrize(
    ("visible", "device", "known", "cuda_uuid", "found"),
    [
        (None, CUDA0, [f"GPU-{UUID}"], UUID, f"GPU-{UUID}"),  # CUDA's bare UUID, as a GPU's
        (None, CUDA0, [f"GPU-{UUID}"], f"GPU-{UUID}", f"GPU-{UUID}"),  # CUDA's UUID with its prefix
        (None, CUDA0, [f"MIG-{UUID}"], UUID, f"MIG-{UUID}"),  # a MIG instance: CUDA's UUID is the instance's
        (f"MIG-{UUID}", CUDA0, [f"MIG-{UUID}"], OTHER, f"MIG-{UUID}"),  # the MIG UUID the user made visible
        (f"GPU-{OTHER},MIG-{UUID}", torch.device("cuda", 1), [f"MIG-{UUID}"], OTHER, f"MIG-{UUID}"),  # the Nth entry
        ("GPU-8932f937", CUDA0, [f"GPU-{UUID}"], UUID, f"GPU-{UUID}"),  # a prefix, which only CUDA takes
        ("0", CUDA0, [f"GPU-{UUID}"], UUID, f"GPU-{UUID}"),  # an index: CUDA's order is not NVML's
    ],
)
def test_nvml_finds_the_handle_of_a_gpu_or_mig_instance_by_uuid(monkeypatch, visible, device, known, cuda_uuid, found):
    FakeNvml(monkeypatch, known, cuda_uuid=cuda_uuid)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert handle_of(device) == (f"handle of {found}", None)


def test_nvml_knowing_none_of_the_uuids_is_unavailable_with_each_one_tried(monkeypatch):
    fake = FakeNvml(monkeypatch, [f"GPU-{OTHER}"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"MIG-GPU-{UUID}/1/0")  # the old MIG form, which NVML refuses
    handle, reason = handle_of()
    assert handle is None
    assert fake.asked == [f"MIG-GPU-{UUID}/1/0", f"GPU-{UUID}", f"MIG-{UUID}"]
    assert reason == (
        f"NVML has no handle for cuda:0: NVML knows none of the UUIDs it may go by (MIG-GPU-{UUID}/1/0: Not Found; "
        f"GPU-{UUID}: Not Found; MIG-{UUID}: Not Found)"
    )


def test_a_process_outside_the_measured_tree_on_the_gpu_is_counted(monkeypatch):
    fake = FakeNvml(monkeypatch, [f"GPU-{UUID}"], pids=[os.getpid()])
    nvml = Nvml(CUDA0)
    assert nvml.read() == GpuReading(utilization_percent=40.0, memory_used_mb=512.0, other_processes=0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        fake.pids = [os.getpid(), child.pid]  # a process of the tree (as a worker would be) is no neighbour
        assert nvml.read().other_processes == 0
        fake.pids = [os.getpid(), child.pid, os.getppid()]  # the process that started this one is not in the tree
        assert nvml.read().other_processes == 1
    finally:
        child.kill()
        child.wait()
    nvml.close()


def test_in_another_pid_namespace_only_processes_beyond_the_tree_count(monkeypatch):
    """Inside a container NVML lists host PIDs, which match nothing here: the measured process is among them
    unrecognised. Its tree is a childless process (this one may have children of earlier tests)."""
    host_pids = [4_000_001, 4_000_002]
    fake = FakeNvml(monkeypatch, [f"GPU-{UUID}"], pids=host_pids[:1])
    alone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        nvml = Nvml(CUDA0, root_pid=alone.pid)
        assert nvml.read().other_processes == 0, "one process for a tree of one"
        fake.pids = host_pids
        assert nvml.read().other_processes == 1
        nvml.close()
    finally:
        alone.kill()
        alone.wait()


def test_figures_nvml_refuses_are_none_and_the_rest_is_read(monkeypatch):
    """A MIG instance has no utilisation; listing processes may need permissions the user lacks."""
    FakeNvml(monkeypatch, [f"MIG-{UUID}"], pids=None, utilization=None)
    nvml = Nvml(CUDA0)
    assert nvml.read() == GpuReading(utilization_percent=None, memory_used_mb=512.0, other_processes=None)
    nvml.close()


# NVML is read on the sampler's thread inside the timed window: what autotune adds to NVML's own calls must cost
# microseconds a thread of the measured tree, whatever the number of processes on the machine (psutil's recursive
# children read them all: ~0.7 ms with 63 processes). The fastest of 21 reads is the read's own cost: the others also
# carry what the suite's other processes take from this thread's core. A slow host read 113 µs with 3 threads.
NVML_READ_BUDGET_S = 0.0001
NVML_READ_BUDGET_PER_TASK_S = 0.00002


def test_counting_the_gpus_other_processes_costs_microseconds_per_thread_of_the_tree(monkeypatch):
    FakeNvml(monkeypatch, [f"GPU-{UUID}"], pids=[4_000_001, 4_000_002])  # host PIDs: the tree is counted
    nvml = Nvml(CUDA0)
    costs = []
    for _ in range(21):
        cpu = time.thread_time()
        assert nvml.read().other_processes is not None
        costs.append(time.thread_time() - cpu)
    nvml.close()
    tasks = tree_tasks(os.getpid())
    budget_s = (NVML_READ_BUDGET_S + NVML_READ_BUDGET_PER_TASK_S * tasks) * host_slowness()  # as the host runs
    assert min(costs) <= budget_s, f"{tasks} threads"


def test_other_processes_on_the_gpu_disturb_a_run_like_a_busy_cpu():
    quiet_cpu = dict(cpu_total_percent=60.0, cpu_per_core_percent=[60.0, 60.0], process_tree_cores=1.2)
    assert not SystemReport(**quiet_cpu, gpu_other_processes=0).disturbed
    assert not SystemReport(**quiet_cpu).disturbed, "not listed is not disturbed"
    shared = SystemReport(**quiet_cpu, gpu_other_processes=2)
    assert shared.disturbed and not shared.cores_taken
    both = SystemReport(100.0, [100.0, 100.0], 1.2, gpu_other_processes=1)
    assert both.disturbed and both.cores_taken and both.other_processes_cores == pytest.approx(0.8)


@needs_gpu
def test_nvml_finds_this_gpu_and_this_process_on_it():
    device = torch.device("cuda", torch.cuda.current_device())
    block = torch.empty(2**20, dtype=torch.uint8, device=device)  # a CUDA context here
    nvml = Nvml(device)
    assert nvml.available, nvml.reason
    try:
        reading, listed = _read_while_the_gpus_processes_hold_still(nvml)
    except pynvml.NVMLError:  # listing the processes needs permissions this user lacks: none are counted
        reading, listed = nvml.read(), None
    assert reading.memory_used_mb > 0
    if listed is None:
        assert reading.other_processes is None
    else:
        # Other test processes may compute on the GPU beside this one (pytest-xdist), and this process may have
        # children and be listed under another PID namespace's number: the count's rules are the fakes' tests above;
        # here it is a count of what NVML lists, this process left out.
        listed_here = os.getpid() in listed
        assert 0 <= reading.other_processes <= len(set(listed)) - listed_here
    nvml.close()
    del block


def _read_while_the_gpus_processes_hold_still(nvml: Nvml) -> tuple[GpuReading, list[int]]:
    """A reading of ``nvml`` and the PIDs NVML lists on its GPU, unchanged from just before the reading to after."""
    for _ in range(20):
        before = sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(nvml._handle))
        reading = nvml.read()
        if before == sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(nvml._handle)):
            return reading, before
        time.sleep(0.1)
    pytest.fail("the GPU's processes changed at every reading")


@needs_gpu
def test_a_second_process_on_the_gpu_is_seen(tmp_path):
    device = torch.device("cuda", torch.cuda.current_device())
    block = torch.empty(2**20, dtype=torch.uint8, device=device)
    pid_file = tmp_path / "neighbour.pid"
    script = (
        "import os, sys, time, torch; torch.empty(1, device='cuda'); "
        "open(sys.argv[1] + '.part', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.part', sys.argv[1]); "
        "time.sleep(60)"
    )
    # Started by a shell that exits at once, so that it descends from no process of this tree: another user's job.
    subprocess.run(["sh", "-c", '"$0" -c "$1" "$2" &', sys.executable, script, str(pid_file)], check=True)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), "the neighbour did not start on the GPU within 60 s"
    try:
        nvml = Nvml(device)
        others = nvml.read().other_processes
        listed = set() if others is None else {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(nvml._handle)}
        nvml.close()
        if others is None:
            pytest.skip("NVML does not list the GPU's processes for this user")
        if os.getpid() not in listed:  # another PID namespace: the count is a lower bound, which the tree may cover
            pytest.skip("NVML lists this GPU's processes under another PID namespace's numbers")
        assert others >= 1
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        del block


def test_the_step_events_go_on_the_stream_of_the_device_the_loop_runs_on_not_the_current_one(monkeypatch):
    recorded = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing

        def record(self, stream=None) -> None:
            recorded.append(stream)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"the current stream of {device}")
    timeline = DeviceTimeline(torch.device("cuda", 1))
    timeline.start(1.0)
    timeline.batch_ready()
    timeline.batch_transferred()
    timeline.step_done(16)
    assert recorded == ["the current stream of cuda:1"] * 4


@pytest.mark.parametrize("step_s, expected", [(0.0005, 400 * 0.0005 / 0.02), (0.005, 400 * 0.005 / 0.02), (0.04, 400)])
def test_a_timeline_samples_one_step_per_spacing_of_the_warmups_step_time(monkeypatch, step_s, expected):
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing: SimpleNamespace(record=lambda stream: None))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    timeline = DeviceTimeline(spacing_s=0.02)
    timeline.start(step_s)
    for _ in range(400):
        timeline.step_done(16)
    assert 0.5 * expected <= len(timeline.steps) <= 1.5 * expected + 1
