"""Which finalist, if any, a re-measurement proves against the baseline."""

from __future__ import annotations

import pytest

from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.race_rules import beats, paired_ratio, wins_needed
from autotune.results.trim_rules import trim_path, trimmed_to


def finalist(label, runs, changes=1, memory=100.0, dropped=None):
    return Finalist(label, {"batch_size": 64}, changes, memory, list(runs), dropped)


def confirmation(*finalists, baseline=(100, 101, 99), failure=None):
    return Confirmation(list(baseline), list(finalists), failure)


def test_a_win_in_every_round_with_enough_gain_is_confirmed():
    result = confirmation(finalist("3", [110, 108, 112]))
    assert result.confirmed and result.winner.label == "3" and result.speedup == pytest.approx(110 / 100)
    assert result.describe().endswith("is confirmed: 1.10x by medians (a win in every round and at least 2% gain)."), (
        "alone, nothing to say of the others"
    )


def test_one_lost_round_is_not_confirmed():
    result = confirmation(finalist("3", [120, 99, 121]), baseline=[100, 100, 100])
    assert not result.confirmed and result.leader.label == "3"
    assert "baseline is kept" in result.describe()


def test_a_gain_within_two_percent_is_not_confirmed():
    assert not confirmation(finalist("3", [101, 101.5, 101]), baseline=[100, 100, 100]).confirmed


def test_a_finalist_with_a_higher_median_but_a_lost_round_is_not_proven():
    result = confirmation(finalist("3", [130, 99, 131]), finalist("5", [120, 121, 119]), baseline=[100, 100, 100])
    assert result.winner.label == "5", "trial 3 lost round 2 to the baseline"


def test_a_winner_whose_rounds_after_the_verdict_pull_its_median_under_the_gain_is_not_proven():
    # Decided after round 1, then four rounds lost by 10 %: the verdict's round alone would confirm a slowdown.
    later_lost = Confirmation([100.0] * 5, [finalist("7", [125, 90, 90, 90, 90])], planned_rounds=5, decided_after=1)
    assert not later_lost.confirmed
    said = later_lost.describe()
    assert (
        "trial 7's verdict was taken back: it won the rounds up to the verdict (round 1), but the rounds after it put"
        in said
    )
    assert "its median over all 5 at 0.90x, under the 2% a change must gain, so the baseline is kept" in said
    held = Confirmation([100.0] * 5, [finalist("7", [125, 104, 99, 106, 103])], planned_rounds=5, decided_after=1)
    assert held.confirmed, "a round lost after the verdict, its median still 2 % up: the proof stands"


def test_among_tied_finalists_the_one_with_fewer_changes_then_less_memory_wins():
    tied = [finalist("3", [130, 131, 129], changes=4), finalist("5", [128, 129, 128], changes=2, memory=300)]
    assert confirmation(*tied).winner.label == "5"
    assert confirmation(*tied).why_won() == (
        "trial 3 read a higher median but did not beat it beyond noise (within 3% by the paired rounds' ratios), and "
        "this one changes fewer knobs (2 against 4)"
    ), "the rule that decided, not every rule"
    split = [finalist("3", [127, 160, 136], changes=4), finalist("5", [128, 129, 137], changes=2)]  # 7 % by ratios
    assert confirmation(*split).winner.label == "5"
    said = confirmation(*split).why_won()
    assert "did not beat it beyond noise (it read faster in 1 of the 3 rounds both ran)" in said
    same_changes = [finalist("3", [130, 131, 129], memory=200), finalist("5", [128, 129, 128], memory=100)]
    assert confirmation(*same_changes).winner.label == "5"
    assert (
        confirmation(*same_changes)
        .why_won()
        .endswith("this one changes as many knobs and uses less memory (100 against 200 MiB)")
    )
    close = [finalist("3", [130, 131, 129], memory=362.4), finalist("5", [128, 129, 128], memory=361.9)]
    assert confirmation(*close).why_won().endswith("uses less memory (361.9 against 362.4 MiB)"), "not 362 against 362"
    clearly_faster = [finalist("3", [140, 141, 139], changes=4), finalist("5", [128, 129, 128], changes=2)]
    assert confirmation(*clearly_faster).winner.label == "3", "more than 3 % faster is not a tie"


