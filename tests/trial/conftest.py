"""Fixtures of the trial tests."""

from __future__ import annotations

import pytest

from autotune.trial.launch import ForkServer
from autotune.trial.runner import shared_fork_server


@pytest.fixture
def server() -> ForkServer:
    """The test process's own fork server, which its other tests' trials are forked from too: one start a process
    (~5 CPU-seconds). A test that uses it also checks it lives on after its trial where that is the point."""
    return shared_fork_server()
