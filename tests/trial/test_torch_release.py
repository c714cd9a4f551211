"""Which torch reserves a batch's shared memory up front (``exceptions.reserves_shared_memory_up_front``) is read from
its release's major and minor version, whatever else its version says: a local build's is no PEP 440 version, and
comparing it raised TypeError while a worker's death was being described."""

from __future__ import annotations

import pytest
import torch
from torch.torch_version import TorchVersion

from autotune.pipeline.setup import WorkerKilledError
from autotune.trial.exceptions import reserves_shared_memory_up_front
from autotune.trial.result import FailureKind
from autotune.trial.worker import describe_exception


@pytest.mark.parametrize(
    ("version", "reserves"),
    [
        ("2.10.0-custom", True),  # a local build: TorchVersion's comparison raised TypeError
        ("2.10.0.post1", True),
        ("2.10", True),
        ("3.0.0+cu130", True),
        ("2.9.1+cu121", False),
        ("2.10.0rc1", False),  # pre-releases of 2.10 count as older
        ("2.10.0.dev20250101", False),
        ("2.11.0a0+git1234abc", True),  # a pre-release of a later one: nightlies, source builds, NGC containers
        ("2.12.0.dev20251201+cu126", True),
        ("custom", False),  # no release read: older
        ("", False),
    ],
)
def test_the_release_is_read_from_any_version_and_one_read_none_from_counts_as_older(monkeypatch, version, reserves):
    monkeypatch.setattr(torch, "__version__", TorchVersion(version))
    assert reserves_shared_memory_up_front() is reserves
    expected = FailureKind.SIGNAL if reserves else FailureKind.OUT_OF_MEMORY
    assert describe_exception(WorkerKilledError("SIGBUS")).kind is expected
