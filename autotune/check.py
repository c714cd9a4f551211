"""``mode=check``: a regression gate on a tuning run's recommendation.

The recommendation in a report.json runs against the baseline (``pipeline.baseline``) for ``check.rounds``
interleaved rounds, as mode=benchmark measures (``measure_rounds``), so the machine's drift cancels; the speedup now
is held against the one the report recorded, or against the one an earlier check measured (its check.json, where it
held: over more rounds than the tuning run's race, a sharper reference). The record is saved to check.json before
anything is rendered from it.
Its rule: ``autotune/results/check.py``. A regression, or a configuration that ran in too few rounds to tell, raises
RegressionError (exit 1). A file no gate can mean anything against (another pipeline's, another kind of device's, one
whose speedup its own interval contradicts) is refused before any round (ConfigError, exit 2).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from autotune.benchmark import (
    baseline_note,
    both_ends,
    measure_rounds,
    measure_then_report,
    refuse_other_device,
    refuse_same_as_baseline,
    refuse_unrunnable,
    trained_as_tuned,
)
from autotune.config.settings import Settings
from autotune.config.values import finite
from autotune.errors import ConfigError, RegressionError
from autotune.knobs import BATCH_POLICIES, changed
from autotune.measure.stats import MIN_ROUNDS, RatioInterval
from autotune.recommendation import measured_elsewhere, parse_knobs, read_record
from autotune.report.check import print_check, verdict_line, write_check
from autotune.results.benchmark import Benchmark
from autotune.results.check import Check
from autotune.runner import inspect_run, study_machine, study_slot

_NO_AGAINST = (
    "mode=check re-measures a tuning run's recommendation: give against=PATH/report.json (or the check.json of a "
    "check of it that held)"
)
# A record's field that this autotune's dataclasses do not take (their constructor's refusal): a newer autotune's.
_UNKNOWN_FIELD = re.compile(r"unexpected keyword argument '(\w+)'")
# How far a recorded speedup may lie from the figure autotune derives it from. JSON keeps a float exactly (repr's
# shortest round trip), so this only lets through a file written again by a tool that keeps 15 significant digits.
_AS_WRITTEN = 1e-12


@dataclass(frozen=True)
class Tuned:
    """What a tuning run's report.json (at ``path``) says: the recommended knobs, the baseline's it was tuned
    against, the speedup it measured (and its 95 % interval, where it had one; the rounds it was measured in,
    ``speedup_rounds``: 0 for single runs, None where the file does not say), the pipeline, machine and device it
    measured them on (None: the file does not say), and how it trained (its ``batch_policy``). From a check.json, the
    same as that check measured them (``measured``: "checked"; ``where``: the key of the recommended knobs in the
    file)."""

    path: str
    knobs: dict[str, Any]
    baseline: dict[str, Any]
    speedup: float
    pipeline: str
    machine: dict[str, Any]
    batch_policy: str = "free"
    speedup_interval: RatioInterval | None = None
    speedup_rounds: int | None = None
    device: str | None = None
    measured: str = "tuned"
    where: str = "recommended.knobs"

    @property
    def changes_nothing(self) -> bool:
        """Whether the tuning run recommended the baseline itself: no speedup to keep."""
        return not changed(self.knobs, self.baseline)


def run(settings: Settings, output_dir: Path, out: TextIO = sys.stdout) -> Path | None:
    """Check ``settings.against``'s recommendation, write check.json into ``output_dir`` and return its path (None
    where the recommendation changes nothing); raise RegressionError where the check fails."""
    tuned = load_tuned(settings.against)
    _refuse_other_pipeline(tuned, settings.pipeline.name)
    if tuned.changes_nothing:  # nothing to measure, so no process runs and no check.json is written
        print(
            f"autotune check: nothing to gate: the tuning run in {tuned.path} recommended the baseline itself", file=out
        )
        return None
    facts = inspect_run(settings, output_dir)
    device = facts.device
    refuse_other_device(tuned.device, device, tuned.path)
    refuse_same_as_baseline(settings, tuned.knobs, tuned.path)
    settings, as_tuned_note = trained_as_tuned(settings, tuned.batch_policy)
    refuse_unrunnable(settings, facts, tuned.knobs, "against", f"{tuned.path}: {tuned.where}")
    print(
        f"autotune check: pipeline '{settings.pipeline.name}' on {device}; the recommendation in {tuned.path} "
        f"({tuned.speedup:.2f}x when {tuned.measured}) against the baseline, {settings.check_rounds} interleaved "
        "rounds",
        file=out,
        flush=True,
    )
    machine = study_machine(settings, facts)  # as the tuning run's report.json says it, pinned to as many cores
    notes = _notes(tuned, settings, machine) + as_tuned_note
    for note in notes:
        print(f"note: {note}", file=out)
    benchmark = Benchmark(
        pipeline=settings.pipeline.name,
        device=device,
        rounds=settings.check_rounds,
        recommended=tuned.path,
        machine=machine,
        entries=both_ends(settings.baseline, tuned.knobs),
        notes=notes,
        batch_policy=settings.batch_policy,
    )
    check = Check(
        tuned.speedup, settings.check_tolerance, benchmark, tuned.speedup_interval, before_rounds=tuned.speedup_rounds
    )
    slot = study_slot(settings, facts)
    check, path = measure_then_report(
        lambda: measure_rounds(settings, check.benchmark, output_dir / "check", out, slot),
        lambda stopped: _report(replace(check, benchmark=replace(check.benchmark, stopped=stopped)), output_dir, out),
    )
    if not check.passed:
        raise RegressionError(f"check of {tuned.path}: {verdict_line(check)}")
    return path


def _report(check: Check, output_dir: Path, out: TextIO) -> tuple[Check, Path]:
    """Write ``check`` into ``output_dir``, then print it; the check and its file."""
    path = write_check(check, output_dir)
    print_check(check, path, out)
    return check, path


def load_tuned(path: str | None) -> Tuned:
    """The report.json (or check.json, ``checked``) at ``path``; ConfigError naming ``against`` where there is none,
    or it cannot be used here."""
    if not path:
        raise ConfigError("against", _NO_AGAINST)
    try:
        data = json.loads(read_record(path).decode("utf-8"))
    except OSError as exc:
        raise ConfigError("against", f"cannot read {path} ({exc.strerror}); pass a tuning run's report.json") from exc
    except ValueError as exc:
        raise ConfigError("against", f"{path} is not JSON ({exc}); pass a tuning run's report.json") from exc
    if isinstance(data, dict) and "benchmark" in data and "verdict" in data:
        return checked(data, path)
    recommended, baseline = (_get(data, section, "knobs") for section in ("recommended", "baseline"))
    speedup = _get(data, "speedup")
    if recommended is None or baseline is None:
        raise ConfigError(
            "against",
            f"{path} is neither a report.json nor a check.json written by autotune (no recommended.knobs or "
            "baseline.knobs, no benchmark and verdict)",
        )
    if not _positive(speedup):
        raise ConfigError("against", f"{path}: speedup: expected a finite number > 0, got {speedup!r}")
    interval = _interval(_get(data, "speedup_interval"), f"{path}: speedup_interval")
    _refuse_contradicted_speedup(data, interval, path)
    _refuse_unsteady(data, path)
    return Tuned(
        path=path,
        knobs=_knobs(recommended, path, "recommended.knobs"),
        baseline=_knobs(baseline, path, "baseline.knobs"),
        speedup=float(speedup),
        pipeline=str(_get(data, "pipeline") or ""),
        machine=_machine(_get(data, "machine"), f"{path}: machine"),
        batch_policy=_batch_policy(_get(data, "training", "policy"), f"{path}: training.policy"),  # BatchAdvice's
        speedup_interval=interval,
        speedup_rounds=_rounds(_get(data, "speedup_rounds"), f"{path}: speedup_rounds"),
        device=_device(_get(data, "device"), f"{path}: device"),
    )


def _refuse_other_pipeline(tuned: Tuned, pipeline: str) -> None:
    """Refuse ``tuned`` where it was measured on another pipeline than ``pipeline`` (a file that does not say is
    checked): a gate would hold one pipeline's speedup to another's, so a wrong ``against`` would fail it, or pass it,
    for nothing. Another machine is only noted (``_notes``): a gate may run on another host of the kind it was tuned
    on. ConfigError naming ``against``."""
    if tuned.pipeline and tuned.pipeline != pipeline:
        raise ConfigError(
            "against",
            f"{tuned.path} was {tuned.measured} for pipeline '{tuned.pipeline}', not '{pipeline}': check it with "
            f"pipeline={tuned.pipeline}, or give this pipeline's own report.json (where it is the same pipeline, "
            f"renamed since: ++pipeline.name={tuned.pipeline})",
        )


def _refuse_unsteady(data: dict[str, Any], path: str) -> None:
    """Refuse a report.json (``data``, at ``path``) whose tuning run's machine did not hold its speed (``unsteady``:
    the baseline's readings over UNSTEADY_BASELINE apart, ``Summary.unsteady``): its speedup stands for nothing a
    gate could hold a pipeline to. ConfigError naming ``against``."""
    spread, readings = _get(data, "unsteady"), _get(data, "baseline_readings")
    if spread is None:
        return
    if not _finite(spread) or spread <= 1:
        raise ConfigError("against", f"{path}: unsteady: expected null or a number > 1, got {spread!r}")
    if not isinstance(readings, dict):
        raise ConfigError("against", f"{path}: baseline_readings: expected a mapping, got {readings!r}")
    read = ", ".join(f"{samples:.1f}" for samples in readings.values() if _positive(samples))
    raise ConfigError(
        "against",
        f"{path}: its tuning run's machine did not hold its speed (the baseline read {read} samples/s, {spread:.1f}x "
        "apart), so its speedup is no reference: tune again with nothing else running, or gate against the "
        "check.json of a check run on a quiet machine",
    )


def _refuse_contradicted_speedup(data: dict[str, Any], interval: RatioInterval | None, path: str) -> None:
    """Refuse a report.json (``data``, at ``path``) whose speedup its own ``interval`` contradicts: outside it
    (``_refuse_outside``), or not its geomean, which autotune writes as the speedup; a file an earlier autotune wrote,
    its speedup the ratio of its throughputs (``_earlier_speedups``), is taken as it is. Edited by hand, the speedup
    would set the floor while the noise of another measurement judged the fall from it. ConfigError naming ``against``
    and the keys."""
    if interval is None:  # single runs or one round: nothing to hold it to
        return
    speedup = data["speedup"]
    if any(math.isclose(speedup, figure, rel_tol=_AS_WRITTEN) for figure in _earlier_speedups(data)):
        return  # an earlier autotune's, as it wrote it: on a drifting machine it may lie outside its interval
    remedy = "gate against the report.json as the tuning run wrote it, or render it again from its study (mode=report)"
    _refuse_outside(speedup, interval, (f"{path}: speedup", "speedup_interval"), remedy)
    if not math.isclose(speedup, interval.geomean, rel_tol=_AS_WRITTEN):
        raise ConfigError(
            "against",
            f"{path}: speedup: {speedup!r} is not the geomean of its own speedup_interval, {interval.geomean!r}, "
            f"which autotune writes as the speedup: {remedy}",
        )


def _earlier_speedups(data: dict[str, Any]) -> list[float]:
    """What an earlier autotune wrote as the speedup of a report.json (``data``) with an interval, before it wrote
    the interval's geomean (``Summary.speedup``): the ratio of the two throughputs beside it
    (``recommended.throughput_sps`` over ``baseline.throughput_sps``), where the file holds them."""
    throughputs = (_get(data, "recommended", "throughput_sps"), _get(data, "baseline", "throughput_sps"))
    return [throughputs[0] / throughputs[1]] if all(_positive(value) for value in throughputs) else []


def _refuse_outside(speedup: float, interval: RatioInterval | None, keys: tuple[str, str], remedy: str) -> None:
    """Refuse a recorded speedup (at ``keys[0]``) outside the 95 % interval it was measured with (at ``keys[1]``;
    None: it had none). autotune writes the interval's geomean; the ratio of two medians an earlier autotune wrote
    could lie outside it on a drifting machine, and rendered again (``mode=report``) it is the geomean. ConfigError
    naming ``against``, the keys and ``remedy``."""
    if interval is not None and not interval.low <= speedup <= interval.high:
        raise ConfigError(
            "against",
            f"{keys[0]}: {speedup!r} lies outside its own 95 % interval, {keys[1]} {interval.low!r} to "
            f"{interval.high!r} (geomean {interval.geomean!r}): {remedy}",
        )


def checked(data: dict[str, Any], path: str) -> Tuned:
    """What the check.json ``data`` (at ``path``) measured, as the reference of a later check: the speedup now and its
    interval, the configurations it ran and how they trained. Only a check that held, its speedup at its floor or
    above: one that regressed, or held only within the noise below its floor, measured a fall a gate on it would let
    pass; one stopped decides nothing, and one not measured has no interval."""
    record = _record(data, path)
    entries = record.benchmark.entries
    recommended, baseline = record.recommended, record.benchmark.baseline
    checked_file = f"the file it checked ({record.benchmark.recommended})"
    if record.verdict != "holds":
        raise ConfigError(
            "against",
            f"{path}: its verdict is {record.verdict}: gate against a check that held, or against {checked_file}",
        )
    if record.now.geomean < record.floor:
        raise ConfigError(
            "against",
            f"{path}: its speedup, {record.now.geomean:.2f}x, lies below its floor of {record.floor:.2f}x (it held "
            f"within the noise only): gate against {checked_file}",
        )
    policy = record.benchmark.batch_policy
    if policy is None or [entry.kind for entry in entries] != ["baseline", "recommended"]:
        raise ConfigError(
            "against",
            f"{path}: written by an earlier autotune, which did not record how its runs trained: gate against "
            f"{checked_file}, or check again and use that check.json",
        )
    where = "benchmark.entries[1].knobs"
    return Tuned(
        path=path,
        knobs=_knobs(recommended.knobs, path, where),
        baseline=_knobs(baseline.knobs, path, "benchmark.entries[0].knobs"),
        speedup=record.now.geomean,
        pipeline=record.benchmark.pipeline,
        machine=_machine(record.benchmark.machine, f"{path}: benchmark.machine"),
        batch_policy=_batch_policy(policy, f"{path}: benchmark.batch_policy"),
        speedup_interval=record.now,
        speedup_rounds=record.now.n,
        device=_device(record.benchmark.device, f"{path}: benchmark.device"),
        measured="checked",
        where=where,
    )


def _record(data: dict[str, Any], path: str) -> Check:
    """The check.json ``data`` (at ``path``) as the record it holds, its values checked (``_refuse_unusable``);
    ConfigError naming ``against`` where it is none autotune writes, or one a newer autotune wrote (a field this one
    does not know)."""
    try:
        record = Check.from_dict(data)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        if isinstance(exc, TypeError) and (field := _UNKNOWN_FIELD.search(str(exc))):
            raise ConfigError(
                "against",
                f"{path} was written by a newer autotune than this one (it records '{field[1]}', which this one does "
                "not know); upgrade autotune, or gate against the report.json it checked",
            ) from None
        raise ConfigError("against", f"{path} is not a check.json written by autotune ({exc!r})") from None
    _refuse_unusable(record, path)
    return record


def _refuse_unusable(record: Check, path: str) -> None:
    """Refuse a check.json (at ``path``) holding a value its verdict is computed from that autotune does not write:
    the speedup before, the tolerance and the interval before, the baseline's and the recommendation's entries and
    their runs' throughputs (each a finite number > 0, or null for a run that failed), and a speedup before outside
    its own interval (``_refuse_outside``: its verdict read against a floor edited by hand); ConfigError naming
    ``against`` and the field."""
    if not _positive(record.before):
        raise ConfigError("against", f"{path}: before: expected a finite number > 0, got {record.before!r}")
    tolerance = record.tolerance
    if not (_finite(tolerance) and 0 <= tolerance < 1):
        raise ConfigError("against", f"{path}: tolerance: expected a number >= 0 and < 1, got {tolerance!r}")
    if record.before_interval is not None and not _usable(record.before_interval):
        raise ConfigError("against", f"{path}: before_interval: {_INTERVAL}, got {record.before_interval}")
    checked_file = record.benchmark.recommended
    remedy = f"gate against the check.json as autotune wrote it, or against the file it checked ({checked_file})"
    _refuse_outside(record.before, record.before_interval, (f"{path}: before", "before_interval"), remedy)
    entries = record.benchmark.entries
    if len(entries) < 2:
        raise ConfigError(
            "against", f"{path}: benchmark.entries: expected the baseline's and the recommendation's, got {entries!r}"
        )
    for index, entry in enumerate(entries[:2]):
        runs = entry.throughputs
        if not isinstance(runs, list) or not all(run is None or _positive(run) for run in runs):
            raise ConfigError(
                "against",
                f"{path}: benchmark.entries[{index}].throughputs: expected a list of finite numbers > 0 (null: a "
                f"failed run), got {runs!r}",
            )


def _finite(value: Any) -> bool:
    """Whether ``value`` is a number (not a bool) and finite (``values.finite``: an int no float holds is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)


