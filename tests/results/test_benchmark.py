"""The benchmark's record: ratios paired by round, their interval, the verdict, and its JSON round trip."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from autotune.benchmark import both_ends, configurations
from autotune.measure.stats import RatioInterval
from autotune.report.benchmark import benchmark_document, benchmark_table, print_benchmark, write_benchmark
from autotune.results.benchmark import Benchmark, Entry, TunedGain
from autotune.results.check import Check
from autotune.trial.result import Disturbance
from tests.conftest import NEUTRAL_KNOBS

BASE = {**NEUTRAL_KNOBS, "batch_size": 16}
BIGGER = {**BASE, "batch_size": 32}


def benchmark(recommended_runs, base_runs=(100.0, 104.0, 98.0)) -> Benchmark:
    rounds = len(base_runs)
    entries = [
        Entry("baseline", "baseline", None, BASE, list(base_runs), [400.0, 410.0, *[405.0] * (rounds - 2)]),
        Entry("recommended", "recommended", None, BIGGER, list(recommended_runs), [500.0] * rounds),
        Entry(
            "baseline + batch_size", "alone", "batch_size", BIGGER,
            [None, 150.0, *[149.0] * (rounds - 2)], [None, *[1] * (rounds - 1)],
        ),
    ]  # fmt: skip
    return Benchmark("p", "cpu", rounds, "recommended.yaml", {"cpu_model": "Test CPU"}, entries)


def test_a_change_whose_alone_or_left_out_is_an_end_is_judged_by_that_ends_runs():
    # One change: alone it is the recommendation, left out the baseline; workers left out take their options along
    # (the baseline), and an option of workers alone does not apply (not measured).
    workers = {**BASE, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    for recommended, knob in ((BIGGER, "batch_size"), (workers, "num_workers")):
        ends = both_ends(BASE, recommended)
        runs = dict(zip([e.label for e in ends], ([100.0, 104.0, 98.0], [150.0, 156.0, 147.0]), strict=True))
        entries = [
            replace(e, throughputs=runs.get(e.label, [120.0, 121.0, 119.0]))
            for e in configurations(BASE, recommended, None, "cpu")
        ]
        record = Benchmark("p", "cpu", 3, "recommended.yaml", {}, entries)
        alone, without = record.share(knob)
        assert without is record.baseline and (alone is record.recommendation) == (knob == "batch_size")
        (share,) = [s for s in benchmark_document(record).sections if s.heading == "Each change's share"]
        line = next(bullet for bullet in share.bullets if bullet.startswith(f"{knob}:"))
        assert "left out, 0.67x the recommendation (0.67-0.67, the change matters) (that is the baseline)" in line
        assert ("(that is the recommendation)" in line) == (knob == "batch_size")
        assert json.loads(json.dumps(record.to_dict()))["shares"][knob] == {"alone": alone.label, "without": "baseline"}
    assert share.bullets[-1] == (
        "persistent_workers: alone not measured (it applies only together with another change); "
        "left out, 0.79x the recommendation (0.75-0.84, the change matters)"
    )


def test_ratios_are_paired_by_round_and_skip_a_failed_run():
    record = benchmark([150.0, 156.0, 147.0])
    assert record.ratios(record.entries[1]) == pytest.approx([1.5, 1.5, 1.5])
    assert record.ratios(record.entries[2]) == pytest.approx([150 / 104, 149 / 98])


@pytest.mark.parametrize(
    ("runs", "verdict"),
    [([150.0, 156.0, 147.0], "gain"), ([90.0, 93.0, 88.0], "loss"), ([101.0, 103.0, 99.0], "within noise")],
)
def test_the_verdict_follows_the_interval(runs, verdict):
    record = benchmark(runs)
    assert record.verdict(record.entries[1]) == verdict


def test_a_configuration_with_one_complete_round_has_no_interval_and_no_verdict_but_too_few_rounds():
    record = benchmark([150.0, None, None])
    assert record.interval(record.entries[1]) is None and record.verdict(record.entries[1]) == "too few rounds"


def test_a_benchmark_stopped_in_its_first_rounds_says_how_many_ran_and_judges_nothing_unmeasured():
    record = benchmark([150.0])
    record.entries.append(Entry("recommended - amp", "without", "amp", {"batch_size": 32}))
    assert record.verdict(record.entries[-1]) == "too few rounds"
    lead = benchmark_document(record).headline
    assert lead.lead == "No verdict." and lead.rest.startswith("1 of 3 rounds measured both the baseline and the")


def test_the_baselines_row_counts_its_runs_other_processes_slowed_as_every_rows_does():
    record = benchmark([150.0, 156.0, 147.0])
    record.entries[0].disturbed[2] = Disturbance(others_cores=1.9)
    assert benchmark_table(record).rows[0][0] == "baseline (1 run disturbed)"


def test_the_runs_an_earlier_version_stored_in_words_read_back_as_what_slowed_them():
    stored = {"label": "baseline", "kind": "baseline", "knob": None, "knobs": BASE, "throughputs": [100.0, 90.0]}
    entry = Entry.from_dict({**stored, "disturbed": ["round 2: 1.9 cores", "round 3: the cores ran 1.4x slow"]})
    assert entry.disturbed == {2: Disturbance(others_cores=1.9), 3: Disturbance(cores_slowdown=1.4)}


def test_the_record_is_written_first_and_reads_back(tmp_path):
    record = benchmark([150.0, 156.0, 147.0, 153.0], base_runs=(100.0, 104.0, 98.0, 102.0))
    record.entries[1].disturbed[3] = Disturbance(gpu_processes=1, cores_slowdown=1.5)
    files = write_benchmark(record, tmp_path)
    assert list(files) == ["benchmark.json", "benchmark.md", "benchmark.html"]
    assert Benchmark.from_dict(json.loads(files["benchmark.json"].read_text())) == record
    assert record.memory_change(record.entries[1]) == pytest.approx(500 / 405)
    document = benchmark_document(record)
    assert document.headline.lead == "The recommendation: 1.50x the baseline (gain)."
    headings = ["Configurations", "Measured on a busy machine", "Each change's share"]  # round 3 slowed a run
    assert [section.heading for section in document.sections][:3] == headings


@pytest.mark.parametrize(
    ("without_runs", "said"),
    [
        ([120.0, 125.0, 118.0], "0.80x the recommendation (0.798-0.805, the change matters)"),  # bounds told apart
        ([149.0, 157.0, 148.0], "1.00x the recommendation (0.98-1.02, not shown to matter)"),
    ],
)
def test_a_change_left_out_is_judged_against_the_recommendation_paired_by_round(without_runs, said):
    # Both left-out configurations read well above the baseline (a gain against it): only the pairing with the
    # recommendation tells a change that matters from one that does not.
    record = benchmark([150.0, 156.0, 147.0])
    record.entries[1] = replace(record.entries[1], knobs={**BIGGER, "amp": "bf16"})
    record.entries.append(Entry("baseline + amp", "alone", "amp", {**BASE, "amp": "bf16"}, [101.0] * 3, [1.0] * 3))
    record.entries.append(Entry("recommended - amp", "without", "amp", BIGGER, without_runs, [1.0] * 3))
    assert record.verdict(record.entries[-1]) == "gain"
    (share,) = [s for s in benchmark_document(record).sections if s.heading == "Each change's share"]
    assert share.bullets[-1] == f"amp: alone 1.00x the baseline (0.93-1.08, within noise); left out, {said}"
    out = io.StringIO()
    print_benchmark(record, {}, out)  # the terminal says it too: its table's verdicts are against the baseline
    assert "Each change's share:\n" in out.getvalue() and f"  {share.bullets[-1]}\n" in out.getvalue()
    row = json.loads(json.dumps(record.to_dict()))["entries"][-1]
    assert row["to_recommended_verdict"] == ("loss" if "matters" in said else "within noise")
    assert Benchmark.from_dict(record.to_dict()) == record


def test_a_round_in_which_something_slowed_either_run_is_left_out_of_the_ratio_where_three_rounds_are_left():
    record = benchmark([150.0, 156.0, 147.0, 153.0], base_runs=(100.0, 30.0, 98.0, 102.0))
    record.entries[0].disturbed[2] = Disturbance(cores_slowdown=3.3)
    assert record.ratios(record.recommendation) == pytest.approx([1.5, 147 / 98, 1.5])
    record.entries[1].disturbed[3] = Disturbance(others_cores=1.0)  # two quiet rounds left: they bound nothing
    assert record.ratios(record.recommendation) == pytest.approx([1.5, 5.2, 147 / 98, 1.5])


def test_where_most_rounds_were_slowed_every_round_counts():
    # Five rounds, the cores read slow around three: the two quiet ones alone (Student's t 12.7) would say 0.99-2.23x,
    # within noise, of a gain of 1.44-1.55x every round shows; all five count, as where one quiet round is left.
    record = benchmark([150.0, 140.0, 160.0, 150.0, 145.0], base_runs=(100.0, 95.0, 104.0, 98.0, 101.0))
    for index in (1, 2, 3):
        record.entries[0].disturbed[index] = Disturbance(cores_slowdown=1.5)
    assert len(record.ratios(record.recommendation)) == 5
    assert record.verdict(record.recommendation) == "gain"
    del record.entries[0].disturbed[3]  # three quiet rounds of five: the slowed ones are left out
    assert record.ratios(record.recommendation) == pytest.approx([160 / 104, 150 / 98, 145 / 101])


def test_an_interval_whose_bounds_differ_or_lie_either_side_of_one_never_prints_them_alike():
    tight = benchmark([100.35, 104.4, 98.4])  # a gain of 1.0031-1.0045: "1.00-1.00" to two decimals
    assert tight.verdict(tight.recommendation) == "gain"
    assert "95 % interval 1.003-1.005 over 3 paired rounds" in str(benchmark_document(tight).headline)
    assert benchmark_table(tight).rows[1][3] == "1.003-1.005"
    spanning = benchmark([102.5, 105.04, 100.94])  # 0.996-1.05: "1.00" beside "within noise" would read as a gain
    assert spanning.verdict(spanning.recommendation) == "within noise"
    assert benchmark_table(spanning).rows[1][3] == "0.996-1.05"


def test_a_stopped_benchmark_states_stopped_for_each_verdict_its_figures_kept_and_a_finished_one_what_its_rounds_read(
    tmp_path,
):
    finished = benchmark([150.0, 156.0, 147.0])
    finished.entries[1] = replace(finished.entries[1], knobs={**BIGGER, "amp": "bf16"})
    finished.entries.append(Entry("recommended - amp", "without", "amp", BIGGER, [120.0, 125.0, 118.0], [1.0] * 3))
    stopped = replace(finished, stopped=True)
    readings = ["gain", "gain", "gain"]  # the recommendation, alone and left out against the baseline
    for record, verdicts, left_out in ((finished, readings, "loss"), (stopped, ["stopped"] * 3, "stopped")):
        data = json.loads(json.dumps(record.to_dict()))
        assert [row["verdict"] for row in data["entries"]] == [None, *verdicts]
        assert data["entries"][-1]["to_recommended_verdict"] == left_out
        assert [row[4] for row in benchmark_table(record).rows] == ["", *verdicts]
        assert Benchmark.from_dict(data) == record
    kept = ("ratios", "interval", "to_recommended")  # the rounds that ran: provisional figures
    assert [{k: row.get(k) for k in kept} for row in stopped.to_dict()["entries"]] == [
        {k: row.get(k) for k in kept} for row in finished.to_dict()["entries"]
    ]
    # A stopped benchmark.json an earlier version wrote, its verdicts the rounds' readings, reads as stopped.
    assert Benchmark.from_dict({**finished.to_dict(), "stopped": True}) == stopped
    write_benchmark(stopped, tmp_path)
    out = io.StringIO()
    print_benchmark(stopped, {}, out)
    table = " ".join(line for line in out.getvalue().splitlines() if line.startswith("|"))
    markdown = " ".join(line for line in (tmp_path / "benchmark.md").read_text().splitlines() if line.startswith("|"))
    for said in (table, markdown):
        assert said.count("| stopped |") == 3 and not {"gain", "loss", "noise"} & set(said.replace("|", " ").split())
    assert "<td>stopped</td>" in (tmp_path / "benchmark.html").read_text()
    assert "<td>gain</td>" not in (tmp_path / "benchmark.html").read_text()
    assert "left out, 0.80x the recommendation (0.798-0.805, stopped)" in out.getvalue()
    assert "provisional, as are the figures below." in out.getvalue()
    assert not [word for word in ("gain", "loss", "noise", "matter") if word in out.getvalue()], "headline, shares"


def test_a_stopped_check_keeps_its_own_verdict_and_its_benchmark_states_stopped_per_entry():
    record = benchmark([150.0, 156.0, 147.0])
    check = Check(1.5, 0.1, replace(record, entries=record.entries[:2], stopped=True))
    data = json.loads(json.dumps(check.to_dict()))
    assert data["verdict"] == "stopped" and [e["verdict"] for e in data["benchmark"]["entries"]] == [None, "stopped"]
    assert Check.from_dict(data) == check and Check.from_dict(data).verdict == "stopped"
    assert replace(check, benchmark=replace(check.benchmark, stopped=False)).verdict == "holds"


def test_a_stopped_benchmarks_picture_draws_every_configuration_alike_and_says_why():
    from matplotlib.figure import Figure

    from autotune.report.plots import BASELINE, OTHER, RECOMMENDED, VERDICT_COLOUR, benchmark_ratios

    def colours(record: Benchmark) -> set[str]:
        ax = Figure().subplots()
        benchmark_ratios(record).draw(ax)
        return {line.get_color() for line in ax.get_lines()} - {BASELINE, RECOMMENDED}  # the lines at 1 and at it

    finished = benchmark([150.0, 156.0, 147.0])
    stopped = replace(finished, stopped=True)
    assert colours(finished) == {VERDICT_COLOUR["gain"]} and colours(stopped) == {OTHER}
    assert (
        "provisional" in benchmark_ratios(stopped).caption and "green, a gain" not in benchmark_ratios(stopped).caption
    )
    assert "green, a gain" in benchmark_ratios(finished).caption


def busy(sections) -> str:
    """The paragraph of the section on the runs something slowed, of a document's ``sections``."""
    (section,) = [section for section in sections if section.heading == "Measured on a busy machine"]
    return " ".join(section.paragraphs)


