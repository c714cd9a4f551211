"""The report's pictures say only what the study measured and decided."""

from __future__ import annotations

from dataclasses import replace

import pytest
from matplotlib.figure import Figure

from autotune.measure.profiling import StageTiming
from autotune.records import TrialRecord
from autotune.report import plots
from autotune.report.profile_plots import paired_stage_bars, stage_percents
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.race_rules import TIE_TOLERANCE
from autotune.results.summary import summarise
from autotune.study.pruner import SlowerThanBestPruner
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.results.test_summary import failed, results_with, trial
from tests.study.test_tuner import BASELINE, fake_result


def drawn(plot: plots.Plot):
    ax = Figure().subplots()
    plot.draw(ax)
    return ax


def collection(ax, label: str):
    return next(c for c in ax.collections if c.get_label() == label)


def pruned(label: str, message: str, reading: float | None) -> TrialRecord:
    failure = Failure(FailureKind.PRUNED, message, reading)
    return TrialRecord(label, TrialResult({**BASELINE, "amp": "bf16"}, failure=failure))


def trim_variant_results(variant_run: float = 150.0, others: int = 0):
    """Trial 0 (two changes) proven, then its trim recommends it without num_threads (first run ``variant_run``);
    ``others`` more trials, each faster by single run than that run."""
    winner = trial("0", 200.0, batch_size=32, num_threads=1)
    knobs = winner.result.knobs
    extra = [trial(str(i), 160.0 + i, amp="bf16", batch_size=16 * (i % 3 + 1)) for i in range(1, others + 1)]
    labels = ["0", *[e.label for e in extra]]
    proven = Confirmation([100.0] * 3, [Finalist("0", knobs, 2, 100.0, [200.0, 205.0, 198.0])], None, 3, trials=labels)
    undone = {**knobs, "num_threads": BASELINE["num_threads"]}
    tied = Finalist(
        "0 without num_threads", undone, 1, 90.0, [199.0, 201.0, 200.0], result=fake_result(undone, variant_run)
    )
    race = Confirmation([100.0] * 3, [Finalist("0", knobs, 2, 100.0, [200.0] * 3), tied], None, 3)
    return replace(results_with(winner, *extra), confirmation=proven, trim=[race])


def test_a_pruned_trial_is_drawn_at_the_reading_the_pruner_stopped_it_at_and_a_failed_one_claims_none():
    reason = SlowerThanBestPruner(0.25, lambda: 250.0).reason(182.4) + "; its compile took 3.0 s"
    results = results_with(trial("0", 250.0, batch_size=32), pruned("1", reason, 182.4), failed("2"))
    summary = summarise(results)
    ax = drawn(plots.trials_in_order(results, summary))
    points = collection(ax, plots.STATE_STYLE["pruned"][2]).get_offsets()
    assert points.tolist() == [[2.0, 182.4]], "at its reading when stopped (above the baseline's 100), not made up"
    no_reading = collection(ax, plots.UNREAD_LABEL["failed"])
    assert no_reading.get_transform() != ax.transData, "on the axis, at no throughput"
    assert no_reading.get_offsets().tolist() == [[3.0, 0.0]]


def test_a_pruned_trial_stored_without_its_reading_claims_none():
    results = results_with(trial("0", 250.0, batch_size=32), pruned("1", "stopped", reading=None))
    ax = drawn(plots.trials_in_order(results, summarise(results)))
    assert collection(ax, plots.UNREAD_LABEL["pruned"]).get_transform() != ax.transData


def test_the_time_split_always_shows_the_recommendation():
    summary = summarise(trim_variant_results(variant_run=150.0, others=9))
    assert summary.recommended.label == "0 without num_threads"
    assert len([r for r in summary.ranked if r.result.ok]) > 9, "more than the first 8 ranked, the baseline and it"
    labels = [t.get_text() for t in drawn(plots.time_split(summary)).get_yticklabels()]
    assert "trial 0 without num_threads (recommended)" in labels
    assert "baseline" in labels


def test_trials_in_order_rings_a_recommendation_the_trim_made():
    results = trim_variant_results()
    summary = summarise(results)
    ax = drawn(plots.trials_in_order(results, summary))
    ring = collection(ax, "recommended").get_offsets().tolist()
    assert ring == [[2.0, 150.0]], "after the trials (base, 0), at the variant's own run"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "0", "trim"]
    assert "0 without num_threads" in plots.trials_in_order(results, summary).caption


