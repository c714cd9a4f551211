"""A study measured one version of the pipeline's code: the user's modules are read with a digest of their source
(``user_code``), a study resumed over edited code is refused naming the module, and a study stored before the code
was kept resumes."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from autotune.errors import StudyMismatchError
from autotune.pipeline.inspect import user_code
from autotune.records import META_ATTR
from autotune.study.start import _fingerprint, open_study
from autotune.study.tuner import ensure_baseline
from tests.study.test_tuner import BASELINE, META, FakeMeasure, settings


def test_the_users_modules_are_read_with_a_digest_of_their_source_and_python_and_autotune_are_not(
    tmp_path, monkeypatch
):
    (tmp_path / "mine_net.py").write_text("WIDTH = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mine_net", raising=False)
    importlib.import_module("mine_net")
    first = user_code()
    assert "mine_net" in first and "json" not in first and "torch" not in first
    assert not any(name.startswith("autotune") for name in first), "the tool's own code is not the pipeline's"
    (tmp_path / "mine_net.py").write_text("WIDTH = 2\n")
    assert user_code()["mine_net"] != first["mine_net"], "an edit changes the digest"
    monkeypatch.delitem(sys.modules, "mine_net")


def test_a_study_resumed_over_edited_code_is_refused_naming_the_module(tmp_path):
    ensure_baseline(open_study(settings(tmp_path), {**META, "code": {"mine.data": "aaaa"}}), BASELINE, FakeMeasure())
    assert open_study(settings(tmp_path), {**META, "code": {"mine.data": "aaaa"}}), "the same code resumes"
    with pytest.raises(StudyMismatchError, match=r': code.mine.data "aaaa" → "bbbb" \(the code of the pipeline'):
        open_study(settings(tmp_path), {**META, "code": {"mine.data": "bbbb"}})


def test_a_study_stored_before_the_code_was_kept_resumes(tmp_path):
    study = open_study(settings(tmp_path), META)
    study.set_user_attr(META_ATTR, {**META, "fingerprint": _fingerprint(json.loads(json.dumps(META)))})
    ensure_baseline(study, BASELINE, FakeMeasure())
    assert open_study(settings(tmp_path), {**META, "code": {"mine.data": "aaaa"}})
