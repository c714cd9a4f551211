"""The README's profiling example runs and saves its measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_profiling_example_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "profile_my_loop.py")],
        cwd=tmp_path,
        env={name: value for name, value in os.environ.items() if name != "PYTHONPATH"},  # as its docstring runs it
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "samples/s (95% CI" in proc.stdout and "MFLOP/sample" in proc.stdout
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["name"] == "my-loop" and saved["timing"]["steps"] >= 20
