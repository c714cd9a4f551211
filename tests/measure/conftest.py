"""The measurement tests read this test process's own process tree as a trial reads its own."""

from __future__ import annotations

import os

import pytest

from autotune.measure.memory import tree_pids
from autotune.trial.runner import shared_fork_server


@pytest.fixture(autouse=True)
def _a_tree_of_this_process_alone():
    """End the fork server a trial test may have started in this process: it is this process's child, and a
    trial's tree has no such process."""
    shared_fork_server().close()


def tree_tasks(root: int) -> int:
    """The threads of ``root``'s process tree: listing the tree reads a file for each (``memory.tree_pids``), so a
    read's cost grows with them (a test process gathers threads as its tests run)."""
    tasks = 0
    for pid in tree_pids(root):
        try:
            tasks += len(os.listdir(f"/proc/{pid}/task"))
        except FileNotFoundError:  # ended since it was listed
            pass
    return tasks
