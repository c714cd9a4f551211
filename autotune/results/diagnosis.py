"""What limits a profiled configuration, decided from a profiling run's measurements by rules written once here.

The verdict is the first of these that holds, each a measured figure against a threshold:

1. **data-bound**: the training process waits for data for ``DATA_BOUND_WAIT`` of each step or more, as a long run
   waits (``autotune/results/epochs.py``: what the waits at epochs' starts exceed the other steps' by, once an epoch,
   not as often as the timed steps held them), the figure the advice reads too; where that differs from the timed
   steps', every figure of the step says it is of ``LONG_RUN_STEP`` (``Figures.step_named``);
2. **host-overhead-bound**: on a GPU, its kernels are busy less than ``DEVICE_BUSY_MIN`` of the model step (it waits
   for the host); on a CPU, ``OVERHEAD_BOUND_SHARE`` or more of the model step is the host's own work (Python between
   operators, autograd's and the optimizer's bookkeeping, operators too short to be more than their dispatch);
3. **memory-bound**: less than ``MEMORY_BOUND_SHARE`` of the operators' work is arithmetic: matrix products and
   convolutions, and on a CPU random number generation (the rest, elementwise operators, normalisation, copies and a
   compiled graph's own fused kernels, is limited by memory bandwidth); on a CPU, the operators' work is their time
   less what rule 2 counted as overhead (``work_time``), so that no time counts twice;
4. **compute-bound**: otherwise.

On a GPU whose trace recorded no kernel (``OperatorProfile.kernels_recorded``: the profiler without CUPTI records
every device time as 0), rules 2 and 3 read the host's times, as on a CPU, and say so: a device time of 0 there is
no reading, not a device idle throughout. The host's wait for the GPU at the step's end is then neither overhead nor
work: the trace times it apart (``DEVICE_WAIT``). In a trace that did not (``wait_told_apart``: one stored before it
did), that wait reads as the host's overhead, a GPU-bound step as overhead-bound: rule 2 cannot be read, and the
verdict past rule 1 is unknown (``STEP_UNKNOWN``), not a guess.

Beside the verdict, findings: other processes busy on the cores while the steps were timed (first: every figure
after it may read slow), memory that grows step after step (a possible leak), garbage-collection pauses, cores
saturated by loading and training together, and fresh pages faulted in every step.
The advice, ranked by its expected effect: ``autotune/results/remedies.py``.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from autotune.measure.measurement import SystemReport
from autotune.measure.profiling import DEVICE_WAIT, OperatorProfile, OperatorStat, ProfileResult
from autotune.results.epochs import LONG_RUN_STEP, epoch_starts, long_run
from autotune.words import listed

DATA_BOUND, OVERHEAD_BOUND, MEMORY_BOUND, COMPUTE_BOUND = (
    "data-bound",
    "host-overhead-bound",
    "memory-bound",
    "compute-bound",
)
# Not data-bound, and which of the model step's host overhead or the device's work limits it the profile cannot tell.
STEP_UNKNOWN = "model-step-bound (host overhead or GPU work: unknown)"
# Waiting for data 30 % of the step: removing the wait alone gains 1.4x, more than most changes to the model step.
DATA_BOUND_WAIT = 0.30
# Over half the model step in the host's own work: cutting that work gains more than faster arithmetic would.
OVERHEAD_BOUND_SHARE = 0.50
# A GPU busy less than half the model step is waiting for the host to launch its next kernel.
DEVICE_BUSY_MIN = 0.50
# An operator under 10 µs a call, or under 2 calls of a trivial operator timed beside it (a busy host stretches both),
# is mostly its dispatch (Python to C++, dtype and device checks), not arithmetic.
SMALL_OPERATOR_S = 10e-6
SMALL_OPERATOR_DISPATCHES = 2
# Less than half the operator time in matrix products and convolutions: the rest moves more bytes than it computes.
MEMORY_BOUND_SHARE = 0.50
# What rule 2's share is of: the training step under the profiler, without its wait for data.
MODEL_STEP = "the model step"
# What the arithmetic's share (rule 3) is of: the operators' time, not the step's.
OPERATORS_TIME = "the operators' time"
# Allocator arenas and lazily built state add tens of MiB over a run's first steps (the images example: 35 MiB in 30
# steps, levelling off); a leak keeps adding, at least this much over the sample,
LEAK_MIN_MB = 64.0
# and at least this share of where it started,
LEAK_MIN_SHARE = 0.10
# steadily: a straight line through memory after each step fits this well (R²), as it does for a leak, not a jump,
LEAK_MIN_FIT = 0.8
# and still growing at the end: over the last third, at this share of the line's slope at least.
LEAK_LATE_SHARE = 0.5
# Collections pausing the training process 2 % of its time or more are worth a line of code (gc.freeze).
GC_PAUSE_SHARE = 0.02
# A training process that spends 5 % of its CPU time in the kernel while faulting in a megabyte of fresh pages a step
# or more is paying for its allocator (glibc's malloc on the image loop of docs/benchmarks.md, Known limits: up to
# 16 816 pages a step and 149-172 samples/s, against 0-154 pages and 172-179 with freed memory kept). A batch
# from DataLoader workers arrives in a new shared-memory block: its bytes are not counted against the allocator.
FAULT_KERNEL_SHARE = 0.05
FAULT_MIN_MB_PER_STEP = 1.0
# Workers loading and the training process computing, busy together 90 % of the cores or more: they take cores
# from each other (a CPU's stage times are then a shared machine's).
SATURATED_CORES = 0.9
# Other processes busy on the cores while the steps were timed: by the rule that marks a trial's window busy
# (``SystemReport.cores_taken``), over a window this long at least. The reading counts the OS's 10 ms clock ticks:
# over half a second its error, a tick or two a process and a core, stays well under SystemReport.BUSY_OTHERS_CORES.
CONTENTION_MIN_WINDOW_S = 0.5
# Matrix products and convolutions, attention's and recurrent layers' kernels among them: the operators whose time
# goes to arithmetic, told by a whole word of the operator's name (its parts between underscores), as a substring
# would take aten::cummax for a product and aten::_convert_indices_from_coo_to_csr for a convolution. Resampling is
# none: upsample_bilinear2d, upsample_linear1d and their kin move memory, and their words are "bilinear2d" and
# "linear1d", not a linear layer's.
_CONVOLUTION_WORD = re.compile(r"conv(?:olution|[123]d)?")
_PRODUCT_WORD = re.compile(r"(?:b?add)?b?mm|matmul|(?:bi|tri)?linear|einsum|attention|rnn|lstm|gru")
# torch.compile's graphs: Inductor leaves matrix products and convolutions to aten's kernels, which the profiler
# records as operators inside the graph's range. Its own fused C++ kernels (elementwise operators, normalisation,
# reductions) record none on a CPU, so their time is the range's own: operators' time of the memory-bound class, not
# host overhead. Its Triton kernels are recorded by name on a GPU, their device time theirs (``_COMPILED_KERNEL``).
_COMPILED_GRAPH = re.compile(r"CompiledFxGraph")
# Inductor's kernels recorded under their own names (triton_* on a GPU, cpp_fused_* where its C++ kernel profiling is
# on): told by the words of the name as an operator is, triton_tem_fused_mm_0 (a max-autotune template) a product,
# triton_poi_fused_add_relu_0 memory traffic. A Triton kernel's host time is its launch: overhead.
_COMPILED_KERNEL = re.compile(r"(?:triton|cpp_fused)_")
# Random number generation (dropout's masks) is arithmetic too on a CPU, not memory traffic: on one thread of the
# 2-core Xeon of docs/profile.md, bernoulli_ wrote 0.3 GB/s (12 ns an element) where a copy of the same tensors
# (1 to 16 MiB) moved 10 to 40 GB/s. (On a GPU, counter-based generators keep pace with memory: not counted there.)
_RANDOM_OPERATOR = re.compile(r"aten::(bernoulli|uniform|normal|random|exponential|geometric|cauchy|log_normal)_?$")


@dataclass(frozen=True)
class Rule:
    """One figure against its threshold: ``holds`` when ``value`` is at least (``at_least``) or below it. A figure
    the profile cannot give (``value`` None, ``name`` saying why) holds too: the verdict ends there, its own
    (``STEP_UNKNOWN``), rather than go on from a guess. ``of``: the whole the figure is a share of, which its gist
    says: the rules' wholes differ (the step, ``LONG_RUN_STEP``, ``MODEL_STEP``, ``OPERATORS_TIME``), and two shares
    side by side, their wholes unsaid, read as parts of one (25% and 84%, as if 109%)."""

    name: str
    value: float | None
    threshold: float
    at_least: bool
    verdict: str
    of: str

    @property
    def holds(self) -> bool:
        if self.value is None:
            return True
        return self.value >= self.threshold if self.at_least else self.value < self.threshold

    @property
    def gist(self) -> str:
        """The figure in a few words, with the whole it is a share of (``of``): "waiting for data 60% of the step",
        "host overhead 84% of the model step"; to a tenth of a per cent where whole ones would read as its threshold
        (``share_shown``); "unknown" where it cannot be read."""
        if self.value is None:
            return f"{self.name.partition(', of ')[0]} unknown"
        return f"{self.name.partition(', of ')[0]} {share_shown(self.value, self.threshold)} of {self.of}"

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.name} unknown: {self.verdict}"
        relation = ("≥" if self.at_least else "<") if self.holds else ("<" if self.at_least else "≥")
        outcome = self.verdict if self.holds else f"not {self.verdict}"
        return f"{self.name} {self.value:.1%} {relation} {self.threshold:.0%}: {outcome}"


def share_shown(share: float, threshold: float) -> str:
    """``share`` in whole per cents, or to a tenth where whole ones would read as ``threshold`` ("29.7%", not the
    "30%" it falls short of)."""
    shown = f"{share:.0%}"
    return f"{share:.1%}" if shown == f"{threshold:.0%}" else shown


@dataclass(frozen=True)
class Figures:
    """The figures the rules and the advice read, per step of the profiled configuration, in seconds: the step and
    its wait for data as a long run reads them (``epochs.long_run``; ``long_run``: where that differs from the timed
    steps' own)."""

    loop_s: float
    wait_s: float
    transfer_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    loading_s: float  # fetching and collating one batch, in the process that makes it
    wait_share: float
    model_step_s: float  # the training step under the profiler, per step
    overhead_share: float
    device_busy_share: float | None  # None off a GPU, and on one whose trace recorded no kernel
    compute_share: float  # arithmetic (``is_compute_operator``), of the operators' work (``work_time``)
    product_share: float  # matrix products and convolutions alone, of the operators' work: what 16 bits speed up
    operator_share: float = 1.0  # the operators' work, of the profiled model step (the rest: overhead)
    long_run: bool = False  # loop_s and wait_s are a long run's, not the timed steps' own (``step_named``)

    @property
    def step_named(self) -> str:
        """The step ``loop_s`` is, as a share of it is said to be of: "the step", or ``LONG_RUN_STEP`` where a long
        run's differs from the timed steps' (a table of those beside it)."""
        return LONG_RUN_STEP if self.long_run else "the step"

    @property
    def step_overhead_share(self) -> float:
        """The share of the model step that is per-step overhead, as the verdict's rule 2 reads it: on a GPU whose
        kernels were recorded the device idle (``1 - device_busy_share``: waiting for the host to launch its
        kernels), else the host's own work (``overhead_share``). What a larger batch amortises and compiling cuts."""
        return self.overhead_share if self.device_busy_share is None else max(0.0, 1 - self.device_busy_share)


def figures(result: ProfileResult) -> Figures:
    """The figures of ``result`` the rules and the advice read; its step and wait for data as a long run reads them
    (``epochs.long_run``: the waits at epochs' starts once an epoch), the stages' other figures as timed."""
    stages, ops = result.stages, result.operators
    run = long_run(stages, epoch_starts(result))
    classified = classified_operators(ops)
    time_of = work_time(ops)
    small = _small_call_s(ops)
    overhead = ops.outside_operators_s + sum(_overhead_of(op, small) for op in ops.step_operators)
    operator_time = sum(time_of(op) for op in classified) or float("inf")
    compute = sum(time_of(op) for op in classified if is_compute_operator(op.name, ops.device))
    products = sum(time_of(op) for op in classified if _is_product(op.name))
    step_s = ops.step_s or float("inf")
    return Figures(
        loop_s=run.loop_s,
        wait_s=run.wait_s,
        transfer_s=stages.mean("transfer_s"),
        forward_s=stages.mean("forward_s"),
        backward_s=stages.mean("backward_s"),
        optimizer_s=stages.mean("optimizer_s"),
        loading_s=stages.mean("fetch_s") + stages.mean("collate_s"),
        wait_share=run.wait_share,
        model_step_s=ops.step_s / ops.active_steps,
        overhead_share=min(1.0, overhead / step_s),
        device_busy_share=sum(op.self_device_s for op in ops.step_operators) / step_s if ops.kernels_recorded else None,
        compute_share=compute / operator_time,
        product_share=products / operator_time,
        operator_share=min(1.0, operator_time / step_s) if math.isfinite(operator_time) else 0.0,
        long_run=run.differs,
    )


def long_run_said(result: ProfileResult) -> str | None:
    """A long run's step and its wait's share in a line, with the epochs' starts that make it differ from the timed
    steps' (``epochs.long_run``), for a table of those to be read beside: "26.3 ms a step, waiting 7% (step 12 began
    an epoch and waited 250 ms, the others 1.0 ms: the excess counted once an epoch of 1000 steps)"; None where the
    two do not differ."""
    starts = epoch_starts(result)
    run = long_run(result.stages, starts)
    if not run.differs:
        return None
    at = [str(step) for step in starts.at]
    began = f"step {at[0]} began an epoch" if len(at) == 1 else f"steps {listed(at)} began epochs"
    return (
        f"{run.loop_s * 1e3:.1f} ms a step, waiting {share_shown(run.wait_share, DATA_BOUND_WAIT)} ({began} and "
        f"waited {starts.waited}, the others {starts.steady_s * 1e3:.1f} ms: the excess counted {starts.how_often})"
    )


def wait_told_apart(ops: OperatorProfile) -> bool:
    """Whether the host's overhead of ``ops`` holds none of the host's wait for the device: off a GPU there is none;
    on one whose kernels were recorded rule 2 reads the device, not the host; else where the trace timed the wait
    apart (``DEVICE_WAIT``), which a trace stored before it did lacks: its time outside operators holds the wait."""
    return ops.device != "cuda" or ops.kernels_recorded or any(op.name == DEVICE_WAIT for op in ops.step_operators)


def work_time(ops: OperatorProfile) -> Callable[[OperatorStat], float]:
    """The time an operator of ``ops`` spends on work, arithmetic or memory traffic (rule 3's split): on a GPU its
    device time, where the trace recorded kernels (``kernels_recorded``); else its host time less what rule 2 counts
    as host overhead (``_overhead_of``: the calls of an operator whose typical call is its dispatch), which would
    otherwise count twice."""
    if ops.kernels_recorded:
        return lambda op: op.self_device_s
    small = _small_call_s(ops)
    return lambda op: op.self_cpu_s - _overhead_of(op, small)


def _small_call_s(ops: OperatorProfile) -> float:
    """A call this short or shorter is mostly its dispatch (``SMALL_OPERATOR_S``, ``SMALL_OPERATOR_DISPATCHES``)."""
    return max(SMALL_OPERATOR_S, SMALL_OPERATOR_DISPATCHES * ops.dispatch_s)


def classified_operators(ops: OperatorProfile) -> list[OperatorStat]:
    """The operators of the training step whose time the rules split into arithmetic and memory traffic: aten's,
    compiled graphs' own (``_COMPILED_GRAPH``: Inductor's fused kernels, of the memory-bound class) and Inductor's
    kernels recorded by name (``_COMPILED_KERNEL``)."""
    return [
        op
        for op in ops.step_operators
        if op.name.startswith("aten::") or _COMPILED_GRAPH.search(op.name) or _COMPILED_KERNEL.match(op.name)
    ]


def _overhead_of(op: OperatorStat, small: float) -> float:
    """The host time of ``op``'s calls that is overhead: all of it for what is not an aten operator, but a compiled
    graph's (``_COMPILED_GRAPH``: its kernels' work); for one whose typical call is ``small``, its calls at that
    typical cost (a few heavy calls among many tiny ones, an add_ on activations among an optimizer's on scalars, are
    work, not overhead); none for the rest, nor for the host's wait for the device (``DEVICE_WAIT``)."""
    if _COMPILED_GRAPH.search(op.name) or op.name.startswith("cpp_fused_") or op.name == DEVICE_WAIT:
        return 0.0
    if not op.name.startswith("aten::"):
        return op.self_cpu_s
    if op.typical_call_cpu_s >= small:
        return 0.0
    return min(op.self_cpu_s, op.calls * op.typical_call_cpu_s)


def is_compute_operator(name: str, device: str) -> bool:
    """Whether operator ``name`` spends its time on arithmetic on a ``device`` ("cpu" or "cuda"): a matrix product
    or a convolution; on a CPU, random number generation too."""
    return _is_product(name) or bool(device != "cuda" and _RANDOM_OPERATOR.match(name))


def is_convolution(name: str) -> bool:
    """Whether operator ``name`` is a convolution (``aten::conv2d``, ``aten::cudnn_convolution``)."""
    return any(_CONVOLUTION_WORD.fullmatch(word) for word in _words(name))


def _is_product(name: str) -> bool:
    """Whether operator ``name`` is a matrix product or a convolution (``_PRODUCT_WORD``, ``_CONVOLUTION_WORD``)."""
    return is_convolution(name) or any(_PRODUCT_WORD.fullmatch(word) for word in _words(name))


def _words(name: str) -> list[str]:
    """The words of operator ``name`` after its namespace ("aten::_conv_depthwise2d" → conv, depthwise2d), or of an
    Inductor kernel's name (``_COMPILED_KERNEL``); none for another name without a namespace, which is a range
    recorded around operators, not one."""
    _, namespace, operator = name.lower().rpartition("::")
    named = namespace or _COMPILED_KERNEL.match(name)
    return [word for word in operator.split("_") if word] if named else []


def rules(result: ProfileResult) -> list[Rule]:
    """The verdict's rules in the order they are tried (the first that holds decides)."""
    found = figures(result)
    ops = result.operators
    on_cpu = ops.device != "cuda"
    arithmetic = "matrix products and convolutions" + (" and random numbers" if on_cpu else "")
    # A GPU's rules read the host's times where its trace recorded no kernel: said, as they then read no device.
    host_read = " (no GPU kernel recorded: read on the host)" if not on_cpu and not ops.kernels_recorded else ""
    # Where a long run's wait differs from the timed steps' (an epoch's start among them), the rule says which it read.
    once = " (epoch starts' waits once an epoch)" if found.long_run else ""
    data = Rule(
        f"waiting for data, of {found.step_named}{once}:",
        found.wait_share,
        DATA_BOUND_WAIT,
        True,
        DATA_BOUND,
        of=found.step_named,
    )
    if not wait_told_apart(ops):
        unread = (
            f"host overhead, of {MODEL_STEP} (no GPU kernel recorded, and the host's wait for the GPU not timed "
            "apart from it: a profile made before it was; profile again):"
        )
        return [data, Rule(unread, None, OVERHEAD_BOUND_SHARE, True, STEP_UNKNOWN, of=MODEL_STEP)]
    overhead = (
        Rule(
            f"the GPU busy, of {MODEL_STEP}:",
            found.device_busy_share,
            DEVICE_BUSY_MIN,
            False,
            OVERHEAD_BOUND,
            of=MODEL_STEP,
        )
        if found.device_busy_share is not None
        else Rule(
            f"host overhead, of {MODEL_STEP}{host_read}:",
            found.overhead_share,
            OVERHEAD_BOUND_SHARE,
            True,
            OVERHEAD_BOUND,
            of=MODEL_STEP,
        )
    )
    return [
        data,
        overhead,
        Rule(
            f"{arithmetic}, of {OPERATORS_TIME}{host_read}:",
            found.compute_share,
            MEMORY_BOUND_SHARE,
            False,
            MEMORY_BOUND,
            of=OPERATORS_TIME,
        ),
    ]


@dataclass(frozen=True)
class Leak:
    """Memory that grew over the sampled steps: ``start_mb`` to ``end_mb`` (a straight line's through the readings,
    at the first step and the last: one noisy reading moves them little) of ``what``, ``per_step_mb`` by that line's
    slope, which fits with ``fit`` (R²)."""

    what: str
    steps: int
    start_mb: float
    end_mb: float
    per_step_mb: float
    fit: float

    def __str__(self) -> str:
        return (
            f"{self.what} grew from {self.start_mb:.0f} to {self.end_mb:.0f} MiB over {self.steps} steps, "
            f"{self.per_step_mb:.2f} MiB a step, steadily (a straight line fits with R² {self.fit:.2f})"
        )


def leaks(result: ProfileResult) -> list[Leak]:
    """The memory series that grew as a leak grows: by ``LEAK_MIN_MB`` and ``LEAK_MIN_SHARE`` at least over the
    sample, steadily (host memory first)."""
    cuda = result.memory.cuda_allocated_mb
    apart = result.memory.steps_apart
    found = [_host_leak(result), _leak("CUDA memory allocated", cuda, apart) if cuda is not None else None]
    return [leak for leak in found if leak is not None]


_HOST_MEMORY = "host memory of the training process and its workers ({})"
# Fewer readings than this make no line worth reading a leak from.
_LEAK_MIN_READINGS = 6


def _leak(what: str, readings: list[float], steps_apart: int) -> Leak | None:
    """A leak of ``readings`` (memory after each of their steps, ``steps_apart`` steps apart: a whole cycle under
    gradient accumulation), read from the straight line through them: what it grew from the first reading to the
    last, from where it started, still growing over the last third (LEAK_LATE_SHARE of the line's slope: memory that
    rose and levelled off is no leak); per step, of training's steps."""
    if len(readings) < _LEAK_MIN_READINGS:
        return None
    slope, start, fit = _line(readings)
    late, _, _ = _line(readings[-(len(readings) // 3) :])
    grew = slope * (len(readings) - 1)
    if grew < LEAK_MIN_MB or grew < LEAK_MIN_SHARE * start or fit < LEAK_MIN_FIT or late < LEAK_LATE_SHARE * slope:
        return None
    return Leak(what, (len(readings) - 1) * steps_apart + 1, start, start + grew, slope / steps_apart, fit)


def _line(values: list[float]) -> tuple[float, float, float]:
    """The least-squares slope and intercept of ``values`` against their index, and R² (0 for a flat series)."""
    steps = list(range(len(values)))
    slope, intercept = statistics.linear_regression(steps, values)
    mean = statistics.fmean(values)
    total = sum((v - mean) ** 2 for v in values)
    residual = sum((v - (slope * x + intercept)) ** 2 for x, v in zip(steps, values, strict=True))
    return slope, intercept, (1 - residual / total) if total > 0 else 0.0


def verdict(result: ProfileResult) -> tuple[str, list[Rule]]:
    """The verdict and the rules tried to reach it, the deciding one last."""
    tried = []
    for rule in rules(result):
        tried.append(rule)
        if rule.holds:
            return rule.verdict, tried
    return COMPUTE_BOUND, tried


def gc_finding(result: ProfileResult) -> str | None:
    """A line on garbage collection where its pauses took ``GC_PAUSE_SHARE`` of the time or more."""
    gc = result.gc
    if gc.share < GC_PAUSE_SHARE:
        return None
    return (
        f"garbage collection paused the training process {gc.share:.1%} of its time ({sum(gc.collections)} "
        f"collections, {gc.total_s * 1e3:.0f} ms in all, the longest {gc.longest_s * 1e3:.1f} ms; "
        f"≥ {GC_PAUSE_SHARE:.0%})"
    )


def saturation_finding(result: ProfileResult, cpu_count: int) -> str | None:
    """A line where, on a CPU with workers, loading and the model step keep ``SATURATED_CORES`` of the machine's
    ``cpu_count`` cores busy or more (the process tree's CPU, where the profile read it): each slows the other. Each
    worker is one process: the workers keep at most as many cores busy as there are of them, however long a batch
    takes; where they load slower than the steps consume, the steps timed ran on batches loaded before them, which
    the line says. It reads the timed steps' own step (the table's), over which the cores were read, not a long
    run's (``figures``): the cores' reading holds the waits the timed steps held."""
    workers = result.stages.num_workers
    if workers == 0 or result.operators.device == "cuda":
        return None
    found, step = figures(result), result.stages.loop_s
    working = found.loop_s - found.wait_s  # the same in the timed steps and in a long run
    loading_cores = found.loading_s / step
    # The cores the process tree used, as read; from the stage times (busy as long as it is not waiting: a worker
    # that sleeps or waits on I/O reads busy) only in a profile without the reading.
    read = result.cpu.system.process_tree_cores if result.cpu is not None else None
    cores = read if read is not None else min(loading_cores, workers) + working / step
    if cores < SATURATED_CORES * cpu_count:
        return None
    behind = loading_cores > workers
    ahead = (
        f" (its {workers} workers load a batch each {found.loading_s / workers * 1e3:.0f} ms at best, slower than the "
        "steps: these ran on batches loaded before them, and a longer run may wait for data)"
        if behind
        else ""
    )
    return (
        f"the {cpu_count} cores are saturated: each {step * 1e3:.0f} ms step, a worker loads a batch for "
        f"{found.loading_s * 1e3:.0f} ms while the training process works {working * 1e3:.0f} ms{ahead}, "
        f"{cores:.1f} cores' worth (≥ {SATURATED_CORES:.0%} of {cpu_count}): loading and the model step slow each "
        "other, and more workers or threads cannot help; cheaper loading or a cheaper model step can help"
    )


def fault_finding(result: ProfileResult) -> str | None:
    """A line where the training process faults in ``FAULT_MIN_MB_PER_STEP`` of fresh pages a step or more (beyond a
    batch received from workers) and spends ``FAULT_KERNEL_SHARE`` of its CPU time in the kernel or more (None for a
    profile without the reading)."""
    faults = result.faults
    if faults is None:
        return None
    leak = _host_leak(result) if result.stages.num_workers == 0 else None
    fresh = _fresh_mb_per_step(result, leak)
    if faults.kernel_share < FAULT_KERNEL_SHARE or fresh < FAULT_MIN_MB_PER_STEP:
        return None
    beyond = [" the batch its workers send"] if result.stages.num_workers else []
    beyond += [" what its memory keeps growing by"] if leak else []
    received = f" beyond{' and'.join(beyond)}" if beyond else ""
    pages = round(fresh * 2**20 / faults.page_bytes)  # those megabytes' faults: the batch's and a leak's left out too
    return (
        f"the training process faults in {fresh:.0f} MiB of fresh pages a step or more{received} "
        f"({pages} faults) and spends {faults.kernel_share:.0%} of its CPU time "
        f"in the kernel (≥ {FAULT_MIN_MB_PER_STEP:g} MiB and {FAULT_KERNEL_SHARE:.0%}), as when memory freed in a step "
        "is given back to the kernel and mapped and zeroed again in the next step"
    )


def _fresh_mb_per_step(result: ProfileResult, leak: Leak | None) -> float:
    """Megabytes of fresh pages a step, less a batch where workers send it (in a new shared-memory block), and less
    what ``leak`` keeps a step (taken without workers only: the host memory read is then the training process's
    alone): pages kept are faulted in once, which no allocator setting saves."""
    received = result.sample_bytes * result.stages.batch_size if result.stages.num_workers else 0
    return result.faults.mb_per_step - received / 2**20 - (leak.per_step_mb if leak else 0.0)


def _host_leak(result: ProfileResult) -> Leak | None:
    memory = result.memory
    return _leak(_HOST_MEMORY.format(memory.metric.upper()), memory.tree_mb, memory.steps_apart)


def contention_finding(result: ProfileResult) -> str | None:
    """A line where other processes kept the cores busy while the steps were timed, as a trial's window is called busy
    (``SystemReport.cores_taken``; over ``CONTENTION_MIN_WINDOW_S`` at least): the stage times may read slow and the
    advice be off; and on a CPU, where the training process ran more compute threads than the cores they left free,
    that fewer threads may help more than any advice (None for a profile without the reading, or a quiet one)."""
    cpu = result.cpu
    if cpu is None or result.stages.wall_s < CONTENTION_MIN_WINDOW_S or not cpu.system.cores_taken:
        return None
    system = cpu.system
    line = (
        f"other processes kept {system.other_processes_cores:.1f} of the {cpu.cores} cores busy while the steps were "
        f"timed (the cores {system.cpu_total_percent:.0f}% busy, ≥ {SystemReport.SATURATED_PERCENT:g}%, and theirs "
        f"≥ {SystemReport.BUSY_OTHERS_CORES:g} cores' worth: busy, as a trial's window is called): the stage times may "
        "read slow, and the verdict and the advice below be off"
    )
    fewer = max(1, math.floor(cpu.free_cores))
    if result.operators.device != "cuda" and cpu.threads > cpu.free_cores and cpu.threads > fewer:
        line += (
            f", and with {cpu.threads} compute threads in the training process on the {cpu.free_cores:.1f} cores they "
            f"left free, fewer threads (num_threads={fewer}) may help more than anything advised below"
        )
    return line
