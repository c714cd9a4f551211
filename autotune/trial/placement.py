"""Where trials run when several run at once (``study.parallel``): each in a slot of its own, a GPU (by
``CUDA_VISIBLE_DEVICES``) or a set of CPU cores (by affinity), never two trials in one slot.

On a CPU, trials at once share caches, memory bandwidth and, unpinned, cores: each distorts the others' figures.
So more than one at once on a CPU needs the user's disjoint, equal-sized core sets (``study.cpu_sets``), and every
run of the study, baseline and race included, is pinned to a set of that size, so that all its figures are alike.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from autotune.errors import ConfigError

# The cores a trial pins itself to, as "0,1" (the worker reads it before anything else runs).
CPUS_ENV = "AUTOTUNE_CPUS"


@dataclass(frozen=True)
class Slot:
    """Where one trial runs: ``env`` pins it (its GPU, or its cores); ``cores`` are the cores it may use (None: all of
    the tuner's); ``name`` says which, for the console."""

    env: dict[str, str] = field(default_factory=dict)
    cores: tuple[int, ...] | None = None
    name: str = ""


UNPINNED = Slot()


def slots(
    parallel: int | str,
    cpu_sets: list[list[int]] | None,
    device: str,
    gpus: tuple[str, ...],
    usable: set[int] | None = None,
) -> list[Slot]:
    """The slots of a run: ``parallel`` trials at once ("auto": one per visible GPU on CUDA, one on a CPU) on
    ``device``, with the GPUs ``gpus`` visible (their names, in CUDA's order) and the tuner's ``usable`` cores (None:
    its affinity); ConfigError naming the key where they cannot be had."""
    if cpu_sets is not None and device.startswith("cuda"):
        raise ConfigError("study.cpu_sets", "pins trials on a CPU; on a GPU, study.parallel runs one trial on each GPU")
    if cpu_sets is not None:
        return _core_slots(parallel, cpu_sets, usable if usable is not None else os.sched_getaffinity(0))
    if device.startswith("cuda"):
        return _gpu_slots(parallel, device, gpus)
    if parallel not in (1, "auto"):
        raise ConfigError(
            "study.parallel",
            f"{parallel} trials at once on a CPU would distort each other's figures; give study.cpu_sets (disjoint "
            "core sets of one size, one per trial, e.g. [[0,1],[2,3]]) to pin each, or keep 1",
        )
    return [UNPINNED]


def refuse_mixed_gpus(places: list[Slot], device: str, gpus: tuple[str, ...]) -> None:
    """A ConfigError naming study.parallel where a tuning run's ``places`` (``slots``) run trials at once on GPUs of
    different models (``gpus``: the visible GPUs' names, in CUDA's order, the first ones used): the same
    configuration measures differently on each, and the search would rank GPUs, not configurations. A mode that runs
    one trial at a time runs it in the first slot alone, whatever the others' GPUs."""
    used = gpus[: len(places)]
    if not device.startswith("cuda") or len(places) < 2 or len(set(used)) < 2:
        return
    names = ", ".join(f"GPU {visible} {name}" for visible, name in zip(_visible_gpus(len(gpus)), used, strict=False))
    raise ConfigError(
        "study.parallel",
        f"trials at once would run on GPUs of different models ({names}), which measure the same configuration "
        "differently: make CUDA_VISIBLE_DEVICES list GPUs of one model, or set study.parallel=1",
    )


def _gpu_slots(parallel: int | str, device: str, gpus: tuple[str, ...]) -> list[Slot]:
    # "auto" is one trial per GPU the run may use: every visible one on cuda, the one named on cuda:N.
    count = (len(gpus) if device == "cuda" else 1) if parallel == "auto" else parallel
    if count == 1:
        return [UNPINNED]
    if device != "cuda":
        raise ConfigError(
            "study.parallel", f"trials on several GPUs at once choose their GPU: use measure.device=cuda, not {device}"
        )
    if count > len(gpus):
        raise ConfigError("study.parallel", f"{count} trials at once need {count} GPUs; {len(gpus)} are visible")
    visible = _visible_gpus(len(gpus))
    return [Slot({"CUDA_VISIBLE_DEVICES": visible[index]}, name=f"GPU {visible[index]}") for index in range(count)]


def _visible_gpus(gpus: int) -> list[str]:
    """The ids of the visible GPUs as CUDA_VISIBLE_DEVICES names them (its list where set: indexes, UUIDs or MIG)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given:
        return [entry.strip() for entry in given.split(",")][:gpus]
    return [str(index) for index in range(gpus)]


def _core_slots(parallel: int | str, cpu_sets: list[list[int]], usable: set[int]) -> list[Slot]:
    count = len(cpu_sets) if parallel == "auto" else parallel
    sets = [tuple(sorted(set(cores))) for cores in cpu_sets]
    problem = None
    if len(sets) != count:
        problem = f"{len(sets)} sets for study.parallel={parallel}: give one set per trial at once"
    elif any(not cores for cores in sets):
        problem = "a set is empty"
    elif len({len(cores) for cores in sets}) > 1:
        problem = "sets of different sizes would measure differently: give sets of one size"
    elif len({core for cores in sets for core in cores}) < sum(len(cores) for cores in sets):
        problem = "the sets overlap: trials sharing a core distort each other's figures"
    elif outside := sorted({core for cores in sets for core in cores} - usable):
        problem = f"cores {outside} are not among this process's usable cores {sorted(usable)}"
    if problem:
        raise ConfigError("study.cpu_sets", problem)
    return [Slot({CPUS_ENV: ",".join(map(str, cores))}, cores, f"cores {','.join(map(str, cores))}") for cores in sets]


def pinned_cores(env: Mapping[str, str]) -> frozenset[int] | None:
    """The cores the environment ``env`` pins a trial to (``CPUS_ENV``); None where it pins it to none."""
    given = env.get(CPUS_ENV)
    return frozenset(int(core) for core in given.split(",")) if given else None


@contextlib.contextmanager
def starting_on(cores: frozenset[int] | None) -> Iterator[None]:
    """A process this thread starts in the block starts on ``cores`` (where None, on this thread's): a new process
    takes the affinity of the thread that forks it, and its libraries size their thread pools from it as they load
    (OpenMP's, torch's default thread count; OpenBLAS's as numpy is imported): one pinned after its imports keeps
    pools sized for every core. Only this thread's affinity changes, and for the block alone: the tuner's other
    threads (study.parallel's slots) start their trials on their own cores.

    Where this thread cannot be moved to ``cores`` (none of them is usable any more: the container's cores shrank,
    EINVAL), the process starts on this thread's cores and its own pinning (``pin_from_env``) refuses them, naming
    study.cpu_sets: a PLACEMENT result, at which the run stops with the key's line, its trial left for a later
    run (``autotune.runner._refused_cores``), where an error raised here would end the tuner as an internal error.
    Where this thread cannot be moved back (none of its cores usable any more), it keeps the cores it has."""
    before = os.sched_getaffinity(0)  # this thread's
    if cores is None or not _moved_to(cores):
        yield
        return
    try:
        yield
    finally:
        _moved_to(before)


def _moved_to(cores: frozenset[int] | set[int]) -> bool:
    """Whether this thread was moved to ``cores``: not where none of them is usable (EINVAL)."""
    try:
        os.sched_setaffinity(0, cores)
    except OSError:
        return False
    return True


def pin_from_env() -> None:
    """In a trial process: pin every thread of it to the cores ``CPUS_ENV`` names (``_pin_every_thread``), with the
    thread counts a process started on those cores gets (torch's: one per core, as an unset num_threads then runs;
    Inductor's compile threads), before anything else runs; nothing where it is not set. The launchers start a trial,
    and the fork server a trial is forked from, on its cores already (``starting_on``), so that the pools its imports
    start are sized to them too; this holds the trial to them however it was started. A ConfigError naming
    study.cpu_sets, the cores and those this process may use where any of them is not usable now (the cores the
    machine or its container lets it use shrank since the run began): with none (EINVAL) it cannot run there, and
    with some gone it would run on fewer cores than its set and than the other trials' sets, its figure not theirs."""
    cores = pinned_cores(os.environ)
    if cores is None:
        return
    import torch  # the trial's: the tuner's process, which places the trials, never imports torch

    try:
        _pin_every_thread(cores)
    except OSError as refused:
        if refused.errno != errno.EINVAL:
            raise
        usable = os.sched_getaffinity(0)  # where it started instead: its tuner's cores (``starting_on``)
        raise _unusable(cores, f"none usable now: this process may use cores {cores_text(usable)}") from refused
    if gone := cores - os.sched_getaffinity(0):
        raise _unusable(cores, f"cores {cores_text(gone)} not usable now: it would run on fewer cores than its set")
    torch.set_num_threads(len(cores))
    _count_compile_threads()


def _unusable(cores: frozenset[int], which: str) -> ConfigError:
    """The error of a trial whose set ``cores`` has ``which`` of its cores usable now."""
    return ConfigError(
        "study.cpu_sets",
        f"this trial's set, cores {cores_text(cores)}, has {which} (the cores the machine or its container lets it "
        "use shrank since the run began); give sets of the cores still usable",
    )


def cores_text(cores: Iterable[int]) -> str:
    """``cores`` in words, runs of consecutive ones as ranges ("0-3, 8, 10-11"): a set of a large machine's cores,
    listed one by one, would push an error's cause and remedy past the length a trial's failure keeps."""
    ordered, runs = sorted(cores), []
    for core in ordered:
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ", ".join(f"{first}" if first == last else f"{first}-{last}" for first, last in runs)


def _pin_every_thread(cores: frozenset[int]) -> None:
    """Pin every thread of this process to ``cores``: an affinity is a thread's, and threads started before the
    pinning (in a trial not started on its cores, its imports start some: OpenBLAS's pool as numpy is imported) would
    keep every core. A new thread takes its creator's, so threads are listed again until no new one appeared; one that
    ended meanwhile is passed over. The pools' sizes, counted at their start, stay as they are (torch's is set
    again)."""
    pinned: set[int] = set()
    while unpinned := {int(task) for task in os.listdir("/proc/self/task")} - pinned:
        for thread in unpinned:
            with contextlib.suppress(ProcessLookupError):  # it ended since it was listed
                os.sched_setaffinity(thread, cores)
        pinned |= unpinned


def _count_compile_threads() -> None:
    """Inductor's compile threads counted again, by Inductor's own rule, where Inductor was imported before the
    pinning: a trial forked from a fork server (which imports it with torch._dynamo) started on other cores would keep
    the count that server made. Where it is not imported, its import counts them on the pinned cores."""
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.compile_threads = config.decide_compile_threads()  # which honours TORCHINDUCTOR_COMPILE_THREADS
