"""One tuner per SQLite study whichever hard link to the file it is given: the lock is on the file itself too."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing

import optuna
import pytest

from autotune.errors import ConfigError
from autotune.study.lock import one_tuner
from tests.conftest import REPO

# The refusal at the file's own lock: another autotune's keeps no pid.
REFUSED = r"^study.name: the database file of .* is locked by another process: an autotune tuning study 'mine' "

HOLD = """
import sys, time
from autotune.study.lock import one_tuner
with one_tuner(sys.argv[1], "mine"):
    print("held", flush=True)
    time.sleep(60)
"""


def _hard_linked(tmp_path) -> tuple[str, str]:
    """Two storages naming one database file through hard links in two folders (no path resolves to the other)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "autotune.db").write_bytes(b"")
    os.link(tmp_path / "a" / "autotune.db", tmp_path / "b" / "autotune.db")
    return f"sqlite:///{tmp_path}/a/autotune.db", f"sqlite:///{tmp_path}/b/autotune.db"


def test_tuners_reaching_one_database_file_through_hard_links_never_tune_one_study_at_once(tmp_path):
    one, other = _hard_linked(tmp_path)
    for first, second in ((one, other), (other, one)):
        with one_tuner(first, "mine"):
            with pytest.raises(ConfigError, match=REFUSED):
                with one_tuner(second, "mine"):
                    pass
            with one_tuner(second, "another study"):  # other studies of the same file are free
                pass
    (tmp_path / "a" / "elsewhere.db").write_bytes(b"")
    with one_tuner(one, "mine"), one_tuner(f"sqlite:///{tmp_path}/a/elsewhere.db", "mine"):  # another file is free
        pass
    assert (tmp_path / "a" / "autotune.db").read_bytes() == b"", "the database file is left as it was"
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["autotune.db", "autotune.db", "elsewhere.db"], "no lock file is left"


def test_a_tuner_killed_holding_a_study_through_a_hard_link_leaves_it_free(tmp_path):
    one, other = _hard_linked(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, one], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=REFUSED):
            with one_tuner(other, "mine"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with one_tuner(other, "mine"):  # the kernel released the killed holder's lock
        pass


def test_sqlite_works_the_file_a_tuner_holds_a_study_on(tmp_path):
    """The study's lock lies past the bytes SQLite locks: a tuner's own writes, through either link, go on."""
    one, other = _hard_linked(tmp_path)
    with one_tuner(one, "mine"):
        study = optuna.create_study(storage=other, study_name="mine")
        study.tell(study.ask(), 1.0)
    with closing(sqlite3.connect(tmp_path / "a" / "autotune.db")) as database:
        assert [row[0] for row in database.execute("PRAGMA quick_check")] == ["ok"]
    assert [t.value for t in optuna.load_study(study_name="mine", storage=one).trials] == [1.0]
