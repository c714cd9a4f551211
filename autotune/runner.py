"""The trial runs of every mode on this machine: ``TrialRunner``, which runs each trial in a process of its own; the
inspection of the devices and the pipeline (``inspect_run``); the slot a study's runs are measured in and the machine
as those runs see it (``study_slot``, ``study_machine``); the knob a recommendation cannot run with here
(``unrunnable``) and the fix a failure's words point to (``remedy``). The tuning run (``autotune/app.py``) and
mode=check, benchmark, selfcheck and profile run their trials through it. It runs in the tuner's own process, which
never imports torch: only the trial subprocesses do."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.config.settings import Settings
from autotune.errors import BaselineFailedError, ConfigError, PlacementRefusedError
from autotune.files import file_name
from autotune.knobs import SearchContext, accumulated_to, conflict, device_kind, unavailable
from autotune.measure.core_speed import CoreGauge
from autotune.measure.environment import has_16_bit_units, machine_fingerprint, machine_id, thread_variables
from autotune.pipeline.facts import Inspection
from autotune.study.clock import RunClock
from autotune.study.space import check_baseline
from autotune.trial import runner as trial_runner
from autotune.trial.launch import ForkServer, FreshLauncher, Launcher
from autotune.trial.placement import UNPINNED, Slot, slots
from autotune.trial.result import FailureKind, ProbePlan, TrialRequest, TrialResult
from autotune.trial.runner import ProgressFn, run_repeated, run_trial, shared_fork_server


def study_slot(settings: Settings, facts: Inspection) -> Slot:
    """The slot a tuning run of ``settings`` measures its baseline and race in, the first of its slots
    (``study_slots``). A mode that measures what the study measured (mode=check, benchmark, selfcheck, profile) runs
    its trials there too: a study tuned pinned to 2 cores (``study.cpu_sets``), its baseline checked on every core,
    would read a regression that is only the other cores."""
    return study_slots(settings, facts)[0]


def study_runner(settings: Settings, facts: Inspection, workdir: Path) -> TrialRunner:
    """A runner of trials in the study's first slot (``study_slot``), on the device of ``facts``, its logs and
    results in ``workdir``."""
    return TrialRunner(settings, facts.device, workdir, study_slot(settings, facts))


def study_machine(settings: Settings, facts: Inspection) -> dict:
    """The machine of ``facts`` as a run in the study's first slot sees it (``study_slot``): what a tuning run of
    ``settings`` stores its results under, and what another mode's record says it measured on."""
    return pinned(facts.machine, study_slot(settings, facts).cores)


def study_machine_id(settings: Settings, facts: Inspection) -> str:
    """The id a tuning run of ``settings`` stores this machine's results under (``machine_id`` of
    ``study_machine``): what another mode reads of the study must be looked up under it."""
    return machine_id(study_machine(settings, facts))


def study_slots(settings: Settings, facts: Inspection) -> list[Slot]:
    """Where a tuning run of ``settings`` runs its trials on the machine of ``facts`` (``trial/placement.py``)."""
    return slots(settings.study.parallel, settings.study.cpu_sets, facts.device, facts.devices.cuda)


def pinned(machine: dict, cores: tuple[int, ...] | None) -> dict:
    """``machine`` (``describe_machine``) as a run pinned to ``cores`` sees it (None: unpinned): as many cores, and
    as many torch threads, as it is pinned to."""
    return {**machine, **({"cpu_count": len(cores), "torch_threads": len(cores)} if cores else {})}


def inspect_run(settings: Settings, output_dir: Path, clock: RunClock | None = None) -> Inspection:
    """The facts of the machine's devices and of the pipeline (``pipeline/inspect.py``), read in a trial subprocess
    with a trial's timeout and crash handling: the tuner's own process runs no user code and creates no CUDA context,
    which would hold the GPU for the whole study and, in exclusive-process mode, block every trial. It costs one
    trial process: the pipeline's imports and build, and its first sample.

    A configuration error found there is raised as it was (the key it names; exit 2), as is a baseline the facts
    rule out (``check_baseline``). A crash, hang or other failure is one line naming the pipeline (exit 1), its log
    kept as trials/inspect.log in ``output_dir``; a run that stops at neither leaves nothing there. ``clock`` counts
    its process, where given.
    """
    with tempfile.TemporaryDirectory(prefix="autotune-inspect-") as scratch:
        result = TrialRunner(settings, settings.measure.device, Path(scratch), clock=clock).inspect()
        if result.inspection is None:
            log = output_dir / "trials" / "inspect.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(scratch) / "inspect.log", log)
            raise BaselineFailedError(
                f"pipeline '{settings.pipeline.name}': reading its facts (its modules, the devices, the dataset's "
                f"length and first sample, the optimizer) in a subprocess failed: {result.failure}. Log: {log}"
            )
    refused = result.inspection.refused
    if refused:
        raise ConfigError(refused.key, refused.problem)
    check_baseline(settings.baseline, search_context(settings, result.inspection))
    return result.inspection


