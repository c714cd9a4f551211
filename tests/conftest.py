"""Shared fixtures: the repo's paths, settings for the tiny test pipeline, and a CLI runner."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import hypothesis
import optuna
import psutil
import pytest
from optuna.storages._rdb.storage import _VersionManager

from autotune import cli, recommendation
from autotune.config.load import load_settings
from autotune.knobs import KNOBS, REQUIRED, SearchContext
from autotune.measure import environment
from autotune.measure.measurement import ComputeReport, Measurement, MemoryReport, SystemReport
from autotune.measure.recorder import Timing
from autotune.redact import Secrets
from autotune.study import start
from autotune.trial import runner
from autotune.trial.launch import ForkServer
from autotune.trial.result import TrialRequest

REPO = Path(__file__).resolve().parent.parent
TEST_CONF = REPO / "tests" / "conf"
MEASURE_TESTS = REPO / "tests" / "measure"  # tests that read the test process's own process tree

# Bytecode caches (git-ignored) are written even where PYTHONDONTWRITEBYTECODE is set: without them every test
# process compiles and assertion-rewrites the test modules again as it collects them (6 of its 11 CPU-seconds here),
# and every process the tests start compiles autotune's modules again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Torch's OpenMP threads spin for a while before they sleep, waiting for the next parallel region: with three test
# processes and their trials on two cores, the spinning takes cores the tests need (the suite's CPU-seconds 4-9 %
# fewer here, docs/benchmarks.md section 10). Read once, as OpenMP loads: so set before anything imports torch, in
# the test processes and every process they start. Tests check what happens, not how fast.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _migrations_read_once(read):
    """Optuna reads its schema's migration scripts (alembic's revision files) every time it opens an RDB storage,
    0.06 s each: a fifth of tests/study/test_tuner.py's time. They are the same files for every storage, so a test
    process reads them once."""
    scripts = []

    def script_directory(self):
        if not scripts:
            scripts.append(read(self))
        return scripts[0]

    return script_directory


_VersionManager._create_alembic_script = _migrations_read_once(_VersionManager._create_alembic_script)


def _neutral_knobs() -> dict:
    """Every knob at its baseline default (as a pipeline that sets none runs), batch size 32: nothing changed."""
    values: dict = {}
    for name, knob in KNOBS.items():
        default = 32 if knob.baseline_default is REQUIRED else knob.baseline_default
        values[name] = default if knob.active(values) else None
    return values


NEUTRAL_KNOBS = _neutral_knobs()


def fixed_search(**candidates) -> list[str]:
    """``search.KNOB=[...]`` overrides fixing every knob to its baseline default, but those in ``candidates`` (a list:
    its candidates; None: derived); batch_size, which has no default, is fixed to 16 unless given."""

    def cli(value) -> str:
        return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)

    overrides, workers = [], candidates.get("num_workers", [0]) or [1]
    for name, knob in KNOBS.items():
        values = candidates.get(name, [16 if knob.baseline_default is REQUIRED else knob.baseline_default])
        applies = any(knob.active({"num_workers": count}) for count in workers)  # worker options need workers
        if values is not None and applies:
            overrides.append(f"search.{name}=[{','.join(cli(v) for v in values)}]")
    return overrides


FAST_MEASURE = [
    "measure.warmup_min_steps=2",
    "measure.warmup_max_steps=4",
    "measure.min_steps=3",
    "measure.min_time_s=0.05",
    "measure.max_time_s=5",
    "measure.screen_min_steps=3",
    "measure.screen_min_time_s=0.05",
    "measure.fork_trials=true",  # tests check what happens, not how fast: 0.02 s a trial instead of ~3 s
    "study.diagnose=false",  # no profiling runs after the race: tests/test_profile.py runs them
    "study.remeasure_disturbed=false",  # as many runs however busy the machine: tests/study/test_disturbed.py
    "measure.core_speed=false",  # ~60 ms a run; read where tests/measure/test_core_speed.py asks
]


def tiny_config(**overrides) -> dict:
    """The composed config for tests/conf/pipeline/tiny.yaml as plain data, with section overrides."""
    config = {
        "pipeline": {
            "model": {"_target_": "tests.fixtures.tiny.TinyCNN"},
            "dataset": {"_target_": "tests.fixtures.tiny.TinyImages", "length": 256},
            "loss": {"_target_": "torch.nn.CrossEntropyLoss"},
            "optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.01},
            "baseline": {"batch_size": 16},
        },
        "search": dict.fromkeys(KNOBS),
        "study": {
            "name": None,
            "storage": "sqlite:///autotune.db",
            "n_trials": 3,
            "timeout_s": None,
            "budget_s": None,
            "seed": 0,
            "memory_budget_mb": None,
            "host_memory_budget_mb": None,
            "max_consecutive_failures": 5,
            "confirm_rounds": 0,
            "objectives": ["throughput"],
            "prune_margin": None,
            "probe": False,
            "diagnose": False,
            "remeasure_disturbed": False,
        },
        "measure": {
            "device": "cpu",
            "warmup_min_steps": 2,
            "warmup_max_steps": 4,
            "warmup_tolerance": 0.15,
            "warmup_min_time_s": None,
            "min_steps": 3,
            "min_time_s": 0.05,
            "max_time_s": 5.0,
            "screen_min_steps": None,
            "screen_min_time_s": None,
            "trial_timeout_s": 60,
            "memory_interval_s": 0.2,
            "repeats": 1,
            "loss_tolerance": 0.05,
            "compile_cache_dir": None,
            "fork_trials": True,
            "core_speed": False,
        },
    }
    for section, values in overrides.items():
        config[section] = {**config[section], **values}
    return config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (in their order), the rest after: pytest-xdist's workers then end together, the short
    tests filling in behind the long ones, rather than one worker running a long test while the others wait. Last,
    the short tests that read the test process's own tree (tests/measure/): each ends the process's fork server
    first (tests/measure/conftest.py), which a trial test after it would start again (~5 CPU-seconds)."""
    items.sort(key=lambda item: (item.path.parent == MEASURE_TESTS, item.get_closest_marker("slow") is None))


