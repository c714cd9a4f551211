"""Before recommending a trial over the baseline, measure the two again, interleaved."""

from __future__ import annotations

from collections.abc import Callable

import optuna

from autotune.results.confirmation import Confirmation
from autotune.results.model import StudyResults
from autotune.results.summary import choose_candidate
from autotune.study.tuner import CONFIRMATION_ATTR, MeasureFn
from autotune.trial.result import TrialResult


def confirm_fastest(
    study: optuna.Study,
    results: StudyResults,
    rounds: int,
    measure: MeasureFn,
    on_run: Callable[[str, TrialResult], None],
) -> Confirmation | None:
    """Measure the trial chosen for recommendation (``choose_candidate``: the fastest, or a simpler one tied
    with it) and the baseline alternately, ``rounds`` times each, and store the outcome.

    A stored confirmation of the same candidate with as many rounds is reused, not measured again.
    """
    best = choose_candidate(results)
    if best is None or rounds == 0:
        return None
    stored = study.user_attrs.get(CONFIRMATION_ATTR)
    if stored and stored["candidate_knobs"] == best.result.knobs and len(stored["baseline_throughputs"]) == rounds:
        return Confirmation.from_dict(stored)
    baseline_runs: list[float] = []
    candidate_runs: list[float] = []
    failure = None
    for index in range(1, rounds + 1):
        runs = [
            (f"confirm-{index}-baseline", results.baseline.result.knobs, baseline_runs),
            (f"confirm-{index}-trial-{best.label}", best.result.knobs, candidate_runs),
        ]
        for name, knobs, throughputs in runs:
            result = measure(knobs, name, None)
            on_run(name, result)
            if not result.ok:
                failure = f"{name}: {result.failure}"
                break
            throughputs.append(result.timing.throughput)
        if failure:
            break
    pairs = min(len(baseline_runs), len(candidate_runs))
    confirmation = Confirmation(
        candidate=best.label,
        candidate_knobs=best.result.knobs,
        baseline_throughputs=baseline_runs[:pairs],
        candidate_throughputs=candidate_runs[:pairs],
        failure=failure,
    )
    study.set_user_attr(CONFIRMATION_ATTR, confirmation.to_dict())
    return confirmation
