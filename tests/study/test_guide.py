"""The guide: the probe's predictions corrected by measured trials choose each next trial, and end the search."""

from __future__ import annotations

from dataclasses import replace

import pytest
from optuna.trial import TrialState

from autotune.knobs import KNOBS
from autotune.records import BASELINE_LABEL, PREDICTED_ATTR, ProbeRecord, config_key
from autotune.results.model import load_results
from autotune.study.guide import Guide, guide_from_record
from autotune.study.probe_model import ProbeModel, probe_plan
from autotune.study.search_state import Observation, Proposal
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.trial_outcome import Outcome
from autotune.study.tuner import _next_in_words, ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, ProbeFailure, ProbeResult, TrialResult
from tests.conftest import fake_measurement
from tests.study.test_probe_model import (
    BASELINE,
    FIXED,
    SPACE,
    VARIED,
    compute_rate,
    loader_raised,
    loader_rate,
    scaled,
    swinging,
    with_anchor_timings,
)
from tests.study.test_tuner import META, left_measuring, settings

WORKERS_BEST = {**BASELINE, "batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}


def guide(space=SPACE, loader_scale=1.0, compute_scale=1.0) -> Guide:
    plan = probe_plan(space, BASELINE)
    result = ProbeResult(
        [loader_scale * loader_rate(s) for s in plan.loaders], [compute_scale * compute_rate(k) for k in plan.computes]
    )
    return Guide(ProbeModel(plan, result), space, BASELINE)


def observed(g: Guide, knobs, ratio=1.0, feasible=True) -> Observation:
    """``knobs`` measured at ``ratio`` times the probe's prediction."""
    return Observation(knobs, ratio * g.probe_model.predict(knobs), feasible)


def propose(g: Guide, *observations: Observation) -> tuple[dict, float | None] | None:
    """The guide's proposal as (knobs, predicted samples/s), or None once it has converged."""
    proposal = g.propose(list(observations), {config_key(o.knobs) for o in observations}, [])
    return None if proposal is None else (proposal.knobs, proposal.predicted)


def test_the_first_proposal_is_the_configuration_predicted_fastest():
    g = guide()
    knobs, predicted = propose(g, observed(g, BASELINE))
    assert knobs == WORKERS_BEST, "batch 32 with workers: loading 300 and compute 300 samples/s"
    assert predicted == pytest.approx(300.0)


def test_predictions_are_corrected_by_the_measured_trials_of_their_group():
    g = guide()
    # Workers measured at a fifth of their prediction (say, the batch hand-off costs more than the probe saw):
    # every configuration with 2 workers is now predicted below the baseline, so the search turns to 0 workers.
    knobs, predicted = propose(g, observed(g, BASELINE), observed(g, WORKERS_BEST, ratio=0.2))
    assert knobs["num_workers"] == 0 and knobs["batch_size"] == 32
    assert predicted == pytest.approx(1 / (1 / 100 + 1 / 300)), "0 workers keep the baseline's ratio of 1"


def test_the_search_stops_when_nothing_left_is_predicted_faster_than_the_best_and_its_batch_neighbours_lost():
    g = guide()
    best = observed(g, WORKERS_BEST, ratio=1.1)
    neighbour, _ = propose(g, observed(g, BASELINE), best)
    assert neighbour == {**WORKERS_BEST, "batch_size": 16}, "the next smaller batch size is measured first"
    assert propose(g, observed(g, BASELINE), best, observed(g, neighbour)) is None


def test_a_batch_neighbour_that_wins_moves_the_check_along():
    space = SearchSpace({name: {**VARIED, "batch_size": [16, 32, 64]}.get(name, [FIXED[name]]) for name in KNOBS})
    g = guide(space)
    middle = {**WORKERS_BEST, "batch_size": 32}
    observations = [observed(g, BASELINE), observed(g, middle, ratio=2.0)]
    seen = set()
    while (proposal := g.propose(observations, {config_key(o.knobs) for o in observations}, [])) is not None:
        knobs = proposal.knobs
        seen.add(knobs["batch_size"])
        faster = knobs["batch_size"] == 64 and knobs["num_workers"] == 2 and knobs["amp"] == "off"
        observations.append(Observation(knobs, 1000.0 if faster else 1.0))
    assert {16, 64} <= seen


@pytest.mark.parametrize(("rival_share", "checked"), [(0.9, True), (0.8, False)])
def test_the_fastest_of_another_worker_count_within_a_runs_noise_of_the_best_has_its_batch_neighbours_checked(
    rival_share, checked
):
    """Without workers the best reads far above its prediction; with workers the fastest run came within 15 % of
    it (or not), which corrects every prediction with workers below the best: only the check measures batch 64."""
    space = SearchSpace({name: {**VARIED, "batch_size": [16, 32, 64]}.get(name, [FIXED[name]]) for name in KNOBS})
    g = guide(space)
    best = observed(g, {**BASELINE, "batch_size": 32, "num_threads": 1}, ratio=4.0)
    rival = Observation(WORKERS_BEST, rival_share * best.throughput)
    observations, seen = [observed(g, BASELINE), best, rival], []
    while (proposal := g.propose(observations, {config_key(o.knobs) for o in observations}, [])) is not None:
        seen.append(proposal.knobs)
        observations.append(Observation(proposal.knobs, 1.0))
    assert ({**WORKERS_BEST, "batch_size": 64} in seen) is checked


def test_a_batch_size_whose_model_step_raised_in_the_probe_is_never_proposed():
    # A forward that rejects batches over 64: every model step setting at batch 128 raised in the probe, so a trial
    # there would fail the same way. Batch 128 was proposed as the best's batch neighbour all the same.
    space = SearchSpace({name: {**VARIED, "batch_size": [16, 32, 128]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    too_big = [i for i, k in enumerate(plan.computes) if k["batch_size"] == 128]
    error = "RuntimeError: batch 128 too big for my custom kernel"
    result = ProbeResult(
        [loader_rate(s) for s in plan.loaders],
        [None if i in too_big else compute_rate(k) for i, k in enumerate(plan.computes)],
        failed=[ProbeFailure("compute", i, error) for i in too_big],
    )
    g = Guide(ProbeModel(plan, result), space, BASELINE)
    observations = [observed(g, BASELINE), observed(g, WORKERS_BEST, ratio=2.0)]  # the best, at batch 32
    proposed = []
    while (proposal := g.propose(observations, {config_key(o.knobs) for o in observations}, [])) is not None:
        proposed.append(proposal.knobs)
        observations.append(Observation(proposal.knobs, 1.0))
    assert {**WORKERS_BEST, "batch_size": 16} in proposed, "the smaller neighbour is still checked"
    assert all(knobs["batch_size"] != 128 for knobs in proposed)


def test_a_loader_setting_that_raised_in_the_probe_is_never_proposed():
    # A stream that splits itself across workers: with 2 workers each holds too few samples for a batch of 128, so
    # the probe's DataLoader at (128, 2 workers) raised. Batch 128 with 2 workers was proposed as the best's batch
    # neighbour all the same, to fail the same way; without workers it loads, and is still checked.
    space = SearchSpace({name: {**VARIED, "batch_size": [16, 32, 128]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    g = Guide(ProbeModel(plan, loader_raised(plan, {"batch_size": 128, "num_workers": 2})), space, BASELINE)
    best = observed(g, WORKERS_BEST, ratio=2.0)
    observations = [observed(g, BASELINE), best, Observation({**BASELINE, "batch_size": 32}, 1.0)]
    proposed = []
    while (proposal := g.propose(observations, {config_key(o.knobs) for o in observations}, [])) is not None:
        proposed.append(proposal.knobs)
        observations.append(Observation(proposal.knobs, 1.0))
    assert {**WORKERS_BEST, "batch_size": 16} in proposed, "the smaller neighbour is still checked"
    assert not any(k["batch_size"] == 128 and k["num_workers"] == 2 for k in proposed)


def test_the_best_to_beat_must_be_feasible():
    g = guide()
    over_budget = observed(g, WORKERS_BEST, ratio=2.0, feasible=False)
    knobs, _ = propose(g, observed(g, BASELINE), over_budget)
    assert knobs["num_workers"] == 2, "an infeasible trial is not the best to beat, though its speed is real"
    knobs, _ = propose(g, observed(g, BASELINE, feasible=False))
    assert knobs == WORKERS_BEST, "with nothing feasible yet, the search goes on"


COMPILE_SPACE = SearchSpace(
    {name: {**VARIED, "compile": ["off", "default"]}.get(name, [FIXED[name]]) for name in KNOBS}
)


def test_compile_is_tried_on_the_best_configuration_where_the_model_step_limits_it():
    g = guide(COMPILE_SPACE, loader_scale=10.0)  # loading is fast: the model step limits every configuration
    first, _ = propose(g, observed(g, BASELINE))
    assert first["compile"] == "off", "compile is not predicted before it is measured"
    best = observed(g, first)
    neighbour = observed(g, {**first, "batch_size": 16})
    twin, predicted = propose(g, observed(g, BASELINE), best, neighbour)
    assert twin == {**first, "compile": "default"} and predicted is None
    slower = Observation(twin, best.throughput / 2)
    assert propose(g, observed(g, BASELINE), best, neighbour, slower) is None, "compiled ones now predict half"


def compute_bound_guide(one_thread: float) -> Guide:
    """COMPILE_SPACE with fast loading, and one compute thread ``one_thread`` times as fast as two."""
    plan = probe_plan(COMPILE_SPACE, BASELINE)
    computes = [
        compute_rate({**k, "num_threads": 2}) * (one_thread if k["num_threads"] == 1 else 1) for k in plan.computes
    ]
    probe_model = ProbeModel(plan, ProbeResult([10 * loader_rate(s) for s in plan.loaders], computes))
    return Guide(probe_model, COMPILE_SPACE, BASELINE)


@pytest.mark.parametrize(("one_thread", "tried"), [(0.96, False), (1.08, True)])
def test_a_compiled_configuration_must_be_predicted_to_beat_the_best_not_only_come_near_it(one_thread, tried):
    g = compute_bound_guide(one_thread)
    first = WORKERS_BEST
    best = observed(g, first)
    plain_one_thread = observed(g, {**first, "num_threads": 1})
    twin = Observation({**first, "compile": "default"}, 1.3 * best.throughput)  # compile won: the new best
    done = [observed(g, BASELINE), best, observed(g, {**first, "batch_size": 16}), plain_one_thread, twin]
    compiled_one_thread = {**first, "num_threads": 1, "compile": "default"}  # predicted at one_thread x the twin
    expected = (compiled_one_thread, pytest.approx(one_thread * twin.throughput)) if tried else None
    assert propose(g, *done) == expected, "a compiled trial must be predicted 5 % faster than the best"


def test_a_compile_that_lost_on_the_best_is_not_tried_elsewhere_on_the_probes_word():
    g = guide(COMPILE_SPACE, loader_scale=10.0)  # compute-bound: the probe predicts batch 32 at 1.5x batch 16
    batch_16 = {**WORKERS_BEST, "batch_size": 16}
    best = observed(g, batch_16, ratio=2.0)  # batch 16 measured at twice its prediction: the best, over batch 32
    plain_32 = observed(g, WORKERS_BEST)
    lost = Observation({**batch_16, "compile": "default"}, 0.9 * best.throughput)  # compile lost by 10 %
    observations, proposals = [observed(g, BASELINE), best, plain_32, lost], []
    while (proposal := propose(g, *observations)) is not None:
        proposals.append(proposal[0])
        observations.append(observed(g, proposal[0], ratio=0.5))
    # Batch 32 compiled is expected at 0.9 x what batch 32 measured (270), not at the compiled group's ratio to the
    # probe (1.8) x the probe's batch-32 prediction (540), which would beat the best (400)
    assert proposals and all(knobs["compile"] == "off" for knobs in proposals)


def converge(g: Guide) -> list[dict]:
    """Every proposal until the guide stops, each configuration measured at its prediction (compiled: half)."""
    observations, proposals = [observed(g, BASELINE)], []
    while (proposal := propose(g, *observations)) is not None:
        knobs = proposal[0]
        proposals.append(knobs)
        observations.append(observed(g, knobs, ratio=0.5 if knobs["compile"] != "off" else 1.0))
    return proposals


def test_compile_is_not_tried_where_loading_data_limits_the_best_configuration():
    g = guide(COMPILE_SPACE, compute_scale=10.0)  # the model step is fast: loading limits
    proposals = converge(g)
    assert proposals and all(knobs["compile"] == "off" for knobs in proposals)
    assert converge(guide(COMPILE_SPACE, loader_scale=10.0))[-1]["compile"] == "default", "but where compute limits"


def test_configurations_predicted_within_noise_of_the_best_are_measured_too():
    g = guide()
    batch_32 = {**BASELINE, "batch_size": 32}  # no workers: predicted 75 at the baseline's ratio of 1
    assert propose(g, observed(g, BASELINE), Observation(WORKERS_BEST, 78.0)) == (batch_32, pytest.approx(75.0))
    knobs, _ = propose(g, observed(g, BASELINE), Observation(WORKERS_BEST, 80.0))
    assert knobs["num_workers"] == 2, "75 is over 5 % below 80: only the best's batch neighbour is left to check"


def test_a_cheap_untimed_knobs_first_twin_goes_before_configurations_predicted_within_noise_below_the_best():
    space = SearchSpace({name: {**VARIED, "malloc": ["default", "keep"]}.get(name, [FIXED[name]]) for name in KNOBS})
    g = guide(space)
    batch_32 = {**BASELINE, "batch_size": 32}
    best = Observation(WORKERS_BEST, 78.0)  # batch 32 without workers is predicted 75: within noise below it
    twin, predicted = propose(g, observed(g, BASELINE), best)
    assert twin == {**WORKERS_BEST, "malloc": "keep"} and predicted is None, "its effect: unknown until measured"
    kept = Observation(twin, 78.0 * 1.1)  # malloc=keep: 10 % faster, which now predicts every configuration
    knobs, predicted = propose(g, observed(g, BASELINE), best, kept)
    assert knobs == {**batch_32, "malloc": "keep"} and predicted == pytest.approx(75.0 * 1.1)
    assert propose(g, observed(g, BASELINE), best, Observation(twin, 70.0))[0] == batch_32, "no twin twice"


def test_compute_knob_values_the_probe_did_not_tell_apart_are_kept_at_the_anchors():
    space = SearchSpace({name: {**VARIED, "set_to_none": [True, False]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)

    def rate(knobs):
        return compute_rate(knobs) * (1.01 if knobs["set_to_none"] is False else 1.0)

    g = Guide(ProbeModel(plan, ProbeResult([loader_rate(x) for x in plan.loaders], [rate(k) for k in plan.computes])),
              space, BASELINE)  # fmt: skip
    assert not g.probe_model.told_apart("set_to_none", False) and g.probe_model.told_apart("amp", "bf16")
    assert g.candidates and all(knobs["set_to_none"] is True for knobs in g.candidates)
    assert BASELINE not in g.candidates and all(space.contains(knobs) for knobs in g.candidates)


@pytest.mark.parametrize("factor, twin", [(1.2, True), (0.8, False)])
def test_a_compute_value_the_probe_read_within_its_noise_is_measured_once_on_the_best(factor, twin):
    # set_to_none=False read 20 % faster (or slower) while the anchor's own timings swung 20 %: it could be noise, so
    # it enters no trial of its own; read faster, it is measured once on the best, after the best's batch neighbours.
    space = SearchSpace({name: {**VARIED, "set_to_none": [True, False]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    g = Guide(with_anchor_timings(plan, scaled(plan, "set_to_none", False, factor), *swinging(5, 1.1)), space, BASELINE)
    assert not g.probe_model.told_apart("set_to_none", False)
    assert g.candidates and all(knobs["set_to_none"] is True for knobs in g.candidates)
    best = observed(g, WORKERS_BEST, ratio=1.1)
    neighbour = observed(g, {**WORKERS_BEST, "batch_size": 16})
    proposal = propose(g, observed(g, BASELINE), best, neighbour)
    assert (proposal[0] if proposal else None) == ({**WORKERS_BEST, "set_to_none": False} if twin else None)
    if twin:
        measured = observed(g, {**WORKERS_BEST, "set_to_none": False})
        assert propose(g, observed(g, BASELINE), best, neighbour, measured) is None, "once"


def test_a_compute_value_the_probe_read_faster_within_its_noise_goes_before_configurations_predicted_within_noise():
    # Found on the example: channels_last read 1.04x within a noisy probe's noise; study.n_trials ran out on
    # configurations within noise below the best before the search converged, and channels_last (1.12x measured
    # there) was never tried.
    space = SearchSpace({name: {**VARIED, "set_to_none": [True, False]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    g = Guide(with_anchor_timings(plan, scaled(plan, "set_to_none", False, 1.2), *swinging(5, 1.1)), space, BASELINE)
    batch_32 = {**BASELINE, "batch_size": 32}
    best = Observation(WORKERS_BEST, 78.0)  # batch 32 without workers is predicted 75: within noise below it
    twin = {**WORKERS_BEST, "set_to_none": False}
    assert propose(g, observed(g, BASELINE), best)[0] == twin
    slower = Observation(twin, 70.0)
    assert propose(g, observed(g, BASELINE), best, slower)[0] == batch_32, "then those within noise; no twin twice"


@pytest.mark.parametrize("held", [{"num_workers": [2]}, {"compile": ["default"]}])
def test_a_knob_the_space_holds_at_one_value_other_than_the_probes_anchor_takes_it(held):
    space = SearchSpace({name: {**VARIED, **held}.get(name, [FIXED[name]]) for name in KNOBS})
    g = guide(space)
    assert g.candidates and all(space.contains(knobs) for knobs in g.candidates)
    proposal = g.propose([Observation(BASELINE, 60.0)], {config_key(BASELINE)}, [])
    assert proposal is not None and space.contains(proposal.knobs)


def test_no_guide_without_a_probe_result():
    assert guide_from_record(None, SPACE, BASELINE, None, "cpu") is None
    assert guide_from_record(ProbeRecord(1.0, failure="timeout"), SPACE, BASELINE, None, "cpu") is None


def test_the_tuner_measures_what_the_guide_proposes_and_stops_when_it_converges(tmp_path):
    g = guide()
    study = open_study(settings(tmp_path, n_trials=8, prune_margin=0.25), META)

    def measure(knobs, name, on_progress):
        # every configuration runs at its prediction, except workers, which are pruned at a tenth of theirs
        predicted = g.probe_model.predict(knobs)
        if knobs["num_workers"] > 0:
            reason = on_progress(20, predicted / 10)
            assert reason is not None
            return TrialResult(knobs=knobs, failure=Failure(FailureKind.PRUNED, reason))
        return TrialResult(knobs=knobs, measurement=fake_measurement(predicted))

    ensure_baseline(study, BASELINE, measure)
    seen = []

    def watching(observations, measured, ran_out):
        seen.append({config_key(o.knobs): o.throughput for o in observations})
        return g.propose(observations, measured, ran_out)

    reason = tune(study, SPACE, settings(tmp_path, n_trials=8, prune_margin=0.25), measure, print, watching)
    assert reason.message.startswith("converged") and not reason.aborted
    trials = load_results(study).trials
    assert trials[0].result.knobs == WORKERS_BEST and trials[0].predicted_sps == pytest.approx(300.0)
    assert seen[1][config_key(WORKERS_BEST)] == pytest.approx(30.0), "the pruned reading corrects predictions"
    assert [t.result.knobs["num_workers"] for t in trials[1:]] == [0] * (len(trials) - 1)
    assert len(trials) < 8, "stopped before the budget: nothing left was predicted faster"


def test_a_search_study_n_trials_stopped_before_it_converged_says_so_and_a_larger_one_goes_on(tmp_path):
    g = guide()

    def measure(knobs, name, on_progress):
        return TrialResult(knobs=knobs, measurement=fake_measurement(g.probe_model.predict(knobs)))

    study = open_study(settings(tmp_path, n_trials=1), META)
    ensure_baseline(study, BASELINE, measure)
    reason = tune(study, SPACE, settings(tmp_path, n_trials=1), measure, print, g.propose)
    assert reason.message == (
        "study.n_trials=1: 1 trial measured, before the guided search converged: next it would measure trial 0's "
        "configuration with batch_size=16 (predicted at 0.67x trial 0's 300.0 samples/s); a larger study.n_trials "
        "goes on from here"
    ), "what it would measure next, against the fastest so far: the user judges whether to go on"
    check = Proposal({**BASELINE, "malloc": "keep"})
    known = {config_key(BASELINE): Outcome(BASELINE_LABEL, TrialState.COMPLETE, [100.0])}
    assert _next_in_words(check, known) == (
        "the baseline's configuration with malloc=keep (a check: the probe does not time that change)"
    )
    reason = tune(study, SPACE, settings(tmp_path, n_trials=20), measure, print, g.propose)
    assert reason.message.startswith("converged") and len(load_results(study).trials) == 2, "its batch neighbour"


def test_on_resume_an_interrupted_trial_runs_before_the_guide_proposes_again(tmp_path):
    g = guide()
    study = open_study(settings(tmp_path, n_trials=8), META)

    def measure(knobs, name, on_progress):
        return TrialResult(knobs=knobs, measurement=fake_measurement(g.probe_model.predict(knobs)))

    ensure_baseline(study, BASELINE, measure)
    stale_knobs = {**BASELINE, "batch_size": 32}
    study.enqueue_trial({k: stale_knobs[k] for k in VARIED})
    stale = study.ask()
    assert left_measuring(stale, SPACE) == stale_knobs
    stale.set_user_attr(PREDICTED_ATTR, 123.0)  # as the tuner records the guide's prediction before measuring
    names = []
    resumed = open_study(settings(tmp_path, n_trials=8), META)
    tune(resumed, SPACE, settings(tmp_path, n_trials=8), lambda k, n, p: names.append(k) or measure(k, n, p), print,
         g.propose)  # fmt: skip
    assert names[0] == stale_knobs and names[1] == WORKERS_BEST
    trials = load_results(resumed).trials
    assert trials[0].predicted_sps == 123.0, "the re-run keeps the prediction the interrupted trial was made for"
    assert trials[1].predicted_sps == pytest.approx(300.0)


def test_a_baseline_with_torchs_default_threads_outside_the_space_still_guides_the_search():
    baseline = {**BASELINE, "num_threads": None}  # torch's default; the space searches 1 and 2 threads
    plan = probe_plan(SPACE, baseline)
    result = ProbeResult([loader_rate(s) for s in plan.loaders], [compute_rate(k) for k in plan.computes])
    g = Guide(ProbeModel(plan, result, cores=2), SPACE, baseline)
    assert g.probe_model.predict(baseline) == g.probe_model.predict({**baseline, "num_threads": 2}), "None: 1 per core"
    proposal = g.propose([Observation(baseline, 60.0)], {config_key(baseline)}, [])
    assert proposal is not None and proposal.predicted > 60.0


def test_no_trial_oversubscribes_the_cores_where_the_same_with_fewer_threads_can_be_measured():
    plan = probe_plan(SPACE, BASELINE)
    result = ProbeResult([loader_rate(s) for s in plan.loaders], [compute_rate(k) for k in plan.computes])
    g = Guide(ProbeModel(plan, result, cores=2), SPACE, BASELINE)
    with_workers = [k for k in g.candidates if k["num_workers"] == 2]
    assert with_workers and all(k["num_threads"] == 1 for k in with_workers), "2 workers leave 1 of 2 cores"
    assert any(k["num_threads"] == 2 for k in g.candidates if k["num_workers"] == 0), "without workers: both"
    unknown_cores = Guide(ProbeModel(plan, result), SPACE, BASELINE)
    assert {k["num_threads"] for k in unknown_cores.candidates if k["num_workers"] == 2} == {1, 2}
    two_threads_only = SearchSpace({name: {**VARIED, "num_threads": [2]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(two_threads_only, BASELINE)
    result = ProbeResult([loader_rate(s) for s in plan.loaders], [compute_rate(k) for k in plan.computes])
    only_two = Guide(ProbeModel(plan, result, cores=2), two_threads_only, BASELINE)
    assert any(k["num_workers"] == 2 for k in only_two.candidates), "no fewer threads to try instead: kept"


def test_threads_the_probe_did_not_tell_apart_still_leave_workers_their_cores():
    # A model step alike at 1 and 2 threads holds num_threads at the anchor's 2; with workers, it takes the one
    # thread they leave free (which costs nothing), where every configuration with workers was dropped for it.
    plan = probe_plan(SPACE, BASELINE)
    loading = [50.0 if s["num_workers"] == 0 else 800.0 for s in plan.loaders]
    result = ProbeResult(loading, [2000.0] * len(plan.computes))
    g = Guide(ProbeModel(plan, result, cores=2), SPACE, BASELINE)
    assert not g.probe_model.told_apart("num_threads", 1)
    with_workers = [k for k in g.candidates if k["num_workers"] == 2]
    assert with_workers and all(k["num_threads"] == 1 for k in with_workers)
    assert all(k["num_threads"] == 2 for k in g.candidates if k["num_workers"] == 0), "held where nothing competes"
    knobs, _ = propose(g, Observation(BASELINE, 50.0))
    assert knobs["num_workers"] == 2, "workers load 16x faster: the first trial"


def test_a_space_held_at_compile_on_is_searched_by_the_probe_as_timed_then_by_its_trials():
    # Every configuration compiles: none has an uncompiled form to measure a compile factor against, so the probe's
    # timings (without compile) stand for them; the search converged at once instead, though workers load 20x.
    held = SearchSpace({name: {**VARIED, "compile": ["default"]}.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(held, BASELINE)
    result = ProbeResult([20.0 if s["num_workers"] == 0 else 400.0 for s in plan.loaders], [300.0] * len(plan.computes))
    g = Guide(ProbeModel(plan, result), held, BASELINE)
    knobs, predicted = propose(g, Observation(BASELINE, 20.0))
    assert knobs["compile"] == "default" and knobs["num_workers"] == 2 and predicted == pytest.approx(300.0)
    slower = Observation(knobs, 150.0)  # measured at half its prediction: the compiled group is corrected by it
    proposal = g.propose([Observation(BASELINE, 20.0), slower], {config_key(BASELINE), config_key(knobs)}, [])
    assert proposal is None, "every compiled configuration now predicted at half the probe: none beats it"


def test_without_a_predictable_measurement_the_probe_is_taken_as_it_is():
    g = guide()
    unpredictable = Observation({**BASELINE, "batch_size": 8}, 50.0)  # a batch size the probe never timed
    knobs, predicted = propose(g, unpredictable)
    assert knobs == WORKERS_BEST and predicted == pytest.approx(300.0)


def test_while_nothing_measured_corrects_the_probe_its_best_prediction_is_measured_however_low():
    # search.batch_size=[32] with a baseline of 16: the probe times no setting of the baseline, so nothing measured
    # corrects it; a probe read on a busy machine predicts every configuration below the baseline's measurement.
    g = guide(loader_scale=0.1, compute_scale=0.1)
    baseline_outside = Observation({**BASELINE, "batch_size": 8}, 500.0)
    knobs, predicted = propose(g, baseline_outside)
    assert knobs == WORKERS_BEST and predicted == pytest.approx(30.0), "the best prediction, far below 500"
    measured = Observation(WORKERS_BEST, 600.0)  # 20x its prediction: the others of its group are corrected by it
    knobs, _ = propose(g, baseline_outside, measured)
    assert knobs == {**WORKERS_BEST, "batch_size": 16}, "the search goes on as usual: the best's batch neighbour"


@pytest.mark.parametrize(("waits", "workers"), [(True, 4), (False, 2)])
def test_workers_beyond_the_cores_are_proposed_only_where_the_probe_read_loading_waiting(waits, workers):
    # 2 cores; one worker loads 100 samples/s, each more adds as much (4 workers: 400/s, of which 2 cores hold
    # 200 where loading computes). The model step: 400 samples/s at 1 thread, 500 at 2.
    varied = {"batch_size": [16], "num_workers": [0, 2, 4], "num_threads": [1, 2]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    plan = probe_plan(space, BASELINE)
    rates = [100.0 * max(s["num_workers"], 1) for s in plan.loaders]
    # Waiting, a sample takes 1 ms of CPU; computing, a worker's whole time (10 ms a sample).
    cpu = [0.001 if waits else 0.01 for _ in plan.loaders]
    computes = [400.0 if k["num_threads"] == 1 else 500.0 for k in plan.computes]
    quiet = ProbeResult(rates, computes, loader_cpu=cpu, loader_others_cores=0.02)
    g = Guide(ProbeModel(plan, quiet, cores=2), space, BASELINE)
    knobs, predicted = propose(g, observed(g, BASELINE))
    assert knobs["num_workers"] == workers
    # Waiting, 4 workers hold 1 core (0.4 cores' worth, rounded up): one thread computes beside them, at 400/s
    assert predicted == pytest.approx(400.0 if waits else 1 / ((0.01 + 1 / 400) / 2))
    # Other processes busy while the loaders were timed: loading off a core may have waited for one, not for I/O.
    crowded = Guide(ProbeModel(plan, replace(quiet, loader_others_cores=0.8), cores=2), space, BASELINE)
    assert propose(crowded, observed(crowded, BASELINE))[0]["num_workers"] == 2
    # On a GPU the model step takes no core, and loading alone decides: 4 workers on 2 cores read faster than 2 by
    # their quarter-second timings count only where loading waits.
    on_gpu = Guide(ProbeModel(plan, quiet, device="cuda", host_cores=2), space, BASELINE)
    assert propose(on_gpu, observed(on_gpu, BASELINE))[0]["num_workers"] == workers


def test_threads_the_workers_leave_free_are_a_candidate_where_that_count_was_not_told_apart():
    # 4 cores, the baseline at torch's default (4 threads). The model step runs 2x slower at 1 thread and alike at 2
    # and 4, so 2 threads is no candidate of its own; a worker loads 500 samples/s. With 2 workers, 4 threads take the
    # 2 cores left free: that form was dropped for a "candidate of its own" that was none, and the search converged
    # at 500 with 2 workers and 1 thread, short of the 1000 that 2 workers and 2 threads give.
    varied = {"batch_size": [16], "num_workers": [0, 1, 2, 4], "num_threads": [1, 2, None]}
    space = SearchSpace({name: varied.get(name, [FIXED[name]]) for name in KNOBS})
    baseline = {**BASELINE, "num_threads": None}
    plan = probe_plan(space, baseline)
    loading = [500.0 * max(s["num_workers"], 1) for s in plan.loaders]
    result = ProbeResult(loading, [500.0 if k["num_threads"] == 1 else 1000.0 for k in plan.computes])
    g = Guide(ProbeModel(plan, result, cores=4), space, baseline)
    assert not g.probe_model.told_apart("num_threads", 2) and g.probe_model.told_apart("num_threads", 1)
    two_workers = {**baseline, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "num_threads": 2}
    assert two_workers in g.candidates
    assert len({config_key(k) for k in g.candidates}) == len(g.candidates), "each configuration once"
    observations = [observed(g, baseline)]
    while (proposal := g.propose(observations, {config_key(o.knobs) for o in observations}, [])) is not None:
        observations.append(observed(g, proposal.knobs))
    assert max(o.throughput for o in observations) == pytest.approx(1000.0)
