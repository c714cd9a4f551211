"""Whether an exception raised in a trial says memory ran out: behind whatever the user's code raised over it."""

from __future__ import annotations

import os

import pytest
import torch

from autotune.pipeline.setup import WorkerKilledError
from autotune.trial import exceptions
from autotune.trial.exceptions import is_out_of_memory, worker_bus_error
from autotune.trial.result import FailureKind
from autotune.trial.worker import describe_exception


def raised_over(error: BaseException, handled: BaseException, suppressed: bool = False) -> BaseException:
    """``error`` as the user's code raises it while handling ``handled``: without ``from``, or with ``from None``
    (``suppressed``)."""
    try:
        try:
            raise handled
        except BaseException:
            if suppressed:
                raise error from None
            raise error  # noqa: B904  (as the user's code is written)
    except BaseException as exc:
        return exc


def test_an_out_of_memory_the_users_code_raised_another_error_over_without_from_is_out_of_memory():
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_out_of_memory(raised_over(ValueError("the step failed"), oom))
    assert is_out_of_memory(raised_over(ValueError("the step failed"), oom, suppressed=True)), "from None hides it"
    assert is_out_of_memory(raised_over(KeyError("x"), raised_over(ValueError("again"), MemoryError())))
    assert not is_out_of_memory(raised_over(ValueError("the step failed"), KeyError("x")))


def retried(error: BaseException, handled: BaseException) -> BaseException:
    """``error`` as code called by the handler of ``handled`` raises it (a retry at a smaller size, a cleanup)."""

    def retry():
        raise error

    try:
        try:
            raise handled
        except BaseException:
            retry()
    except BaseException as exc:
        return exc
    raise AssertionError("the retry raised nothing")


def failed_in_handler(handled: BaseException) -> BaseException:
    """An operation of the handler of ``handled`` that fails on its own line (a tensor of the wrong shape)."""
    try:
        try:
            raise handled
        except BaseException:
            torch.ones(2, 3).view(4)
    except BaseException as exc:
        return exc
    raise AssertionError("the view did not fail")


def test_an_error_raised_by_code_the_handler_of_an_out_of_memory_called_is_not_out_of_memory():
    # A retry at half the batch that fails for a reason of its own, or a cleanup that fails: not the configuration's
    # memory, which the study would hold against every larger batch.
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not is_out_of_memory(retried(ValueError("labels must be 1-D"), oom))
    assert not is_out_of_memory(failed_in_handler(oom)), "a failing operation is no raise of the handler's"
    assert is_out_of_memory(retried(ValueError("x"), oom).__context__), "the out of memory itself still is"
    wrapped = RuntimeError("backend='inductor' raised an error")
    wrapped.__cause__ = oom  # as raise ... from oom sets it
    assert is_out_of_memory(retried(wrapped, KeyError("y"))), "raised from one: its cause, wherever it was raised"


def test_a_chain_that_loops_is_followed_once():
    first, second = ValueError("first"), ValueError("second")
    first.__cause__, second.__cause__ = second, first
    assert not is_out_of_memory(first)
    third = raised_over(ValueError("third"), MemoryError())
    first.__cause__, third.__cause__ = third, first
    assert is_out_of_memory(first)


def test_a_full_shared_memory_reservation_is_out_of_memory_whatever_its_error():
    # Where DataLoader workers hand over their batches; torch reserves each batch's before writing it.
    for error in ("No space left on device (28)", "Resource temporarily unavailable (11)"):
        caught = RuntimeError(
            "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n  ...\n"
            f"RuntimeError: unable to allocate shared memory(shm) for file </torch_2751_1950925322_0>: {error}"
        )
        assert is_out_of_memory(caught), error


BUS_ERROR = RuntimeError(  # as the probe's DataLoader raises it
    "DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's workers are "
    "out of shared memory. Please try to raise your shared memory limit."
)


def test_a_worker_killed_by_sigbus_beside_a_tmpfs_is_a_truncated_mapped_file_not_out_of_memory(monkeypatch):
    # A tmpfs reserves shared memory as torch asks, and a full one raises an error: the SIGBUS came from elsewhere.
    monkeypatch.setattr(exceptions, "_shared_memory", lambda: ("tmpfs", 60.4, 64.0))
    assert not is_out_of_memory(BUS_ERROR)
    assert worker_bus_error().cause == (
        "most likely as a memory-mapped file the dataset reads became shorter than when it was mapped (truncated or "
        "replaced while in use): shared memory running out raises an error instead (torch reserves each batch's in "
        "/dev/shm, a tmpfs with 60 MB of 64 MB free, before writing it)"
    )


@pytest.mark.parametrize("found", [("ext4", 1.0, 64.0), None], ids=["not-tmpfs", "unread"])
def test_a_worker_killed_by_sigbus_elsewhere_is_most_likely_out_of_shared_memory(monkeypatch, found):
    monkeypatch.setattr(exceptions, "_shared_memory", lambda: found)
    assert is_out_of_memory(BUS_ERROR)
    assert worker_bus_error().cause == (
        "most likely as shared memory (/dev/shm), where workers hand over their batches, ran out (or a memory-mapped "
        "file the dataset reads is shorter than when it was mapped)"
    )


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="needs /dev/shm mounted on its own")
def test_shared_memory_is_read_from_the_mount_that_holds_it():
    found = exceptions._shared_memory()
    mounts = [line.split() for line in open("/proc/self/mounts", encoding="utf-8")]
    assert found[0] == [fields[2] for fields in mounts if fields[1] == "/dev/shm"][-1]
    assert 0 <= found[1] <= found[2]


@pytest.mark.parametrize(
    "found, kind",
    [(("tmpfs", 60.4, 64.0), FailureKind.SIGNAL), (None, FailureKind.OUT_OF_MEMORY)],
    ids=["tmpfs", "unread"],
)
def test_a_trials_worker_killed_by_sigbus_is_typed_as_its_cause_reads(monkeypatch, found, kind):
    # Out of memory rules out larger batches and more workers (study/space.py): a file cut short must not.
    monkeypatch.setattr(exceptions, "_shared_memory", lambda: found)
    failure = describe_exception(WorkerKilledError("SIGBUS"))
    assert failure.kind is kind
    assert failure.message == f"a DataLoader worker was killed by SIGBUS, {worker_bus_error().cause}"
    assert describe_exception(WorkerKilledError("SIGKILL")).kind is FailureKind.OUT_OF_MEMORY
    assert describe_exception(WorkerKilledError("SIGSEGV")).kind is FailureKind.SIGNAL
