"""A finalist that another finalist's trim races as a variant does not race the finalists' race too."""

from __future__ import annotations

from functools import partial

import pytest

from autotune.knobs import KNOBS
from autotune.results.finalist import Finalist, Left
from autotune.results.model import load_results
from autotune.results.race import Confirmation
from autotune.results.race_rules import left_to_trims
from autotune.results.summary import _left, summarise
from autotune.study.run_race import run_race
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.trim import run_trim, trim_ahead
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import fake_measurement
from tests.study.test_trim import BASELINE, Pipeline
from tests.study.test_tuner import META, settings

# Batch 64 and bf16 make most of the gain; channels_last adds 5 %.
NESTED = {**BASELINE, "batch_size": 64, "amp": "bf16", "channels_last": True}
INNER = {**NESTED, "channels_last": False}  # NESTED with channels_last undone


class SmallLayoutGain(Pipeline):
    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        value = 100.0 * (1.6 if knobs["batch_size"] == 64 else 1.0) * (1.25 if knobs["amp"] == "bf16" else 1.0)
        value *= 1.05 if knobs["channels_last"] else 1.0
        return TrialResult(knobs=dict(knobs), measurement=fake_measurement(value * next(self.wobble)))


def nested_finalists(tmp_path):
    """A study whose two trials are finalists, one the other with channels_last undone, and its pipeline."""
    study, pipeline = open_study(settings(tmp_path), META), SmallLayoutGain()
    ensure_baseline(study, BASELINE, pipeline)
    for trial in (INNER, NESTED):  # NESTED's run beats INNER's by 7 %: both race (``select_finalists``)
        study.enqueue_trial(trial)
    space = SearchSpace({name: list(dict.fromkeys([BASELINE[name], NESTED[name], INNER[name]])) for name in KNOBS})
    tune(study, space, settings(tmp_path, n_trials=2), pipeline, lambda e: None)
    pipeline.names.clear()
    return study, pipeline


def test_a_finalist_the_winners_trim_races_as_a_variant_leaves_the_race_before_it_and_the_trim_races_it(tmp_path):
    study, pipeline = nested_finalists(tmp_path)
    results = load_results(study)
    ahead = partial(trim_ahead, results, rounds=3)
    notes = []
    confirmation = run_race(
        study, results, 3, pipeline, lambda name, result: None, on_note=notes.append, trim_ahead=ahead, park=True
    )
    nested, inner = confirmation.finalists
    assert notes[0].startswith(f"[race] trial {inner.label} does not race: trial {nested.label}'s trim races it")
    assert confirmation.describe().startswith("1 finalist, re-measured")
    assert f"Trial {inner.label} did not race: trial {nested.label}'s trim races it" in confirmation.describe()
    assert inner.knobs == INNER and inner.left is Left.TRIMMED and not inner.throughputs
    assert f"trial {nested.label}'s trim races it, as trial {nested.label} without channels_last" in inner.dropped
    assert not [name for name in pipeline.names if name.endswith(f"-trial-{inner.label}")], "no run of it here"
    assert confirmation.winner is nested and confirmation.rounds < 3, "alone, decided at its verdict for the trim"
    (first, *_) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    variant = next(f for f in first.finalists if f.knobs == INNER)
    assert len(variant.throughputs) >= 1 and first.rounds == 3, "the trim race measures it against its origin"
    summary = summarise(load_results(study))
    assert summary.proof is not None and summary.gain_interval is not None and summary.gain_interval.n == 3


def test_without_a_trim_ahead_both_race(tmp_path):
    """Where no trim will race the winner (its first race does not fit study.budget_s), the finalist races."""
    study, pipeline = nested_finalists(tmp_path)
    results = load_results(study)
    none_fits = partial(trim_ahead, results, rounds=3, fits=lambda configurations: False)
    confirmation = run_race(study, results, 3, pipeline, lambda name, result: None, trim_ahead=none_fits, park=True)
    assert len(confirmation.finalists) == 2
    assert all(finalist.left is not Left.TRIMMED and finalist.throughputs for finalist in confirmation.finalists)


class NestedFails(SmallLayoutGain):
    """As ``SmallLayoutGain``, but every run of the nested configuration fails."""

    def __call__(self, knobs, name, on_progress=None):
        if knobs == NESTED:
            self.names.append(name)
            return TrialResult(knobs=dict(knobs), failure=Failure(FailureKind.SIGNAL, "killed"))
        return super().__call__(knobs, name, on_progress)


def test_where_the_finalist_whose_trim_was_to_race_another_does_not_win_the_race_runs_anew_with_every_finalist(
    tmp_path,
):
    study, _ = nested_finalists(tmp_path)
    results, failing, notes = load_results(study), NestedFails(), []
    ahead = partial(trim_ahead, results, rounds=3)
    confirmation = run_race(
        study, results, 3, failing, lambda name, result: None, on_note=notes.append, trim_ahead=ahead, park=True
    )
    nested, inner = confirmation.finalists
    assert any("no trim will race trial 0 (no finalist won the race): the race runs anew" in note for note in notes)
    assert inner.left is None and inner.throughputs and confirmation.winner is inner, "raced, it wins"
    assert "did not race" not in confirmation.describe()
    assert failing.names[:2] == ["confirm-1-baseline", f"confirm-1-trial-{nested.label}"]
    assert failing.names[2:] == [
        "confirm-anew-1-baseline",
        f"confirm-anew-1-trial-{nested.label}",
        f"confirm-anew-1-trial-{inner.label}",
    ], "the race anew, its runs named apart from the first race's"


