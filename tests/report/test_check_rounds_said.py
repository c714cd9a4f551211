"""mode=check's ``now:`` line names the rounds its speedup does not stand on alike, by the benchmark's rule and in
its words: those left out as a run of them was slowed, those counted slowed as too few were quiet (a little off, or
unreliable), and those in which a run failed; its header's rounds and the paired rounds it counts then add up."""

from __future__ import annotations

from autotune.report.check import now_line
from autotune.results.benchmark import Benchmark, Entry
from autotune.results.check import Check
from autotune.trial.result import Disturbance

SLOWED = Disturbance(cores_slowdown=1.5)


def check(base: list[float | None], rec: list[float | None], slowed: tuple[int, ...] = ()) -> Check:
    """A check of 2.0x whose rounds ran the baseline and the recommendation at these samples/s (None: the run
    failed), something beside the baseline's run slowing it in the rounds ``slowed``."""
    entries = [
        Entry("baseline", "baseline", None, {}, throughputs=base, disturbed=dict.fromkeys(slowed, SLOWED)),
        Entry("recommended", "recommended", None, {"batch_size": 32}, throughputs=rec),
    ]
    return Check(2.0, 0.10, Benchmark("tiny", "cpu", len(base), "report.json", {}, entries))


def test_rounds_left_out_as_slowed_are_named_as_the_benchmark_names_them():
    record = check([100.0, 60.0, 102.0, 70.0, 98.0], [180.0, 175.0, 190.0, 185.0, 182.0], slowed=(2, 4))
    line = now_line(record)
    assert line.endswith("over 3 paired rounds (rounds 2 and 4 left out: a run of each was slowed)"), line


def test_slowed_rounds_counted_as_too_few_were_quiet_are_said_to_make_it_a_little_off_or_unreliable():
    record = check([100.0, 60.0, 102.0], [180.0, 175.0, 190.0], slowed=(2,))  # two quiet rounds: too few to leave any
    assert now_line(record).endswith(
        "over 3 paired rounds (may be a little off, counting round 2, slowed, too few rounds being quiet to leave it "
        "out)"
    ), "one run of three the cores' reading flagged: about 0.94x"
    most = check([100.0, 60.0, 70.0], [180.0, 175.0, 190.0], slowed=(2, 3))
    assert "(unreliable, counting rounds 2 and 3, slowed," in now_line(most), "most rounds slowed"
    record.benchmark.baseline.disturbed[2] = Disturbance(others_cores=1.5)
    assert "(unreliable, counting round 2, slowed," in now_line(record), "other processes took the cores"


def test_rounds_in_which_a_run_failed_are_named():
    record = check([100.0, 104.0, None, 98.0], [180.0, None, 190.0, 185.0])
    line = now_line(record)
    assert line.endswith("over 2 paired rounds (rounds 2 and 3 left out: a run of each failed)"), line


def test_a_round_left_out_as_slowed_and_one_whose_run_failed_are_both_named():
    record = check([100.0, 60.0, None, 102.0, 98.0, 101.0], [180.0, 175.0, 185.0, 190.0, 182.0, 181.0], slowed=(2,))
    line = now_line(record)
    assert line.endswith(
        "over 4 paired rounds (round 2 left out: a run of it was slowed; round 3 left out: a run of it failed)"
    ), line


def test_where_every_round_counts_alike_nothing_follows_the_paired_rounds():
    assert now_line(check([100.0, 104.0, 98.0], [180.0, 190.0, 185.0])).endswith("over 3 paired rounds")
