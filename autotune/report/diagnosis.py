"""A profiling run's record as profile.json, profile.md and profile.html, and its lines on the terminal; nothing
here measures. The record is written first and every page is rendered from it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TextIO

from autotune.files import write_atomic
from autotune.measure.hotspots import Hotspots
from autotune.measure.profiling import MemoryTrend, OperatorProfile, ProfileResult
from autotune.report.console import format_knobs
from autotune.report.document import Document, Headline, Link, Section, Table, machine_lines
from autotune.report.html_report import to_html
from autotune.report.markdown import to_markdown
from autotune.report.profile_plots import memory_trend, stage_bars, stage_percents, stage_segments
from autotune.report.profiles import ALL_MEASURED_NO_GAIN
from autotune.results.diagnosis import MEMORY_BOUND, long_run_said
from autotune.results.epochs import LONG_RUN
from autotune.results.loading_remedies import called_from
from autotune.results.profile import Diagnosis, ProfileRecord
from autotune.results.remedies import first_to_follow

PERFETTO = "https://ui.perfetto.dev"
_METHOD = (
    "One configuration in a process of its own, never inside a tuning trial's timed window: warm-up steps, then "
    "{steps} steps timed stage by stage (waiting for the DataLoader, copying to the device, the model's forward "
    "pass through its forward hooks, the optimizer step through its step hooks, the loss and backward pass "
    "between them; fetching and collating timed in the process that does them, worker or training process), "
    "garbage collections timed (gc.callbacks) over the same steps; then memory read after each of {memory}; "
    "then {trace} steps under "
    "torch.profiler (one skipped, one of warm-up, {trace} recorded); then {batches} batches loaded under cProfile, "
    "in the workers where there are workers. On a GPU every stage boundary waits for the device, so the stages "
    "run one after another rather than overlapped as in training. The verdict's rules and thresholds: "
    "autotune/results/diagnosis.py; the advice's: autotune/results/remedies.py and the modules it names."
)

# A verdict's meaning where its name misleads a new reader, in a line after it on the page.
_VERDICT_MEANS = {
    MEMORY_BOUND: (
        "Most of the operators' time is elementwise work limited by memory traffic (bandwidth), not by the RAM's "
        "size: docs/profile.md, How it decides."
    )
}


def write_profile(record: ProfileRecord, out_dir: Path) -> dict[str, Path]:
    """Write profile.json first (the record), then the pages rendered from it; returns name → path."""
    files = {"profile.json": write_atomic(out_dir / "profile.json", json.dumps(record.to_dict(), indent=1))}
    document = profile_document(record, out_dir)
    files["profile.md"] = write_atomic(out_dir / "profile.md", to_markdown(document))
    files["profile.html"] = write_atomic(out_dir / "profile.html", to_html(document))
    return files


def profile_document(record: ProfileRecord, out_dir: Path) -> Document:
    """The profile as a report document; links are relative to ``out_dir``, where the pages are written."""
    title = f"autotune profile: {record.pipeline} ({record.label})"
    machine = Section("Machine", bullets=machine_lines(record.machine, record.device))
    configuration = Section("Configuration", paragraphs=[format_knobs(record.knobs)])
    diagnosis, result = record.diagnosis, record.result
    if diagnosis is None or result is None:
        return Document(title, Headline("The profiling run failed.", record.failure or ""), [configuration, machine])
    sections = [
        Section("Verdict", paragraphs=diagnosis.rules, bullets=diagnosis.findings),
        Section("What to change, most effective first", table=_advice_table(diagnosis)),
        Section(
            "Where a step's time goes",
            table=_stage_table(result),
            bullets=_long_run_line(result),
            plots=[stage_bars(result.stages)],
        ),
        _hot_section(result.hotspots),
        _operator_section(result.operators, out_dir),
        _memory_section(result),
        configuration,
        Section(
            "How it was profiled",
            paragraphs=[
                _METHOD.format(
                    steps=result.stages.steps,
                    memory=_readings(result.memory, "more "),
                    trace=result.operators.active_steps,
                    batches=result.hotspots.batches,
                )
            ],
        ),
        machine,
    ]
    return Document(title, _headline(diagnosis), sections)


def _headline(diagnosis: Diagnosis) -> Headline:
    first = first_to_follow(diagnosis.advice)
    rest = _VERDICT_MEANS.get(diagnosis.verdict, "")
    rest += f" Decided by {diagnosis.rules[-1]}." if diagnosis.rules else ""
    if first is not None:
        rest += f" First: {first.action} ({first.effect})."
    elif diagnosis.advice:
        rest += f" First: {ALL_MEASURED_NO_GAIN} (the table below lists what it measured)."
    verdict = diagnosis.verdict
    return Headline(f"{verdict[:1].upper()}{verdict[1:]}.", rest.strip())  # not capitalize(): it lowers "GPU"


def _advice_table(diagnosis: Diagnosis) -> Table:
    rows = [
        [str(rank), advice.action, advice.why, advice.effect, advice.location or advice.tried or ""]
        for rank, advice in enumerate(diagnosis.advice, 1)
    ]
    return Table(["#", "change", "because", "expected effect", "where / tried"], rows)


def _stage_table(result: ProfileResult) -> Table:
    stages = result.stages
    step_ms = stages.loop_s * 1e3
    share = stage_percents(stages)
    rows = [[stage, f"{ms:.2f}", f"{share[stage]}%"] for stage, ms in stage_segments(stages).items()]
    if stages.num_workers:
        for name, field in (("fetching samples", "fetch_s"), ("collating", "collate_s")):
            ms = stages.mean(field) * 1e3
            rows.append([f"{name}, per batch in a worker of {stages.num_workers}", f"{ms:.2f}", "in parallel"])
    rows.append(["step", f"{step_ms:.2f}", "100%"])
    return Table(["stage", "ms per step", "share"], rows)


def _long_run_line(result: ProfileResult) -> list[str]:
    """Beside the timed steps' stages, a long run's step where it differs from theirs (``long_run_said``): the
    verdict and the advice read it."""
    said = long_run_said(result)
    return [f"{LONG_RUN}: {said}"] if said else []


def _hot_section(hotspots: Hotspots) -> Section:
    where = f"{hotspots.processes} worker process(es)" if hotspots.num_workers else "the training process"
    lead = (
        f"cProfile over {hotspots.batches} batches ({hotspots.samples} samples) in {where}: "
        f"{hotspots.total_s * 1e3 / max(hotspots.batches, 1):.1f} ms a batch profiled, "
        f"{1 - hotspots.collate_share:.0%} in the dataset and the rest collating. "
        "Self time is a function's own; for a library's function, the call sites are the lines of your code that lead "
        "to it, with the share of its self time spent through each where there are several (an estimate below a "
        "library function that several of your lines call: docs/profile.md)."
    )
    rows = [
        [
            f"{hotspots.share(f):.0%}",
            f.name,
            f"{f.self_s * 1e3 / max(hotspots.batches, 1):.2f}",
            called_from(f, callers=False) or f.location or "",
        ]
        for f in hotspots.functions
    ]
    own = [
        f"{f.name} ({f.location}): {f.cumulative_s / max(hotspots.total_s, 1e-12):.0%} with what it calls"
        for f in hotspots.own
    ]
    return Section(
        "Hot functions of the data pipeline",
        paragraphs=[lead],
        table=Table(["share", "function", "self ms per batch", "called from / defined at"], rows),
        bullets=own,
    )


def _operator_section(ops: OperatorProfile, out_dir: Path) -> Section:
    device = ops.device == "cuda"
    headers = ["operator", "calls per step", "self CPU ms per step"] + (["self CUDA ms per step"] if device else [])
    rows = []
    for op in ops.top:
        row = [op.name, f"{op.calls / ops.active_steps:g}", f"{op.self_cpu_s * 1e3 / ops.active_steps:.2f}"]
        rows.append(row + ([f"{op.self_device_s * 1e3 / ops.active_steps:.2f}"] if device else []))
    trace = os.path.relpath(ops.trace_file, out_dir) if Path(ops.trace_file).is_absolute() else ops.trace_file
    step_ms = ops.step_s * 1e3 / ops.active_steps
    lead = (
        f"torch.profiler over {ops.active_steps} steps, the top operators by self time"
        f" ({'the GPU' if device else 'the CPU'}'s). The training step took {step_ms:.1f} ms "
        f"under the profiler, {ops.outside_operators_s / max(ops.step_s, 1e-12):.0%} of it outside any operator "
        f"(Python and the framework between operators). The trace opens in Perfetto ({PERFETTO}, Open trace file), "
        f"chrome://tracing, and TensorBoard (pip install torch-tb-profiler; tensorboard --logdir "
        f"{os.path.dirname(trace) or '.'})."
    )
    return Section(
        "Top operators and the trace",
        paragraphs=[lead],
        table=Table(headers, rows),
        links=[Link(f"the trace: {trace}", trace), Link("Perfetto", PERFETTO)],
    )


def _readings(memory: MemoryTrend, more: str = "") -> str:
    """What ``memory`` was read after, in words: its steps, or under gradient accumulation its whole cycles."""
    count = len(memory.tree_mb)
    if memory.steps_apart == 1:
        return f"{count} {more}steps"
    return f"{count} {more}whole cycles of {memory.steps_apart} micro-batches (gradients accumulated)"


def _memory_section(result: ProfileResult) -> Section:
    memory, gc = result.memory, result.gc
    lines = [
        f"host memory ({memory.metric.upper()} of the training process and its workers) after each of "
        f"{_readings(memory)}: "
        f"{memory.tree_mb[0]:.0f} MiB first, {max(memory.tree_mb):.0f} MiB at most, {memory.tree_mb[-1]:.0f} MiB last",
        f"garbage collection: {sum(gc.collections)} collections (generations 0/1/2: "
        f"{'/'.join(map(str, gc.collections))}), {gc.total_s * 1e3:.1f} ms paused in all ({gc.share:.1%} of "
        f"{gc.wall_s:.1f} s), the longest {gc.longest_s * 1e3:.1f} ms",
    ]
    if memory.cuda_allocated_mb:
        lines.append(
            f"CUDA allocated after each of the same {_readings(memory)}: {memory.cuda_allocated_mb[0]:.0f} MiB first, "
            f"{memory.cuda_allocated_mb[-1]:.0f} MiB last"
        )
    table = None
    if result.cuda_allocations:
        rows = [[f"{a.size_mb:.1f}", str(a.count), a.where] for a in result.cuda_allocations]
        table = Table(["CUDA allocation (MiB)", "times", "made at"], rows)
    return Section("Memory and the interpreter", bullets=lines, table=table, plots=[memory_trend(memory)])


def print_profile(record: ProfileRecord, files: dict[str, Path], out: TextIO) -> None:
    """The verdict, the step's stages, the hottest function and the advice, then the files written."""
    diagnosis, result = record.diagnosis, record.result
    print(f"[profile {record.label}] {format_knobs(record.knobs)}", file=out)
    if diagnosis is None or result is None:
        print(f"  FAILED {record.failure}", file=out)
    else:
        print(f"  verdict: {diagnosis.verdict}: {'; '.join(diagnosis.rules)}", file=out)
        segments = ", ".join(f"{stage} {ms:.1f}" for stage, ms in stage_segments(result.stages).items() if ms >= 0.05)
        print(f"  per step {result.stages.loop_s * 1e3:.1f} ms: {segments}", file=out)
        for line in _long_run_line(result):
            print(f"  {line}", file=out)
        hot = result.hotspots.functions[:1]
        for function in hot:
            site = f", called from {called_from(function, callers=False)}" if function.call_site else ""
            print(f"  hottest in loading: {result.hotspots.share(function):.0%} in {function.name}{site}", file=out)
        for line in diagnosis.findings:
            print(f"  finding: {line}", file=out)
        for rank, advice in enumerate(diagnosis.advice, 1):
            where = f" [{advice.location}]" if advice.location else f" [{advice.tried}]" if advice.tried else ""
            print(f"  {rank}. {advice.action}: {advice.effect}{where}", file=out)
        print(f"  trace: {result.operators.trace_file} (open in {PERFETTO} or TensorBoard)", file=out)
    for name, path in files.items():
        print(f"  {name:<17} {path}", file=out)
