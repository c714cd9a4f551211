"""The did-you-mean hints of a target that cannot be imported or called as the config says: the closest module of
its package or argument it takes, and none where that is no mistake of the config."""

from __future__ import annotations

import sys

import pytest

from autotune.errors import ConfigError
from autotune.pipeline.inspect import _check_arguments, _why


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``hintpkg`` with a module ``models`` and a module ``broken`` that imports what is not installed."""
    (tmp_path / "hintpkg").mkdir()
    (tmp_path / "hintpkg" / "__init__.py").write_text("")
    (tmp_path / "hintpkg" / "models.py").write_text("class Net: ...\n")
    (tmp_path / "hintpkg" / "broken.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [name for name in sys.modules if name.startswith("hintpkg")]:
        del sys.modules[name]


def _failure(target: str) -> Exception:
    module = target.rpartition(".")[0]
    try:
        __import__(module)
    except Exception as exc:
        return exc
    raise AssertionError(f"{module} imported")


def test_a_misspelt_module_gets_the_closest_of_its_package_and_a_broken_one_none(package):
    assert _why("hintpkg.model.Net", _failure("hintpkg.model.Net")).endswith("did you mean 'hintpkg.models'?")
    said = _why("hintpkg.broken.Net", _failure("hintpkg.broken.Net"))
    assert "not_installed_dependency_xyz" in said and "did you mean" not in said, "its own import failed, not the name"


def test_a_misspelt_argument_gets_the_closest_keyword_the_target_takes_never_a_star_one():
    with pytest.raises(ConfigError, match=r"did you mean pipeline.model.width for widht\?$"):
        _check_arguments("model", {"_target_": "m.build", "widht": 3}, lambda width, *args, depth=2: None)
    with pytest.raises(ConfigError) as raised:
        _check_arguments("model", {"_target_": "m.build", "argz": 3}, lambda width, *args, depth=2: None)
    assert "did you mean" not in str(raised.value), "*args cannot be passed by keyword"
