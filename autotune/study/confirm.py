"""Before recommending a trial over the baseline, race the finalists against it and each other, interleaved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

from autotune.results.confirmation import TIE_TOLERANCE, Confirmation, Finalist, wins_needed
from autotune.results.model import StudyResults
from autotune.results.summary import count_changes, select_finalists
from autotune.study.tuner import CONFIRMATION_ATTR, MeasureFn
from autotune.trial.result import TrialResult

# After each round a finalist whose median so far is this far below the leader's leaves the race: about twice
# one run's noise, so a configuration that is really as fast is rarely dropped, and a clearly slower one costs
# one re-measurement, not all of them.
RACE_MARGIN = 0.10
# The race ends early when one finalist leads so clearly that more rounds would not change the verdict: from
# round 2 on, its slowest run beat the baseline's fastest by this much (about twice one run's noise: two runs each
# that far apart do not happen by chance), and every other finalist's fastest run by more than TIE_TOLERANCE (so
# no other can win, not even a tie-break by fewer changes). After round 1 the same holds with twice the gain,
# counting the runs made before the race (the baseline's first measurement, each finalist's search trial): two
# runs a side, 20 % apart, are no accident either. From round 2 on it also ends once every finalist still racing
# leads the baseline that clearly: what is left to settle is which of them, finalists within RACE_MARGIN of each
# other, and one more round cannot tell a few per cent apart (6 interleaved rounds give a 95 % interval of about
# +-10 % on this noise, docs/benchmarks.md), so it would cost a round of runs and change nothing that matters.
DECISIVE_GAIN = 0.10


def confirm_finalists(
    study: optuna.Study,
    results: StudyResults,
    rounds: int,
    measure: MeasureFn,
    on_run: Callable[[str, TrialResult], None],
) -> Confirmation | None:
    """Measure the baseline and the finalists (``select_finalists``) again in fresh processes, ``rounds``
    rounds of the baseline and the finalists (their order, the baseline's place included, rotating each round),
    and store the outcome in the study.

    A finalist leaves the race when a run of it fails, when it has lost too many rounds to the baseline to be
    proven (``wins_needed``; with up to 5 rounds, one), or when it falls RACE_MARGIN behind the leader; the race
    ends early once decided (DECISIVE_GAIN). A stored confirmation of the same finalists and planned rounds is
    reused, not measured again.
    """
    picks = select_finalists(results)
    if not picks or rounds == 0:
        return None
    stored = results.confirmation
    if stored and stored.is_about([p.label for p in picks]) and stored.planned_rounds == rounds:
        return stored
    base = results.baseline.result
    finalists = [
        Finalist(p.label, p.result.knobs, count_changes(p.result.knobs, base.knobs), p.result.peak_memory_mb)
        for p in picks
    ]
    before_race = {p.label: p.throughput for p in picks} | {"baseline": results.baseline.throughput}
    baseline_runs: list[float] = []
    failure = None
    for index in range(1, rounds + 1):
        racing = [f for f in finalists if f.dropped is None]
        if not racing:
            break
        failure = _run_round(index, base.knobs, racing, baseline_runs, measure, on_run)
        if failure:
            break
        _drop_unprovable(racing, baseline_runs, rounds)
        _drop_laggards(racing, index)
        if _decided(finalists, baseline_runs, before_race):
            break
    confirmation = Confirmation(baseline_runs, finalists, failure, rounds)
    study.set_user_attr(CONFIRMATION_ATTR, confirmation.to_dict())
    return confirmation


def _run_round(
    index: int,
    baseline: dict[str, Any],
    racing: list[Finalist],
    baseline_runs: list[float],
    measure: MeasureFn,
    on_run: Callable[[str, TrialResult], None],
) -> str | None:
    """One round: the baseline and every racing finalist once, in an order rotated each round (so no one always
    runs first, right after the search or the previous round). Returns why the baseline's run failed, if it did."""
    order: list[Finalist | None] = [None, *racing]  # None: the baseline
    shift = (index - 1) % len(order)
    for entrant in order[shift:] + order[:shift]:
        if entrant is not None:
            _run_finalist(entrant, index, measure, on_run)
            continue
        name = f"confirm-{index}-baseline"
        result = measure(baseline, name, None)
        on_run(name, result)
        if not result.ok:
            return f"{name}: {result.failure}"
        baseline_runs.append(result.timing.throughput)
    return None


def _run_finalist(
    finalist: Finalist, index: int, measure: MeasureFn, on_run: Callable[[str, TrialResult], None]
) -> None:
    name = f"confirm-{index}-trial-{finalist.label}"
    result = measure(finalist.knobs, name, None)
    on_run(name, result)
    if not result.ok:
        finalist.dropped = f"round {index} failed: {result.failure}"
        return
    finalist.throughputs.append(result.timing.throughput)


def _decided(finalists: list[Finalist], baseline_runs: list[float], before_race: dict[str, float]) -> bool:
    """Whether one running finalist leads beyond doubt, or (from round 2 on) every running finalist leads the
    baseline beyond doubt (DECISIVE_GAIN); ``before_race`` holds each finalist's and the baseline's throughput
    measured before the race, counted after round 1."""
    running = [f for f in finalists if f.dropped is None]
    if not running:
        return False
    gain, runs, base = DECISIVE_GAIN, {f.label: f.throughputs for f in running}, baseline_runs
    if len(baseline_runs) == 1:
        gain = 2 * DECISIVE_GAIN
        runs = {f.label: [before_race[f.label], *f.throughputs] for f in running}
        base = [before_race["baseline"], *baseline_runs]
    clear_of_baseline = {f.label for f in running if min(runs[f.label]) > max(base) * (1 + gain)}
    if len(baseline_runs) > 1 and len(clear_of_baseline) == len(running):
        return True
    leader = max(running, key=lambda f: min(runs[f.label]))
    others_fastest = max((max(runs[f.label]) for f in running if f is not leader), default=0.0)
    return leader.label in clear_of_baseline and min(runs[leader.label]) > others_fastest * (1 + TIE_TOLERANCE)


def _drop_unprovable(racing: list[Finalist], baseline_runs: list[float], rounds: int) -> None:
    """A finalist that has lost more rounds to the baseline than a proof over ``rounds`` rounds allows leaves."""
    allowed = rounds - wins_needed(rounds)
    for finalist in (f for f in racing if f.dropped is None):
        lost = sum(f <= b for f, b in zip(finalist.throughputs, baseline_runs, strict=True))
        if lost > allowed:
            finalist.dropped = f"slower than the baseline in round {len(baseline_runs)}"
            if allowed:
                finalist.dropped += f" ({lost} rounds lost; a proof over {rounds} rounds allows {allowed})"


def _drop_laggards(racing: list[Finalist], index: int) -> None:
    running = [f for f in racing if f.dropped is None]
    if not running:
        return
    leader = max(running, key=lambda f: f.median)
    for finalist in running:
        if finalist.median < leader.median * (1 - RACE_MARGIN):
            finalist.dropped = f"more than {RACE_MARGIN:.0%} behind trial {leader.label} after round {index}"