def _positive(value: Any) -> bool:
    """Whether ``value`` is a finite number > 0."""
    return _finite(value) and value > 0


def _machine(value: Any, where: str) -> dict[str, Any]:
    """The machine the report was measured on ({} where it says none)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("against", f"{where}: expected the mapping autotune writes, got {value!r}")
    return value


_INTERVAL = f"expected geomean, low and high (finite, 0 < low <= geomean <= high) and a whole number n >= {MIN_ROUNDS}"


def _interval(value: Any, where: str) -> RatioInterval | None:
    """The speedup's interval as report.json records it at ``where`` (None: it had none, one round or an earlier
    autotune)."""
    if value is None:
        return None
    try:
        interval = RatioInterval(**value)
    except TypeError:
        interval = None
    if interval is None or not _usable(interval):
        raise ConfigError("against", f"{where}: {_INTERVAL}, got {value!r}")
    return interval


def _usable(interval: RatioInterval) -> bool:
    """Whether ``interval`` holds what autotune writes of one: three finite bounds in order above 0, and the whole
    number of rounds (at least two) the noise of a gate on it is read from (Student's t)."""
    bounds = (interval.low, interval.geomean, interval.high)
    n = interval.n
    return (
        all(_finite(bound) for bound in bounds)
        and 0 < interval.low <= interval.geomean <= interval.high
        and isinstance(n, int)
        and not isinstance(n, bool)
        and n >= MIN_ROUNDS
    )


def _rounds(value: Any, where: str) -> int | None:
    """The rounds the speedup was measured in, as report.json records them (None: an earlier autotune's)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError("against", f"{where}: expected a whole number >= 0, got {value!r}")
    return value


def _device(value: Any, where: str) -> str | None:
    """The device the speedup was measured on (None where the file does not say)."""
    if value is None or isinstance(value, str):
        return value
    raise ConfigError("against", f"{where}: expected the device autotune writes (cpu, cuda:0), got {value!r}")


def _batch_policy(value: Any, where: str) -> str:
    """The tuning run's batch policy ("free" where the report says none)."""
    if value is None:
        return "free"
    if value not in BATCH_POLICIES:
        raise ConfigError("against", f"{where}: expected one of {', '.join(BATCH_POLICIES)}")
    return value


def _get(data: Any, *keys: str) -> Any:
    """``data[key][key]...``, None where a level is missing or not a mapping."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _knobs(node: Any, path: str, section: str) -> dict[str, Any]:
    """The knobs at ``section`` of the file ``path``, read as recommended.yaml's are (``parse_knobs``); its errors
    named as ``against``, the setting that gave the file, their file and key said in the message."""
    try:
        return parse_knobs(node, path, section)
    except ConfigError as exc:
        raise ConfigError("against", str(exc)) from None


def _notes(tuned: Tuned, settings: Settings, machine: dict[str, Any]) -> list[str]:
    """What the reader should know: the report is from another machine, or tuned against another baseline than the
    one measured here (another pipeline's is refused: ``_refuse_other_pipeline``)."""
    notes = []
    where = measured_elsewhere(tuned.machine, machine) if tuned.machine else None
    if where:
        notes.append(f"{tuned.path} was measured {where}: its speedup may differ here")
    return notes + baseline_note(tuned.baseline, settings.baseline)