def test_a_finalist_left_to_a_trim_is_not_ruled_out_by_a_race_stopped_before_its_end():
    """A race stopped in round 2 rules out the finalists it dropped, not one that left it for a trim unmeasured."""
    lagged = _finalist("1", NESTED)
    lagged.throughputs.append(150.0)
    lagged.leave(Left.LAGGING, "more than 10% behind trial 2 after round 1")
    parked = _finalist("0", INNER)
    parked.leave(Left.TRIMMED, "trial 2's trim races it")
    leader = _finalist("2", {**NESTED, "set_to_none": False}, [200.0])
    stopped = Confirmation([100.0], [leader, lagged, parked], planned_rounds=3, cut=True)
    assert _left(stopped) == frozenset({"1"})


def _finalist(label: str, knobs: dict, runs: list[float] | None = None) -> Finalist:
    return Finalist(label, knobs, sum(knobs[name] != BASELINE[name] for name in KNOBS), None, list(runs or []))


def _undoing(*knobs: str):
    """A ``trim_ahead`` whose trim races each finalist with each of ``knobs`` it changes undone."""

    def ahead(finalist: Finalist) -> dict[str, Finalist]:
        found = {}
        for knob in knobs:
            if finalist.knobs[knob] != BASELINE[knob]:
                undone = {**finalist.knobs, knob: BASELINE[knob]}
                found[knob] = _finalist(f"{finalist.label} without {knob}", undone)
        return found

    return ahead


def test_only_a_finalist_whose_trim_races_leaves_others_to_it():
    outer = _finalist("1", {**NESTED, "set_to_none": False})
    nested, inner, other = _finalist("2", NESTED), _finalist("3", INNER), _finalist("4", {**INNER, "amp": "off"})
    left = left_to_trims([nested, inner, outer, other], _undoing("set_to_none", "channels_last"))
    assert {label: (by.label, knob) for label, (by, knob) in left.items()} == {"2": ("1", "set_to_none")}, (
        "trial 2 leaves to trial 1's trim; trial 3, a variant of trial 2 alone, races: trial 2 is not racing"
    )
    assert left_to_trims([nested, inner], _undoing("amp")) == {}, "not the variant its trim races"
    compiled = _finalist("5", {**NESTED, "compile": "default"})
    plain_twin = _finalist("6", NESTED)
    assert left_to_trims([compiled, plain_twin], _undoing("compile")) == {}, "a compiled finalist's twin races"


class StopsOnce(SmallLayoutGain):
    """As ``SmallLayoutGain``; the run named ``stop_at`` raises KeyboardInterrupt (the tuner stopped) the first time."""

    def __init__(self, stop_at: str, fails: bool = False):
        super().__init__()
        self.stop_at, self.fails = stop_at, fails

    def __call__(self, knobs, name, on_progress=None):
        if name == self.stop_at:
            self.stop_at = None
            raise KeyboardInterrupt
        if self.fails and knobs == NESTED:
            self.names.append(name)
            return TrialResult(knobs=dict(knobs), failure=Failure(FailureKind.SIGNAL, "killed"))
        return super().__call__(knobs, name, on_progress)


def test_a_race_run_anew_is_stored_before_its_first_round_and_a_stopped_one_goes_on_under_its_own_name(tmp_path):
    study, _ = nested_finalists(tmp_path)
    stopping = StopsOnce("confirm-anew-1-baseline", fails=True)
    ahead = partial(trim_ahead, load_results(study), rounds=3)
    with pytest.raises(KeyboardInterrupt):
        run_race(study, load_results(study), 3, stopping, lambda n, r: None, trim_ahead=ahead, park=True)
    stored = load_results(study).confirmation
    assert stored.cut and not stored.rounds and all(f.left is None for f in stored.finalists), "the race anew"
    results = load_results(study)
    ahead = partial(trim_ahead, results, rounds=3)
    confirmation = run_race(study, results, 3, stopping, lambda n, r: None, trim_ahead=ahead, park=True)
    assert stopping.names[-1].startswith("confirm-anew-") and "confirm-anew-1-baseline" in stopping.names
    assert confirmation.winner is not None and confirmation.winner.knobs == INNER


def test_a_race_that_decided_nothing_is_not_run_anew_for_a_parked_finalist(tmp_path):
    """A failed baseline run keeps the baseline; a race cut short is gone on with by a later run."""
    study, _ = nested_finalists(tmp_path)
    failing = SmallLayoutGain()
    failing_base = lambda knobs, name, on_progress=None: (  # noqa: E731
        TrialResult(knobs=dict(knobs), failure=Failure(FailureKind.SIGNAL, "killed"))
        if name.endswith("-baseline")
        else failing(knobs, name, on_progress)
    )
    ahead = partial(trim_ahead, load_results(study), rounds=3)
    notes = []
    confirmation = run_race(
        study, load_results(study), 3, failing_base, lambda n, r: None, on_note=notes.append, trim_ahead=ahead,
        park=True,
    )  # fmt: skip
    assert confirmation.failure and not any("runs anew" in note for note in notes)