def test_undone_changes_draws_the_statistic_the_trim_decides_by_and_its_decision():
    winner = trial("0", 200.0, batch_size=32, num_threads=1, amp="bf16")
    knobs = winner.result.knobs
    proven = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3)], None, 3, trials=["0"])
    no_threads = {**knobs, "num_threads": BASELINE["num_threads"]}
    no_amp = {**knobs, "amp": BASELINE["amp"]}
    costs = Finalist(
        "0 without num_threads", no_threads, 2, 90.0, [180.0, 198.0, 198.0], result=fake_result(no_threads)
    )
    free = Finalist("0 without amp", no_amp, 2, 90.0, [201.0, 199.0, 200.0], result=fake_result(no_amp, 200.0))
    race = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3), costs, free], None, 3)
    summary = summarise(replace(results_with(winner), confirmation=proven, trim=[race]))
    assert summary.no_difference == {"amp": "bf16"}, "num_threads kept: undoing it lost every round, 4 % by geomean"
    ax = drawn(plots.undone_changes(summary))
    diamonds = [line for line in ax.lines if line.get_marker() == "D"]
    kept, undone = diamonds
    assert kept.get_xdata()[0] == pytest.approx((0.90 * 0.99 * 0.99) ** (1 / 3)), "the geometric mean, not the median"
    assert (kept.get_color(), kept.get_label()) == (plots.RECOMMENDED, "kept: the configuration it came from beat it")
    assert (undone.get_color(), undone.get_label()) == (plots.BASELINE, "undone: undoing it cost nothing")


def amp_undone(without_amp: list[float]):
    """The summary of a winner at 200 samples/s changing three knobs whose trim race read it without bf16 at
    ``without_amp``, round by round."""
    winner = trial("0", 200.0, batch_size=32, num_threads=1, amp="bf16")
    knobs = winner.result.knobs
    proven = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3)], None, 3, trials=["0"])
    no_amp = {**knobs, "amp": BASELINE["amp"]}
    median = sorted(without_amp)[1]
    variant = Finalist("0 without amp", no_amp, 2, 90.0, without_amp, result=fake_result(no_amp, median))
    race = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3), variant], None, 3)
    return summarise(replace(results_with(winner), confirmation=proven, trim=[race]))


def test_undone_changes_caption_names_only_the_colours_in_its_picture_in_plain_words():
    caption = plots.undone_changes(amp_undone([201.0, 199.0, 200.0])).caption
    assert "Grey: undone, as undoing it cost nothing beyond noise" in caption
    assert "(rules: docs/how-it-decides.md)" in caption
    for absent in ("Blue", "Orange", "Purple", "orange", "purple", "trim_path", "race.py"):
        assert absent not in caption, f"{absent}: not in this picture, or not the user's to use"


def test_a_change_whose_undoing_ran_faster_beyond_the_band_is_undone_in_words_true_of_it():
    summary = amp_undone([212.0, 210.0, 211.0])
    assert summary.no_difference == {"amp": "bf16"}, "undone: 5 % faster without it, beyond the band"
    plot = plots.undone_changes(summary)
    (diamond,) = [line for line in drawn(plot).lines if line.get_marker() == "D"]
    assert diamond.get_xdata()[0] > 1 + TIE_TOLERANCE and diamond.get_color() == plots.BASELINE
    assert "no difference" not in diamond.get_label() + plot.caption, "it made one: it ran faster without it"
    assert "a grey diamond right of the band: it ran faster without it" in plot.caption


def test_the_trim_charts_labels_lie_inside_its_picture_however_many_changes_a_variant_undid():
    # A variant that undid three changes at once has a long label; on one line it left the plot narrower than its
    # x label, which passed the picture's right edge.
    winner = trial("0", 200.0, batch_size=32, num_threads=1, persistent_workers=True, channels_last=True)
    knobs = winner.result.knobs
    proven = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3)], None, 3, trials=["0"])
    undone = {**knobs, **{k: BASELINE[k] for k in ("num_threads", "persistent_workers", "channels_last")}}
    label = "0 without num_threads without persistent_workers without channels_last"
    variant = Finalist(label, undone, 3, 90.0, [199.0, 201.0, 200.0], result=fake_result(undone, 200.0))
    race = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3), variant], None, 3)
    plot = plots.undone_changes(summarise(replace(results_with(winner), confirmation=proven, trim=[race])))
    figure = plots.figure_of(plot)
    figure.draw_without_rendering()  # lays the figure out as saving it does
    (ax,) = figure.axes
    for text in (ax.xaxis.label, *ax.get_yticklabels()):
        extent = text.get_window_extent()
        assert figure.bbox.x0 <= extent.x0 and extent.x1 <= figure.bbox.x1, text.get_text()
        assert figure.bbox.y0 <= extent.y0 and extent.y1 <= figure.bbox.y1, text.get_text()
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "0 without num_threads\nwithout persistent_workers\nwithout channels_last"
    ], "broken before a 'without', each change's name whole"


