"""The tuning report's side by side of the baseline and the recommendation, each profiled after the race
(``TunedProfiles``, stored in the study): table rows, data and terminal lines rendered from the stored record;
nothing here measures. Each configuration's own profile page is ``autotune/report/diagnosis.py``'s."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, TextIO

from autotune.measure.hotspots import Hotspots
from autotune.report.profile_plots import STAGE_COLOURS, stage_percents, stage_segments
from autotune.results.diagnosis import long_run_said
from autotune.results.epochs import LONG_RUN
from autotune.results.loading_remedies import called_from
from autotune.results.profile import ProfileRecord, TunedProfiles
from autotune.results.race_rules import TIE_TOLERANCE
from autotune.results.remedies import first_to_follow
from autotune.results.remedy_model import Advice
from autotune.results.summary import Summary
from autotune.words import counted

# Stages under this (ms per step) in every configuration are left out of the table.
_SHOWN_MS = 0.05


def current_profiles(profiles: TunedProfiles | None, summary: Summary) -> TunedProfiles | None:
    """``profiles`` where they are of ``summary``'s baseline and recommendation; None where they are of others (a
    run stopped after trials that changed the recommendation, before it profiled the new one)."""
    recommended = None if summary.is_baseline else summary.recommended.result.knobs
    if profiles is None or not profiles.about(summary.baseline.result.knobs, recommended):
        return None
    return profiles


def sides(profiles: TunedProfiles) -> dict[str, ProfileRecord]:
    """The profiled configurations by name: the baseline, and the recommendation where it is not the baseline."""
    return {"baseline": profiles.baseline} | ({"recommended": profiles.recommended} if profiles.recommended else {})


def gist(record: ProfileRecord) -> str:
    """The verdict and its figures in a few words, or why profiling failed."""
    diagnosis = record.diagnosis
    return diagnosis.gist if diagnosis else f"profiling failed: {record.failure}"


def print_tuned_profile(record: ProfileRecord, stored: bool, out: TextIO) -> None:
    """A tuning run's line for one configuration it profiled (``stored``: reused from the study)."""
    took = ", stored" if stored else ""
    wall = "" if stored or record.wall_s is None else f" ({record.wall_s:.1f} s)"
    print(f"[profile {record.label}{took}] {gist(record)}{wall}", file=out, flush=True)


def summary_lines(profiles: TunedProfiles) -> list[str]:
    """The terminal summary's lines: each verdict in a few words, then the last configuration's advice to follow
    next (``first_to_follow``), or that the study measured all its advice no faster beyond noise."""
    named = sides(profiles)
    lines = ["What limits it: " + " → ".join(f"{name} {gist(record)}" for name, record in named.items())]
    name, last = list(named.items())[-1]
    diagnosis = last.diagnosis
    if diagnosis and diagnosis.advice:
        lines.append(f"Next, for the {name}: {to_follow(diagnosis.advice, ' (see the report)')}")
    return lines


# What stands for the advice to follow next where the study measured every piece of it no faster beyond noise
# (``Advice.measured_no_gain``).
ALL_MEASURED_NO_GAIN = f"only changes the tuner measured no faster beyond noise ({TIE_TOLERANCE:.0%})"


def to_follow(advice: list[Advice], where: str = "") -> str:
    """The advice to follow next (``first_to_follow``) in a line, or ``ALL_MEASURED_NO_GAIN`` and ``where`` the
    advice is listed; empty without advice."""
    if not advice:
        return ""
    first = first_to_follow(advice)
    return describe(first) if first else ALL_MEASURED_NO_GAIN + where


def describe(advice: Advice) -> str:
    """One piece of advice in a line: what to do, what it can bring, and where (or whether the tuner tried it)."""
    where = advice.location or advice.tried
    return f"{advice.action}: {advice.effect}" + (f" [{where}]" if where else "")


def hottest(hotspots: Hotspots) -> str:
    """The data pipeline's hottest function, its share of loading and the line(s) of the user's code behind it."""
    if not hotspots.functions:
        return ""
    function = hotspots.functions[0]
    site = f", called from {called_from(function, callers=False)}" if function.call_site else ""
    return f"{hotspots.share(function):.0%} in {function.name}{site}"


def side_by_side_rows(profiles: TunedProfiles) -> tuple[list[str], list[list[str]]]:
    """The table's headers and rows: a column per configuration, a row per figure (stages in ms per step of the timed
    steps, with their share of it, and a long run's step where it differs: ``long_run_said``); a row empty in every
    column is left out."""
    named = sides(profiles)
    columns = [_column(record) for record in named.values()]
    splits = [stage_segments(record.result.stages) for record in named.values() if record.result is not None]
    shown = [stage for stage in STAGE_COLOURS if any(split.get(stage, 0.0) >= _SHOWN_MS for split in splits)]
    order = ["verdict", "decided by", "a step (ms)", *(f"  {stage}" for stage in shown), LONG_RUN, *_TAIL]
    rows = [[row, *(column.get(row, "") for column in columns)] for row in order]
    return ["", *named], [row for row in rows if any(row[1:])]


_TAIL = ("a worker loads a batch (ms)", "hottest in loading", "findings", "first advice", "profiled in (s)")


def _column(record: ProfileRecord) -> dict[str, str]:
    """One configuration's cells of the side by side, by row."""
    column = {"verdict": gist(record)}
    if record.wall_s is not None:
        column["profiled in (s)"] = f"{record.wall_s:.1f}"
    diagnosis, result = record.diagnosis, record.result
    if diagnosis is None or result is None:
        return column
    stages = result.stages
    step_ms, share = stages.loop_s * 1e3, stage_percents(stages)
    column |= {
        "decided by": diagnosis.rules[-1],
        "a step (ms)": f"{step_ms:.1f} ({stages.batch_size} samples, {step_ms / stages.batch_size:.2f} ms a sample)",
        LONG_RUN: long_run_said(result) or "",
        **{f"  {stage}": f"{ms:.1f} ({share[stage]}%)" for stage, ms in stage_segments(stages).items()},
        "hottest in loading": hottest(result.hotspots),
        "findings": "; ".join(diagnosis.findings),
        "first advice": to_follow(diagnosis.advice),
    }
    if stages.num_workers:
        loading_ms = (stages.mean("fetch_s") + stages.mean("collate_s")) * 1e3
        column["a worker loads a batch (ms)"] = f"{loading_ms:.1f} ({counted(stages.num_workers, 'worker')})"
    return column


def profiles_data(profiles: TunedProfiles) -> dict[str, Any]:
    """report.json's side by side: per configuration its knobs, verdict, figures, stages, hottest function and
    advice, or why profiling failed (the whole record is in the study)."""
    return {name: _record_data(record) for name, record in sides(profiles).items()}


def _record_data(record: ProfileRecord) -> dict[str, Any]:
    diagnosis, result = record.diagnosis, record.result
    data: dict[str, Any] = {"knobs": record.knobs, "failure": record.failure, "wall_s": record.wall_s}
    if diagnosis is None or result is None:
        return data
    return data | {
        **diagnosis.to_dict(),
        "step_ms": result.stages.loop_s * 1e3,
        "batch_size": result.stages.batch_size,
        "stages_ms": stage_segments(result.stages),
        "hottest": _hottest_data(result.hotspots),
        "trace_file": result.operators.trace_file,
    }


def _hottest_data(hotspots: Hotspots) -> dict[str, Any] | None:
    if not hotspots.functions:
        return None
    function = hotspots.functions[0]
    return asdict(function) | {"share_of_loading": hotspots.share(function)}
