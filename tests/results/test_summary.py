"""Ranking and recommendation over stored results."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.records import TrialRecord
from autotune.report.headline import headline
from autotune.report.json_report import report_data
from autotune.report.races import confirmation_sections
from autotune.results.advice import batch_advice
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import finalist_choice, select_finalists
from autotune.results.summary import summarise
from autotune.results.tuner_time import RunTime, TunerTime
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import fake_measurement
from tests.study.test_tuner import BASELINE, fake_result


def finalists_of(results: StudyResults) -> list[TrialRecord]:
    return select_finalists(results.baseline, results.trials)


def results_with(*trials: TrialRecord, baseline_throughput=100.0) -> StudyResults:
    return StudyResults(
        study_name="s",
        pipeline="p",
        device="cpu",
        machine={},
        space={},
        measure={},
        baseline=TrialRecord("baseline", fake_result(BASELINE, baseline_throughput)),
        trials=list(trials),
    )


def trial(label, throughput, **knobs):
    return TrialRecord(label, fake_result({**BASELINE, **knobs}, throughput))


def failed(label, **knobs):
    return TrialRecord(
        label, TrialResult({**BASELINE, **knobs}, failure=Failure(FailureKind.TIMEOUT, "timeout after 5 s"))
    )


def test_the_fastest_trial_is_recommended_and_failures_rank_last():
    summary = summarise(results_with(trial("0", 90.0), failed("1"), trial("2", 150.0, batch_size=32)))
    assert [r.label for r in summary.ranked] == ["2", "baseline", "0", "1"]
    assert summary.recommended.label == "2"
    assert summary.speedup == pytest.approx(1.5)
    assert summary.changed_knobs() == {"batch_size": (16, 32)}
    assert not summary.is_baseline


def test_the_baseline_is_kept_when_nothing_beats_it():
    summary = summarise(results_with(trial("0", 80.0), trial("1", 100.0, batch_size=32)))
    assert summary.is_baseline and summary.speedup == 1.0
    assert summary.changed_knobs() == {}


def test_a_summary_needs_a_measured_baseline():
    results = results_with()
    broken = StudyResults(**{**results.__dict__, "baseline": None})
    with pytest.raises(ValueError):
        summarise(broken)


def test_among_ties_the_configuration_closest_to_the_baseline_wins():
    far = trial("0", 150.0, batch_size=32, num_workers=1, amp="bf16")
    near = trial("1", 147.0, batch_size=32)  # within 3 % of the fastest, one knob changed instead of three
    slower = trial("2", 140.0, num_workers=1)
    summary = summarise(results_with(far, near, slower))
    assert summary.recommended.label == "1"
    assert summary.ranked[0].label == "0", "the ranking stays by throughput"


def test_among_ties_with_as_many_changes_the_leaner_one_wins():
    heavy = TrialRecord("0", TrialResult({**BASELINE, "num_workers": 1}, fake_measurement(150.0, peak_mb=400.0)))
    light = TrialRecord("1", TrialResult({**BASELINE, "batch_size": 32}, fake_measurement(149.0, peak_mb=200.0)))
    assert summarise(results_with(heavy, light)).recommended.label == "1"


def test_a_baseline_tied_with_the_fastest_is_kept():
    summary = summarise(results_with(trial("0", 102.0, batch_size=32)))
    assert summary.is_baseline and summary.recommended.label == "baseline"


def test_a_finalist_that_did_not_outrun_a_simpler_one_by_a_tie_is_not_raced():
    compiled = trial("0", 150.0, batch_size=32, compile="default")
    plain = trial("1", 147.0, batch_size=32)  # one change fewer; the compiled run is only 2 % faster
    other = trial("2", 132.0, batch_size=64)  # 12 % behind, as many changes as the plain one: raced
    finalists = finalists_of(results_with(compiled, plain, other))
    assert [r.label for r in finalists] == ["1", "2"]
    beyond_window = trial("4", 127.0, batch_size=128)  # 15.3 % behind the fastest
    assert [r.label for r in finalists_of(results_with(compiled, plain, beyond_window))] == ["1"]
    clearly = trial("3", 155.0, batch_size=32, compile="default")  # 5 % faster than the plain run: raced
    assert [r.label for r in finalists_of(results_with(clearly, plain, other))] == ["3", "1", "2"]


def test_the_trials_near_the_fastest_left_out_of_the_race_are_named_with_why():
    compiled = trial("0", 150.0, batch_size=32, compile="default")
    plain = trial("1", 147.0, batch_size=32)
    others = [trial(str(n), 140.0 - n, batch_size=size) for n, size in ((2, 64), (3, 128), (4, 256))]
    results = results_with(compiled, plain, *others)
    finalists, left_out = finalist_choice(results.baseline, results.trials)
    assert [r.label for r in finalists] == ["1", "2", "3"] == [r.label for r in finalists_of(results)]
    assert left_out == {
        "0": "it changes more knobs than trial 1 and its run did not beat that one's by 3%",
        "4": "at most 3 finalists race, the fastest runs first",
    }
    race = Confirmation([100.0], [Finalist(f.label, f.result.knobs, 1, 100.0, [150.0]) for f in finalists])
    raced = replace(results, confirmation=race)
    (section,) = confirmation_sections(raced, summarise(raced))
    assert section.paragraphs[1].startswith(
        "Left out of the race, though their runs came within 15% of the fastest: trial 0 (it changes more knobs"
    )
    assert (
        "In the race a trial that changes more knobs wins over a simpler one only by beating it in most rounds and by "
        "more than 3% by the geometric mean of the per-round ratios" in section.paragraphs[1]
    ), "the race's rule (beats), not 3 % in every round"


def test_trials_left_out_of_the_race_for_one_reason_are_named_together():
    plain = trial("0", 147.0, batch_size=32)
    heavier = [trial(str(n), 146.0 - n, batch_size=32, num_workers=n) for n in (1, 3, 4)]  # 2 fails (fake_result)
    results = results_with(plain, *heavier)
    race = Confirmation([100.0], [Finalist("0", plain.result.knobs, 1, 100.0, [150.0])])
    raced = replace(results, confirmation=race)
    (section,) = confirmation_sections(raced, summarise(raced))
    assert (
        "fastest: trials 1, 3 and 4 (each changes more knobs than trial 0 and its run did not beat that one's by 3%). "
        in section.paragraphs[1]
    ), section.paragraphs[1]


def test_where_every_finalist_compiles_its_plain_twin_races_too_where_it_beat_the_baseline_beyond_the_window():
    compiled = trial("0", 160.0, batch_size=32, compile="default")
    plain = trial("1", 134.0, batch_size=32)  # 16 % behind its compiled twin: outside the window
    assert [r.label for r in finalists_of(results_with(compiled, plain))] == ["0", "1"]
    slower = trial("1", 95.0, batch_size=32)  # slower than the baseline: no fallback
    assert [r.label for r in finalists_of(results_with(compiled, slower))] == ["0"]
    assert [r.label for r in finalists_of(results_with(trial("5", 160.0, batch_size=32), plain))] == ["5"]
    other = trial("6", 140.0, amp="bf16")  # in the window, not compiled: it races, the plain twin does not
    assert [r.label for r in finalists_of(results_with(compiled, plain, other))] == ["0", "6"]
    both = [compiled, trial("7", 150.0, batch_size=64, compile="default"), plain, trial("8", 120.0, batch_size=64)]
    assert [r.label for r in finalists_of(results_with(*both))] == ["0", "7", "1", "8"], "beyond the three"


def test_only_a_trial_worth_racing_leaves_out_one_that_changes_more():
    # Each run within a tie of the one with a change fewer; the fastest 9 % ahead of the simplest.
    one = trial("1", 91.8, batch_size=32)
    two = trial("2", 94.5, batch_size=32, amp="bf16")
    three = trial("3", 97.2, batch_size=32, amp="bf16", channels_last=True)
    four = trial("4", 100.0, batch_size=32, amp="bf16", channels_last=True, set_to_none=False)
    finalists = finalists_of(results_with(one, two, three, four, baseline_throughput=50.0))
    assert [r.label for r in finalists] == ["3", "1"], "2 is tied with 1; 3 is not tied with 1, and 4 is with 3"


def test_a_stale_race_still_rules_out_the_finalists_it_did_not_prove():
    lucky = trial("0", 150.0, batch_size=64)
    dropped = Finalist("0", lucky.result.knobs, 1, 100.0, [100.0], "slower than the baseline in round 1")
    results = replace(results_with(lucky, trial("1", 135.0, amp="bf16")), confirmation=Confirmation([100.0], [dropped]))
    summary = summarise(results)
    assert summary.confirmation is None, "about trial 0 alone, of two finalists now"
    assert summary.recommended.label == "1", "not the trial its race measured no faster"
    assert summary.ruled_out == {"0"}
    # Both proven, tied: trial 1 won on fewer changes; a trial measured since makes the race stale.
    proven = [Finalist("0", lucky.result.knobs, 2, 100.0, [120.0]), Finalist("1", {}, 1, 100.0, [119.0])]
    later = [*results.trials, trial("2", 140.0, channels_last=True)]
    stale = replace(results, trials=later, confirmation=Confirmation([100.0], proven))
    assert summarise(stale).ruled_out == frozenset(), "a proven finalist is not ruled out"
    for unmeasured in (Confirmation([], [replace(dropped, throughputs=[])]), Confirmation([100.0], [dropped], "boom")):
        assert summarise(replace(results, confirmation=unmeasured)).recommended.label == "0", "never shown slower"


def test_infeasible_and_pruned_trials_are_never_recommended():
    over = TrialRecord(
        "0",
        TrialResult(
            {**BASELINE, "batch_size": 32},
            fake_measurement(500.0),
            failure=Failure(FailureKind.OUT_OF_MEMORY, "peak 900 MiB is over study.memory_budget_mb=500: infeasible"),
        ),
    )
    pruned = TrialRecord("1", TrialResult(BASELINE, failure=Failure(FailureKind.PRUNED, "slow")))
    summary = summarise(results_with(over, pruned))
    assert summary.is_baseline and [r.label for r in summary.ranked] == ["baseline", "0", "1"]


def test_pareto_front_in_multi_objective_studies():
    fast_heavy = TrialRecord("0", TrialResult(BASELINE, fake_measurement(200.0, peak_mb=300.0)))
    dominated = TrialRecord("1", TrialResult(BASELINE, fake_measurement(150.0, peak_mb=350.0)))
    lean = TrialRecord("2", TrialResult(BASELINE, fake_measurement(90.0, peak_mb=50.0)))
    results = replace(results_with(fast_heavy, dominated, lean), objectives=["throughput", "peak_memory"])
    assert [r.label for r in summarise(results).pareto] == ["0", "baseline", "2"]
    assert summarise(replace(results, objectives=["throughput"])).pareto == []


@pytest.mark.parametrize(
    ("policy", "batch", "sentence"),
    [
        ("free", 32, "scale the learning rate by 2 (learning rate 0.01 → 0.02)"),
        ("free", 16, "Batch size unchanged (16)"),
        ("fixed_effective", 4, "Micro-batches of 4 with 4 gradient-accumulation steps make the baseline's 16"),
    ],
)
def test_batch_advice(policy, batch, sentence):
    results = replace(
        results_with(trial("0", 200.0, batch_size=batch)),
        batch_policy=policy,
        optimizer={"_target_": "torch.optim.SGD", "lr": 0.01},
    )
    summary = summarise(results)
    advice = batch_advice(results, summary)
    assert sentence in advice.describe()
    assert advice.accumulation_steps == (16 // batch if policy == "fixed_effective" else 1)
    assert summary.accumulation_steps(summary.baseline) == 1


def test_a_trim_race_cut_short_by_the_budget_after_a_round_undoes_nothing():
    # Its one round tied the winner with a change undone: the trim, which stops at a cut race and goes on from it in
    # a later run, did not act on it, and neither does the recommendation.
    winner = trial("0", 200.0, batch_size=32, num_threads=1)
    proven = Confirmation([100.0, 101.0, 99.0], [Finalist("0", winner.result.knobs, 2, 100.0, [200.0, 205.0, 198.0])])
    undone = {**winner.result.knobs, "num_threads": BASELINE["num_threads"]}
    tied = Finalist("0 without num_threads", undone, 1, 90.0, [199.0], result=fake_result(undone, 199.0))
    cut = Confirmation([100.0], [Finalist("0", winner.result.knobs, 2, 100.0, [200.0]), tied], None, 3, cut=True)
    results = replace(results_with(winner), confirmation=proven, trim=[cut])
    summary = summarise(results)
    assert summary.recommended.label == "0" and summary.no_difference == {}
    assert summary.untrimmed


def test_a_race_stopped_before_its_end_rules_out_the_finalists_it_dropped():
    # Trial 1, the fastest single run, lost round 1 to the baseline and left; the run was stopped in round 2. The
    # race decides nothing yet, but trial 1 is no pick from its single run.
    fast, next_best = trial("1", 150.0, batch_size=32, num_threads=1), trial("2", 130.0, batch_size=32)
    dropped = Finalist("1", fast.result.knobs, 2, 100.0, [80.0], "slower than the baseline in round 1")
    going = Finalist("2", next_best.result.knobs, 1, 100.0, [131.0])
    stopped = Confirmation([100.0], [dropped, going], None, 3, cut=True)
    in_race = TunerTime([RunTime(0.0, 30.0, {"search": 20.0, "race": 9.0}, {}, finished=False)])
    summary = summarise(replace(results_with(fast, next_best), confirmation=stopped, tuner_time=in_race))
    assert summary.confirmation is None and summary.stopped_before_race_end
    assert summary.recommended.label == "2" and summary.ruled_out == {"1"}
    said = headline(summary).rest
    assert "No race has proven it against the baseline yet (a race re-measured trial 1 and did not prove it)" in said


def test_from_single_runs_no_change_is_recommended_that_is_itself_tied_with_the_baseline():
    # trial 1 is the simplest of those tied with the fastest, but no faster than the baseline beyond noise
    summary = summarise(
        results_with(trial("0", 103.2, batch_size=32, num_threads=1, amp="bf16"), trial("1", 100.2, num_threads=1))
    )
    assert summary.recommended.label == "0"
    summary = summarise(results_with(trial("1", 100.2, num_threads=1), trial("2", 102.0, batch_size=32)))
    assert summary.is_baseline, "both within noise of the baseline"


def _lost_trim(*reference_runs: float, baseline_runs: list[float]) -> tuple[TrialRecord, Confirmation]:
    """Trial 0 (two changes) and a trim race of 3 planned rounds in which it left, slower than the baseline."""
    winner = trial("0", 200.0, batch_size=32, num_threads=1)
    knobs = winner.result.knobs
    undone = {**knobs, "num_threads": BASELINE["num_threads"]}
    runs = len(reference_runs)
    reference = Finalist("0", knobs, 2, 100.0, list(reference_runs), f"slower than the baseline in round {runs}")
    variant = Finalist("0 without num_threads", undone, 1, 90.0, [120.0] * len(baseline_runs), "behind")
    return winner, Confirmation(baseline_runs, [reference, variant], None, 3)


def test_a_winner_that_lost_a_trim_round_to_the_baseline_stands_on_its_proof_untrimmed():
    # Trial 0 left its trim race at round 1, slower than the baseline: the race is not settled (a later run races it
    # again), nothing is undone, and the gain is its proof's.
    winner, trim = _lost_trim(95.0, baseline_runs=[100.0])
    proven = Confirmation([100.0] * 3, [Finalist("0", winner.result.knobs, 2, 100.0, [200.0, 190.0, 210.0])], None, 3)
    summary = summarise(replace(results_with(winner), confirmation=proven, trim=[trim]))
    assert summary.recommended.label == "0" and summary.proof is proven
    assert summary.untrimmed and summary.no_difference == {}


def test_a_trim_of_other_rounds_which_the_trim_would_not_go_on_from_does_not_decide_the_recommendation():
    # study.confirm_rounds went from 3 to 5 and the run stopped before the new trim: the old one stands for nothing.
    winner = trial("0", 200.0, batch_size=32, num_threads=1)
    knobs = winner.result.knobs
    now = Confirmation([100.0] * 5, [Finalist("0", knobs, 2, 100.0, [200.0] * 5)], None, 5)
    undone = {**knobs, "num_threads": BASELINE["num_threads"]}
    tied = Finalist("0 without num_threads", undone, 1, 90.0, [199.0] * 3, result=fake_result(undone, 199.0))
    old = Confirmation([100.0] * 3, [Finalist("0", knobs, 2, 100.0, [200.0] * 3), tied], None, 3)
    summary = summarise(replace(results_with(winner), confirmation=now, trim=[old]))
    assert summary.recommended.label == "0" and summary.trim == [] and summary.untrimmed
    assert summary.proof is now
    same_rounds = summarise(replace(results_with(winner), confirmation=replace(now, planned_rounds=3), trim=[old]))
    assert same_rounds.recommended.label == "0 without num_threads", "of these rounds it stands"


def test_a_recommendation_no_race_re_measured_is_untrimmed_where_it_changes_two_knobs_or_more():
    # study.confirm_rounds=0: single runs pick it; no trim ran, so not every change was raced undone.
    two = summarise(results_with(trial("0", 200.0, batch_size=32, num_threads=1)))
    assert not two.confirmed and two.recommended.label == "0" and two.untrimmed
    one = summarise(results_with(trial("0", 200.0, batch_size=32)))
    assert one.recommended.label == "0" and not one.untrimmed, "a single change: nothing to trim"


def _verdict_and_trim(*reference_runs: float, baseline_runs: list[float], **race) -> tuple[StudyResults, Finalist]:
    """Trial 0 (two changes) won the finalists' race at its verdict after 1 round (1.31x), which ended there for the
    trim; the trim's race 1, planned for 5 rounds, ran it with ``reference_runs`` (its variant gone after round 1)."""
    winner = trial("0", 200.0, batch_size=32, num_threads=1)
    knobs = winner.result.knobs
    verdict = Confirmation([100.0], [Finalist("0", knobs, 2, 100.0, [131.0])], None, 5)
    undone = {**knobs, "num_threads": BASELINE["num_threads"]}
    gone = Finalist("0 without num_threads", undone, 1, 90.0, [80.0], "behind")
    reference = Finalist("0", knobs, 2, 100.0, list(reference_runs), race.pop("dropped", None))
    trim = Confirmation(baseline_runs, [reference, gone], None, 5, **race)
    return replace(results_with(winner), confirmation=verdict, trim=[trim]), reference


