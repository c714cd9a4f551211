"""A study measured one version of the pipeline's code: the user's modules are read with a digest of what their source
runs (``user_code``: a comment, a reformat or a docstring edit changes none; a file that does not parse is digested by
its bytes), a study resumed over edited code is refused naming the module, a study an earlier autotune stored by the
files' bytes resumes where they did not change, a module one run read and the other did not is no edit, and a study
stored before the code was kept takes it from the run that resumes it."""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Callable, Iterator

import pytest

from autotune.code_digest import same_code, source_digest
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


MODULE = '''"""A model."""

WIDTH = 1


def width(scale):
    """The width, scaled."""
    return WIDTH * scale
'''


@pytest.fixture
def digest_of(tmp_path, monkeypatch) -> Iterator[Callable[[bytes], str]]:
    """``user_code``'s digest of the imported module ``mine_net`` with its file's source set to a given one; two are
    compared as a resume compares them (``same_code``)."""
    path = tmp_path / "mine_net.py"
    path.write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mine_net", raising=False)
    importlib.import_module("mine_net")
    spec = PipelineSpec("p", {"model": {"_target_": "mine_net.width"}})

    def digest(source: bytes) -> str:
        path.write_bytes(source)
        return user_code(spec)["mine_net"]

    yield digest
    monkeypatch.delitem(sys.modules, "mine_net")


@pytest.mark.parametrize(
    "edited",
    [
        MODULE.replace("WIDTH = 1", "WIDTH = 1  # the paper's"),
        "# A comment above it all.\n" + MODULE,
        MODULE.replace("\n\n", "\n\n\n\n").replace("WIDTH * scale", "WIDTH*scale"),
        MODULE.replace('"""The width, scaled."""', '"""How wide it is, times scale.\n\n    More words."""'),
        MODULE.replace('"""A model."""\n', ""),
    ],
    ids=["comment", "comment line", "reformat", "docstring edited", "docstring removed"],
)
def test_a_comment_a_reformat_or_a_docstring_edit_leaves_the_digest_as_it_was(digest_of, edited):
    assert same_code(digest_of(MODULE.encode()), digest_of(edited.encode()))


@pytest.mark.parametrize(
    "edited",
    [MODULE.replace("WIDTH = 1", "WIDTH = 2"), MODULE.replace("    return", "    scale += 1\n    return")],
    ids=["constant", "new statement"],
)
def test_an_edit_of_what_runs_changes_the_digest(digest_of, edited):
    assert not same_code(digest_of(MODULE.encode()), digest_of(edited.encode()))


@pytest.mark.parametrize("broken", [b"def width(:\n", b"WIDTH = '\xff\xfe'\n"], ids=["syntax error", "not UTF-8"])
def test_a_file_that_does_not_parse_is_digested_by_its_bytes(digest_of, broken):
    assert same_code(digest_of(broken), digest_of(broken)), "the same file, the same code"
    assert not same_code(digest_of(broken), digest_of(broken + b"# more\n")), "its bytes stand for it: any edit is one"


def test_a_study_resumed_over_a_comment_or_docstring_edit_is_not_refused(tmp_path):
    measured = {"mine.data": source_digest(MODULE.encode())}
    ensure_baseline(open_study(settings(tmp_path), META, code=measured), BASELINE, FakeMeasure())
    commented = MODULE.replace("WIDTH = 1", "WIDTH = 1  # the paper's").replace("A model.", "The model.")
    assert open_study(settings(tmp_path), META, code={"mine.data": source_digest(commented.encode())})
    with pytest.raises(StudyMismatchError, match=r"\(mine.data\)"):
        open_study(settings(tmp_path), META, code={"mine.data": source_digest(b"WIDTH = 2\n")})


def test_a_study_an_earlier_autotune_stored_by_the_files_bytes_resumes_where_they_did_not_change(tmp_path):
    # An earlier autotune stored each module's sha256 of its file's bytes, 12 hex digits, bare.
    stored = {"mine.data": hashlib.sha256(MODULE.encode()).hexdigest()[:12]}
    ensure_baseline(open_study(settings(tmp_path), META, code=stored), BASELINE, FakeMeasure())
    assert open_study(settings(tmp_path), META, code={"mine.data": source_digest(MODULE.encode())})
    with pytest.raises(StudyMismatchError, match=r"\(mine.data\)"):
        open_study(settings(tmp_path), META, code={"mine.data": source_digest(b"WIDTH = 2\n")})


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


def test_a_type_comment_is_code_and_a_type_ignore_is_not():
    """TorchScript reads a signature's types from its type comment; "# type: ignore" changes nothing that runs."""
    scripted = b"def f(x, n):\n    # type: (Tensor, int) -> Tensor\n    return x * n\n"
    assert not same_code(source_digest(scripted), source_digest(scripted.replace(b"int)", b"float)")))
    ignored = b"import os  # type: ignore\n\n\nx = 1\n"
    assert same_code(source_digest(ignored), source_digest(b"\n" + ignored))


def test_unchanged_bytes_are_the_same_code_whatever_python_dumped_the_tree_and_other_versions_trees_are_not_compared():
    source = b"def f(x):\n    return x + 1\n"
    ours, _, file_bytes = source_digest(source).partition("/")
    other_python = f"tree399:{'0' * 12}/{file_bytes}"  # another version's dump of the same file
    assert same_code(other_python, source_digest(source)), "the same bytes: the same code"
    edited = source_digest(source.replace(b"1", b"2"))
    assert not same_code(
        f"tree399:{edited.partition('/')[0].partition(':')[2]}/bytes:{'f' * 12}", source_digest(source)
    )
    assert ours.startswith(f"tree{sys.version_info.major}{sys.version_info.minor}:")
