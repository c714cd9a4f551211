"""recommended.yaml as a newcomer opens it: a comment above each top-level field and each knob, from the knob
registry, and the file read back exactly as the YAML without them."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.knobs import KNOBS, Target
from autotune.recommendation import APPLIED_BY, Recommendation, read_recommended
from autotune.report.recommended import FIELD_COMMENTS, recommendation, render_recommended
from autotune.results.model import StudyResults
from autotune.results.summary import summarise
from tests.report.test_headline_memory import proving_race
from tests.report.test_reports import sample_results
from tests.results.test_advice import study
from tests.results.test_summary import results_with, trial

SGD = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.01}
STUDIES = {
    "a worker more": sample_results,
    "a larger batch and its learning rate": lambda: study(SGD),
    "micro-batches accumulated": lambda: study(SGD, batch=4, policy="fixed_effective"),
    "the baseline kept": lambda: results_with(trial("0", 50.0, num_workers=2)),
}


def rendered(name: str) -> tuple[str, Recommendation]:
    results = STUDIES[name]()
    summary = summarise(results)
    return render_recommended(results, summary), recommendation(results, summary)


def comment_above(lines: list[str], index: int) -> str:
    """The comment lines right above ``lines[index]``, joined into one text ("" where there are none)."""
    above = []
    for line in reversed(lines[:index]):
        if not line.lstrip().startswith("# "):
            break
        above.insert(0, line.lstrip().removeprefix("# "))
    return " ".join(above)


def knob_lines(lines: list[str]) -> dict[str, int]:
    """The index of each knob's line in the knobs section, by the knob's name."""
    start = lines.index("knobs:")
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"\w", lines[i]) or lines[i] == "")
    return {line.split(":")[0].strip(): i for i, line in enumerate(lines[start:end], start) if re.match(r"  \w", line)}


@pytest.mark.parametrize("name", STUDIES)
def test_the_file_reads_back_as_the_yaml_without_its_comments(tmp_path, name):
    text, rec = rendered(name)
    assert yaml.safe_load(text) == rec.to_document()
    plain, commented = tmp_path / "plain.yaml", tmp_path / "recommended.yaml"
    plain.write_text(yaml.safe_dump(rec.to_document(), sort_keys=False))
    commented.write_text(text)
    assert read_recommended(commented) == read_recommended(plain) == rec


@pytest.mark.parametrize("name", STUDIES)
def test_every_top_level_field_has_its_comment_above_it(name):
    text, rec = rendered(name)
    lines = text.splitlines()
    assert lines[:2] == [
        "# autotune recommendation for pipeline 'p' (study 's').",
        "# In a training script: autotune.load_recommended(this file); see examples/train_with_recommended.py",
    ], "the header lines, as before"
    fields = [(i, line.split(":")[0]) for i, line in enumerate(lines) if re.match(r"\w+:", line)]
    assert [key for _, key in fields] == list(rec.to_document())
    for index, key in fields:
        assert comment_above(lines, index) == " ".join(FIELD_COMMENTS[key].split()), key


def test_every_knob_has_a_comment_from_the_registry_saying_what_it_is_and_where_it_is_applied():
    text, _ = rendered("a worker more")
    lines = text.splitlines()
    found = knob_lines(lines)
    assert list(found) == list(KNOBS), "every knob of the registry, each with its line"
    for name, index in found.items():
        comment, knob = comment_above(lines, index), KNOBS[name]
        what, _, applied = comment.partition(" Applied ")
        assert knob.description.startswith(what) and what.endswith("."), f"{name}: its description's first sentence"
        assert applied == "; ".join(APPLIED_BY[target] for target in knob.applies_to) + ".", name
    assert "rec.dataloader_kwargs()" in comment_above(lines, found["batch_size"])
    assert "rec.prepare_model(model); to each batch" in comment_above(lines, found["channels_last"])


def test_a_knob_that_does_not_apply_beside_the_others_says_why_it_is_null():
    text, rec = rendered("the baseline kept")
    assert rec.knobs["num_workers"] == 0 and rec.knobs["prefetch_factor"] is None
    lines = text.splitlines()
    found = knob_lines(lines)
    for name in ("prefetch_factor", "persistent_workers"):
        assert " null: it only applies with num_workers > 0. Applied " in comment_above(lines, found[name]), name
    assert "null: it" not in comment_above(lines, found["num_threads"]), "null there is torch's default, not inactive"


def test_the_throughput_comment_points_to_how_it_was_measured():
    assert "method says how they were measured" in FIELD_COMMENTS["throughput"]
    text, rec = rendered("a worker more")
    assert yaml.safe_load(text)["throughput"]["method"] == rec.measured.method


def test_every_target_names_calls_a_recommendation_has():
    assert set(APPLIED_BY) == set(Target)
    for target, where in APPLIED_BY.items():
        calls = re.findall(r"rec\.(\w+)\(", where)
        assert calls, target
        for call in calls:
            assert inspect.isfunction(getattr(Recommendation, call, None)), f"{target}: rec.{call}"


def test_each_knob_names_only_the_calls_that_apply_it():
    # optimizer_impl goes through rec.optimizer_kwargs() alone, set_to_none through rec.zero_grad() alone
    assert KNOBS["optimizer_impl"].applies_to == (Target.OPTIMIZER,) and "zero_grad" not in APPLIED_BY[Target.OPTIMIZER]
    assert KNOBS["set_to_none"].applies_to == (Target.GRADIENTS,) and "rec.zero_grad(" in APPLIED_BY[Target.GRADIENTS]
    assert (
        "torch_threads" in FIELD_COMMENTS["machine"]
        and "which rec.apply_process_settings() sets" in FIELD_COMMENTS["machine"]
    ), "num_threads: null is set to the measuring machine's default on a machine like it"


def test_a_comment_never_runs_past_the_line_length():
    text, _ = rendered("a larger batch and its learning rate")
    assert all(len(line) <= 120 for line in text.splitlines() if line.lstrip().startswith("#"))


def test_a_pipeline_name_with_a_newline_stays_in_its_comment():
    results = replace(sample_results(), pipeline="p\nknobs: {}")
    assert yaml.safe_load(render_recommended(results, summarise(results)))["pipeline"] == "p\nknobs: {}"


def test_writing_the_file_imports_no_torch():
    code = "import sys, autotune.report.recommended; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_the_speedups_interval_is_kept_as_data_and_reads_back(tmp_path):
    results = StudyResults(**{**sample_results().__dict__, "confirmation": proving_race([1.0] * 3, [1.0] * 3)})
    summary = summarise(results)
    text = render_recommended(results, summary)
    interval = summary.gain_interval
    written = yaml.safe_load(text)["throughput"]["interval"]
    assert written == {"low": round(interval.low, 3), "high": round(interval.high, 3), "rounds": 3}
    path = tmp_path / "recommended.yaml"
    path.write_text(text)
    read = read_recommended(path).measured.interval
    assert (read.low, read.high, read.n) == (written["low"], written["high"], 3)
    document = yaml.safe_load(text)
    document["throughput"]["interval"] = {"low": "a lot"}
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="throughput.interval"):
        read_recommended(path)
