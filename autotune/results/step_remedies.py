"""Advice on the model step: its per-step overhead (a larger batch, compiling), its arithmetic (16 bits,
channels-last, compiling) and the optimizer step's implementation."""

from __future__ import annotations

from typing import Any

from autotune.knobs import KNOBS, SearchContext, conflict
from autotune.knobs.compile import replays_cuda_graphs
from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import (
    MEMORY_BOUND,
    Figures,
    classified_operators,
    is_compute_operator,
    is_convolution,
    work_time,
)
from autotune.results.remedy_model import Advice, Tried

# The optimizer step taking 10 % of the step or more: a foreach or fused step launches far fewer operators.
OPTIMIZER_SHARE = 0.10


def search_context(
    result: ProfileResult, knobs: dict[str, Any], cpu_count: int, sixteen_bit: bool, channels_last_refused: str | None
) -> SearchContext:
    """What the knobs decide their values by, as ``result`` read it and the inspection found the model
    (``channels_last_refused``), ``knobs`` (the profiled configuration, which the advice changes) standing for the
    baseline; foreach for the optimizer's switches where the profile did not read them."""
    options = result.optimizer_options
    return SearchContext(
        device=result.operators.device,
        cpu_count=cpu_count,
        bf16_supported=sixteen_bit,
        dataset_len=result.dataset_len,
        input_ndim=result.input_ndim,
        baseline=knobs,
        optimizer_options=frozenset(["foreach"] if options is None else options),
        repeats_in_workers=result.repeats_in_workers,
        channels_last_refused=channels_last_refused,
        optimizer_default=result.optimizer_default,
    )


def overhead_advice(
    result: ProfileResult, found: Figures, knobs: dict[str, Any], ctx: SearchContext, effective_batch_size: int | None
) -> list[Advice]:
    overhead = found.step_overhead_share * (found.loop_s - found.wait_s)
    device = ctx.device
    mode = _compile_mode(knobs, ctx, effective_batch_size)
    graphs = replays_cuda_graphs(mode, device)
    # Compiling cuts work done on a core (dispatch, the forward's Python), not waiting: on a CPU, the time a step the
    # training process and its workers were on no core at all (a sleep, I/O, a lock) is out of its reach.
    removable = max(0.0, overhead - (_idle_s(result) if device != "cuda" else 0.0))
    gone = found.loop_s / (found.loop_s - removable)
    advice = [_larger_batch(found, knobs["batch_size"], overhead, device, effective_batch_size)]
    # Compiled, a step keeps the overhead compiling cuts (where ``mode`` replays CUDA graphs, by them: its own alone).
    compiled = knobs.get("compile") not in (None, "off") and (not graphs or knobs["compile"] == mode)
    if not compiled:
        advice.append(
            Advice(
                f"set compile={mode}",
                "torch.compile fuses small operators"
                + (" and replays the step as a CUDA graph, one launch a step" if graphs else ""),
                f"up to {gone:.2f}x if the overhead went",
                gone,
                knob="compile",
            )
        )
    return advice + _optimizer(found, knobs, ctx)


def _larger_batch(
    found: Figures, batch: int, overhead_s: float, device: str, effective_batch_size: int | None
) -> Advice:
    """A larger batch than ``batch``, for a step that pays ``overhead_s`` of per-step overhead: the rest of the whole
    step (loading, copies, the operators' work) grows with the batch and the overhead does not, so a batch ``k``
    times as large takes ``overhead_s + k (step - overhead_s)`` for ``k`` times the samples. Twice the batch; under
    search.batch_policy=fixed_effective (gradients accumulated up to ``effective_batch_size``) a micro-batch must
    divide the effective batch (``BatchSizeKnob.unavailable_reason``): the smallest that does, at twice ``batch`` or
    more (fewer accumulation steps, training unchanged); at the effective batch already, twice it is a new baseline
    batch, which that policy does not try (no knob)."""
    effective = effective_batch_size or 0
    divisors = (size for size in range(2 * batch, effective + 1) if effective % size == 0)
    larger = next(divisors, effective) if batch < effective else 2 * batch
    times = larger / batch
    gain = times * found.loop_s / (overhead_s + times * (found.loop_s - overhead_s))
    share = found.step_overhead_share
    read = _overhead_read(found, device)
    why = f"{share:.0%} of the model step is per-step overhead{read}, paid once a batch whatever its size"
    if batch < effective:
        effect = (
            f"up to {gain:.2f}x per sample at micro-batches of {larger}, {effective // larger} to the effective batch "
            f"of {effective} (fewer accumulation steps: training unchanged but for batch statistics)"
        )
        return Advice(f"set batch_size={larger}", why, effect, gain, knob="batch_size")
    effect = f"up to {gain:.2f}x per sample at twice the batch (it changes training: scale the learning rate)"
    if effective:
        action = (
            f"set pipeline.baseline.batch_size={larger}: a new baseline batch, beyond the effective batch of "
            f"{effective} that search.batch_policy=fixed_effective keeps"
        )
        return Advice(action, why, effect, gain)
    return Advice(f"set batch_size={larger}", why, effect, gain, knob="batch_size")


def _overhead_read(found: Figures, device: str) -> str:
    """How the per-step overhead was read (``Figures.step_overhead_share``), in words, on a GPU: its kernels idle, or,
    where the trace recorded none, the host's own work; nothing on a CPU."""
    if device != "cuda":
        return ""
    if found.device_busy_share is not None:
        return " (the GPU idle, waiting for the host)"
    return " (the host's own work: the trace recorded no GPU kernel)"