def test_a_winner_a_longer_trim_race_re_measured_no_faster_is_not_recommended_on_its_shorter_race():
    # The trim's race ran trial 0 and the baseline 5 rounds and read 1.01x by medians: the longer race decides.
    results, reference = _verdict_and_trim(125.0, 101.0, 100.5, 101.0, 101.5, baseline_runs=[100.0] * 5)
    summary = summarise(results)
    assert summary.is_baseline and summary.proof is None
    assert summary.overruled.label == "0" and summary.overruled.number == 1
    stored = report_data(results, summary)["overruled"]
    assert stored == {"trial": "0", "trim_race": 1, "rounds": 5, "speedup": pytest.approx(1.01)}
    said = headline(summary).rest
    assert "Trial 0 won the finalists' race against the baseline (1.31x by medians of 1 round)" in said
    assert "race 1 re-measured it against the baseline in more (5 rounds, 1.01x by medians) and did not prove" in said
    assert "it: it read 1.01x by medians of the rounds, under the 2% a change must gain. The most rounds" in said
    assert "did not end" not in said
    held = replace(reference, throughputs=[125.0, 104.0, 103.0, 105.0, 103.5])
    kept = summarise(
        replace(results, trim=[replace(results.trim[0], finalists=[held, *results.trim[0].finalists[1:]])])
    )
    assert kept.recommended.label == "0" and kept.proof.rounds == 5 and kept.speedup > 1.03


