"""``mode=benchmark``: the recommendation in a recommended.yaml against the baseline, and each change's share.

The baseline (``pipeline.baseline``), the recommendation, each change alone on top of the baseline and the
recommendation without each change run for ``benchmark.rounds`` rounds, each configuration once a round in a process
of its own with the full window, the order rotating from round to round. The record is saved to benchmark.json before
anything is rendered from it, also where the run stopped before its last round (an interrupt, an error:
``measure_then_report``), which it then says. Its rules: ``autotune/results/benchmark.py``.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO, TypeVar

from autotune.config.settings import Settings
from autotune.errors import ConfigError, NotMeasuredError
from autotune.files import file_name
from autotune.knobs import accumulated_to, changed, conflict, device_kind
from autotune.pipeline.facts import Inspection
from autotune.recommendation import (
    MachineMismatchWarning,
    Measured,
    Recommendation,
    UntrimmedWarning,
    load_recommended,
)
from autotune.report.benchmark import print_benchmark, run_label, write_benchmark
from autotune.report.rows import disturbance_words
from autotune.results.benchmark import Benchmark, Entry, TunedGain, share_knobs
from autotune.runner import TrialRunner, inspect_run, study_machine, study_slot, unrunnable
from autotune.study.disturbed import again_if_disturbed, first_stands_words
from autotune.study.trial_outcome import RunFn
from autotune.trial.placement import UNPINNED, Slot
from autotune.trial.result import TrialResult
from autotune.trial.runner import signals_held
from autotune.words import counted, duration

T = TypeVar("T")


def run(settings: Settings, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Benchmark ``settings.recommended`` and write benchmark.json, .md and .html into ``output_dir``."""
    if not settings.recommended:
        raise ConfigError(
            "recommended", "mode=benchmark measures a recommendation: give recommended=PATH/recommended.yaml"
        )
    facts = inspect_run(settings, output_dir)
    device = facts.device
    settings, recommendation, notes = recommendation_to_measure(settings, facts)
    if spread := recommendation.measured.unsteady:
        notes = [*notes, f"its tuning run's machine did not hold its speed (the baseline's race medians {spread:g}x "
                 "apart): the gain it recorded does not stand, and nothing is compared with it"]  # fmt: skip
    where = str(settings.recommended)
    if recommendation.baseline and not changed(recommendation.knobs, recommendation.baseline):
        # a tuning run that kept its baseline: as mode=check, nothing to measure, and no file is written
        print(f"autotune benchmark: nothing to measure: {where} recommends the baseline it was tuned against", file=out)
        return {}
    refuse_other_device(recommendation.device, device, where)
    refuse_same_as_baseline(settings, recommendation.knobs, where)
    effective = accumulated_to(settings.batch_policy, settings.baseline)
    entries = configurations(settings.baseline, recommendation.knobs, effective, device_kind(device))
    changes = len(changed(recommendation.knobs, settings.baseline))
    skipped = 2 + 2 * changes - len(entries)
    repeat = "repeats" if skipped == 1 else "repeat"
    unmeasured = f", less {skipped} that {repeat} one of the two or cannot run" if skipped else ""
    print(
        f"autotune benchmark: pipeline '{settings.pipeline.name}' on {device}; {settings.benchmark_rounds} rounds of "
        f"{len(entries)} configurations: the baseline, the recommendation, and each of its changes ({changes}) alone "
        f"and left out{unmeasured}",
        file=out,
        flush=True,
    )
    for note in notes:
        print(f"note: {note}", file=out)
    benchmark = Benchmark(
        pipeline=settings.pipeline.name,
        device=device,
        rounds=settings.benchmark_rounds,
        recommended=str(settings.recommended),
        machine=study_machine(settings, facts),
        entries=entries,
        notes=notes,
        batch_policy=settings.batch_policy,
        tuned=tuned_gain(recommendation.measured) if _comparable(recommendation, settings) else None,
    )
    measure = partial(measure_rounds, settings, benchmark, output_dir / "benchmark", out, study_slot(settings, facts))
    files = measure_then_report(measure, partial(_report, benchmark, output_dir, out))
    recommended = benchmark.recommendation
    if benchmark.interval(recommended) is None:
        raise NotMeasuredError(
            f"benchmark of {settings.recommended}: not measured: {len(benchmark.ratios(recommended))} of "
            f"{benchmark.rounds} rounds ran both the baseline and the recommendation (an interval needs two); "
            f"why, in {files['benchmark.md']}"
        )
    return files


