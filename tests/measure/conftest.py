"""The measurement tests read this test process's own process tree as a trial reads its own."""

from __future__ import annotations

import pytest

from autotune.trial.runner import shared_fork_server


@pytest.fixture(autouse=True)
def _a_tree_of_this_process_alone():
    """End the fork server a trial test may have started in this process: it is this process's child, and a
    trial's tree has no such process."""
    shared_fork_server().close()
