"""report.json: the whole report as data."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from autotune.report.profiles import current_profiles, profiles_data
from autotune.report.rows import ranked_rows
from autotune.report.tuner_time import tuner_time_data
from autotune.results.advice import batch_advice
from autotune.results.batch_limit import batch_limit
from autotune.results.compile_payback import compile_payback
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import Overruled, Summary, TakenBack, race_name
from autotune.results.trim_rules import TrimStep


def report_data(results: StudyResults, summary: Summary) -> dict[str, Any]:
    rec, base = summary.recommended, summary.baseline
    return {
        "pipeline": results.pipeline,
        "study": results.study_name,
        "device": results.device,
        "machine": results.machine,
        "machine_id": results.machine_id,
        "search_space": results.space,
        "recommended": {
            "trial": rec.label,
            "is_baseline": summary.is_baseline,
            "knobs": rec.result.knobs,
            "changed": {name: {"before": b, "after": a} for name, (b, a) in summary.changed_knobs().items()},
            "throughput_sps": summary.recommended_throughput,
            "peak_memory_mb": summary.recommended_peak_memory_mb,  # of the runs throughput_sps is of
        },
        "confirmation": _race(summary.confirmation) if summary.confirmation else None,
        "trim": [_trim_race(race, step) for race, step in zip(summary.trim, summary.trim_steps, strict=True)],
        "no_difference": summary.no_difference,
        "untrimmed": summary.untrimmed,  # two changes or more, not all raced undone (``Summary.untrimmed``)
        # a race's winner a longer trim race did not prove (``Summary.overruled``): the baseline is kept
        "overruled": _overruled(summary.overruled) if summary.overruled else None,
        # a race's winner whose gain, over the rounds that measured it without choosing it too, fell under the least
        # a change must gain (``Summary.taken_back``): the baseline is kept
        "taken_back": _taken_back(summary.taken_back) if summary.taken_back else None,
        "baseline": {
            "knobs": base.result.knobs,
            "throughput_sps": summary.baseline_throughput,
            "peak_memory_mb": summary.baseline_peak_memory_mb,
        },
        "speedup": summary.speedup,
        # its 95 % interval from the paired rounds of the race that proves it and those of other races that did not
        # choose it (speedup_paired: Summary.gain_runs); null with 0 rounds (single runs) or 1
        "speedup_interval": asdict(interval) if (interval := summary.gain_interval) else None,
        "speedup_rounds": len(summary.gain_runs.rounds),
        "speedup_paired": _paired_rounds(summary),
        # the baseline's median samples/s in each race of two rounds or more; "unsteady": how far apart, highest over
        # lowest, where past UNSTEADY_BASELINE (the machine's speed did not hold: nothing stands)
        "baseline_readings": summary.baseline_readings,
        "unsteady": summary.unsteady,
        "training": batch_advice(results, summary).to_dict(),
        "batch_limit": batch_limit(results).to_dict(),
        "compile_payback": payback.to_dict() if (payback := compile_payback(results, summary)) else None,
        "pareto_front": [record.label for record in summary.pareto],
        "importance": results.importance,  # Optuna's, of each knob the trials varied; {} below IMPORTANCE_MIN_TRIALS
        "memory_change": summary.recommended_peak_memory_mb / summary.baseline_peak_memory_mb,
        "trials": [_clean(row) for row in ranked_rows(summary)],
        "not_measured": [  # configurations ruled out by a failure, unmeasured, and why
            {"trial": ruled.label, "knobs": ruled.knobs, "reason": ruled.reason} for ruled in results.not_measured
        ],
        "profiles": profiles_data(profiles) if (profiles := current_profiles(results.profiles, summary)) else None,
        "tuner_time": tuner_time_data(results.tuner_time) if results.tuner_time else None,
    }


def _race(race: Confirmation) -> dict[str, Any]:
    """A race's runs and verdict (a variant's first run is in trials/, not repeated here)."""
    data = race.to_dict()
    for finalist in data["finalists"]:
        del finalist["result"]
    return {**data, "confirmed": race.confirmed, "winner": race.winner.label if race.winner else None}


def _trim_race(race: Confirmation, step: TrimStep) -> dict[str, Any]:
    """A trim race as ``_race``, with what it left in place of the configuration it started from (None: nothing),
    how far the trim's result lies behind the race's winner by then, and the race's own verdict where that bound
    refused it (``trim_path``)."""
    left, refused = step.left, step.refused
    return {
        **_race(race),
        "trimmed_to": left.label if left else None,
        "behind_race_winner": step.behind,
        "refused": {"trial": refused.label, "behind_race_winner": step.refused_behind} if refused else None,
    }


def render_json(results: StudyResults, summary: Summary) -> str:
    """report.json's text: strict JSON (``allow_nan=False``), which every parser reads."""
    return json.dumps(report_data(results, summary), indent=2, allow_nan=False)


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """The row with a value that is not a finite number (a metric this run could not measure) as null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _overruled(overruled: Overruled) -> dict[str, Any]:
    return {
        "trial": overruled.label,
        "trim_race": overruled.number,
        "rounds": overruled.race.rounds,
        "speedup": overruled.speedup,
    }


def _taken_back(back: TakenBack) -> dict[str, Any]:
    return {
        "trial": back.label,
        "race": race_name(back.number),
        "rounds": len(back.rounds.counted()),
        "speedup": back.rounds.gain,
    }


def _paired_rounds(summary: Summary) -> list[dict[str, Any]]:
    """The paired rounds the speedup is of (``Summary.gain_runs``: the proving race's and those of other races that
    did not choose the recommendation), each with its race, its number there, the two runs' samples/s and whether the
    speedup counts it (a round something beside a run slowed may be left out)."""
    counted = set(summary.gain_rounds)
    return [
        {
            "race": race_name(paired.race),
            "round": paired.round,
            "recommended_sps": paired.recommended,
            "baseline_sps": paired.baseline,
            "counted": number in counted,
        }
        for number, paired in enumerate(summary.gain_runs.rounds, 1)
    ]