def test_one_finalist_beats_another_by_its_per_round_ratios_not_by_winning_every_round():
    faster = finalist("3", [140, 127, 139, 141, 138, 140], changes=2, memory=500)  # behind in round 2 only
    leaner = finalist("5", [130, 129, 128, 129, 130, 128], changes=2, memory=400)
    result = confirmation(faster, leaner, baseline=[100] * 6)
    assert paired_ratio(faster.throughputs, leaner.throughputs) == pytest.approx(1.0652, abs=1e-4)
    assert result.winner.label == "3", "6.5 % ahead round by round is beyond a tie, one lost round or not"
    assert result.describe().endswith(
        "(a win in at least 5 of 6 rounds and at least 2% gain); the fastest by median of those proven."
    )
    lucky = finalist("3", [140, 127], changes=2, memory=500)  # 7.8 % ahead by geometric mean, behind in round 2
    assert confirmation(lucky, finalist("5", [130, 129], changes=2, memory=400), baseline=[100, 100]).winner.label == (
        "5"
    ), "one lucky run does not make a finalist faster: it must win most rounds"


def test_a_finalist_another_proven_one_beats_round_by_round_does_not_win_on_its_median():
    lean = finalist("a", [110, 120, 121], changes=1)  # the higher median
    fast = finalist("b", [119, 125, 118], changes=2)  # won two rounds of three, 3.2 % faster by paired ratios
    result = confirmation(lean, fast, baseline=(105, 108, 100))
    assert result.winner.label == "b"
    assert result.why_won() == (
        "trial a read a higher median, but this one beat it in most rounds and by more than 3% by the geometric mean "
        "of the per-round ratios"
    )


def test_a_winner_is_said_to_beat_only_a_finalist_it_beats():
    a = finalist("a", [170, 170, 201, 190, 190])
    b = finalist("b", [200, 200, 200, 150, 150])  # the highest median; a beats it, c does not
    c = finalist("c", [195] * 5)  # beats a
    result = confirmation(a, b, c, baseline=[100] * 5)
    assert result.winner is c and beats(a, b) and beats(c, a) and not beats(c, b)
    assert result.why_won() == (
        "trial b read a higher median, but trial a beat it in most rounds and by more than 3% by the geometric mean "
        "of the per-round ratios; this one has the highest median of those no other proven finalist beats"
    )


def test_finalists_within_three_percent_round_by_round_are_tied_and_the_leaner_wins():
    faster = finalist("3", [134, 131, 133], changes=2, memory=500)  # won every round, 2.3 % by per-round ratios
    leaner = finalist("5", [130, 129, 130], changes=2, memory=400)
    assert confirmation(faster, leaner).winner.label == "5"


@pytest.mark.parametrize(("rounds", "needed"), [(1, 1), (2, 2), (3, 3), (5, 5), (6, 5), (7, 6), (10, 8), (12, 9)])
def test_wins_needed_is_a_sign_test_at_one_in_eight(rounds, needed):
    assert wins_needed(rounds) == needed


def test_with_many_rounds_one_lost_round_does_not_undo_a_proof():
    runs = [120, 99, 121, 119, 122, 120]  # lost round 2 of 6: 5 wins pass the sign test
    result = confirmation(finalist("3", runs), baseline=[100] * 6)
    assert result.confirmed and "a win in at least 5 of 6 rounds" in result.describe()
    assert not confirmation(finalist("3", [120, 99, 121, 99, 122, 120]), baseline=[100] * 6).confirmed
    assert (
        "No finalist won at least 5 of 6 rounds" in confirmation(finalist("3", [99] * 6), baseline=[100] * 6).describe()
    )


def test_a_dropped_finalist_cannot_win():
    result = confirmation(finalist("3", [130], dropped="slower than the baseline in round 2"))
    assert not result.confirmed and "dropped: slower than the baseline" in result.describe()


def test_a_finalist_that_won_every_round_it_ran_but_left_for_a_failed_run_is_said_to_have_left_for_it():
    failed = finalist("3", [130, 131], dropped="round 3 failed: signal: SIGKILL")
    said = confirmation(failed, baseline=[100, 101, 99]).describe()
    assert said.endswith(
        "No finalist is proven: trial 3 won every round it ran, 1.30x by medians, but left the race (round 3 failed: "
        "signal: SIGKILL), so the baseline is kept."
    ), "not that no finalist won every round"
    lost = finalist("3", [130, 99], dropped="slower than the baseline in round 2")
    assert (
        confirmation(lost, baseline=[100, 101, 99])
        .describe()
        .endswith("No finalist won every round with at least 2% gain, so the baseline is kept.")
    )


def test_the_rounds_a_race_ran_are_counted_in_words():
    one = Confirmation([100.0], [finalist("3", [110])])
    assert "re-measured against the baseline in 1 interleaved round of processes of their own" in one.describe()
    cut = Confirmation([100.0, 101.0], [finalist("3", [110, 111])], None, 5, cut=True)
    said = cut.describe()
    assert "in 2 of 5 planned interleaved rounds of processes" in said
    assert "a proof still counts the 5 rounds planned (a win in every round), not the 2 rounds run; the same" in said
    assert "not the 1 round run;" in Confirmation([100.0], [finalist("3", [110])], None, 5, cut=True).describe()


