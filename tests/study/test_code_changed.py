"""A study measured one version of the pipeline's code: the user's modules are read with a digest of their source
(``user_code``), a study resumed over edited code is refused naming the module, a module one run read and the other
did not is no edit, and a study stored before the code was kept takes it from the run that resumes it."""

from __future__ import annotations

import importlib
import sys

import pytest

from autotune.errors import StudyMismatchError
from autotune.pipeline.inspect import user_code
from autotune.pipeline.spec import PipelineSpec
from autotune.records import META_ATTR
from autotune.study.start import open_study
from autotune.study.tuner import ensure_baseline
from tests.study.test_tuner import BASELINE, META, FakeMeasure, settings


def test_the_modules_of_the_targets_packages_are_read_with_a_digest_and_installed_libraries_are_not(
    tmp_path, monkeypatch
):
    mine, cache, installed = tmp_path / "mine", tmp_path / "cache", tmp_path / "site-packages"
    for folder in (mine, cache, installed):
        folder.mkdir()
    (mine / "mine_net.py").write_text("WIDTH = 1\n")
    (cache / "linked_lib.py").write_text("X = 1\n")
    (installed / "linked_lib.py").symlink_to(cache / "linked_lib.py")  # an installer linking files from its cache
    for folder in (mine, installed):
        monkeypatch.syspath_prepend(str(folder))
    for name in ("mine_net", "linked_lib"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        importlib.import_module(name)
    targets = ["mine_net.Net", "linked_lib.Loss", "torch.nn.MSELoss", "autotune.knobs.KNOBS"]
    spec = PipelineSpec("p", {f"part{i}": {"_target_": target} for i, target in enumerate(targets)})
    first = user_code(spec)
    assert list(first) == ["mine_net"], (
        "the user's module; not an installed one, linked or not, nor torch, nor autotune"
    )
    (mine / "mine_net.py").write_text("WIDTH = 2\n")
    assert user_code(spec)["mine_net"] != first["mine_net"], "an edit changes the digest"
    for name in ("mine_net", "linked_lib"):
        monkeypatch.delitem(sys.modules, name)


def test_a_study_resumed_over_edited_code_is_refused_naming_the_module(tmp_path):
    ensure_baseline(open_study(settings(tmp_path), META, code={"mine.data": "aaaa"}), BASELINE, FakeMeasure())
    assert open_study(settings(tmp_path), META, code={"mine.data": "aaaa"}), "the same code resumes"
    with pytest.raises(
        StudyMismatchError, match=r"^study.name: the code of the pipeline's modules changed .*\(mine.data\)"
    ):
        open_study(settings(tmp_path), META, code={"mine.data": "bbbb"})


def test_a_module_one_run_read_and_the_other_did_not_is_no_edit_and_is_kept_to_compare_later(tmp_path):
    # A lazy import (a download module imported only while the cache is empty) is read by one run of two.
    ensure_baseline(open_study(settings(tmp_path), META, code={"mine.data": "aaaa"}), BASELINE, FakeMeasure())
    study = open_study(settings(tmp_path), META, code={"mine.data": "aaaa", "mine.download": "cccc"})
    assert study.user_attrs[META_ATTR]["code"] == {"mine.data": "aaaa", "mine.download": "cccc"}
    assert open_study(settings(tmp_path), META, code={}), "no module read: nothing to compare"
    with pytest.raises(StudyMismatchError, match=r"\(mine.download\)"):
        open_study(settings(tmp_path), META, code={"mine.download": "dddd"})


def test_a_study_stored_before_the_code_was_kept_takes_it_from_the_run_that_resumes_it(tmp_path):
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    assert META_ATTR in study.user_attrs and "code" not in study.user_attrs[META_ATTR]
    assert open_study(settings(tmp_path), META, code={"mine.data": "aaaa"})
    with pytest.raises(StudyMismatchError, match=r"\(mine.data\)"):
        open_study(settings(tmp_path), META, code={"mine.data": "bbbb"})