def test_where_most_rounds_were_slowed_the_headline_calls_its_verdict_unreliable_and_every_page_says_why(tmp_path):
    # The review's run: a load slowed a run of the baseline or the recommendation in every round, so every round
    # counts (``quiet_rounds``): "within noise" alone would read as a measured verdict.
    record = benchmark([150.0, 140.0, 160.0, 150.0, 145.0], base_runs=(100.0, 95.0, 104.0, 98.0, 30.0))
    record.entries[2].throughputs.extend([148.0, 151.0])
    for index in (1, 2, 3, 4, 5):
        record.entries[1].disturbed[index] = Disturbance(cores_slowdown=1.4 + index / 10)
    record.entries[0].disturbed[5] = Disturbance(others_cores=1.2, cores_slowdown=1.4)
    lead = benchmark_document(record).headline.lead
    assert lead == (
        "The recommendation: 1.91x the baseline (within noise; unreliable, as it counts runs something slowed: see "
        "below)."
    )
    said = busy(benchmark_document(record).sections)
    assert said.startswith(
        "6 of the 16 runs measured were slowed by something beside them: the cores ran 1.4-1.9x slow in 6 of them, "
        "other processes busy (1.2 cores) in 1 of them."
    )
    assert "slowed in all 5 rounds that ran both, so the headline's ratio counts every round" in said
    assert "Of the other configurations' ratios to the baseline, 1 leaves them out." in said  # round 5's baseline
    assert said.endswith("run the benchmark again when the machine is quiet.")
    row = record.to_dict()["entries"][1]
    assert (row["slowed_rounds"], row["rounds_left_out"]) == ([1, 2, 3, 4, 5], [])
    assert Benchmark.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    files = write_benchmark(record, tmp_path)
    out = io.StringIO()
    print_benchmark(record, files, out)
    for page in (out.getvalue(), files["benchmark.md"].read_text(), files["benchmark.html"].read_text()):
        words = " ".join(page.split())
        assert "Measured on a busy machine" in words and "unreliable, as it counts runs something slowed" in words


