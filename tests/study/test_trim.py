"""Only the changes that matter: the race's winner against itself with each change undone, on fake measurements."""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import partial

import pytest

from autotune.knobs import KNOBS, undo
from autotune.measure.environment import this_machine_id
from autotune.records import TRIM_ATTR, on_machine
from autotune.report.headline import headline
from autotune.report.plots import undone_changes
from autotune.results.finalist import Finalist, run_name
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.results.trim_rules import alone, is_trim_of, trimmed_to
from autotune.study.run_race import race, run_race
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.trim import _announce, run_trim, trim_ahead, undo_next, variants
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement
from tests.study.test_disturbed import Runs, run_of
from tests.study.test_tuner import META, settings

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
# batch 64 and bf16 make the gain; set_to_none=False does nothing.
WINNER = {**BASELINE, "batch_size": 64, "amp": "bf16", "set_to_none": False}


class Pipeline:
    """Throughput from what each knob does, with a run-to-run wobble of +-2 % that alternates (``restart``: from its
    first phase)."""

    def __init__(self):
        self.names = []
        self.restart()

    def restart(self):
        self.wobble = itertools.cycle([1.02, 0.98, 1.0])

    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        value = 100.0 * (1.6 if knobs["batch_size"] == 64 else 1.0) * (1.25 if knobs["amp"] == "bf16" else 1.0)
        return TrialResult(knobs=dict(knobs), measurement=fake_measurement(value * next(self.wobble)))


def space_to(winner: dict) -> SearchSpace:
    """A space of the baseline's value and ``winner``'s for each knob."""
    return SearchSpace({name: list(dict.fromkeys([BASELINE[name], winner[name]])) for name in KNOBS})


def tuned(tmp_path, winner=WINNER):
    """A study whose only trial is ``winner``, raced against the baseline."""
    study = open_study(settings(tmp_path), META)
    pipeline = Pipeline()
    ensure_baseline(study, BASELINE, pipeline)
    study.enqueue_trial(winner)
    tune(study, space_to(winner), settings(tmp_path, n_trials=1), pipeline, lambda e: None)
    confirmation = run_race(study, load_results(study), 3, pipeline, lambda name, result: None)
    pipeline.restart()  # the trim's runs read the wobble from its first phase, however many runs the race took
    return study, confirmation, pipeline


class Alike(Pipeline):
    """Batch 64, ``channels_last`` and bf16 each make a gain (1.6, 1.4, 1.4)."""

    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        gains = (knobs["batch_size"] == 64, knobs["channels_last"], knobs["amp"] == "bf16")
        value = 100.0 * (1.6 if gains[0] else 1.0) * (1.4 if gains[1] else 1.0) * (1.4 if gains[2] else 1.0)
        return TrialResult(knobs=dict(knobs), measurement=fake_measurement(value * next(self.wobble)))


def alike_finalists(tmp_path):
    """A study of two trials alike (batch 64 with ``channels_last``, batch 64 with bf16), and its pipeline."""
    layout, bf16 = {**BASELINE, "batch_size": 64, "channels_last": True}, {**BASELINE, "batch_size": 64, "amp": "bf16"}
    study, pipeline = open_study(settings(tmp_path), META), Alike()
    ensure_baseline(study, BASELINE, pipeline)
    for trial in (layout, bf16):
        study.enqueue_trial(trial)
    space = SearchSpace({name: list(dict.fromkeys([BASELINE[name], layout[name], bf16[name]])) for name in KNOBS})
    tune(study, space, settings(tmp_path, n_trials=2), pipeline, lambda e: None)
    return study, pipeline