def test_a_trim_race_the_winner_left_having_lost_more_rounds_than_the_first_race_it_won_keeps_the_baseline():
    # It lost round 2 of the trim's race and left it: 2 rounds against the baseline, one lost, outweigh the 1 it won.
    dropped = "slower than the baseline in round 2"
    results, _ = _verdict_and_trim(125.0, 95.0, baseline_runs=[100.0] * 2, dropped=dropped)
    summary = summarise(results)
    assert summary.is_baseline and summary.overruled.rounds == 2
    said = headline(summary).rest
    assert f"did not prove it: it left the race ({dropped})" in said
    assert "That race did not end: the same command again goes on with it." in said


def test_a_trim_race_cut_short_that_did_not_prove_the_winner_says_what_it_missed_and_that_it_goes_on():
    # Cut by study.budget_s after 3 of 5 rounds, one of them lost: a proof over the 5 planned allows none lost.
    results, _ = _verdict_and_trim(125.0, 99.0, 130.0, baseline_runs=[100.0] * 3, cut=True)
    summary = summarise(results)
    assert summary.is_baseline
    said = headline(summary).rest
    assert "did not prove it: it won 2 of the 3 rounds it ran before the race was cut short" in said
    assert "where a proof over the 5 planned needs 5" in said
    assert "That race did not end (it stopped after 3 of 5 rounds" in said


def test_a_verdict_the_rounds_after_it_took_back_keeps_the_baseline_and_the_headline_says_so():
    # Trial 0 was decided after round 1 and trial 1 left; rounds 2-5 put trial 0 at 1.00x by medians.
    fast, next_best = trial("0", 130.0, batch_size=64), trial("1", 115.0, batch_size=32)
    faded = Finalist("0", fast.result.knobs, 1, 100.0, [130.0, 99.0, 100.0, 101.0, 100.5])
    left = Finalist("1", next_best.result.knobs, 1, 100.0, [115.0], "the race was decided for trial 0 after round 1")
    race = Confirmation([100.0] * 5, [faded, left], None, 5, decided_after=1)
    summary = summarise(replace(results_with(fast, next_best), confirmation=race))
    assert summary.is_baseline and summary.overruled is None
    said = headline(summary).rest
    assert "The race's verdict for trial 0 was taken back: it won the rounds up to the verdict (round 1)" in said
    assert "put its median over all 5 at 1.00x" in said