def test_where_the_slowed_rounds_are_left_out_the_verdict_stands_and_the_rounds_are_named():
    record = benchmark([150.0, 156.0, 147.0, 153.0], base_runs=(100.0, 30.0, 98.0, 102.0))
    record.entries[0].disturbed[2] = Disturbance(cores_slowdown=3.3)
    assert benchmark_document(record).headline.lead == "The recommendation: 1.50x the baseline (gain)."
    assert benchmark_document(record).headline.rest.startswith(
        "95 % interval 1.50-1.50 over 3 paired rounds (round 2 left out: a run of it was slowed) on cpu"
    ), "the headline says which rounds its interval counts, as the tune's does"
    said = busy(benchmark_document(record).sections)
    assert said.startswith("1 of the 11 runs measured was slowed by something beside it: round 2 baseline: the cores")
    assert "The recommendation's ratio to the baseline leaves out round 2, in which a run of one of the two" in said
    # baseline + batch_size failed in round 1: of its rounds with the baseline, one is left quiet, too few to count
    assert "Of the other configurations' ratios to the baseline, 1 counts the slowed rounds, too few being" in said
    assert record.to_dict()["entries"][1]["rounds_left_out"] == [2]
    assert not busy_sections(benchmark([150.0, 156.0, 147.0])), "nothing slowed: no section"