def test_undoing_a_change_puts_back_the_baselines_value_and_what_follows_from_it():
    workers = {**BASELINE, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    assert undo(workers, BASELINE, "num_workers") == BASELINE, "no worker options without workers"
    assert undo(workers, BASELINE, "prefetch_factor")["prefetch_factor"] == 2, "PyTorch's default, with workers"
    assert undo(WINNER, BASELINE, "amp") == {**WINNER, "amp": "off"}
    own_workers = {**BASELINE, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    no_workers = {**own_workers, "num_workers": 0, "prefetch_factor": None, "persistent_workers": None, "amp": "bf16"}
    assert undo(no_workers, own_workers, "num_workers") == {**own_workers, "amp": "bf16"}, "the user's options back"


def test_each_change_gives_one_variant_and_a_default_that_was_never_changed_gives_none():
    workers = {**BASELINE, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "amp": "bf16"}
    found = variants(Finalist("7", workers, 3, 100.0), BASELINE, list(KNOBS), None, "cpu")
    assert list(found) == ["num_workers", "persistent_workers", "amp"]
    assert [f.changes for f in found.values()] == [1, 2, 2], "prefetch_factor at PyTorch's default is no change"


@pytest.mark.parametrize("planned", [2, 3])
def test_a_race_decided_early_gives_its_winner_the_rounds_planned_so_a_trim_race_every_variant_left_ends_there(
    tmp_path, planned
):
    """Two finalists alike (1.6 x 1.4), decided after two rounds; undoing any change of the winner costs over 25 %, so
    every variant leaves its trim race after one round. Planned for three, the winner and the baseline run the
    third round of the race (the other finalist leaves): the gain is not stated from two, and the trim race ends
    after its first round, whose round of the winner and the baseline the gain counts too."""

    study, pipeline = alike_finalists(tmp_path)
    confirmation = run_race(study, load_results(study), planned, pipeline, lambda name, result: None)
    assert confirmation.rounds == planned and confirmation.winner is not None
    (other,) = [f for f in confirmation.finalists if f is not confirmation.winner]
    assert len(other.throughputs) == 2, "decided after round 2, it left the race"
    draws = []
    (trim,) = run_trim(study, load_results(study), confirmation, pipeline, print, new_draw=lambda: draws.append(1))
    assert trim.winner.label == confirmation.winner.label
    assert all(len(variant.throughputs) == 1 for variant in trim.finalists[1:])
    assert len(draws) == trim.rounds == 1, "each round a new draw of the process layout, as the race's"
    summary = summarise(load_results(study))
    assert summary.gain_interval is not None and summary.gain_interval.n == planned + 1
    assert summary.proof == confirmation


@pytest.mark.parametrize("planned", [3, 4])
def test_a_race_decided_early_whose_winner_the_trim_races_ends_there_and_the_trims_first_race_runs_its_rounds_out(
    tmp_path, planned
):
    """As above, but the race is told the trim will race its winner (``trim_ahead``): it ends after round 2 and the
    trim's first race, every variant gone after round 1, runs the winner and the baseline to the rounds planned;
    the gain's interval is that race's (the finalists' race's two rounds chose the winner: they would lift it), and
    no round of the winner is measured for nothing."""

    study, pipeline = alike_finalists(tmp_path)
    results = load_results(study)
    trimmed = partial(trim_ahead, results, rounds=planned)
    confirmation = run_race(study, results, planned, pipeline, lambda name, result: None, trim_ahead=trimmed)
    assert confirmation.rounds == 2 and confirmation.ended_early and confirmation.winner is not None
    assert "the trim's races re-measure its winner against the baseline" in confirmation.describe()
    pipeline.names.clear()
    (trim,) = run_trim(study, load_results(study), confirmation, pipeline, print)
    assert trim.rounds == planned and trim.decided_after == 1 and trim.winner.label == confirmation.winner.label
    assert all(len(variant.throughputs) == 1 for variant in trim.finalists[1:])
    assert len(pipeline.names) == 1 + len(trim.finalists) + 2 * (planned - 1), "rounds 2 on: the winner, the baseline"
    assert "After round 1 every variant had left it" in trim.describe(trim=True)
    summary = summarise(load_results(study))
    assert summary.proof == trim and summary.gain_interval is not None and summary.gain_interval.n == planned


def test_the_trim_races_a_winner_of_two_changes_or_more_one_of_which_can_be_undone_where_its_first_race_fits(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    results, winner = load_results(study), confirmation.winner
    assert trim_ahead(results, winner, 3) and not trim_ahead(results, winner, 3, fits=lambda configurations: False)
    seen = []
    trim_ahead(results, winner, 3, fits=lambda configurations: seen.append(configurations) or True)
    assert seen == [
        [BASELINE, WINNER, *(v.knobs for v in variants(winner, BASELINE, list(KNOBS), None, "cpu").values())]
    ]
    one_change = replace(winner, knobs={**BASELINE, "amp": "bf16"}, changes=1)
    assert not trim_ahead(results, one_change, 3)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert not trim_ahead(load_results(study), winner, 3), "its stored first race is reused as it ran, not raced anew"
    assert trim_ahead(load_results(study), winner, 5), "one planned for other rounds is raced anew"


def test_a_trim_race_whose_origin_is_left_alone_unproven_races_on_and_runs_the_rounds_out_once_proven():
    """Every variant leaves after round 1, where the configuration the race started from (one round before it, as
    a finalists' race ended at its verdict leaves it) beat the baseline by 1 %, short of a proof: the race goes on,
    proves it in round 2, and runs it and the baseline to the rounds planned."""
    reference = Finalist("1", {**BASELINE, "batch_size": 64}, 2, 100.0)
    variant = Finalist("1 without amp", {**BASELINE, "batch_size": 64, "amp": "off"}, 1, None)
    runs = Runs(
        {
            **{f"trim-1-{i}-baseline": run_of(100.0) for i in (1, 2, 3)},
            "trim-1-1-trial-1": run_of(101.0),
            "trim-1-1-trial-1-without-amp": run_of(60.0),  # over 15 % behind the reference: it leaves
            **{f"trim-1-{i}-trial-1": run_of(130.0) for i in (2, 3)},
        }
    )
    trim = race([reference, variant], BASELINE, {}, 3, "trim-1", runs, print, alone, reference, runs_out=lambda f: True)
    assert trim.rounds == 3 and trim.decided_after == 2 and trim.winner is reference
    assert len(runs.names) == 3 + 2 + 2


def test_no_variant_is_the_baselines_own_configuration_which_races_as_the_baseline():
    workers = {**BASELINE, "num_workers": 2, "persistent_workers": True}
    found = variants(Finalist("7", workers, 2, 100.0), BASELINE, list(KNOBS), None, "cpu")
    assert [f.label for f in found.values()] == ["7 without persistent_workers"]


def test_a_change_that_does_nothing_is_left_out_and_the_figures_are_the_trimmed_configurations(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    label = confirmation.winner.label
    trims = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert trims[0].winner.label == f"{label} without set_to_none"
    assert len(trims) == 1, "undoing batch_size or amp lost clearly: not tried again"

    summary = summarise(load_results(study))
    assert summary.recommended.result.knobs == {**WINNER, "set_to_none": True}
    assert summary.no_difference == {"set_to_none": False}
    assert summary.proof == trims[0]
    assert summary.speedup > 1.9 and summary.changed_knobs() == {"batch_size": (16, 64), "amp": ("off", "bf16")}
    assert summary.recommended in summary.ranked
    assert any(name.startswith("trim-1-1-trial-") and name.endswith("without-set_to_none") for name in pipeline.names)


def test_a_stored_trim_is_reused_and_a_winner_whose_changes_all_matter_is_kept(tmp_path):
    winner = {**WINNER, "set_to_none": True}
    study, confirmation, pipeline = tuned(tmp_path, winner)
    trims = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert len(trims) == 1 and trims[0].winner.label == confirmation.winner.label
    assert summarise(load_results(study)).no_difference == {}
    runs = len(pipeline.names)
    assert run_trim(study, load_results(study), confirmation, pipeline, print) == trims
    assert len(pipeline.names) == runs and on_machine(TRIM_ATTR, this_machine_id()) in study.user_attrs


def test_a_trim_race_a_failed_baseline_run_ended_keeps_the_winner_and_is_run_again_by_a_later_run(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)

    def baseline_fails(knobs, name, on_progress=None):
        if name.endswith("-baseline"):
            return TrialResult(knobs=dict(knobs), failure=Failure(FailureKind.SIGNAL, "killed by SIGKILL"))
        return pipeline(knobs, name, on_progress)

    (failed,) = run_trim(study, load_results(study), confirmation, baseline_fails, lambda name, result: None)
    assert failed.failure and failed.winner is None
    kept = f"trial {confirmation.winner.label}, with every change,"
    assert failed.describe(trim=True).endswith(f"so {kept} is kept.")
    assert summarise(load_results(study)).recommended.label == confirmation.winner.label
    assert summarise(load_results(study)).untrimmed, "said: some of its changes may do nothing"

    runs = len(pipeline.names)
    (again,) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert len(pipeline.names) > runs and not again.failure, "raced anew, not reused"
    assert summarise(load_results(study)).no_difference == {"set_to_none": False}
    assert not summarise(load_results(study)).untrimmed


def test_a_trim_race_whose_winners_own_first_run_failed_keeps_every_change_says_so_and_is_raced_again_later(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    own_run = run_name("trim-1-1", confirmation.winner.label)  # its run in round 1 of the first race

    def own_run_fails(knobs, name, on_progress=None):
        if name == own_run:
            return TrialResult(knobs=dict(knobs), failure=Failure(FailureKind.TIMEOUT, "no result after 60 s"))
        return pipeline(knobs, name, on_progress)

    run_trim(study, load_results(study), confirmation, own_run_fails, lambda name, result: None)
    summary = summarise(load_results(study))
    assert summary.recommended.label == confirmation.winner.label and summary.no_difference == {}
    assert summary.untrimmed, "its changes were not tested: said"
    assert "Running the study again goes on with it" in headline(summary).rest
    assert undone_changes(summary) is None, "no picture: no ratio to the winner's own runs (it drew none)"
    runs = len(pipeline.names)
    (again,) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert len(pipeline.names) > runs and again.finalists[0].dropped is None, "a later run races it again"
    summary = summarise(load_results(study))
    assert not summary.untrimmed and summary.no_difference == {"set_to_none": False}


def test_a_new_winner_stands_untrimmed_until_its_own_trim_ran(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    study.enqueue_trial({**WINNER, "set_to_none": True})  # as fast, one change fewer: the next race's winner
    tune(study, space_to(WINNER), settings(tmp_path, n_trials=2), pipeline, lambda e: None)
    new = run_race(study, load_results(study), 3, pipeline, lambda name, result: None)
    assert new.winner.label != confirmation.winner.label
    summary = summarise(load_results(study))
    assert summary.trim == [] and summary.untrimmed, "the stored trim is the older winner's"


def test_a_winner_with_one_change_is_not_trimmed(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path, {**BASELINE, "batch_size": 64})
    assert run_trim(study, load_results(study), confirmation, pipeline, print) == []


def test_changes_that_all_do_nothing_are_undone_one_race_after_another(tmp_path):
    winner = {**WINNER, "set_to_none": False, "optimizer_impl": "foreach"}
    study, confirmation, pipeline = tuned(tmp_path, winner)
    trims = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert len(trims) == 2 and [f.label.count("without") for f in trims[1].finalists] == [1, 2]
    summary = summarise(load_results(study))
    assert summary.changed_knobs() == {"batch_size": (16, 64), "amp": ("off", "bf16")}
    assert summary.no_difference == {"set_to_none": False, "optimizer_impl": "foreach"}


def test_changes_that_each_did_nothing_are_undone_together_in_the_next_race(tmp_path):
    winner = {**WINNER, "set_to_none": False, "optimizer_impl": "foreach", "malloc": "keep"}
    study, confirmation, pipeline = tuned(tmp_path, winner)
    trims = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert len(trims) == 2, "one race undid one of the three, the next the other two at once"
    together = trims[1].finalists[-1]
    assert together.label.count("without") == 3 and trims[1].winner is together
    summary = summarise(load_results(study))
    assert summary.changed_knobs() == {"batch_size": (16, 64), "amp": ("off", "bf16")}
    assert summary.no_difference == {"set_to_none": False, "optimizer_impl": "foreach", "malloc": "keep"}


class SmallGains(Pipeline):
    """Batch 64 and bf16 make the gain; ``set_to_none=False``, ``optimizer_impl=foreach`` and ``malloc=keep`` each
    1.5 %, within TIE_TOLERANCE alone; no wobble."""

    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        small = (not knobs["set_to_none"], knobs["optimizer_impl"] == "foreach", knobs["malloc"] == "keep")
        value = 100.0 * (1.6 if knobs["batch_size"] == 64 else 1.0) * (1.25 if knobs["amp"] == "bf16" else 1.0)
        return TrialResult(knobs=dict(knobs), measurement=fake_measurement(value * 1.015 ** sum(small)))


def test_small_gains_undone_one_race_at_a_time_stop_before_they_add_up_to_a_gain_given_back(tmp_path):
    winner = {**WINNER, "set_to_none": False, "optimizer_impl": "foreach", "malloc": "keep"}
    study, pipeline = open_study(settings(tmp_path), META), SmallGains()
    ensure_baseline(study, BASELINE, pipeline)
    study.enqueue_trial(winner)
    tune(study, space_to(winner), settings(tmp_path, n_trials=1), pipeline, lambda e: None)
    confirmation = run_race(study, load_results(study), 3, pipeline, lambda name, result: None)
    trims = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert len(trims) == 2 and trimmed_to(trims[1]) is not None, "the second race's own verdict undoes one more"
    summary = summarise(load_results(study))
    assert len(summary.no_difference) == 1, "two would leave the trim 3 % behind the race's winner"
    assert summary.recommended.throughput == pytest.approx(confirmation.winner.median / 1.015)


def test_a_lucky_variant_does_not_push_the_others_out_of_a_trim_race():
    """Variants leave once TRIM_MARGIN behind the configuration they were made from, not behind the leader."""
    runs = {"w": iter([100, 101, 99]), "a": iter([125, 100, 100]), "b": iter([95, 100, 101]), "base": iter([50] * 3)}
    knobs = {label: {"batch_size": index} for index, label in enumerate(runs)}

    def run(config, name, on_progress=None):
        label = next(label for label, value in knobs.items() if value == config)
        return TrialResult(knobs=config, measurement=fake_measurement(next(runs[label])))

    w, a, b = (Finalist(label, knobs[label], 2 if label == "w" else 1, 1.0) for label in ("w", "a", "b"))
    result = race([w, a, b], knobs["base"], {}, 3, "trim-1", run, lambda name, r: None, ends=alone, reference=w)
    assert a.dropped is None and b.dropped is None and result.rounds == 3


def test_a_variant_its_origin_has_beaten_whatever_the_last_round_reads_leaves_the_trim_race_before_it():
    """Beaten in both of the first two of three rounds, by 10 % and 9 %: whatever the third reads, short of the
    variant faster, its origin beats it (``beats``), so it runs no third round; one beaten by 4 % and 2 % could still
    tie and runs it, as does one tied."""
    runs = {
        "w": iter([100, 101, 99]),
        "beaten": iter([90, 92, 91]),
        "close": iter([96, 99, 100]),
        "tied": iter([99, 102, 100]),
        "base": iter([50] * 3),
    }
    knobs = {label: {"batch_size": index} for index, label in enumerate(runs)}

    def run(config, name, on_progress=None):
        label = next(label for label, value in knobs.items() if value == config)
        return TrialResult(knobs=config, measurement=fake_measurement(next(runs[label])))

    w, beaten, close, tied = (
        Finalist(label, knobs[label], 2 if label == "w" else 1, 1.0) for label in runs if label != "base"
    )
    result = race([w, beaten, close, tied], knobs["base"], {}, 3, "trim-1", run, lambda n, r: None, alone, w)
    assert beaten.throughputs == [90, 92] and beaten.dropped == (
        "trial w ran 1.10x its speed in rounds 1-2, each by more than 3%: only the 1 round left reading this one "
        "faster could change that"
    )
    assert close.dropped is None and tied.dropped is None and result.rounds == 3
    assert trimmed_to(result) is tied, "the change the tied variant undid goes; the beaten one's stays"


def test_a_change_that_tied_with_its_origin_is_undone_next_even_when_a_lucky_variant_won():
    reference = Finalist("6", WINNER, 3, 100.0, [100.0, 100.0, 100.0])
    lucky = Finalist("6 without amp", WINNER, 2, 100.0, [107.0, 108.0, 106.0])
    tied = Finalist("6 without set_to_none", WINNER, 2, 100.0, [101.0, 96.0, 103.0])
    lost = Finalist("6 without batch_size", WINNER, 2, 100.0, [85.0, 86.0, 84.0])
    undone = {"amp": lucky, "set_to_none": tied, "batch_size": lost}
    assert undo_next(reference, undone, lucky) == ["set_to_none"], "the lucky winner beats it, its origin does not"


def test_no_variant_undoes_a_change_into_values_that_cannot_run_together():
    baseline = {**BASELINE, "set_to_none": False}
    graphs = {**baseline, "compile": "reduce-overhead", "set_to_none": True}
    found = variants(Finalist("3", graphs, 2, 100.0), baseline, list(KNOBS), None, "cuda")
    assert list(found) == ["compile"], "set_to_none=False beside CUDA graphs is no configuration to race"
    assert len(variants(Finalist("3", graphs, 2, 100.0), baseline, list(KNOBS), None, "cpu")) == 2, "no graphs on a CPU"
    micro = {**BASELINE, "batch_size": 8, "compile": "off", "amp": "bf16"}
    found = variants(
        Finalist("4", micro, 3, 100.0), {**BASELINE, "compile": "reduce-overhead"}, list(KNOBS), 16, "cuda"
    )
    assert "compile" not in found and "batch_size" in found, "CUDA graphs over micro-batches accumulated to 16"


def test_the_trim_and_the_summary_take_a_stored_trim_by_one_rule_of_winner_and_rounds(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    (trim,) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert is_trim_of([trim], confirmation) and summarise(load_results(study)).trim == [trim]
    five = replace(confirmation, planned_rounds=5)  # study.confirm_rounds changed, the race not yet run again
    assert not is_trim_of([trim], five)
    assert summarise(replace(load_results(study), confirmation=five)).trim == [], "as run_trim, which races anew"
    runs = len(pipeline.names)
    (anew,) = run_trim(study, load_results(study), five, pipeline, lambda name, result: None)
    assert anew.planned_rounds == 5 and len(pipeline.names) > runs


def test_a_trim_race_the_winner_left_losing_a_round_to_the_baseline_is_raced_again_by_a_later_run(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path)
    own_run = run_name("trim-1-1", confirmation.winner.label)

    def own_run_slow(knobs, name, on_progress=None):  # the winner reads below the baseline in the trim's round 1
        if name == own_run:
            return TrialResult(knobs=dict(knobs), measurement=fake_measurement(1.0))
        return pipeline(knobs, name, on_progress)

    run_trim(study, load_results(study), confirmation, own_run_slow, lambda name, result: None)
    summary = summarise(load_results(study))
    assert summary.is_baseline and summary.taken_back is not None, "the round it lost takes its proof back"
    assert summary.trim_open is not None, "until the trim race is raced again"
    runs, notes = len(pipeline.names), []
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None, on_note=notes.append)
    again = summarise(load_results(study))
    assert len(pipeline.names) > runs and not again.untrimmed and again.taken_back is None, "raced again"
    assert again.recommended.label != "baseline"
    assert notes[0] == (
        f"[trim] the stored trim race 1 is raced again: trial {confirmation.winner.label}, the configuration it "
        "started from, left it (slower than the baseline in round 1)"
    )
    assert notes[1].startswith("[trim] trim race 1: trial "), "then what it races"


def test_a_trim_stopped_in_its_second_race_keeps_its_first_and_is_not_taken_for_ended(tmp_path):
    study, confirmation, pipeline = tuned(tmp_path, {**WINNER, "optimizer_impl": "foreach"})

    def stopped_in_race_2(knobs, name, on_progress=None):  # Ctrl-C there
        if name.startswith("trim-2-"):
            raise KeyboardInterrupt
        return pipeline(knobs, name, on_progress)

    with pytest.raises(KeyboardInterrupt):
        run_trim(study, load_results(study), confirmation, stopped_in_race_2, lambda name, result: None)
    left = summarise(load_results(study))
    assert len(left.trim) == 1 and left.untrimmed, "its first race kept; the trim did not end"
    pipeline.names.clear()
    races = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    assert pipeline.names and not [name for name in pipeline.names if name.startswith("trim-1-")], pipeline.names
    assert len(races) >= 2 and not summarise(load_results(study)).untrimmed


def test_each_trim_race_says_what_it_races_and_how_long_a_round_takes_before_its_first_run(tmp_path):
    # set_to_none=False, channels_last and the foreach optimizer do nothing: each ties undone, so the second race
    # undoes the two left, each alone and both at once.
    study, confirmation, pipeline = tuned(tmp_path, {**WINNER, "channels_last": True, "optimizer_impl": "foreach"})
    said = []

    def run(knobs, name, on_progress=None):
        said.append(name)
        return pipeline(knobs, name, on_progress)

    per_run = lambda configurations: 10.0 * len(configurations)  # noqa: E731
    races = run_trim(study, load_results(study), confirmation, run, lambda n, r: None, None, None, said.append, per_run)
    assert len(races) >= 2
    first, second = (said.index(f"trim-{race}-1-baseline") for race in (1, 2))
    assert said[first - 1] == (
        "[trim] trim race 1: trial 0 against itself with each change undone (5 variants), the baseline too: the 7 in "
        "turn for up to 3 rounds (about 70 s a round)"
    )
    assert said[second - 1] == (
        f"[trim] trim race 2: trial {races[1].finalists[0].label} against itself with the changes that tied in trim "
        "race 1 undone, each alone and all at once (3 variants), the baseline too: the 5 in turn for up to 3 rounds "
        "(about 50 s a round)"
    )
    verdicts = [f"[trim] Trim race {number}: {race.describe(trim=True)}" for number, race in enumerate(races, 1)]
    assert said[second - 2] == verdicts[0], "each race's verdict once it ends, before the next race is announced"
    assert said[-1] == verdicts[-1] and all(said.count(verdict) == 1 for verdict in verdicts)


class OneSmallGain(Pipeline):
    """Batch 64 and bf16 make the gain; ``malloc=keep`` 2.5 %, within TIE_TOLERANCE but over TRIM_BOUND; no wobble."""

    def __call__(self, knobs, name, on_progress=None):
        self.names.append(name)
        value = 100.0 * (1.6 if knobs["batch_size"] == 64 else 1.0) * (1.25 if knobs["amp"] == "bf16" else 1.0)
        return TrialResult(
            knobs=dict(knobs), measurement=fake_measurement(value * (1.025 if knobs["malloc"] == "keep" else 1.0))
        )


def small_gain_raced(tmp_path):
    """A study whose winner's ``malloc=keep`` gives 2.5 %, its race ended at its verdict for the trim to run the
    rounds left: the study, the race, the pipeline."""
    winner = {**BASELINE, "batch_size": 64, "amp": "bf16", "malloc": "keep"}
    study, pipeline = open_study(settings(tmp_path), META), OneSmallGain()
    ensure_baseline(study, BASELINE, pipeline)
    study.enqueue_trial(winner)
    tune(study, space_to(winner), settings(tmp_path, n_trials=1), pipeline, lambda e: None)
    trimmed = partial(trim_ahead, load_results(study), rounds=3)
    confirmation = run_race(study, load_results(study), 3, pipeline, lambda name, result: None, trim_ahead=trimmed)
    assert confirmation.rounds < 3, "the race ends at its verdict: the trim's first race runs the rounds left"
    return study, confirmation, pipeline


def test_a_trim_race_whose_verdict_is_refused_proves_the_configuration_it_kept_over_its_rounds(tmp_path):
    study, confirmation, pipeline = small_gain_raced(tmp_path)
    (trim,) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    summary = summarise(load_results(study))
    assert summary.trim_steps[0].refused is not None, "undoing malloc=keep ties, but gives back 2.5 %"
    assert summary.recommended.label == confirmation.winner.label
    assert summary.proof.rounds == trim.rounds == 3 and summary.proof.winner.label == confirmation.winner.label
    assert summary.proof.baseline_throughputs == trim.baseline_throughputs, "the trim's rounds, against the baseline"


def test_a_trim_race_cut_short_proves_no_variant_and_keeps_the_configuration_it_started_from_proven(tmp_path):
    study, confirmation, pipeline = small_gain_raced(tmp_path)
    before_round_3 = lambda runs, step: not step.startswith("trim-1 round 3")  # noqa: E731 (study.budget_s)
    (trim,) = run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None, before_round_3)
    summary = summarise(load_results(study))
    assert trim.cut and trim.rounds == 2
    assert trim.winner is None, "2 of 3 planned rounds prove no entrant (the variant without malloc=keep ties)"
    assert summary.recommended.label == confirmation.winner.label and summary.untrimmed
    assert summary.proof == summary.confirmation, "the finalists' race's verdict, not the cut race's 2 rounds"


def test_a_trim_race_going_on_names_the_variants_still_racing():
    leader = Finalist("0 without a", {"batch_size": 64}, 3, None)
    single, together = (Finalist(f"0 without a without {knob}", {}, 2, None) for knob in ("b", "b without c"))
    said = []
    for racing in ([leader, single, together], [leader, together], [leader, single]):
        _announce(said.append, {single.label, "0 without a without c"}, {}, 3, None, 1, racing, 2)
    assert [line.split(": ")[1].split(", the baseline")[0] for line in said] == [
        "trial 0 without a against itself with the changes that tied in trim race 1 undone, one alone and all at once "
        "(2 variants)",
        "trial 0 without a against itself with the changes that tied in trim race 1 undone, all at once (1 variant)",
        "trial 0 without a against itself with the change that tied in trim race 1 undone (1 variant)",
    ]
    assert said[0].endswith("the 4 in turn for up to 2 rounds more after round 1")