def test_a_legend_too_wide_for_four_columns_takes_fewer_inside_the_picture_which_grows_by_the_rows_they_add():
    # Without workers, every stage of the training process: eight labels, one of them long (two rows of four).
    seconds = dict(wait_s=[0.05] * 2, transfer_s=[0.01] * 2, forward_s=[0.05] * 2, optimizer_s=[0.01] * 2)
    stages = StageTiming(2, 32, 0, 1.0, **seconds, step_s=[0.2] * 2, fetch_s=[0.02] * 2, collate_s=[0.01] * 2)
    plot = paired_stage_bars({"baseline": stages})
    figure = plots.figure_of(plot)
    figure.draw_without_rendering()
    (legend,) = figure.legends
    extent = legend.get_window_extent()
    assert len(legend.get_texts()) == 8
    assert 0 <= extent.x0 and extent.x1 <= figure.bbox.width
    assert figure.get_figheight() > plot.height, "three rows of three take a row more than two of four"


def test_the_profiling_picture_claims_no_race():
    stages = StageTiming(2, 16, 0, 1.0, *([[0.01, 0.01]] * 7))
    caption = paired_stage_bars({"baseline": stages, "recommendation": stages}).caption
    assert "race" not in caption, "an unconfirmed recommendation has none, and the ranking is by single runs"


def test_a_steps_stages_in_whole_percents_add_up_to_the_step():
    # Waiting, forward, and loss and backward a third of the step each: 33 % each, rounded one by one, sum to 99.
    thirds = StageTiming(1, 16, 1, 0.03, [0.01], [0.0], [0.01], [0.0], [0.02], [0.0], [0.0])
    shares = stage_percents(thirds)
    assert sum(shares.values()) == 100
    assert [shares[s] for s in ("waiting for data", "forward", "loss and backward")] == [34, 33, 33]


def test_undone_changes_labels_a_change_kept_though_its_undoing_tied_and_one_not_settled_apart_from_one_that_costs():
    winner = trial("0", 200.0, batch_size=32, num_threads=1, amp="bf16")
    knobs = winner.result.knobs
    proven = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3)], None, 3, trials=["0"])
    no_threads = {**knobs, "num_threads": BASELINE["num_threads"]}
    no_amp = {**knobs, "amp": BASELINE["amp"]}
    # 2.6 % slower by the paired ratios: a tie, but undoing it would give back TRIM_BOUND or more (trim_path).
    tied = Finalist("0 without num_threads", no_threads, 2, 90.0, [195.0] * 3, result=fake_result(no_threads, 195.0))
    failed = Finalist("0 without amp", no_amp, 2, 90.0, [199.0], "round 2 failed: x", fake_result(no_amp, 199.0))
    race = Confirmation([100.0] * 3, [Finalist("0", knobs, 3, 100.0, [200.0] * 3), tied, failed], None, 3)
    summary = summarise(replace(results_with(winner), confirmation=proven, trim=[race]))
    assert summary.no_difference == {} and summary.trim_steps[0].refused is tied
    ax = drawn(plots.undone_changes(summary))
    diamonds = [line for line in ax.lines if line.get_marker() == "D"]
    assert [(d.get_color(), d.get_label()) for d in diamonds] == [
        plots.FOUND_STYLE["tied"],
        plots.FOUND_STYLE["unsettled"],
    ]
    assert "kept: the configuration it came from beat it" not in [d.get_label() for d in diamonds], (
        "neither was shown to cost"
    )
    caption = plots.undone_changes(summary).caption
    assert "Orange: kept though undoing it tied" in caption and "Purple: kept" in caption
    assert "Grey" not in caption and "Blue" not in caption