def measure_then_report(measure: Callable[[], object], report: Callable[[bool], T]) -> T:
    """Run ``measure``, then ``report`` what it measured whatever happened, told whether the run stopped before its
    last round: ``measure`` raised (an interrupt, an error), so the rounds that ran are reported and decide nothing,
    and what it raised is raised on once they are, its exit code standing where the report failed too (that failure
    said on stderr). A stop signal while the report is written is delivered once it is (``signals_held``), as a
    tuning run's is: raised there, it would leave the files half written."""
    try:
        measure()
    except BaseException:
        with signals_held():
            try:
                report(True)
            except Exception as failed:
                print(f"autotune: the rounds that ran could not all be reported: {failed}", file=sys.stderr)
        raise
    with signals_held():
        return report(False)


def _report(benchmark: Benchmark, output_dir: Path, out: TextIO, stopped: bool) -> dict[str, Path]:
    """Write ``benchmark`` (``stopped`` before its last round or not) into ``output_dir``, then print it."""
    benchmark = replace(benchmark, stopped=stopped)
    files = write_benchmark(benchmark, output_dir)
    print_benchmark(benchmark, files, out)
    return files


def recommendation_to_measure(settings: Settings, facts: Inspection) -> tuple[Settings, Recommendation, list[str]]:
    """``settings.recommended`` loaded (a ConfigError naming the key where it cannot be, or where a change of it
    cannot run here: ``refuse_unrunnable``), ``settings`` training as it was tuned (``trained_as_tuned``), and the
    notes a run measuring it states: tuned on another machine, not trimmed, against another baseline or pipeline,
    trained as tuned. What a speedup's measure refuses beside (another kind of device, a baseline that already runs
    it) is the caller's: mode=selfcheck checks the harness on any recommendation, its baseline's too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MachineMismatchWarning)
        warnings.simplefilter("always", UntrimmedWarning)
        try:
            recommendation = load_recommended(settings.recommended, study_machine(settings, facts))
        except ConfigError as exc:
            raise ConfigError("recommended", str(exc)) from exc
    settings, as_tuned_note = trained_as_tuned(settings, recommendation.training.batch_policy)
    refuse_unrunnable(settings, facts, recommendation.knobs, "recommended", f"{settings.recommended}: knobs")
    notes = [str(warning.message) for warning in caught] + baseline_note(recommendation.baseline, settings.baseline)
    notes += as_tuned_note
    if recommendation.pipeline and recommendation.pipeline != settings.pipeline.name:
        notes.append(
            f"{settings.recommended} was tuned for pipeline '{recommendation.pipeline}', measured here on "
            f"'{settings.pipeline.name}'"
        )
    return settings, recommendation, notes


def _comparable(recommendation: Recommendation, settings: Settings) -> bool:
    """Whether the gain ``recommendation``'s file records was measured against what this run measures it against:
    the same pipeline, and the baseline it was tuned against (where the file says) the one here."""
    same_baseline = not recommendation.baseline or not changed(recommendation.baseline, settings.baseline)
    return recommendation.pipeline == settings.pipeline.name and same_baseline


def tuned_gain(measured: Measured) -> TunedGain | None:
    """The gain a recommended.yaml says its recommendation measured when tuned (``measured``: its throughput
    section), with its interval where the file holds one; None where the file records no throughputs (an earlier
    autotune's, or one written by hand), or where the tuning run's machine did not hold its speed (``unsteady``):
    a figure that does not stand is nothing to compare with."""
    if measured.throughput <= 0 or measured.baseline_throughput <= 0 or measured.unsteady:
        return None
    return TunedGain(measured.speedup, measured.interval)


def refuse_other_device(tuned_on: str | None, device: str, where: str) -> None:
    """ConfigError naming measure.device where the recommendation in ``where`` was measured on another kind of device
    (``tuned_on``, as the file says; None where it does not) than ``device``, the one this run measures on: its gain
    over the baseline is a gain on that kind (a CPU recommendation's, measured on a GPU, gates nothing it promised).
    Another GPU of the same kind (cuda:1 against cuda) is measured: the machine's note says which GPU differs."""
    if tuned_on is None or device_kind(tuned_on) == device_kind(device):
        return
    raise ConfigError(
        "measure.device",
        f"{where} was measured on {tuned_on}, and this run would measure it on {device}: set "
        f"measure.device={device_kind(tuned_on)} to measure it on the kind of device it was tuned on",
    )


def refuse_same_as_baseline(settings: Settings, knobs: dict[str, Any], where: str) -> None:
    """ConfigError naming pipeline.baseline where it already runs the recommendation ``knobs`` (from the file
    ``where``, which recommends a change from the baseline it was tuned against: a file that recommends that baseline
    itself is nothing to measure, said before this is asked): every round would measure one configuration twice, its
    speedup 1 by construction."""
    if changed(knobs, settings.baseline):
        return
    raise ConfigError(
        "pipeline.baseline",
        f"it already runs the recommendation in {where}, so there is no speedup to measure; keep it at the baseline "
        f"the recommendation was measured against (the baseline's knobs in {where})",
    )


def refuse_unrunnable(settings: Settings, facts: Inspection, knobs: dict[str, Any], key: str, where: str) -> None:
    """ConfigError naming ``key`` where a change of the recommendation ``knobs`` (from ``where``) cannot run here
    (``unrunnable``): every run of it would fail, and the rounds measure nothing."""
    found = unrunnable(settings, facts, knobs)
    if found:
        name, reason = found
        raise ConfigError(
            key,
            f"{where}.{name}={knobs[name]} cannot run here ({reason}); measure it against the baseline and on the "
            "kind of machine it was tuned for, or tune again here",
        )


def configurations(
    baseline: dict[str, Any], recommended: dict[str, Any], effective_batch_size: int | None, device: str
) -> list[Entry]:
    """The baseline, the recommendation, then for each change the baseline with it alone and the recommendation
    without it, each measured on its own (with two changes, one's alone is the other's without); one that is the
    baseline or the recommendation is not measured again (with one change, alone is the recommendation; an option
    of workers alone, without workers, is the baseline); none whose values cannot run together at
    ``effective_batch_size`` (micro-batches accumulated to it) on a ``device`` of that kind (``conflict``)."""
    ends = both_ends(baseline, recommended)
    entries = list(ends)
    for knob in changed(recommended, baseline):
        candidates = [
            Entry(f"baseline + {knob}", "alone", knob, share_knobs(baseline, recommended, knob, "alone")),
            Entry(f"recommended - {knob}", "without", knob, share_knobs(baseline, recommended, knob, "without")),
        ]
        entries += [
            c
            for c in candidates
            if conflict(c.knobs, effective_batch_size, device) is None and all(c.knobs != end.knobs for end in ends)
        ]
    return entries


def both_ends(baseline: dict[str, Any], recommended: dict[str, Any]) -> list[Entry]:
    """The baseline's entry, then the recommendation's: what every interleaved comparison measures."""
    return [
        Entry("baseline", "baseline", None, dict(baseline)),
        Entry("recommended", "recommended", None, dict(recommended)),
    ]


def trained_as_tuned(settings: Settings, batch_policy: str) -> tuple[Settings, list[str]]:
    """``settings`` training as the recommendation was tuned, with its ``batch_policy`` (under "fixed_effective",
    micro-batches accumulated to the baseline's batch), whatever search.batch_policy says here; and a note where
    the two differ."""
    if batch_policy == settings.batch_policy:
        return settings, []
    note = f"trained as tuned: search.batch_policy={batch_policy} (the tuning run's), not {settings.batch_policy}"
    return replace(settings, batch_policy=batch_policy), [note]


def measure_rounds(settings: Settings, benchmark: Benchmark, workdir: Path, out: TextIO, slot: Slot = UNPINNED) -> None:
    """Fill ``benchmark``'s entries: ``benchmark.rounds`` rounds, each configuration once a round in a process of its
    own with the full window (its log and result in ``workdir``) in ``slot`` (the study's first: ``study_slot``, so
    that the runs are pinned as the tuning run's were), the order rotating, each round a new draw of the process
    layout (``TrialRunner.new_draw``); after the first of two or more, a line says what the rounds left will take.
    Each run is added as it ends, so the record holds every run that ended when this is interrupted. A run that
    something beside it disturbed is measured again (``study.remeasure_disturbed``: ``autotune/study/disturbed.py``)."""
    runner = TrialRunner(settings, benchmark.device, workdir, slot)

    def timed(knobs: dict[str, Any], name: str, on_progress=None) -> TrialResult:
        return runner.check(knobs, name, plain=False)

    rounds = range(1, benchmark.rounds + 1)
    said = {_run_name(index, entry): run_label(index, entry) for index in rounds for entry in benchmark.entries}

    again: dict[str, TrialResult] = {}  # a run measured again, by name: the first, said

    def show_disturbed(name: str, result: TrialResult) -> None:
        again[name] = result
        shown = f"{result.timing.throughput:.1f} samples/s, {disturbance_words(result.disturbance)}: measured again"
        print(f"[{said.get(name, name)}] {shown}", file=out, flush=True)

    def show_first_stands(name: str, result: TrialResult) -> None:
        first = said.get(name.removesuffix("-again"), name)
        shown = f"FAILED {result.failure}" if not result.ok else f"{result.timing.throughput:.1f} samples/s"
        shown += f", {disturbance_words(result.disturbance)}" if result.disturbance else ""
        print(f"[{first}, again] {shown}: {first_stands_words(result)}", file=out, flush=True)

    run = timed
    if settings.study.remeasure_disturbed:
        notes = partial(print, file=out, flush=True)
        run = again_if_disturbed(timed, show_disturbed, notes, on_first_stands=show_first_stands)
    for entry in benchmark.entries:  # each run's line names its configuration only: its knobs are said once, here
        print(f"[{entry.label}] {changes_in_words(entry.knobs, settings.baseline)}", file=out, flush=True)
    for index in rounds:
        began = time.monotonic()
        runner.new_draw()
        _round(run, index, benchmark.entries, out, again)
        if index == 1 and benchmark.rounds > 1:
            print(f"[time] {_rest_after_first(time.monotonic() - began, benchmark.rounds)}", file=out, flush=True)


def _rest_after_first(round_s: float, rounds: int) -> str:
    """What the rounds after the first of ``rounds`` are expected to take, in words, the first having taken
    ``round_s``: each round runs the same configurations."""
    left = rounds - 1
    return f"round 1 took {round_s:.0f} s: about {duration(left * round_s)} more for the {counted(left, 'round')} left"


def _round(run: RunFn, index: int, entries: list[Entry], out: TextIO, again: dict[str, TrialResult]) -> None:
    """Every configuration once, starting one further along each round, each run that stands said once: one
    measured again (its first run in ``again``, by name, said) as "LABEL, again", unless the first stands, which the
    run measured again said."""
    shift = (index - 1) % len(entries)
    for entry in entries[shift:] + entries[:shift]:
        name = _run_name(index, entry)
        result = run(entry.knobs, name, None)
        first = again.pop(name, None)
        if result.ok:
            entry.throughputs.append(result.timing.throughput)
            entry.peak_memory_mb.append(result.peak_memory_mb)
            shown = f"{result.timing.throughput:.1f} samples/s, peak {result.peak_memory_mb:.0f} MiB"
            if result.disturbance:
                entry.disturbed[index] = result.disturbance
                shown += f", {disturbance_words(result.disturbance)}: may read low"
        else:
            entry.throughputs.append(None)
            entry.peak_memory_mb.append(None)
            entry.failures.append(f"round {index}: {result.failure}")
            shown = f"FAILED {result.failure}"
        if result is not first:
            print(f"[{run_label(index, entry)}{', again' if first else ''}] {shown}", file=out, flush=True)


def _run_name(index: int, entry: Entry) -> str:
    """The name of ``entry``'s run of round ``index``: its log and result files'."""
    return file_name(f"round{index}-{entry.label}")


def baseline_note(tuned_against: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """A note where the recommendation was tuned against another baseline (``tuned_against``, empty where the file
    does not say) than ``baseline``, the one it is measured against here."""
    if not tuned_against or not changed(tuned_against, baseline):
        return []
    differs = changes_in_words(tuned_against, baseline)
    return [
        f"the recommendation was tuned against another baseline ({differs}); measured here against pipeline.baseline"
    ]


def changes_in_words(knobs: dict[str, Any], baseline: dict[str, Any]) -> str:
    """What ``knobs`` change from ``baseline`` (``knobs.changed``: an option that comes with a change is said with
    it, not apart), as ``name=value``, joined by ", "; "the baseline's settings" where they change nothing."""
    return (
        ", ".join(f"{name}={after}" for name, (_, after) in changed(knobs, baseline).items())
        or "the baseline's settings"
    )
