"""Advice the study measured within noise is not the step to follow next; what the study measured is said first, and
whether a race weighed it; the offline advice keeps its augmentation caveat; the memory-bound verdict says what its
share is of and what it means."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autotune.measure.page_faults import PageFaults
from autotune.report.diagnosis import profile_document
from autotune.results.diagnosis import MEMORY_BOUND
from autotune.results.finalist import Finalist
from autotune.results.profile import ProfileRecord
from autotune.results.race import Confirmation
from autotune.results.race_rules import TIE_TOLERANCE
from autotune.results.remedies import advise, first_to_follow
from autotune.results.remedy_model import Tried
from autotune.results.tried import tries_of
from tests.results.profile_records import hot, profile_result
from tests.results.test_remedies import KNOBS
from tests.results.test_summary import BASELINE, results_with, trial

FAULTING = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)


def keep_measured(ratios: list[float], raced: dict | None = None) -> Tried:
    """The reviewer's study: malloc=keep measured against malloc=default in ``ratios`` pairs of single runs."""
    return Tried("mymodel", {"malloc": ["default", "keep"]}, {}, {"malloc=default->keep": ratios}, raced=raced)


def test_a_change_measured_within_the_races_tie_is_no_gain_ranked_last_and_never_next():
    result = profile_result(faults=FAULTING, gc_share=0.01)
    tied = keep_measured([1.00, 1.04])  # median 1.02: over the 2 % a change must gain, within the race's 3 %
    assert tied.no_gain("malloc", "default", "keep")
    ranked = advise(result, "", KNOBS, 8, tied)
    assert ranked[-1].knob == "malloc" and ranked[-1].measured_no_gain
    assert first_to_follow(ranked).knob != "malloc"
    beyond = keep_measured([1.00 + TIE_TOLERANCE, 1.05])  # median 1.04
    assert not beyond.no_gain("malloc", "default", "keep"), "faster beyond noise: its estimate ranks it"
    assert not keep_measured([1.02]).no_gain("malloc", "default", "keep"), "one pair tells no small gain from none"


def test_what_was_measured_leads_and_a_value_no_race_ran_is_said_not_raced():
    said = keep_measured([1.00, 1.04], raced={}).says("malloc", "keep", "default")
    assert said == (
        "the tuner measured malloc=keep at 1.02x the same settings with malloc=default (median of 2 pairs of single "
        "runs, 1.00x to 1.04x; within noise) and did not race it (study 'mymodel')"
    )
    raced = keep_measured([0.90, 0.80], raced={"malloc": ["keep"]}).says("malloc", "keep", "default")
    assert raced == (
        "the tuner measured malloc=keep at 0.85x the same settings with malloc=default (median of 2 pairs of single "
        "runs, 0.80x to 0.90x) and did not recommend it (study 'mymodel')"
    ), "a race weighed it: not recommended; slower beyond noise: no tie said"
    unknown = keep_measured([1.00, 1.04]).says("malloc", "keep", "default")
    assert "did not" not in unknown, "a profile stored before the races were recorded claims neither"


def test_the_values_a_study_raced_are_those_its_finalists_ran_a_round_with():
    knobs = {**BASELINE, "num_threads": 1}
    winner = Finalist("0", knobs, 1, 100.0, [200.0, 204.0, 198.0])
    trials = [trial("0", 200.0, num_threads=1), trial("1", 150.0, malloc="keep"), trial("2", 190.0, amp="bf16")]
    never_ran = Finalist("2", {**BASELINE, "amp": "bf16"}, 1, 100.0, [], dropped="round 1 failed")
    race = Confirmation([100.0] * 3, [winner, never_ran], None, 3, trials=["0", "2"])
    tried = tries_of(replace(results_with(*trials), confirmation=race))
    assert 1 in tried.raced["num_threads"] and "bf16" not in tried.raced["amp"]
    assert tried.says("malloc", "keep").endswith("and did not race it (study 's')"), tried.says("malloc", "keep")
    assert tried.says("amp", "bf16").endswith("and did not race it (study 's')"), "it raced no round"
    lost = Finalist("1", {**BASELINE, "malloc": "keep"}, 1, 100.0, [150.0, 151.0, 149.0])
    race = Confirmation([100.0] * 3, [winner, lost], None, 3, trials=["0", "1", "2"])
    tried = tries_of(replace(results_with(*trials), confirmation=race))
    assert tried.left_out == {} and tried.says("malloc", "keep").endswith("and did not recommend it (study 's')")
    assert tries_of(results_with(*trials)).says("malloc", "keep").endswith("and did not race it (study 's')")


def test_resize_offline_carries_the_augmentation_caveat_the_other_offline_advice_has():
    functions = [hot("torch.nn.functional.interpolate", 0.6), hot("torch.conv2d", 0.4)]
    advice = advise(profile_result(wait_share=0.6, functions=functions), "data-bound", KNOBS, 8, None)
    resize, offline = (a for a in advice if a.location)
    caveat = "(not where its input or its parameters are drawn at random: an augmentation)"
    assert resize.action.startswith("resize offline") and resize.action.endswith(caveat)
    assert offline.action.startswith("do the work of torch.conv2d once") and offline.action.endswith(caveat)


def test_the_memory_bound_gist_says_its_share_is_of_the_operators_time_and_the_page_says_what_it_means(
    tmp_path: Path,
):
    result = profile_result(wait_share=0.05, compute_share=0.15)
    record = ProfileRecord("mymodel", "cpu", "baseline", KNOBS, {"cpu_count": 8}, "mymodel", result)
    diagnosis = record.diagnosis
    assert diagnosis.verdict == MEMORY_BOUND
    assert diagnosis.gist.endswith("matrix products and convolutions and random numbers 15% of the operators' time)")
    headline = profile_document(record, tmp_path).headline
    assert headline.rest.startswith("Most of the operators' time is elementwise work limited by memory traffic")
    assert "not by the RAM's size: docs/profile.md" in headline.rest
    computed = replace(record, result=profile_result(wait_share=0.05, compute_share=0.8))
    assert profile_document(computed, tmp_path).headline.rest.startswith("Decided by"), "no gloss but memory-bound's"


def test_a_race_that_no_longer_counts_still_raced_its_values_the_baseline_its_own_and_an_unpaired_run_none():
    trials = [trial("0", 200.0, num_threads=1), trial("1", 150.0, malloc="keep"), trial("2", 190.0, amp="bf16")]
    lost = Finalist("1", {**BASELINE, "malloc": "keep"}, 1, 100.0, [150.0, 151.0, 149.0])
    winner = Finalist("0", {**BASELINE, "num_threads": 1}, 1, 100.0, [200.0, 204.0, 198.0])
    stale = Confirmation([100.0] * 3, [winner, lost], None, 3, trials=["0", "1"])  # trial 2 measured after it
    tried = tries_of(replace(results_with(*trials), confirmation=stale))
    assert tried.says("malloc", "keep").endswith("and did not recommend it (study 's')"), "the race weighed it"
    assert tried.says("num_threads", None, 1).endswith("and did not recommend it (study 's')"), "the baseline ran it"
    # The baseline's run of round 1 failed after trial 1 ran in it: no figure weighs that run.
    unpaired = Confirmation([], [replace(lost, throughputs=[150.0])], None, 0, trials=["0", "1", "2"])
    tried = tries_of(replace(results_with(*trials), confirmation=unpaired))
    assert tried.says("malloc", "keep").endswith("and did not race it (study 's')")
