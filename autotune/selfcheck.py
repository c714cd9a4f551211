"""``mode=selfcheck``: does autotune's harness read what a plain training loop reads, for this pipeline here?

The baseline, and the configuration the stored study recommends (when there is one; or the recommended.yaml the
command names, ``recommended=PATH``), run in processes of their own, each once timed by a trial (the harness, with
the full window) and once by the plain loop that judges it (``autotune/trial/plain.py``, a fresh interpreter), for
``selfcheck.rounds`` rounds; the order alternates from run to run, so neither loop always goes first. The record is
saved to selfcheck.json before it is printed, also where the run stopped before its last round (an interrupt, an
error: ``measure_then_report``), which it then says, and decides nothing.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from autotune.benchmark import measure_then_report, recommendation_to_measure, trained_as_tuned
from autotune.config.settings import Settings
from autotune.errors import HarnessDisagreesError
from autotune.files import file_name
from autotune.pipeline.facts import Inspection
from autotune.records import stored_description
from autotune.redact import redact_url
from autotune.report.selfcheck import print_selfcheck, write_selfcheck
from autotune.results.model import load_results
from autotune.results.selfcheck import AGREEMENT, ConfigurationCheck, SelfCheck
from autotune.results.summary import summarise
from autotune.runner import TrialRunner, inspect_run, study_machine, study_machine_id, study_runner
from autotune.study.storage import load_study
from autotune.words import counted


def run(settings: Settings, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Check the harness against the plain loop and write selfcheck.json into ``output_dir``."""
    facts = inspect_run(settings, output_dir)
    device = facts.device
    if settings.recommended:
        settings, configurations, source, notes = _of_file(settings, facts)
    else:
        configurations, source, batch_policy = _configurations(settings, study_machine_id(settings, facts))
        settings, notes = trained_as_tuned(settings, batch_policy)
    rounds = settings.selfcheck_rounds
    print(
        f"autotune selfcheck: pipeline '{settings.pipeline.name}' on {device}; {source}; "
        f"{rounds} rounds of {counted(len(configurations), 'configuration')}, each timed by autotune and by a plain "
        "loop",
        file=out,
        flush=True,
    )
    for note in notes:
        print(f"note: {note}", file=out)
    runner = study_runner(settings, facts, output_dir / "selfcheck")
    runs: dict[str, dict[str, list]] = {}

    def report(stopped: bool) -> tuple[SelfCheck, dict[str, Path]]:
        check = SelfCheck(
            pipeline=settings.pipeline.name,
            device=device,
            rounds=rounds,
            source=source,
            machine=study_machine(settings, facts),
            configurations=_checks(configurations, runs),
            stopped=stopped,
        )
        files = write_selfcheck(check, output_dir)
        print_selfcheck(check, files, out)
        return check, files

    check, files = measure_then_report(partial(check_configurations, runner, configurations, rounds, out, runs), report)
    fail_if_disagreeing(check)
    return files


def fail_if_disagreeing(check: SelfCheck) -> None:
    """Raise HarnessDisagreesError (exit 1) where a configuration's verdict is disagree: the figures the harness
    reads for it are not what the plain loop reads (agree or unresolved: exit 0; a self-check stopped before its last
    round decides nothing, as ``SelfCheck.verdict`` says)."""
    apart = [c for c in check.configurations if check.verdict(c) == "disagree"]
    if apart:
        named = "; ".join(
            f"{c.label}: harness / plain {c.interval.geomean:.3f} (95 % interval {c.interval.low:.3f}-"
            f"{c.interval.high:.3f})"
            for c in apart
        )
        raise HarnessDisagreesError(
            f"selfcheck: the harness and the plain loop disagree beyond {AGREEMENT:.0%}: {named}"
        )


