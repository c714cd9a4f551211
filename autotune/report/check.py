"""The check's record as check.json, and its before/now lines on the terminal; nothing here measures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from autotune.files import write_atomic
from autotune.measure.stats import MIN_ROUNDS
from autotune.report.benchmark import stopped_words
from autotune.results.check import MAX_ROUNDS_TO_TELL, Check, measured_rounds
from autotune.words import interval_bounds, slowed_rounds_counted, slowed_rounds_left_out

_NAMES = {"baseline": "the baseline", "recommended": "the recommendation"}
# What a recorded speedup with no interval came from, by report.json's speedup_rounds (None: it does not say).
_NO_INTERVAL = {0: "from single runs", None: "with no interval"}
# What sharpens a gate the recorded gain's noise keeps loose, which rounds now do not shrink.
_SHARPER = (
    "gate against the check.json of a check of more check.rounds that held, or tune with more study.confirm_rounds"
)


def write_check(check: Check, out_dir: Path) -> Path:
    """Write check.json (the record) into ``out_dir``; returns its path."""
    return write_atomic(out_dir / "check.json", json.dumps(check.to_dict(), indent=1))


def print_check(check: Check, path: Path, out: TextIO) -> None:
    """The speedup before and now, and the verdict."""
    before = f"{check.before:.2f}x the baseline{_recorded(check)}"
    print(f"\nbefore:  {before}, as recorded in {check.benchmark.recommended}", file=out)
    print(f"now:     {now_line(check)}", file=out)
    print(f"verdict: {verdict_line(check)}", file=out)
    print(f"  check.json  {path}", file=out)


def now_line(check: Check) -> str:
    """The speedup measured now, with its interval and rounds, or why there is none."""
    now = check.now
    if now is None:
        return f"no interval: {_shortfall(check)}"
    bounds = interval_bounds(now.low, now.high)
    return f"{now.geomean:.2f}x the baseline, 95 % interval {bounds} over {now.n} paired rounds{_rounds_counted(check)}"


def _rounds_counted(check: Check) -> str:
    """Where the speedup now does not stand on every round alike, in words to follow the paired rounds it counts, by
    the benchmark's rule and in its words: the rounds it leaves out as a run of them was slowed
    (``Benchmark.rounds_left_out``), or that it counts them, too few being quiet (``quiet_rounds``), and so reads the
    load too; and the rounds in which a run failed (``Check.failed_rounds``): " (round 1 left out: a run of it was
    slowed; round 2 left out: a run of it failed)"; empty where every round counts alike."""
    benchmark, recommended = check.benchmark, check.recommended
    said = [slowed_rounds_left_out(left_out)] if (left_out := benchmark.rounds_left_out(recommended)) else []
    if benchmark.counts_slowed(recommended):
        how = "unreliable" if benchmark.counts_slowed_unreliably(recommended) else "may be a little off"
        said.append(f"{how}, {slowed_rounds_counted(benchmark.slowed_rounds(recommended))}")
    if failed := check.failed_rounds:
        said.append(slowed_rounds_left_out(failed, why="failed"))
    return f" ({'; '.join(said)})" if said else ""


def verdict_line(check: Check) -> str:
    """The verdict in one line, naming before, now and the tolerance."""
    tolerance = f"{check.tolerance * 100:g} %"
    recorded = _recorded(check)
    limit = f"the floor of {check.floor:.2f}x ({check.before:.2f}x before{recorded}, less the tolerance of {tolerance})"
    now = check.now
    if check.stopped:
        return f"{stopped_words(check.benchmark.complete_rounds, check.benchmark.rounds)} against {limit}"
    if now is None:
        return f"not measured: {_shortfall(check)}, so there is no interval to hold against {limit}"
    speedup = f"{now.geomean:.2f}x now (95 % interval {interval_bounds(now.low, now.high)})"
    if check.regressed:
        return f"regressed: {speedup} lies below {limit}, further than the noise of both measurements allows"
    if not check.within_noise:
        return f"holds: {speedup} lies above {limit}, its whole interval too"
    reaching = ", its interval reaching it" if now.high >= check.floor else ""
    if check.loose_gate:
        return (
            f"holds within the noise: {speedup} lies below {limit}{reaching}, by less than the gain before was "
            "measured to: no number of rounds now can tell this fall from that noise, and a gate on it is loose (for a "
            f"sharper one, {_SHARPER})"
        )
    if now.geomean < check.floor:
        within = reaching or ", but by less than the noise of both measurements"
        return f"holds within the noise: {speedup} lies below {limit}{within} ({_to_tell(check)})"
    return (
        f"holds within the noise: {speedup} lies above {limit}, but its interval reaches below it ({_to_tell(check)})"
    )


def _to_tell(check: Check) -> str:
    """Which rounds would tell the speedup now from the floor, in words (``Check.rounds_to_tell``), or, where none
    would, why: the recorded gain's noise (``Check.record_keeps_from_telling``), or the rounds' own."""
    rounds = check.rounds_to_tell
    if rounds is not None:
        return f"at this noise about check.rounds={rounds} would tell"
    if check.record_keeps_from_telling:
        return (
            f"the gain before was measured too loosely for {MAX_ROUNDS_TO_TELL} rounds now to tell this fall from its "
            f"noise; for a sharper gate, {_SHARPER}"
        )
    side = "below" if check.now.geomean < check.floor else "above"
    return (
        f"the speedup now lies too close to the floor for {MAX_ROUNDS_TO_TELL} rounds to tell whether it is {side} it"
    )


def _recorded(check: Check) -> str:
    """The recorded speedup's interval, as a clause; where the tuning run had none, how it counts
    (``Check.before_noise``: one round's noise for one round of a race, else one run's of each), from what
    (report.json's ``speedup_rounds``)."""
    was = check.before_interval
    if was is not None:
        return f", 95 % interval {interval_bounds(was.low, was.high)} over {was.n} rounds"
    rounds = check.before_rounds
    if rounds == 1:
        return ", from one round, as noisy as a round now"
    source = _NO_INTERVAL.get(rounds) or f"from {rounds} rounds with no interval"
    return f", {source}, counted as one run of each as noisy as its runs now"


def _shortfall(check: Check) -> str:
    """Which configuration ran in too few rounds for an interval, or in how few the two ran both, and why."""
    rounds = check.benchmark.rounds
    short = [f"{_NAMES[e.kind]} ran in {measured_rounds(e)} of {rounds} rounds" for e in check.unmeasured]
    if not short:
        paired = len(check.benchmark.ratios(check.recommended))
        short = [f"the baseline and the recommendation both ran in {paired} of {rounds} rounds"]
    failures = [failure for entry in check.unmeasured for failure in entry.failures]
    why = f"; first failure: {failures[0]}" if failures else ""
    return f"{'; '.join(short)} (an interval needs {MIN_ROUNDS}){why}"