def busy_sections(record: Benchmark) -> list:
    return [s for s in benchmark_document(record).sections if s.heading == "Measured on a busy machine"]


@pytest.mark.parametrize(
    ("tuned", "said"),
    [
        (None, ""),
        (
            TunedGain(1.911, RatioInterval(1.911, 1.58, 2.32, 3)),
            " When tuned: 1.91x (95 % interval 1.58-2.32 over 3 paired rounds), which overlaps this one.",
        ),
        (
            TunedGain(2.5, RatioInterval(2.5, 2.2, 2.9, 3)),
            " When tuned: 2.50x (95 % interval 2.20-2.90 over 3 paired rounds), apart from this one: the gain here "
            "differs from the tuned one beyond noise.",
        ),
        # Single runs, one round or an older file: its own noise unknown, no verdict either way, however far apart.
        *(
            (
                TunedGain(speedup),
                f" When tuned: {speedup:.2f}x; its file records no interval (single runs, one race "
                "round, or a file from before autotune kept one): nothing to compare.",
            )
            for speedup in (1.52, 1.8)
        ),
    ],
)
def test_the_headline_gives_the_medians_ratio_where_it_reads_otherwise_and_the_tuned_gain_beside_this_one(tuned, said):
    # Ratios 1.5, 1.6 and 1.41 by round: their geometric mean 1.50x, as the medians' (150 over 100) reads.
    record = replace(benchmark([150.0, 166.4, 137.8]), tuned=tuned)
    rest = benchmark_document(record).headline.rest
    assert rest == f"95 % interval 1.28-1.76 over 3 paired rounds on cpu.{said}"
    assert Benchmark.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    skewed = benchmark([150.0, 156.0, 147.0, 200.0], base_runs=(100.0, 104.0, 98.0, 100.0))  # medians 153/100
    assert benchmark_document(skewed).headline.rest.startswith(
        "95 % interval 1.28-2.03 over 4 paired rounds on cpu (the geometric mean of their ratios; 1.53x by the "
        "medians of those rounds)."
    )