def check_configurations(
    runner: TrialRunner,
    configurations: dict[str, dict[str, Any]],
    rounds: int,
    out: TextIO,
    runs: dict[str, dict[str, list]] | None = None,
) -> list[ConfigurationCheck]:
    """Time each configuration (label → knobs) by the harness and by the plain loop in each of ``rounds`` rounds,
    the loop that goes first alternating from round to round for each configuration (and from one configuration
    to the next within a round), each round a new draw of the harness's process layout (``TrialRunner.new_draw``).
    ``runs`` collects the runs as they end."""
    runs = {} if runs is None else runs
    for index in range(1, rounds + 1):
        runner.new_draw()
        for position, (label, knobs) in enumerate(configurations.items()):
            plain_first = (index + position) % 2 == 0
            for plain in (plain_first, not plain_first):
                _run_once(runner, index, label, knobs, plain, runs.setdefault(label, _empty_runs()), out)
    return _checks(configurations, runs)


def _checks(configurations: dict[str, dict[str, Any]], runs: dict[str, dict[str, list]]) -> list[ConfigurationCheck]:
    return [
        ConfigurationCheck(label, knobs, **runs.get(label, _empty_runs())) for label, knobs in configurations.items()
    ]


def _empty_runs() -> dict[str, list]:
    return {"harness": [], "plain": [], "epoch_boundaries": [], "failures": []}


def _run_once(runner: TrialRunner, index: int, label: str, knobs: dict, plain: bool, runs: dict, out: TextIO) -> None:
    loop = "plain" if plain else "harness"
    result = runner.check(knobs, file_name(f"round{index}-{label}-{loop}"), plain)
    if not result.ok:
        runs["failures"].append(f"round {index} {loop}: {result.failure}")
        shown = f"FAILED {result.failure}"
    elif plain:
        shown = (
            f"{result.plain.throughput:.1f} samples/s, {result.plain.epoch_boundaries} epoch boundaries in the window"
        )
    else:
        shown = f"{result.timing.throughput:.1f} samples/s"
    if plain:
        runs["plain"].append(result.plain.throughput if result.ok else None)
        runs["epoch_boundaries"].append(result.plain.epoch_boundaries if result.ok else None)
    else:
        runs["harness"].append(result.timing.throughput if result.ok else None)
    print(f"[round {index} {label} {'plain loop' if plain else 'autotune'}] {shown}", file=out, flush=True)


def _of_file(settings: Settings, facts: Inspection) -> tuple[Settings, dict[str, dict[str, Any]], str, list[str]]:
    """The configurations to check where the command names a recommended.yaml (``recommended=PATH``): the baseline
    and that recommendation (``recommendation_to_measure``: ``settings`` training as it was tuned, and its notes),
    where it changes the baseline; where they come from, in words."""
    settings, recommendation, notes = recommendation_to_measure(settings, facts)
    if recommendation.knobs == settings.baseline:
        return settings, {"baseline": settings.baseline}, f"the baseline, which {settings.recommended} keeps", notes
    checked = {"baseline": settings.baseline, "recommended": recommendation.knobs}
    return settings, checked, f"the baseline and the recommendation of {settings.recommended}", notes


def _configurations(settings: Settings, here: str) -> tuple[dict[str, dict[str, Any]], str, str]:
    """The configurations to check (label → knobs), where they come from, in words, and the batch policy they train
    with (the study's, as its pick was measured; else the command's); ``here``: this machine's id, whose results the
    study's pick is."""
    baseline, own = {"baseline": settings.baseline}, settings.batch_policy
    name, storage = settings.study.name, settings.study.storage
    try:
        study = load_study(name, storage)
    except KeyError:
        where = f"no study '{name}' in {redact_url(storage)} (tune first to check its pick)"
        return baseline, f"the baseline only: {where}", own
    described = stored_description(study)
    if described is None or not described.describes(settings.pipeline, settings.baseline):
        return baseline, f"the baseline only: study '{name}' was tuned with another pipeline or baseline", own
    results = load_results(study, here)  # a pick measured on another machine is not this one's
    if results.baseline is None or not results.baseline.result.ok:
        measured = "failed its baseline" if results.baseline else "has no baseline measured"
        return baseline, f"the baseline only: study '{name}' {measured} on this machine", own
    summary = summarise(results)
    if summary.is_baseline:
        return baseline, f"the baseline, which study '{name}' recommends keeping", own
    label = f"recommended (trial {summary.recommended.label})"
    checked = {**baseline, label: summary.recommended.result.knobs}
    return checked, f"the baseline and the recommendation of study '{name}'", results.batch_policy