def unrunnable(settings: Settings, facts: Inspection, knobs: dict[str, object]) -> tuple[str, str] | None:
    """The first knob of ``knobs`` (a recommendation, measured as it is) with which no run here can train, with why:
    a change from the baseline that its knob says cannot run here (``Knob.unavailable_reason``: a batch larger than
    the dataset, workers that would each read the same samples of a stream, a model that refuses channels_last, an
    optimizer implementation it does not take), or a knob that cannot run beside the others (``conflict``). None
    where it can run. The baseline's own values were judged at the inspection (``check_baseline``); a value that runs
    but gains nothing here (``Knob.wasteful_reason``: pinned memory without a GPU, bf16 emulated) is measured."""
    ctx = search_context(settings, facts)
    changes = {name: value for name, value in knobs.items() if value != settings.baseline.get(name)}
    effective_batch_size = accumulated_to(settings.batch_policy, settings.baseline)
    return unavailable(changes, ctx) or conflict(knobs, effective_batch_size, ctx.device)


# torch's words for a pipeline whose pieces do not fit autotune's own step, and the key that fits them.
_REMEDIES = (
    (
        re.compile(r"must be Tensor, not (tuple|list|dict)"),
        "A model output or batch input that is not a tensor (a tuple, a list, a dict): give pipeline.step, a function "
        "fn(model, batch, loss_fn) -> loss that unpacks it (README: 'Tune your own pipeline'). ",
    ),
    (
        re.compile(r"stack expects each tensor to be equal size"),
        "Samples of different shapes cannot be stacked into a batch: give pipeline.collate_fn, a function that pads "
        "them (or crop them to one shape in the dataset). ",
    ),
    (
        re.compile(r"Trying to backward through the graph a second time"),
        "A step that calls loss.backward() (or optimizer.step()) itself, or a model that keeps state from one batch "
        "to the next (an RNN's hidden state) without .detach(): autotune calls backward() on the loss pipeline.step "
        "returns, and steps the optimizer; return the loss without calling either, and detach kept state "
        "(README: 'Tune your own pipeline'). ",
    ),
    (
        re.compile(r"optimizer got an empty parameter list"),
        "A model without parameters, or an optimizer factory that keeps none of them: autotune builds "
        "pipeline.optimizer on the parameters of the model pipeline.model builds; give a model with parameters that "
        "train. ",
    ),
)


def remedy(message: str) -> str:
    """What to change, where a failure's ``message`` says a pipeline's pieces do not fit autotune's own step; ""."""
    return next((fix for words, fix in _REMEDIES if words.search(message)), "")


def search_context(settings: Settings, facts: Inspection, cores: tuple[int, ...] | None = None) -> SearchContext:
    """What the knobs decide by; ``cores``: the cores each trial is pinned to (None: all of the tuner's)."""
    pipeline = facts.pipeline
    return SearchContext(
        device=device_kind(facts.device),
        cpu_count=len(cores) if cores else facts.machine["cpu_count"],  # as a trial process sees them
        bf16_supported=has_16_bit_units(facts.machine, facts.device),
        dataset_len=pipeline.dataset_len,
        input_ndim=pipeline.input_ndim,
        baseline=settings.baseline,
        optimizer_options=pipeline.optimizer_options,
        batch_policy=settings.batch_policy,
        # A trial process starts with the inspection's (read before the user's code ran), or, pinned, one per core.
        torch_threads=len(cores) if cores else facts.machine["torch_threads"],
        gpu_visible=bool(facts.devices.cuda),
        repeats_in_workers=pipeline.repeats_in_workers,
        channels_last_refused=pipeline.channels_last_refused,
        optimizer_default=pipeline.optimizer_default,
    )


