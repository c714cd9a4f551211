"""The Optuna study with a fake measurement: baseline first, no re-measuring, resume, interruptions."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from optuna.trial import TrialState

from autotune import rerender
from autotune.app import _study_meta
from autotune.config.load import load_settings
from autotune.config.settings import StudySettings
from autotune.errors import ConfigError, StudyMismatchError
from autotune.knobs import KNOBS
from autotune.measure.environment import this_machine_id
from autotune.records import CONFIG_ATTR, DUPLICATE_ATTR, MACHINE_ATTR, META_ATTR, config_key
from autotune.results import race as race_module
from autotune.results.model import load_results
from autotune.results.race import Confirmation
from autotune.study import run_race as run_race_module
from autotune.study.run_race import _why_anew, run_race
from autotune.study.search_state import counted_trials, draw_untried
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.tuner import _REPEATS_BEFORE_UNTRIED, ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config

VARIED = {"batch_size": [16, 32], "num_workers": [0, 1, 2]}
FIXED = {**NEUTRAL_KNOBS, "prefetch_factor": 2, "persistent_workers": False}
SPACE = SearchSpace({name: VARIED.get(name, [FIXED[name]]) for name in KNOBS})
BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}


def left_measuring(trial, space: SearchSpace = SPACE, machine: str | None = None) -> dict:
    """``trial``'s configuration, sampled from ``space`` and marked in flight on ``machine`` (None: this one), as a
    tuner that died measuring it leaves it."""
    knobs = space.sample(trial)
    trial.set_user_attr(MACHINE_ATTR, machine or this_machine_id())
    trial.set_user_attr(CONFIG_ATTR, config_key(knobs))
    return knobs


def fake_result(knobs, throughput=None) -> TrialResult:
    """A result whose throughput is a known function of the knobs; num_workers=2 fails."""
    if knobs["num_workers"] == 2:
        return TrialResult(knobs=knobs, failure=Failure(FailureKind.EXCEPTION, "RuntimeError: boom"))
    value = throughput or 100.0 * knobs["batch_size"] / 16 * (1 + knobs["num_workers"])
    return TrialResult(knobs=knobs, measurement=fake_measurement(value))


class FakeMeasure:
    def __init__(self):
        self.calls = []

    def __call__(self, knobs, name, on_progress=None):
        self.calls.append((name, dict(knobs)))
        return fake_result(knobs)


def settings(tmp_path, n_trials=3, timeout_s=None, **more) -> StudySettings:
    storage = f"sqlite:///{tmp_path}/study.db"
    return StudySettings(name="s", storage=storage, n_trials=n_trials, timeout_s=timeout_s, seed=0, **more)


META = {
    "pipeline": {"name": "p"},
    "baseline": BASELINE,
    "space": SPACE.candidates,
    "device": "cpu",
    "machine": {},
    "measure": {},
}


def test_baseline_is_measured_once_and_stored(tmp_path):
    study = open_study(settings(tmp_path), META)
    measure = FakeMeasure()
    first, reused = ensure_baseline(study, BASELINE, measure)
    again, reused_again = ensure_baseline(open_study(settings(tmp_path), META), BASELINE, measure)
    assert (reused, reused_again) == (False, True)
    assert again == first and len(measure.calls) == 1


def test_an_untried_configuration_is_drawn_even_where_all_but_one_are_tried():
    configurations = list(SPACE.configurations())
    rng = random.Random(0)
    for left in configurations:
        taken = {config_key(knobs) for knobs in configurations if knobs != left}
        assert draw_untried(SPACE, taken, [], rng) == left
    drawn = {config_key(draw_untried(SPACE, set(), [], rng)) for _ in range(200)}
    assert drawn == {config_key(knobs) for knobs in configurations}, "at random, every one in turn"


@pytest.mark.slow
def test_tune_measures_each_configuration_once_and_records_failures(tmp_path):
    study = open_study(settings(tmp_path, n_trials=10), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    events = []
    reason = tune(study, SPACE, settings(tmp_path, n_trials=10), measure, events.append)
    measured = [tuple(sorted(knobs.items())) for _, knobs in measure.calls]
    assert len(measured) == len(set(measured)) == SPACE.size, "every configuration exactly once"
    assert "all 6 configurations" in reason.message and not reason.aborted
    asked = (_REPEATS_BEFORE_UNTRIED + 1) * (SPACE.size - 1)
    assert len(study.trials) <= asked, "a sampler repeating itself is answered with an untried configuration"
    assert [e.index for e in events] == list(range(1, SPACE.size))  # the baseline is one of the six
    failed = [e for e in events if not e.result.ok]
    assert failed and all(e.result.knobs["num_workers"] == 2 for e in failed)


@pytest.mark.slow
def test_resume_continues_to_n_trials_without_remeasuring(tmp_path):
    measure = FakeMeasure()
    study = open_study(settings(tmp_path, n_trials=2), META)
    ensure_baseline(study, BASELINE, measure)
    tune(study, SPACE, settings(tmp_path, n_trials=2), measure, lambda e: None)
    assert counted_trials(study) == 2
    resumed = open_study(settings(tmp_path, n_trials=4), META)
    ensure_baseline(resumed, BASELINE, measure)
    tune(resumed, SPACE, settings(tmp_path, n_trials=4), measure, lambda e: None)
    assert counted_trials(resumed) == 4
    assert len(measure.calls) == 1 + 4


def test_a_trial_interrupted_mid_run_is_marked_and_retried(tmp_path):
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())

    def interrupted(knobs, name, on_progress):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tune(study, SPACE, settings(tmp_path, n_trials=3), interrupted, lambda e: None)
    assert counted_trials(study) == 0
    lost = study.trials[-1].params
    measure = FakeMeasure()
    resumed = open_study(settings(tmp_path), META)
    tune(resumed, SPACE, settings(tmp_path, n_trials=3), measure, lambda e: None)
    assert counted_trials(resumed) == 3
    assert {k: measure.calls[0][1][k] for k in lost} == lost, "the interrupted configuration is measured first"


def test_a_trial_left_running_by_a_killed_tuner_is_retried(tmp_path):
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    stale = study.ask()
    left_measuring(stale)
    measure = FakeMeasure()
    resumed = open_study(settings(tmp_path), META)
    tune(resumed, SPACE, settings(tmp_path, n_trials=1), measure, lambda e: None)
    assert {k: measure.calls[0][1][k] for k in stale.params} == stale.params
    assert counted_trials(resumed) == 1


def test_a_study_resumed_under_other_memory_budgets_is_refused_naming_them(tmp_path):
    def meta(**study) -> dict:  # as the tuner describes its study
        return _study_meta(load_settings(tiny_config(study=study), "tiny"), "cpu", SPACE)

    assert meta()["study"] == {}, "unset budgets are left out of a record kept even empty"
    unset = tmp_path / "unset"
    unset.mkdir()
    ensure_baseline(open_study(settings(unset), meta()), BASELINE, FakeMeasure())
    with pytest.raises(StudyMismatchError, match=r": study.memory_budget_mb null → 200.0; set them back"):
        open_study(settings(unset), meta(memory_budget_mb=200))  # made without one: no study of an earlier autotune
    ensure_baseline(open_study(settings(tmp_path), meta(memory_budget_mb=500)), BASELINE, FakeMeasure())
    with pytest.raises(StudyMismatchError, match=r": study.memory_budget_mb 500.0 → 400.0; set them back"):
        open_study(settings(tmp_path), meta(memory_budget_mb=400))
    with pytest.raises(StudyMismatchError, match=r": study.host_memory_budget_mb null → 900.0; study.memory_budget"):
        open_study(settings(tmp_path), meta(host_memory_budget_mb=900))
    assert open_study(settings(tmp_path), meta(memory_budget_mb=500.0)), "the same budgets resume it"


def test_a_study_made_before_its_memory_budgets_were_kept_resumes_under_those_given_now(tmp_path):
    described = _study_meta(load_settings(tiny_config(study={"memory_budget_mb": 500}), "tiny"), "cpu", SPACE)
    before = {key: value for key, value in described.items() if key != "study"}  # as an earlier autotune stored it
    ensure_baseline(open_study(settings(tmp_path), before), BASELINE, FakeMeasure())
    assert open_study(settings(tmp_path), described)
    with pytest.raises(StudyMismatchError, match="measure.repeats"):
        open_study(settings(tmp_path), {**described, "measure": {**described["measure"], "repeats": 3}})
    # older still, its warm-up's span written out as well: the fixed 4 is half of the default min_steps, 8
    now = {
        **described,
        "measure": {**described["measure"], "warmup": {**described["measure"]["warmup"], "min_steps": 8}},
    }
    assert now["measure"]["warmup"]["span"] is None
    oldest = {key: value for key, value in now.items() if key != "study"}
    oldest["measure"] = {**now["measure"], "warmup": {**now["measure"]["warmup"], "span": 4}}
    (tmp_path / "oldest").mkdir()
    ensure_baseline(open_study(settings(tmp_path / "oldest"), oldest), BASELINE, FakeMeasure())
    assert open_study(settings(tmp_path / "oldest"), now)


def test_what_each_trial_sets_for_itself_is_no_setting_of_the_study():
    described = _study_meta(load_settings(tiny_config(), "tiny"), "cpu", SPACE)
    assert "step_multiple" not in described["measure"] and "step_multiple" not in described["measure"]["screen"]


def test_timeout_stops_the_study(tmp_path):
    study = open_study(settings(tmp_path), META)
    reason = tune(study, SPACE, settings(tmp_path, timeout_s=1e-9), FakeMeasure(), lambda e: None)
    assert "timeout" in reason.message and counted_trials(study) == 0


def test_a_study_with_other_settings_is_not_mixed_in_and_the_refusal_names_what_differs(tmp_path):
    measure = {"min_time_s": 4.0, "repeats": 1}
    ensure_baseline(open_study(settings(tmp_path), {**META, "measure": measure}), BASELINE, FakeMeasure())
    with pytest.raises(StudyMismatchError, match=r'^study.name: .*: pipeline.name "p" → "other"; set them back'):
        open_study(settings(tmp_path), {**META, "pipeline": {"name": "other"}, "measure": measure})
    with pytest.raises(StudyMismatchError, match=r": measure.min_time_s 4.0 → 1.5; measure.repeats 1 → 3; set"):
        open_study(settings(tmp_path), {**META, "measure": {"min_time_s": 1.5, "repeats": 3}})
    with pytest.raises(
        StudyMismatchError, match=r": space.batch_size \[16, 32\] → \[1, 2\] \(a search space not given is derived"
    ):
        open_study(
            settings(tmp_path), {**META, "measure": measure, "space": {**SPACE.candidates, "batch_size": [1, 2]}}
        )


def test_mode_report_of_a_study_whose_baseline_failed_says_so(tmp_path):
    open_study(settings(tmp_path), META)
    with pytest.raises(ConfigError, match=r"^study.name: study 's' has no measured baseline \(its baseline failed"):
        rerender.run("s", settings(tmp_path).storage, tmp_path / "out")


def test_a_refusal_names_a_pipelines_component_by_the_key_the_user_sets_it_with(tmp_path):
    pipeline = {"name": "p", "components": {"model": {"_target_": "m.Net", "channels": 128}}}
    ensure_baseline(open_study(settings(tmp_path), {**META, "pipeline": pipeline}), BASELINE, FakeMeasure())
    narrower = {**pipeline, "components": {"model": {"_target_": "m.Net", "channels": 32}}}
    with pytest.raises(StudyMismatchError, match=r": pipeline.model.channels 128 → 32; set them back"):
        open_study(settings(tmp_path), {**META, "pipeline": narrower})


def test_a_refusal_names_a_number_written_another_way_as_the_fingerprint_tells_them_apart(tmp_path):
    ensure_baseline(open_study(settings(tmp_path), {**META, "measure": {"lr": 1}}), BASELINE, FakeMeasure())
    with pytest.raises(StudyMismatchError, match=r": measure.lr 1 → 1.0; set them back"):
        open_study(settings(tmp_path), {**META, "measure": {"lr": 1.0}})


def test_a_study_whose_warm_up_span_an_earlier_autotune_wrote_out_resumes_and_another_span_is_refused(tmp_path):
    # Earlier autotunes stored the span 4 itself; now None stands for half of min_steps: the same comparison.
    warmup = {"min_steps": 8, "max_steps": 60, "tolerance": 0.15, "min_time_s": None}
    ensure_baseline(
        open_study(settings(tmp_path), {**META, "measure": {"warmup": {**warmup, "span": 4}}}), BASELINE, FakeMeasure()
    )
    assert open_study(settings(tmp_path), {**META, "measure": {"warmup": {**warmup, "span": None}}})
    with pytest.raises(StudyMismatchError, match=r": measure.warmup.min_steps 8 → 4; measure.warmup.span 4 → 2; set"):
        open_study(settings(tmp_path), {**META, "measure": {"warmup": {**warmup, "min_steps": 4, "span": None}}})
    # a span the user's pipeline takes is its own argument, compared as given
    spanned = {"name": "p", "components": {"model": {"_target_": "m.Net", "span": 4, "min_steps": 8}}}
    (tmp_path / "p").mkdir()
    ensure_baseline(open_study(settings(tmp_path / "p"), {**META, "pipeline": spanned}), BASELINE, FakeMeasure())
    unset = {**spanned, "components": {"model": {"_target_": "m.Net", "span": None, "min_steps": 8}}}
    with pytest.raises(StudyMismatchError, match=r"pipeline.model.span 4 → null"):
        open_study(settings(tmp_path / "p"), {**META, "pipeline": unset})


def test_a_study_whose_baseline_failed_takes_the_mended_settings_of_the_next_run(tmp_path):
    def fails(knobs, name, on_progress=None):
        return TrialResult(knobs=knobs, failure=Failure(FailureKind.EXCEPTION, "TypeError: my_loss() missing 2"))

    broken = {**META, "pipeline": {"name": "p", "loss": {"_target_": "mine.my_loss"}}}
    result, _ = ensure_baseline(open_study(settings(tmp_path), broken), BASELINE, fails)
    assert not result.ok
    mended = {**META, "pipeline": {"name": "p", "loss": {"_target_": "mine.my_loss", "_partial_": True}}}
    study = open_study(settings(tmp_path), mended)
    assert study.user_attrs[META_ATTR]["pipeline"] == mended["pipeline"], "nothing measured: nothing to mix in"
    ensure_baseline(study, BASELINE, FakeMeasure())
    with pytest.raises(StudyMismatchError, match="pipeline.loss._partial_ true → null"):
        open_study(settings(tmp_path), broken)


def test_a_study_that_holds_nothing_keeps_refusing_other_objectives_which_optuna_fixed_at_its_creation(tmp_path):
    open_study(settings(tmp_path), {**META, "objectives": ["throughput"]})
    two = settings(tmp_path, objectives=("throughput", "peak_memory"))
    with pytest.raises(StudyMismatchError, match="objectives"):
        open_study(two, {**META, "objectives": ["throughput", "peak_memory"]})


def test_a_bad_storage_url_is_a_config_error(tmp_path):
    bad = StudySettings(name="s", storage="nosuchdb://x", n_trials=1, timeout_s=None, seed=0)
    with pytest.raises(ConfigError, match="study.storage"):
        open_study(bad, META)


def test_a_run_of_failures_stops_the_study(tmp_path):
    study = open_study(settings(tmp_path), META)

    def always_fails(knobs, name, on_progress):
        return TrialResult(knobs=knobs, failure=Failure(FailureKind.SIGNAL, "killed by SIGSEGV"))

    reason = tune(study, SPACE, settings(tmp_path, n_trials=6, max_consecutive_failures=3), always_fails, print)
    assert reason.aborted and counted_trials(study) == 3
    assert "the last 3 trials all failed (the last with signal: killed by SIGSEGV)" in reason.message


@pytest.mark.slow
def test_the_finalists_race_the_baseline_once_and_the_fastest_proven_wins(tmp_path):
    study = open_study(settings(tmp_path), META)
    measure = FakeMeasure()
    ensure_baseline(study, BASELINE, measure)
    tune(study, SPACE, settings(tmp_path, n_trials=5), measure, lambda e: None)
    calls_before = len(measure.calls)
    runs = []
    confirmation = run_race(study, load_results(study), 2, measure, lambda name, result: runs.append(name))
    fastest = max((r for r in load_results(study).trials if r.result.ok), key=lambda r: r.throughput)
    assert [f.label for f in confirmation.finalists] == [fastest.label], "the others are over 10 % slower"
    assert confirmation.winner.label == fastest.label and confirmation.confirmed
    trial = f"trial-{fastest.label}"
    assert runs == ["confirm-1-baseline", f"confirm-1-{trial}", f"confirm-2-{trial}", "confirm-2-baseline"]
    assert load_results(study).confirmation == confirmation, "stored in the study"
    assert run_race(study, load_results(study), 2, measure, print) == confirmation
    assert len(measure.calls) == calls_before + 4, "a stored confirmation is reused, not re-measured"


class NoisyMeasure:
    """Per configuration (by batch size), a sequence of throughputs handed out one run at a time; a batch size
    without one runs out of memory."""

    def __init__(self, runs_by_batch):
        self.runs = {batch: iter(runs) for batch, runs in runs_by_batch.items()}
        self.names = []

    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        throughput = next(self.runs.get(knobs["batch_size"], iter(())), None)
        if throughput is None:
            return TrialResult(knobs=knobs, failure=Failure(FailureKind.OUT_OF_MEMORY, "out of memory"))
        return TrialResult(knobs=knobs, measurement=fake_measurement(throughput))


def raced(tmp_path, single_runs, re_runs, rounds=3, affords=None, draws=False):
    """Confirm a study whose baseline (batch 16) and trials (other batch sizes) measured ``single_runs``, its rounds
    held to ``affords``; with ``draws``, each new draw of the process layout is among the names, as "new draw"."""
    study = open_study(settings(tmp_path), META)
    measure = NoisyMeasure({batch: [value] for batch, value in single_runs.items()})
    ensure_baseline(study, BASELINE, measure)
    for batch in single_runs:
        if batch != 16:
            knobs = {**BASELINE, "batch_size": batch}
            study.enqueue_trial(knobs)
    space = SearchSpace({name: [BASELINE[name]] for name in KNOBS} | {"batch_size": list(single_runs)})
    tune(study, space, settings(tmp_path, n_trials=len(single_runs) - 1), measure, lambda e: None)
    race = NoisyMeasure(re_runs)
    new_draw = (lambda: race.names.append("new draw")) if draws else None
    return run_race(study, load_results(study), rounds, race, lambda name, result: None, affords, new_draw), race.names


def test_a_stored_race_stands_for_the_trials_it_was_about_though_the_selection_rule_changes(tmp_path, monkeypatch):
    single, re_runs = {16: 100.0, 32: 140.0, 64: 135.0}, {16: [100] * 3, 32: [120] * 3, 64: [112] * 3}
    confirmation, _ = raced(tmp_path, single, re_runs)
    study = open_study(settings(tmp_path), META)
    assert sorted(load_results(study).confirmation.trials) == ["0", "1"]
    first_only = lambda baseline, trials: trials[:1]  # noqa: E731 (another rule, as a later autotune might have)
    monkeypatch.setattr(race_module, "select_finalists", first_only)
    monkeypatch.setattr(run_race_module, "select_finalists", first_only)
    measure = NoisyMeasure(re_runs)
    assert run_race(study, load_results(study), 3, measure, lambda name, result: None) == confirmation
    assert measure.names == [], "reused: no trial was measured since"


def test_a_race_a_failed_baseline_run_ended_is_run_again_by_a_later_run(tmp_path):
    single = {16: 100.0, 32: 140.0}
    failed, _ = raced(tmp_path, single, {16: [100], 32: [120] * 3})  # the baseline's second run fails
    assert failed.failure and failed.winner is None
    study = open_study(settings(tmp_path), META)
    measure, notes = NoisyMeasure({16: [100] * 3, 32: [120] * 3}), []
    again = run_race(study, load_results(study), 3, measure, lambda name, result: None, on_note=notes.append)
    assert measure.names and again.failure is None and again.winner is not None
    assert notes == [
        f"[race] the stored race is run anew: a baseline run failed in it ({failed.failure})",
        "[race] trial 0 against the baseline: the 2 in turn for up to 3 rounds",
        f"[race] {again.describe()}",
    ]
    run_race(study, load_results(study), 2, NoisyMeasure({16: [100] * 2, 32: [120] * 2}), print, on_note=notes.append)
    assert notes[-3] == "[race] the stored race is run anew: it was planned for 3 rounds, study.confirm_rounds=2 now"
    unplanned = replace(load_results(study).confirmation, planned_rounds=None)
    assert _why_anew(unplanned, 2) == "it was stored by an earlier autotune, which did not record the rounds it planned"


def label_of(confirmation, batch):
    return next(f.label for f in confirmation.finalists if f.knobs["batch_size"] == batch)


def test_a_finalist_slower_than_its_single_run_said_loses_the_race_to_one_that_holds(tmp_path):
    single = {16: 100.0, 32: 140.0, 64: 135.0, 128: 115.0}  # 128 is more than 15 % behind 32: not a finalist
    re_runs = {16: [100, 101, 99], 32: [100.5], 64: [112, 113, 111]}
    confirmation, names = raced(tmp_path, single, re_runs)
    assert sorted(f.knobs["batch_size"] for f in confirmation.finalists) == [32, 64]
    assert confirmation.winner.label == label_of(confirmation, 64)
    dropped = next(f for f in confirmation.finalists if f.knobs["batch_size"] == 32).dropped
    assert dropped == f"more than 10% behind trial {label_of(confirmation, 64)} after round 1"
    assert len(names) == 3 + 2 + 2, "round 1: baseline and both finalists; rounds 2 and 3 the baseline and the leader"


def test_a_race_decided_early_runs_its_winner_and_the_baseline_for_the_rounds_left_where_no_trim_races_it(tmp_path):
    confirmation, names = raced(tmp_path, {16: 100.0, 32: 118.0}, {16: [100, 101, 99], 32: [115, 116, 114]}, rounds=3)
    assert confirmation.confirmed and (confirmation.rounds, confirmation.planned_rounds) == (3, 3)
    assert len(names) == 6, "decided after round 2 (10 % clear in every run), the gain's interval takes the third"
    assert "in 3 interleaved rounds" in confirmation.describe() and not confirmation.ended_early
    assert confirmation.decided_after == 2 and "After round 2 its verdict was in" in confirmation.describe()


def test_a_round_after_the_verdict_bounds_the_gain_and_does_not_take_the_verdict_back(tmp_path):
    confirmation, _ = raced(tmp_path, {16: 100.0, 32: 118.0}, {16: [100, 101, 120], 32: [115, 116, 114]}, rounds=3)
    assert confirmation.rounds == 3 and confirmation.decided_after == 2 and confirmation.confirmed
    assert "a win in every round up to the verdict" in confirmation.describe()
    assert Confirmation.from_dict(confirmation.to_dict()) == confirmation
    (tmp_path / "failed").mkdir()
    confirmation, _ = raced(tmp_path / "failed", {16: 100.0, 32: 118.0}, {16: [100, 101, 100], 32: [115, 116]})
    assert confirmation.rounds == 3 and not confirmation.confirmed, "the winner's run failed in round 3"


def test_a_race_is_decided_after_one_round_when_two_runs_a_side_are_20_percent_apart(tmp_path):
    single, re_runs = {16: 100.0, 32: 150.0, 64: 140.0}, {16: [101] * 3, 32: [148] * 3, 64: [138]}
    confirmation, names = raced(tmp_path, single, re_runs, rounds=3)
    assert confirmation.confirmed and confirmation.rounds == 3 and len(names) == 3 + 2 + 2
    second = next(f for f in confirmation.finalists if f.knobs["batch_size"] == 64)
    assert second.dropped.startswith(f"the race was decided for trial {confirmation.winner.label} after round 1")
    (tmp_path / "close").mkdir()
    single, re_runs = {16: 100.0, 32: 118.0, 64: 110.0}, {16: [100] * 3, 32: [150] * 3, 64: [140] * 2}
    confirmation, names = raced(tmp_path / "close", single, re_runs, rounds=3)
    assert len(names) == 3 + 3 + 2, "the leader's own run was under 20 % clear: a second round is needed"
    second = next(f for f in confirmation.finalists if f.knobs["batch_size"] == 64)
    assert "after round 2" in second.dropped


def test_a_race_of_several_finalists_is_decided_once_one_leads_beyond_a_tie(tmp_path):
    single = {16: 100.0, 32: 118.0, 64: 110.0}
    re_runs = {16: [100, 101, 100], 32: [117, 118, 119], 64: [108, 109]}  # 64 stays within 10 % of the leader
    confirmation, names = raced(tmp_path, single, re_runs, rounds=3)
    assert len(names) == 2 * 3 + 2, "after round 2 the leader's slowest run beats the other's fastest by over 3 %"
    winner = confirmation.winner.label
    assert winner == label_of(confirmation, 32)
    other = next(f for f in confirmation.finalists if f.label != winner)
    why = "the fastest by median of those proven"
    assert other.dropped == f"the race was decided for trial {winner} after round 2 ({why})"


def test_a_race_goes_on_while_a_close_second_could_still_win_it(tmp_path):
    single = {16: 100.0, 32: 108.0, 64: 107.0}
    re_runs = {16: [100, 101, 100], 32: [108, 109, 107], 64: [107, 108, 106]}  # within a tie of the leader
    confirmation, names = raced(tmp_path, single, re_runs, rounds=3)
    assert len(names) == 3 * 3, "neither leads the baseline by 10 % in every run: not decided"
    assert confirmation.winner is not None


def test_a_race_is_decided_after_round_2_once_every_finalist_left_clearly_beats_the_baseline(tmp_path):
    single = {16: 100.0, 32: 150.0, 64: 148.0}
    re_runs = {16: [100, 101, 100], 32: [150, 151, 149], 64: [147, 149, 148]}  # within a tie of each other
    confirmation, names = raced(tmp_path, single, re_runs, rounds=3)
    assert len(names) == 2 * 3 + 2, "a third round could not tell two finalists 1 % apart: the winner's alone"
    assert confirmation.winner is not None and confirmation.rounds == 3
    (tmp_path / "one").mkdir()
    single = {16: 100.0, 32: 113.0, 64: 112.0}
    _, names = raced(tmp_path / "one", single, {16: [100, 101, 100], 32: [112, 113, 112], 64: [111, 108, 112]})
    assert len(names) == 3 * 3, "one finalist's slowest run was not 10 % clear of the baseline's fastest"


def test_the_baseline_runs_at_a_different_place_in_each_round(tmp_path):
    confirmation, names = raced(tmp_path, {16: 100.0, 32: 105.0}, {16: [100, 100, 100], 32: [105, 105, 105]})
    trial = f"trial-{label_of(confirmation, 32)}"
    orders = [("baseline", trial), (trial, "baseline"), ("baseline", trial)]
    assert names == [f"confirm-{index}-{who}" for index, order in enumerate(orders, 1) for who in order]
    assert confirmation.confirmed and confirmation.rounds == 3, "5 % in every round: proven, but not decisive"


def test_each_round_is_a_new_draw_of_the_process_layout(tmp_path):
    confirmation, names = raced(tmp_path, {16: 100.0, 32: 105.0}, {16: [100, 100], 32: [105, 105]}, 2, draws=True)
    trial = f"trial-{label_of(confirmation, 32)}"
    assert names == ["new draw", "confirm-1-baseline", f"confirm-1-{trial}", "new draw", f"confirm-2-{trial}",
                     "confirm-2-baseline"]  # fmt: skip


def test_a_finalist_that_loses_a_round_to_the_baseline_leaves_the_race(tmp_path):
    confirmation, names = raced(tmp_path, {16: 100.0, 32: 120.0}, {16: [100, 115], 32: [118, 112]})
    assert not confirmation.confirmed and len(names) == 4
    assert confirmation.finalists[0].dropped == "slower than the baseline in round 2"


def test_in_a_longer_race_a_finalist_leaves_only_once_it_has_lost_more_rounds_than_a_proof_allows(tmp_path):
    baseline, trial = [100, 115, 100, 100, 100, 100], [108, 112, 107, 109, 108, 108]
    confirmation, names = raced(tmp_path, {16: 100.0, 32: 108.0}, {16: baseline, 32: trial}, rounds=6)
    assert len(names) == 12 and confirmation.confirmed, "5 wins of 6 pass; 8 % is not decisive, so all 6 rounds"
    (tmp_path / "two").mkdir()
    trial[3] = 99
    confirmation, names = raced(tmp_path / "two", {16: 100.0, 32: 108.0}, {16: baseline, 32: trial}, rounds=6)
    assert len(names) == 8 and not confirmation.confirmed
    assert confirmation.finalists[0].dropped == (
        "slower than the baseline in round 4 (2 rounds lost; a proof over 6 rounds allows 1)"
    )


def test_a_failing_finalist_is_dropped_with_its_reason_and_the_race_goes_on(tmp_path):
    single = {16: 100.0, 32: 130.0, 99: 125.0}
    confirmation, _ = raced(tmp_path, single, {16: [100, 100, 100], 32: [130, 131, 129]})
    failed = next(f for f in confirmation.finalists if f.knobs["batch_size"] == 99)
    assert failed.dropped == "round 1 failed: out_of_memory: out of memory" and failed.failed_round == 1
    assert confirmation.winner.knobs["batch_size"] == 32


def test_a_pruned_trial_is_recorded_as_pruned_and_is_not_a_failure(tmp_path):
    study = open_study(settings(tmp_path, prune_margin=0.25), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    reports = []

    def slow_then_pruned(knobs, name, on_progress):
        reports.append(on_progress(10, 10.0))  # 10 samples/s, far below the baseline's 100
        return TrialResult(knobs=knobs, failure=Failure(FailureKind.PRUNED, reports[-1]))

    reason = tune(study, SPACE, settings(tmp_path, n_trials=3, prune_margin=0.25), slow_then_pruned, print)
    assert not reason.aborted, "pruned trials are not a run of failures"
    assert reports[0].startswith("10.0 samples/s after warm-up, more than 25% below the best so far (100.0)")
    pruned = [t for t in study.get_trials(states=(TrialState.PRUNED,)) if DUPLICATE_ATTR not in t.user_attrs]
    assert len(pruned) == 3 and counted_trials(study) == 3
    assert [r.result.failure.kind for r in load_results(study).trials] == [FailureKind.PRUNED] * 3


def test_no_pruning_when_disabled_or_close_to_the_best(tmp_path):
    study = open_study(settings(tmp_path, prune_margin=0.25), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    verdicts = []

    def measure(knobs, name, on_progress):
        verdicts.append(on_progress(10, 90.0))  # within 25 % of the baseline's 100
        return fake_result(knobs)

    tune(study, SPACE, settings(tmp_path, n_trials=1, prune_margin=0.25), measure, print)
    assert verdicts == [None]
    unpruned = open_study(settings(tmp_path, prune_margin=None), META)
    seen = []
    tune(unpruned, SPACE, settings(tmp_path, n_trials=2, prune_margin=None), lambda k, n, p: seen.append(p) or
         fake_result(k), print)  # fmt: skip
    assert seen == [None], "no progress callback without pruning"


@pytest.mark.parametrize(
    "verdict",
    [
        Failure(FailureKind.OUT_OF_MEMORY, "used 306 MiB, over study.memory_budget_mb=300; stopped"),
        Failure(FailureKind.INCORRECT, "the loss is not finite"),
    ],
)
def test_configurations_over_the_budget_or_incorrect_are_verdicts_not_a_broken_study(tmp_path, verdict):
    study = open_study(settings(tmp_path), META)

    def never_fits(knobs, name, on_progress):
        return TrialResult(knobs=knobs, failure=verdict)

    reason = tune(study, SPACE, settings(tmp_path, n_trials=5, max_consecutive_failures=2), never_fits, print)
    assert not reason.aborted and counted_trials(study) > 2, "more of them in a row than max_consecutive_failures"


def test_over_the_memory_budget_is_infeasible_through_optuna_constraints(tmp_path):
    study = open_study(settings(tmp_path, memory_budget_mb=150), META)
    ensure_baseline(study, BASELINE, FakeMeasure())

    def heavy_when_big(knobs, name, on_progress):
        peak = 200.0 if knobs["batch_size"] == 32 else 100.0
        return TrialResult(knobs=knobs, measurement=fake_measurement(100.0, peak_mb=peak))

    tune(study, SPACE, settings(tmp_path, n_trials=5, memory_budget_mb=150), heavy_when_big, print)
    for trial in study.get_trials(states=(TrialState.COMPLETE,)):
        if DUPLICATE_ATTR in trial.user_attrs:
            continue
        over = trial.constraints["memory_over_budget_mb"] > 0
        assert over == (trial.params.get("batch_size") == 32)
    infeasible = [r.result for r in load_results(study).trials if r.result.knobs["batch_size"] == 32]
    assert infeasible
    for result in infeasible:
        assert result.failure.kind is FailureKind.OUT_OF_MEMORY and result.measurement is not None
        assert "over study.memory_budget_mb=150" in result.failure.message


def test_multi_objective_studies_tell_throughput_and_peak_memory(tmp_path):
    objectives = ("throughput", "peak_memory")
    study = open_study(settings(tmp_path, objectives=objectives), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    tune(study, SPACE, settings(tmp_path, n_trials=3, objectives=objectives), FakeMeasure(), print)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert complete and all(len(t.values) == 2 for t in complete)
    assert study.directions[1].name == "MINIMIZE"


@pytest.mark.slow
def test_each_trial_shows_its_knobs_as_params_and_its_figures_as_attributes(tmp_path):
    """What optuna-dashboard shows of a study: the varied knobs, and flat figures beside the full result."""
    study = open_study(settings(tmp_path, n_trials=10), META)
    tune(study, SPACE, settings(tmp_path, n_trials=10), FakeMeasure(), lambda event: None)
    for trial in study.get_trials(deepcopy=False):
        assert set(trial.params) <= set(SPACE.varied) and "batch_size" in trial.params
        if DUPLICATE_ATTR in trial.user_attrs:  # the label of the trial that measured it
            continue
        if trial.state is TrialState.COMPLETE:
            assert trial.user_attrs["throughput_sps"] == trial.values[0] and trial.user_attrs["peak_memory_mb"] > 0
            assert 0 <= trial.user_attrs["data_wait_share"] <= 1 and "failure" not in trial.user_attrs
        else:
            assert "RuntimeError: boom" in trial.user_attrs["failure"] and "throughput_sps" not in trial.user_attrs


def test_a_converged_search_counts_the_configurations_measured_not_those_ruled_out_unmeasured(tmp_path):
    # Batch 32 without workers runs out of memory, which rules out batch 32 with a worker unmeasured: neither
    # measured a throughput, so only the baseline corrected the probe's predictions.
    def measure(knobs, name, on_progress=None):
        if knobs["batch_size"] == 32:
            return TrialResult(knobs, failure=Failure(FailureKind.OUT_OF_MEMORY, "OutOfMemoryError: out of memory"))
        return fake_result(knobs)

    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, measure)
    for workers in (0, 1):
        study.enqueue_trial({"batch_size": 32, "num_workers": workers})
    reason = tune(study, SPACE, settings(tmp_path, n_trials=10), measure, print, lambda *seen: None)
    assert reason.message == (
        "converged: with the probe's predictions corrected by the 1 configuration measured (the baseline included), "
        "none of the others is predicted faster than the best"
    )
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.PRUNED], "out of memory, ruled out"