def _compile_mode(knobs: dict[str, Any], ctx: SearchContext, effective_batch_size: int | None) -> str:
    """The compile knob's candidate here that cuts the most per-step overhead and can run beside ``knobs``
    (``conflict``: no CUDA graphs beside gradients kept across steps or accumulated): its candidates go from least
    to most compiling (reduce-overhead's CUDA graphs last, on a GPU), and its least, default, runs beside any."""
    modes = [mode for mode in KNOBS["compile"].default_candidates(ctx) if mode != "off"]
    runs = (
        mode
        for mode in reversed(modes)
        if conflict({**knobs, "compile": mode}, effective_batch_size, ctx.device) is None
    )
    return next(runs, modes[0])


def _idle_s(result: ProfileResult) -> float:
    """Of a timed step but its wait for data, the time the process tree was on no core, at least: what its CPU time
    (read over the stage-timed steps, so of their step, not a long run's) leaves of the step; 0 for a profile without
    the reading."""
    if result.cpu is None:
        return 0.0
    stages = result.stages
    return max(0.0, stages.loop_s * (1 - result.cpu.system.process_tree_cores) - stages.mean("wait_s"))


def _optimizer(found: Figures, knobs: dict[str, Any], ctx: SearchContext) -> list[Advice]:
    """Another implementation of the optimizer step where it takes OPTIMIZER_SHARE or more of the step and runs
    PyTorch's default: foreach, else fused, the first the pipeline's optimizer takes here (``ctx.optimizer_options``)
    that is not what the default already runs (``OptimizerImplKnob.resolve``: foreach for most of PyTorch's on a GPU,
    so fused there)."""
    share = found.optimizer_s / found.loop_s
    if share < OPTIMIZER_SHARE or knobs.get("optimizer_impl") not in (None, "default"):
        return []
    knob = KNOBS["optimizer_impl"]
    runs = knob.resolve("default", ctx)
    impl = next(
        (name for name in ("foreach", "fused") if knob.searchable(name, ctx) and knob.resolve(name, ctx) != runs),
        None,
    )
    if impl is None:
        return []
    gain = found.loop_s / (found.loop_s - found.optimizer_s)
    return [
        Advice(
            f"set optimizer_impl={impl}",
            f"the optimizer step takes {share:.0%} of {found.step_named} (≥ {OPTIMIZER_SHARE:.0%}), run as {runs} "
            "(PyTorch's default here)",
            f"up to {gain:.2f}x if it cost nothing",
            gain,
            knob="optimizer_impl",
        )
    ]


def arithmetic_advice(
    result: ProfileResult,
    found: Figures,
    knobs: dict[str, Any],
    ctx: SearchContext,
    verdict: str,
    tried: Tried | None,
) -> list[Advice]:
    rest = found.loop_s - found.wait_s
    advice = []
    if knobs.get("amp") in (None, "off") and ctx.bf16_supported:  # emulated bf16 is slower than fp32
        share = found.product_share if verdict != MEMORY_BOUND else 1 - found.compute_share  # of the operators'
        halved = share * found.operator_share * rest / 2
        what = "matrix products run in 16 bits" if verdict != MEMORY_BOUND else "tensors move half the bytes"
        advice.append(
            Advice(
                _amp_action(result, tried),
                f"{what}; on hardware with 16-bit units (GPUs, CPUs with avx512_bf16 or AMX)",
                f"up to {found.loop_s / (found.loop_s - halved):.2f}x if that time halved",
                found.loop_s / (found.loop_s - halved),
                knob="amp",
            )
        )
    convolutions = any(is_convolution(op.name) for op in result.operators.step_operators)
    # The knob says where it runs and pays: inputs that go channels-last, a model that converts.
    if convolutions and not knobs.get("channels_last") and KNOBS["channels_last"].searchable(True, ctx):
        advice.append(
            Advice(
                "set channels_last=True",
                "convolutions run faster on NHWC tensors on most hardware",
                "depends on the model and the hardware: only a measurement tells",
                knob="channels_last",
            )
        )
    if knobs.get("compile") in (None, "off"):
        advice.append(
            Advice(
                "set compile=default",
                f"torch.compile fuses elementwise operators, each a pass over memory ({_elementwise(result)})",
                "depends on the model: only a measurement tells",
                knob="compile",
            )
        )
    return advice + _optimizer(found, knobs, ctx)


def _amp_action(result: ProfileResult, tried: Tried | None) -> str:
    """The advice to compute in 16 bits, its value the one the study could try: fp16 on a GPU where it measured
    fp16 and no bf16 (the tuner leaves bf16 out on a GPU that only emulates it, ``AmpKnob.wasteful_reason``),
    else bf16, or fp16 on a GPU without it (a profile without a study cannot tell which GPU it ran on)."""
    measured = tried.values.get("amp", []) if tried is not None else []
    if result.operators.device == "cuda" and "fp16" in measured and "bf16" not in measured:
        return "set amp=fp16 (the study measured fp16, not bf16)"
    return "set amp=bf16 (fp16 on GPUs without bf16)"


def _elementwise(result: ProfileResult) -> str:
    """The step's three largest operators that are not arithmetic (``is_compute_operator``), with their shares of
    the operators' work (``work_time``, as the verdict splits it)."""
    ops = result.operators
    time_of = work_time(ops)
    classified = classified_operators(ops)
    total = sum(time_of(op) for op in classified) or 1.0
    arithmetic = [op for op in classified if is_compute_operator(op.name, ops.device)]
    others = sorted((op for op in classified if op not in arithmetic), key=time_of, reverse=True)[:3]
    return "the largest: " + ", ".join(f"{op.name} {time_of(op) / total:.0%}" for op in others)