class TrialRunner:
    """Runs trials, each a process of its own (forked, or fresh as measure.fork_trials says), for this run's
    settings: ``run`` a configuration with the full window, ``screen`` it with the search's shorter one, ``check``
    it with the harness or the plain loop, ``probe``, ``inspect``, or any ``request`` (``trial``). Its trials run in
    ``slot`` (``trial/placement.py``); one of several slots (``own_server``) forks its trials from a fork server of its
    own, as a fork server runs one trial at a time. ``clock`` (a tuning run's) counts the phases of each process."""

    def __init__(
        self,
        settings: Settings,
        device: str,
        workdir: Path,
        slot: Slot = UNPINNED,
        own_server: bool = False,
        clock: RunClock | None = None,
    ) -> None:
        self.settings, self.device, self.workdir, self.clock = settings, device, workdir, clock
        self.budget = settings.study.watched_budget(device)  # what a running trial's host tree is held to
        measure = settings.measure
        # The cores its runs use, read around each run where one run decides (``run``, ``check``: TrialResult.
        # core_speed); not around the search's (``screen``), which in several slots run beside each other's: a reading
        # beside another slot's trial, or beside its thread's Python, reads them.
        self.gauge = CoreGauge(slot.cores) if measure.core_speed else None
        self.own_server = ForkServer() if measure.fork_trials and own_server else None
        self.launcher = self.own_server or (shared_fork_server() if measure.fork_trials else FreshLauncher())
        self._servers_started = self.launcher.servers_started  # what the clock was told of so far
        self._since = time.monotonic()  # when the process running now started, or the last counted one ended
        study_dir = file_name(settings.study.name)
        self.request = TrialRequest(
            pipeline=settings.pipeline,
            knobs=settings.baseline,
            device=device,
            plan=measure.plan,
            memory_interval_s=measure.memory_interval_s,
            effective_batch_size=accumulated_to(settings.batch_policy, settings.baseline),
            loss_tolerance=measure.loss_tolerance,
            compile_cache_dir=str(Path(measure.compile_cache_dir) / study_dir) if measure.compile_cache_dir else None,
            placement=slot.env,
        )

    def close(self) -> None:
        """End its own fork server, if it has one."""
        if self.own_server is not None:
            self.own_server.close()

    def new_draw(self) -> None:
        """The trials from here on draw a process layout of their own (``Launcher.new_draw``): each round of an
        interleaved comparison starts with one, so that its rounds are independent draws, as fresh processes are."""
        self.launcher.new_draw()

    def run(self, knobs: dict, name: str, on_progress: ProgressFn | None = None) -> TrialResult:
        """Knob values and a trial name in, a TrialResult out (the median of measure.repeats runs)."""
        return self._repeated(replace(self.request, knobs=knobs), name, on_progress, self.gauge)

    def screen(self, knobs: dict, name: str, on_progress: ProgressFn | None = None) -> TrialResult:
        """As ``run``, with the shorter window of a search trial (measure.screen_*)."""
        request = replace(self.request, knobs=knobs, plan=self.settings.measure.screen_plan)
        return self._repeated(request, name, on_progress)

    def _repeated(
        self, request: TrialRequest, name: str, on_progress: ProgressFn | None, gauge: CoreGauge | None = None
    ) -> TrialResult:
        measure = self.settings.measure
        given: list[float] = []  # each process's timeout as it started: a failure ends the repeats, so the last's

        def timeout_s() -> float:
            given.append(self._timeout_s())
            return given[-1]

        with self._stops_counted(request.knobs):
            result = run_repeated(
                request,
                measure.repeats,
                timeout_s,
                self.workdir,
                name,
                self.budget,
                on_progress,
                self.launcher,
                self._count,
                gauge,
            )
        return self._as_read(result, given[-1])

    def check(self, knobs: dict, name: str, plain: bool) -> TrialResult:
        """``knobs`` with the full window in one process, timed by the harness or by the plain loop, which starts as
        ``trial_runner.JUDGE_LAUNCHER`` says whether or not trials fork."""
        request = replace(self.request, knobs=knobs, plain=plain)
        launcher = trial_runner.JUDGE_LAUNCHER() if plain else self.launcher
        return self.trial(request, name, launcher=launcher, gauge=self.gauge)

    def probe(self, plan: ProbePlan) -> TrialResult:
        """The differential probe of ``plan``, in one process."""
        return self.trial(replace(self.request, probe=plan), "probe")

    def inspect(self) -> TrialResult:
        """The facts of the devices and the pipeline (``read_facts``) in one process, ``device`` being the one
        asked for (measure.device). It compiles nothing, so it is given no compile cache: torch makes the cache's
        folder as it imports, and a run the facts refuse must leave none behind."""
        return self.trial(replace(self.request, inspect=True, compile_cache_dir=None), "inspect", watched=False)

    def trial(
        self,
        request: TrialRequest,
        name: str,
        watched: bool = True,
        launcher: Launcher | None = None,
        gauge: CoreGauge | None = None,
    ) -> TrialResult:
        """``request`` in one process (started by ``launcher``, by default the runner's), held to the run's memory
        budget where ``watched``, its cores read around it by ``gauge`` where given."""
        budget = self.budget if watched else None
        timeout_s = self._timeout_s()
        launcher = launcher or self.launcher
        with self._stops_counted(request.knobs):
            result = run_trial(request, timeout_s, self.workdir, name, budget, launcher=launcher, gauge=gauge)
        self._count(result)
        return self._as_read(result, timeout_s)

    def _timeout_s(self) -> float:
        """The timeout of a process starting now: measure.trial_timeout_s, or in a tuning run what its study.budget_s
        has left where less (``RunClock.timeout_s``), each of measure.repeats processes as it starts."""
        timeout_s = self.settings.measure.trial_timeout_s
        return timeout_s if self.clock is None else self.clock.timeout_s(timeout_s)

    def _as_read(self, result: TrialResult, timeout_s: float) -> TrialResult:
        """``result``, of processes given ``timeout_s``, as the run reads it: PlacementRefusedError where its process
        refused its cores (``_refused_cores``); its reason saying where the budget's timeout ended it
        (``RunClock.as_ended_by_budget``)."""
        _refused_cores(result)
        if self.clock is None:
            return result
        return self.clock.as_ended_by_budget(result, timeout_s, self.settings.measure.trial_timeout_s)

    def _count(self, result: TrialResult) -> None:
        started, self._servers_started = self._servers_started, self.launcher.servers_started
        self._since = time.monotonic()
        if self.clock is not None:
            self.clock.count(result, drew=self._servers_started != started)

    @contextmanager
    def _stops_counted(self, knobs: dict[str, Any]) -> Iterator[None]:
        """A process of ``knobs`` stopped with the run (Ctrl-C, a signal: KeyboardInterrupt) counted as a stopped
        trial from its start, or the end of the last process counted in the block, not as the tuner's own work."""
        self._since = time.monotonic()
        try:
            yield
        except KeyboardInterrupt:
            self._count(TrialResult(knobs=knobs, wall_s=time.monotonic() - self._since))
            raise