def _amp_share_line(record: Benchmark) -> str:
    (share,) = [s for s in benchmark_document(record).sections if s.heading == "Each change's share"]
    return share.bullets[-1]


def test_a_share_line_names_the_slowed_rounds_its_ratio_leaves_out_or_counts():
    record = benchmark([150.0, 156.0, 147.0, 151.0], base_runs=(100.0, 104.0, 98.0, 101.0))
    record.entries[1] = replace(record.entries[1], knobs={**BIGGER, "amp": "bf16"})
    record.entries.append(Entry("baseline + amp", "alone", "amp", {**BASE, "amp": "bf16"}, [101.0] * 4, [1.0] * 4))
    left_out = Entry("recommended - amp", "without", "amp", BIGGER, [120.0, 125.0, 118.0, 121.0], [1.0] * 4)
    record.entries.append(left_out)
    assert _amp_share_line(record).endswith("the change matters)")  # every round quiet: nothing to say
    left_out.disturbed[4] = Disturbance(cores_slowdown=1.5)
    alone, without = _amp_share_line(record).split("; left out, ")
    assert alone.endswith("within noise)") and without.endswith("; round 4 left out: a run of it was slowed)")
    for index in (1, 2, 3):  # most rounds slowed: they all count, and the line says so
        left_out.disturbed[index] = Disturbance(cores_slowdown=1.5)
    said = "; counting rounds 1, 2, 3 and 4, slowed, too few rounds being quiet to leave them out)"
    assert _amp_share_line(record).endswith(said)


def test_a_benchmark_counting_one_run_the_cores_reading_flagged_says_it_may_be_a_little_off():
    record = benchmark([150.0, 156.0, 147.0], base_runs=(100.0, 104.0, 98.0))
    record.entries[0].disturbed[2] = Disturbance(cores_slowdown=1.5)  # two quiet rounds left: too few to leave it out
    lead = benchmark_document(record).headline.lead
    assert lead == (
        "The recommendation: 1.50x the baseline (gain; it counts a run the cores' reading flagged slow, so it may be "
        "a little off: see below)."
    ), lead
    record.entries[0].disturbed[2] = Disturbance(others_cores=1.2)
    assert "unreliable, as it counts runs something slowed" in benchmark_document(record).headline.lead