# A property test checks what the code does, not how fast: under the suite's load one example can take 0.3 s.
hypothesis.settings.register_profile("suite", deadline=None)
hypothesis.settings.load_profile("suite")


# The launchers the tuner ships with, before _trials_forked replaces them for each test.
SHIPPED_JUDGE_LAUNCHER = runner.JUDGE_LAUNCHER


@pytest.fixture(autouse=True)
def _trials_forked(request, monkeypatch):
    """Trials started without a launcher, and the plain loop, are forked; and a fork server forks every trial of
    its process, each round of a race too, unless the test is marked ``draws`` (each new draw would start a server:
    ~5 CPU-seconds). The tests check what happens, not how fast."""
    monkeypatch.setattr(runner, "DEFAULT_LAUNCHER", runner.shared_fork_server)
    monkeypatch.setattr(runner, "JUDGE_LAUNCHER", runner.shared_fork_server)
    if request.node.get_closest_marker("draws") is None:
        monkeypatch.setattr(ForkServer, "new_draw", lambda self: None)


# A valid 1x1 PNG: what a picture is saved as in tests that do not look at pictures.
_ONE_PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c63f8ffff3f030008fc02fea7"
    "9aa0a00000000049454e44ae426082"
)


@pytest.fixture(autouse=True)
def _pictures_drawn_not_rasterized(request, monkeypatch):
    """Every picture of a report is drawn (each plot's ``draw`` on a real matplotlib Figure) but saved as one pixel,
    unless the test is marked ``pictures``: rasterising is a quarter of the suite's CPU time, and the tests that look
    at the images (tests/report/test_pages.py) are marked."""
    if request.node.get_closest_marker("pictures") is None:
        from matplotlib.figure import Figure

        monkeypatch.setattr(Figure, "savefig", lambda self, target, **options: target.write(_ONE_PIXEL_PNG))


@pytest.fixture
def tiny_settings():
    return load_settings(tiny_config(), "tiny")


def cpu_context(**changes) -> SearchContext:
    fields = dict(
        device="cpu",
        cpu_count=2,
        bf16_supported=True,
        dataset_len=1000,
        input_ndim=4,
        baseline=dict(NEUTRAL_KNOBS),
        optimizer_options=frozenset({"for_loop", "foreach", "fused"}),
    )
    fields.update(changes)
    return SearchContext(**fields)


