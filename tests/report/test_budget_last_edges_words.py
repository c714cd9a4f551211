"""What the reports say at study.budget_s's last edges: a race cut short of proving a finalist that is not its
leader (the leader left it) still says the budget cut it and that the same command goes on; a probe the budget
ended is probed anew by a later run, on the console as in the report."""

from __future__ import annotations

from dataclasses import replace

from autotune.records import ProbeRecord
from autotune.report.console import format_probe
from autotune.report.headline import headline
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from autotune.results.tuner_time import RunTime, TunerTime
from tests.results.test_summary import results_with, trial

LEFT, SHORT = trial("3", 150.0, batch_size=64), trial("5", 120.0, batch_size=32)


def test_a_race_cut_short_of_proving_a_finalist_says_so_where_its_leader_left_the_race():
    failed = Finalist("3", LEFT.result.knobs, 1, 100.0, [150.0])
    failed.fail("exception: RuntimeError: boom")  # its run of round 2 failed: it left the race
    short = Finalist("5", SHORT.result.knobs, 1, 100.0, [110.0, 112.0])
    race = Confirmation([100.0, 100.0], [failed, short], None, 3, True, {}, ["3", "5"])
    assert race.leader is failed and race.short_of_rounds(short) and not race.short_of_rounds(failed)
    budget = TunerTime([RunTime(0.0, 600.0, {"race": 90.0}, {}, True, 600.0, ["confirm round 3"])])
    summary = summarise(replace(results_with(LEFT, SHORT), confirmation=race, tuner_time=budget))
    said = headline(summary)
    assert said.lead == "Keep your current settings." and said.rest.startswith(
        "study.budget_s left the race too few rounds to prove the fastest trials: the best still racing, trial 5, "
        "measured 1.11x by medians of 2 of the 3 planned interleaved rounds, and a proof takes a win in every round"
    )
    assert "The same command again goes on from the stored rounds" in said.rest


def test_the_console_says_a_later_run_probes_anew_where_the_budget_ended_the_probe():
    capped = ProbeRecord(4.5, failure="timeout: timeout after 4.5 s: all that study.budget_s had left", retry=True)
    assert format_probe(capped).endswith("the search goes on without it; a later run probes anew")
    assert format_probe(replace(capped, retry=False)).endswith("the search goes on without it"), "failed for good"
