"""The reports give waiting for other tuners and idle parallel slots phases of their own: report.json, the report's
words and its stacked bar, and the console's line."""

from __future__ import annotations

from dataclasses import replace

from matplotlib.figure import Figure

from autotune.report import plots
from autotune.report.study_document import build_document
from autotune.report.tuner_time import tuner_time_data, tuner_time_line
from autotune.results.summary import summarise
from autotune.results.tuner_time import IDLE, TUNER, WAITING, RunTime, TunerTime
from tests.report.test_reports import sample_results

# A search of two slots (one idle 145 s) after which the run waited 60 s for another tuner's turn at the race.
SPLIT = TunerTime(
    [
        RunTime(
            0.0,
            400.0,
            {"search": 300.0},
            {"search": {"startup": 0.2, "windows": 154.8, IDLE: 145.0}, TUNER: {WAITING: 60.0}},
            finished=True,
        )
    ]
)


def test_waiting_and_idle_slots_are_phases_of_their_own_in_report_json():
    data = tuner_time_data(SPLIT)
    assert data["phases_s"][IDLE] == 145.0 and data["phases_s"][WAITING] == 60.0
    assert data["phases_s"][TUNER] == 40.0, "what remains: not the 205 s of waits and idle slots"
    assert data["by_stage_s"]["tuner"] == {WAITING: 60.0, TUNER: 40.0}
    assert sum(data["phases_s"].values()) == 400.0


def test_the_reports_words_bar_and_console_line_name_them():
    results = replace(sample_results(), tuner_time=SPLIT)
    (section,) = [s for s in build_document(results, summarise(results)).sections if s.heading.startswith("Where the")]
    by_stage = {row[0]: row[3] for row in section.table.rows}
    assert by_stage["search"] == "start-up 0.2, timed windows 154.8, idle parallel slots 145.0"
    assert by_stage["outside the stages"] == "waiting for other tuners 60.0, the tuner's own work 40.0"
    assert "waiting for other tuners of a shared study" in section.paragraphs[0]
    assert "idle parallel slots (study.parallel" in section.paragraphs[0]
    ax = Figure().subplots()
    plots.tuner_time(SPLIT).draw(ax)
    drawn = [handle.get_label() for handle in ax.containers]
    assert "idle parallel slots" in drawn and "waiting for other tuners" in drawn
    line = tuner_time_line(SPLIT)
    assert "idle parallel slots 36 %" in line and "waiting for other tuners 15 %" in line, line
