"""Files autotune writes: whole or not at all, with the permissions the user's umask gives."""

from __future__ import annotations

import subprocess
import sys

from autotune.files import file_name
from tests.conftest import REPO


def test_a_written_file_has_the_permissions_of_the_users_umask(tmp_path):
    path = tmp_path / "report.md"
    code = (
        "import os; os.umask(0o027); from autotune.files import write_atomic; "
        f"write_atomic({str(path)!r}, 'x'); print(oct(os.stat({str(path)!r}).st_mode & 0o777))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "0o640", "not the 0600 of a temporary file"


def test_a_name_becomes_one_file_name_that_reaches_no_other_folder():
    assert file_name("..") == "_" and file_name("../../etc") == "_.._etc"
    assert file_name("my study/v2") == "my_study_v2" and file_name(".hidden") == "hidden"
    assert file_name("round1-baseline + amp") == "round1-baseline_amp"


def test_a_long_name_is_cut_and_told_apart_by_a_hash_of_the_whole():
    long, other = "s" * 300, "s" * 299 + "t"
    assert len(file_name(long).encode()) <= 100 and file_name(long) != file_name(other)
    assert file_name("é" * 200).startswith("é") and len(file_name("é" * 200).encode()) <= 100
    assert file_name("short") == "short"