def trial_request(
    model: str = "tiny.TinyCNN", dataset: str = "tiny.TinyImages", length: int = 256, loss: dict | None = None, **knobs
) -> TrialRequest:
    """A request for the tiny test pipeline; ``model`` and ``dataset`` name classes under tests.fixtures,
    and ``knobs`` change the neutral knob values (batch size 16)."""
    config = tiny_config()
    config["pipeline"]["model"] = {"_target_": f"tests.fixtures.{model}"}
    config["pipeline"]["dataset"] = {"_target_": f"tests.fixtures.{dataset}", "length": length}
    if loss is not None:
        config["pipeline"]["loss"] = loss
    settings = load_settings(config, "tiny")
    knobs = {**NEUTRAL_KNOBS, "batch_size": 16, **knobs}
    return TrialRequest(settings.pipeline, knobs, "cpu", settings.measure.plan, 0.1)


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line, working directory or an open file contains ``text`` (e.g. a trial's
    request file or a test's folder: a trial forked by the fork server has the server's command line, but its log
    is open and its working directory is the tuner's). The test's own process is left out."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        if proc.pid == os.getpid():
            continue
        try:
            places = [*(proc.info["cmdline"] or []), proc.info["cwd"] or ""]
            if any(text in place for place in places) or any(text in file.path for file in proc.open_files()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def fake_measurement(throughput: float, peak_mb: float = 100.0) -> Measurement:
    """A Measurement with the given throughput (1 s window) and plausible other figures."""
    timing = Timing(
        steps=10, samples=int(throughput), window_s=1.0, throughput=throughput,
        throughput_ci95_low=throughput * 0.98, throughput_ci95_high=throughput * 1.02, steps_per_s=10.0,
        mean_step_s=0.1, median_step_s=0.1, step_iqr_s=0.01, data_wait_s=0.1, transfer_s=0.0, compute_s=0.9,
        data_stall_fraction=0.1, warmup_steps=8, warmup_s=1.0, warmup_settled=True, compile_s=0.0,
    )  # fmt: skip
    return Measurement(
        name="trial",
        device="cpu",
        timing=timing,
        memory=MemoryReport("pss", peak_mb, peak_mb - 1, peak_mb - 1, 5),
        compute=ComputeReport(1e6, 1e6 * throughput),
        system=SystemReport(90.0, [90.0, 90.0], 1.8),
        environment={"cpu_model": "Test CPU"},
    )


IMPORT_TIMES = {"PYTHONPROFILEIMPORTTIME": "1"}  # the interpreter lists each module it imports on stderr


def imports_torch(stderr: str) -> bool:
    """Whether a process run with ``IMPORT_TIMES`` imported torch, by its stderr."""
    modules = [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    return "torch" in modules


@pytest.fixture
def describes_no_machine(monkeypatch):
    """For a command line run in the test's process (``cli_here``): describing the machine there, which imports torch
    in a tuner's process, fails; the tuner takes the description from its inspection subprocess."""

    def refused():
        pytest.fail("the tuner's process described the machine (importing torch): use the inspection's")

    for module in (environment, recommendation, start):
        monkeypatch.setattr(module, "describe_machine", refused)


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m autotune ARGS`` in ``cwd`` with the repo importable, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DEBUG"}
    full_env.update(PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def cli_here(monkeypatch, capsys):
    """``run_cli`` in this process: the same command line through the same code (Hydra, the study, each trial a
    process of its own, forked from this process's fork server), without a second interpreter's start-up, imports
    and fork server. For what the tuner does; what only a process of its own shows (its exit on a signal, the
    installed script, a tuner killed) runs through ``run_cli``. What the CLI sets for its process is set back:
    streams, signal handlers, the root logger (Hydra configures it), Optuna's verbosity, the passwords it learnt, a
    multirun's failed jobs, the modules it imported from ``cwd``."""

    def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
        with monkeypatch.context() as patch:
            patch.chdir(cwd)
            patch.setattr(sys, "argv", ["autotune", *args])
            patch.setattr(sys, "path", list(sys.path))
            patch.setattr(sys, "stdout", sys.stdout)
            patch.setattr(sys, "stderr", sys.stderr)
            patch.setattr(cli, "_SECRETS", Secrets())
            patch.setattr(cli, "_FAILED_JOBS", {})
            patch.setattr(logging.root, "handlers", list(logging.root.handlers))
            patch.setattr(logging.root, "level", logging.root.level)
            patch.setenv("PYTHONPATH", str(REPO))
            patch.setenv("HYDRA_FULL_ERROR", "0")  # the CLI sets it
            patch.delenv("AUTOTUNE_DEBUG", raising=False)
            handlers = {signum: signal.getsignal(signum) for signum in cli.STOP_SIGNALS}
            verbosity = optuna.logging.get_verbosity()
            try:
                cli.main()
                code = 0
            except SystemExit as exited:
                code = exited.code if isinstance(exited.code, int) else 0 if exited.code is None else 1
                if isinstance(exited.code, str):
                    print(exited.code, file=sys.stderr)  # as the interpreter would
            finally:
                for signum, handler in handlers.items():
                    signal.signal(signum, handler)
                optuna.logging.set_verbosity(verbosity)
                _forget_modules_under(Path(cwd))
            captured = capsys.readouterr()
        return subprocess.CompletedProcess(["autotune", *args], code, captured.out, captured.err)

    return run


def _forget_modules_under(folder: Path) -> None:
    """Drop the modules imported from ``folder`` (a test's own packages, in its tmp_path), as a process of its own
    would; never the repository's own."""
    root = str(folder.resolve()) + os.sep
    for name, module in list(sys.modules.items()):
        path = str(getattr(module, "__file__", None) or "")
        if path.startswith(root) and not path.startswith(str(REPO) + os.sep):
            del sys.modules[name]