def _refused_cores(result: TrialResult) -> None:
    """PlacementRefusedError, with the failure's words (study.cpu_sets, the cores, the remedy), where ``result``'s
    process refused the cores its slot pins it to (``FailureKind.PLACEMENT``): the machine's cores shrank under the
    run, which says nothing of the configuration, so nothing of it is stored (a search trial is left for a later run,
    as an interrupted one is: ``trial_outcome.measure_trial``), and the run stops rather than go on, as every run in
    that slot would be refused the same. Every run of every mode comes through a ``TrialRunner``, so each is judged
    so."""
    if result.failure is not None and result.failure.kind is FailureKind.PLACEMENT:
        raise PlacementRefusedError(result.failure.message)


def other_thread_variables(machines: dict[str, dict], described: dict) -> str | None:
    """The thread variables of a machine among ``machines`` (a study's, by id) that is ``described`` (this one) but
    for them, in words; None where there is none: a study resumed under OMP_NUM_THREADS measures anew, and says why."""
    mine = {**machine_fingerprint(described), "thread_env": None}
    for other in machines.values():
        differs = (other.get("thread_env") or None) != (described.get("thread_env") or None)
        if differs and {**machine_fingerprint(other), "thread_env": None} == mine:
            return thread_variables(other) or "none set"
    return None