def test_a_failed_baseline_re_measurement_confirms_nothing():
    result = confirmation(finalist("3", [120]), baseline=[100], failure="confirm-2-baseline: timeout: after 5 s")
    assert not result.confirmed and "failed" in result.describe()


def test_round_trip():
    result = confirmation(finalist("3", [110.0, 111.0, 112.0]), finalist("4", [90.0], dropped="behind"))
    assert Confirmation.from_dict(result.to_dict()) == result


def trim_race(reference, *variants, runs=(110 / 1.015,) * 3):
    """A settled trim race of ``reference`` (3 changes) against ``variants`` (2 changes each), each read ``runs``."""
    return confirmation(
        finalist(reference, [110, 110, 110], changes=3), *(finalist(v, runs, changes=2) for v in variants)
    )


def test_ties_within_noise_one_race_after_another_must_not_add_up_to_a_gain_given_back():
    races = [trim_race("w", "w without a"), trim_race("w without a", "w without a without b")]
    assert [trimmed_to(race).label for race in races] == ["w without a", "w without a without b"], "each a tie"
    first, second = trim_path(races)
    assert first.left.label == "w without a" and first.behind == pytest.approx(1.015) and first.refused is None
    assert second.left.label == "w without a" and second.ends, "nothing undone: the configuration it started from stays"
    assert second.refused.label == "w without a without b" and second.refused_behind == pytest.approx(1.015**2)
    assert second.behind == pytest.approx(1.015)


def test_a_variant_that_read_faster_leaves_room_for_a_later_tie_and_the_trim_ends_at_a_race_undoing_nothing():
    faster = confirmation(finalist("w", [110, 110, 110], changes=3), finalist("w without a", [112.2] * 3, changes=2))
    second = trim_race("w without a", "w without a without b")
    steps = trim_path([faster, second])
    assert [step.left.label for step in steps] == ["w without a", "w without a without b"]
    assert steps[1].behind == pytest.approx(110 / 112.2 * 1.015)

    kept = confirmation(finalist("w", [150, 151, 149], changes=3), finalist("w without a", [110] * 3, changes=2))
    after = trim_path([kept, trim_race("w", "w without b")])
    assert after[0].left.label == "w" and after[0].ends and after[1].left is None, "nothing undone: the trim ended"
    ended = trim_path([confirmation(finalist("w", [150], changes=3, dropped="round 2 failed")), second])
    assert [step.left for step in ended] == [None, None] and ended[0].refused is None
    elsewhere = trim_path([trim_race("w", "w without a"), trim_race("v", "v without b")])
    assert elsewhere[1].left is None, "a race not started from what the race before left is no step of the trim"


def test_a_trim_race_leaves_a_variant_only_where_it_was_shown_to_cost_nothing_against_its_reference():
    tied = confirmation(finalist("w", [110, 111, 109], changes=3), finalist("w without x", [109, 111, 110], changes=2))
    assert trimmed_to(tied).label == "w without x"
    assert trimmed_to(confirmation(finalist("w", [150, 151, 149], changes=3), tied.finalists[1])).label == "w"

    failed = finalist("w", [150], changes=3, dropped="round 2 failed: signal: SIGKILL")
    slower = finalist("w without x", [110, 111, 109], changes=2)
    assert confirmation(failed, slower).winner is slower and trimmed_to(confirmation(failed, slower)) is None
    unproven = finalist("w", [150, 151, 98], changes=3)  # lost round 3 to the baseline, 36 % ahead of the variant
    assert confirmation(unproven, slower).winner is slower and trimmed_to(confirmation(unproven, slower)) is None


def test_a_winner_chosen_among_finalists_tied_with_it_says_so_not_that_it_was_the_fastest():
    # The reviewer's race: trial 2 read the higher median, 2.7 % over trial 0, each faster in one round: a tie, decided
    # by the winner's order (fewer knobs, then less memory), which the words must say.
    winner = finalist("2", [606.4, 620.0], changes=4, memory=364)
    rival = finalist("0", [590.6, 622.0], changes=4, memory=513)
    said = confirmation(winner, rival, baseline=[313.0, 313.0]).why_won()
    assert said.startswith("tied within noise with trial 0 (it read faster in 1 of the 2 rounds both ran); "), said
    assert said.endswith("this one changes as many knobs and uses less memory (364 against 513 MiB)"), said
    fewer = finalist("2", [606.4, 620.0], changes=3)
    assert confirmation(fewer, rival, baseline=[313.0, 313.0]).why_won().endswith("changes fewer knobs (3 against 4)")
