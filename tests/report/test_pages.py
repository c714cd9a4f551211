"""The pictures of report.html and benchmark.html, and both pages opened in a real headless Chromium.

The study behind the pages is a real Optuna study (search, race, trim and importance through the tuner's own code) on
a fake pipeline whose throughput is a known function of its knobs, plus a pruned and a failed record.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from autotune.knobs import KNOBS
from autotune.records import ProbeRecord, TrialRecord
from autotune.report import write_reports
from autotune.report.benchmark import benchmark_document, write_benchmark
from autotune.report.diagnosis import profile_document
from autotune.report.document import machine_lines
from autotune.report.plots import png
from autotune.report.study_document import build_document
from autotune.results.benchmark import Benchmark, Entry
from autotune.results.model import StudyResults, knob_importance, load_results
from autotune.results.profile import ProfileRecord
from autotune.results.summary import summarise
from autotune.results.tuner_time import RunTime, TunerTime
from autotune.study.run_race import run_race
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.trim import run_trim
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import REPO, fake_measurement
from tests.report.test_reports import MACHINE, MEASURE
from tests.study.test_trim import BASELINE, Pipeline
from tests.study.test_tuner import META, settings

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("AUTOTUNE_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
TRIALS = [
    {**BASELINE, "batch_size": 64, "amp": "bf16", "set_to_none": False},
    {**BASELINE, "batch_size": 64},
    {**BASELINE, "batch_size": 32},
    {**BASELINE, "amp": "bf16"},
]


def rich_results(tmp_path: Path) -> StudyResults:
    """A tuned, raced and trimmed study in multi-objective mode, with a probe, a pruned and a failed record, and the
    importance of its few trials (as of 30 or more: ``IMPORTANCE_MIN_TRIALS``)."""
    study = open_study(settings(tmp_path), META)
    pipeline = Pipeline()
    ensure_baseline(study, BASELINE, pipeline)
    for knobs in TRIALS:
        study.enqueue_trial(knobs)
    space = SearchSpace({name: list(dict.fromkeys(t[name] for t in [BASELINE, *TRIALS])) for name in KNOBS})
    tune(study, space, settings(tmp_path, n_trials=len(TRIALS)), pipeline, lambda event: None)
    confirmation = run_race(study, load_results(study), 3, pipeline, lambda name, result: None)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    results = load_results(study)
    stopped = fake_measurement(60.0)
    pruned = TrialResult({**BASELINE, "batch_size": 8}, stopped, Failure(FailureKind.PRUNED, "slower than the best"))
    failed = TrialResult({**BASELINE, "batch_size": 128}, failure=Failure(FailureKind.EXCEPTION, "RuntimeError: x"))
    return replace(
        results,
        importance=knob_importance(study, study.trials, min_trials=0),
        machine={**MACHINE, "cpu_flags": ["avx2"]},
        measure=MEASURE,
        trials=[*results.trials, TrialRecord("8", pruned), TrialRecord("9", failed)],
        probe=ProbeRecord(3.0, baseline_loader_sps=300.0, baseline_compute_sps=120.0),
        objectives=["throughput", "peak_memory"],
        tuner_time=TunerTime([RunTime(0.0, 60.0, {"baseline": 5.0, "search": 50.0}, {"search": {"startup": 9.0}})]),
    )


def sample_benchmark() -> Benchmark:
    knobs = dict(BASELINE)
    entries = [
        Entry("baseline", "baseline", None, knobs, [100.0, 98.0, 101.0], [400.0, 400.0, 401.0]),
        Entry("recommended", "recommended", None, knobs, [160.0, 158.0, 163.0], [600.0, 610.0, 605.0]),
        Entry("baseline + batch_size", "alone", "batch_size", knobs, [130.0, 127.0, 131.0], [500.0] * 3),
        Entry("recommended - batch_size", "without", "batch_size", knobs, [120.0, 123.0, 119.0], [450.0] * 3),
        Entry("baseline + amp", "alone", "amp", knobs, [99.0, 101.0, 97.0], [400.0] * 3),
        Entry("recommended - amp", "without", "amp", knobs, [90.0, None, 92.0], [400.0, None, 400.0], ["round 2: x"]),
    ]
    return Benchmark("p", "cpu", 3, "recommended.yaml", {"cpu_model": "Test CPU"}, entries)


@pytest.mark.slow
@pytest.mark.pictures
def test_every_picture_the_study_report_promises_is_drawn(tmp_path):
    results = rich_results(tmp_path)
    summary = summarise(results)
    assert summary.trim and summary.confirmed and summary.pareto and results.importance, "the study has it all"
    document = build_document(results, summary)
    drawn = {section.heading: len(section.plots) for section in document.sections if section.plots}
    assert drawn == {
        "Only the changes that matter": 1,
        "Before and after": 2,
        "Pareto front: throughput against peak memory": 1,
        "All configurations, ranked": 2,
        "Which knobs mattered": 1,
        "Where the tuner's time went": 1,
    }
    for plot in (plot for section in document.sections for plot in section.plots):
        image = Image.open(io.BytesIO(png(plot)))
        assert image.format == "PNG" and image.width > 600 and image.height > 150, plot.caption


def test_importance_covers_only_the_knobs_the_trials_varied(tmp_path):
    results = rich_results(tmp_path)
    importance = results.importance
    assert set(importance) == {"batch_size", "amp", "set_to_none"}
    assert sum(importance.values()) == pytest.approx(1.0)
    written = write_reports(results, summarise(results), tmp_path / "written")
    assert json.loads(written["report.json"].read_text())["importance"] == importance, "in figures, not a picture only"
    markdown = written["report.md"].read_text()
    assert all(f"- {name}: {share:.2f}" in markdown for name, share in importance.items())


def test_a_study_of_too_few_trials_for_importance_says_so_and_how_each_change_is_measured(tmp_path):
    results = replace(rich_results(tmp_path), importance={})
    (section,) = [
        s for s in build_document(results, summarise(results)).sections if s.heading == "Which knobs mattered"
    ]
    assert "left out: from fewer than 30 completed trials (this study has 4)" in section.paragraphs[0]
    assert not section.plots and not section.bullets


def test_report_html_embeds_every_picture_and_no_table_lists_every_knob(tmp_path):
    results = rich_results(tmp_path)
    page = write_reports(results, summarise(results), tmp_path)["report.html"].read_text()
    assert page.count('<img src="data:image/png;base64,') == 8
    assert "http://" not in page and "https://" not in page, "self-contained: nothing fetched"
    widest = max(len(re.findall("<th>", table)) for table in page.split("<table>")[1:])
    assert widest <= 10, "knobs are one 'changes from the baseline' cell; trials.csv has every knob"


@pytest.mark.pictures
def test_the_benchmark_page_draws_each_configuration_against_the_baseline():
    document = benchmark_document(sample_benchmark())
    (plot,) = document.sections[0].plots
    assert "green, a gain" in plot.caption
    assert Image.open(io.BytesIO(png(plot))).format == "PNG"


def test_the_benchmark_and_profile_pages_describe_the_machine_as_the_study_report_does(tmp_path):
    benchmark = replace(sample_benchmark(), machine=MACHINE)
    profile = ProfileRecord("p", "cpu", "baseline", dict(BASELINE), MACHINE, "p", None, failure="it crashed")
    for document in (benchmark_document(benchmark), profile_document(profile, tmp_path)):
        (machine,) = [section for section in document.sections if section.heading == "Machine"]
        assert machine.bullets == machine_lines(MACHINE, "cpu")
        assert machine.bullets[0] == "CPU: Test CPU (2 usable cores, 1 physical; flags: none of note)"
    older = machine_lines({"cpu_model": "Old CPU"}, "cpu")  # a description stored by an earlier version
    assert older[0] == "CPU: Old CPU (? usable cores, ? physical; flags: none of note)"


@pytest.fixture
def browser(tmp_path):
    """Debian's Chromium, headless, through its chromedriver, as in the CI (.ci/run installs both)."""
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("AUTOTUNE_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromedriver are required here (AUTOTUNE_REQUIRE_BROWSER is set)")
        pytest.skip("no chromium/chromedriver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1280,900", f"--user-data-dir={tmp_path / 'chromium'}",
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def look(driver, page: Path, headings: list[str], images: int, screenshot: str) -> None:
    """Open ``page``: every heading and image rendered, nothing wider than 1280 px, no console error; then keep a
    full-page screenshot under ARTIFACTS."""
    driver.get(page.resolve().as_uri())
    shown = driver.execute_script("return [...document.querySelectorAll('h2')].map(h => h.textContent)")
    assert shown == headings
    loaded = driver.execute_script("return [...document.images].map(i => i.complete && i.naturalWidth > 0)")
    assert loaded == [True] * images
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 1280, f"the page is {width} px wide: something runs off a 1280 px screen"
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.set_window_size(1280, driver.execute_script("return document.body.scrollHeight") + 120)
    assert driver.save_screenshot(str(ARTIFACTS / screenshot))


@pytest.mark.slow
@pytest.mark.pictures
def test_both_pages_render_in_a_real_browser(tmp_path, browser):
    results = rich_results(tmp_path)
    summary = summarise(results)
    report = write_reports(results, summary, tmp_path / "study")["report.html"]
    sections = build_document(results, summary).sections
    look(browser, report, [s.heading for s in sections], sum(len(s.plots) for s in sections), "report.png")

    benchmark = sample_benchmark()
    page = write_benchmark(benchmark, tmp_path / "bench")["benchmark.html"]
    sections = benchmark_document(benchmark).sections
    look(browser, page, [s.heading for s in sections], 1, "benchmark.png")
