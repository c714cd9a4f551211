"""Whether an exception raised in a trial says memory ran out: behind whatever the user's code raised over it."""

from __future__ import annotations

import pytest
import torch
from torch.torch_version import TorchVersion

from autotune.pipeline.setup import WorkerKilledError
from autotune.trial.exceptions import is_out_of_memory
from autotune.trial.result import Failure, FailureKind
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


class Translated:
    """A context manager of the user's that raises its own error over the one its block raised."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is not None:
            raise ValueError("the step failed")


def test_an_out_of_memory_a_wrapper_raised_another_error_over_is_out_of_memory_wherever_it_raised_it():
    # Raised while the out of memory is handled, by a class-based __exit__ or a helper the handler calls: far more
    # often caused by it than not, and an out of memory taken for a fault has the search propose batches that do not
    # fit, each a fault of its own.
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(ValueError, match="the step failed") as translated:
        with Translated():
            raise oom
    assert is_out_of_memory(translated.value)

    def give_up():
        raise ValueError("the training step failed")

    with pytest.raises(ValueError, match="the training step failed") as given_up:
        try:
            raise oom
        except torch.OutOfMemoryError:
            give_up()
    assert is_out_of_memory(given_up.value)


def test_a_chain_that_loops_is_followed_once():
    first, second = ValueError("first"), ValueError("second")
    first.__context__, second.__context__ = second, first  # each raised while the other was handled
    assert not is_out_of_memory(first)
    second.__cause__ = MemoryError()
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


def torch_version(monkeypatch, version: str) -> None:
    """This process's torch taken for ``version``, as it reports its own (``torch.__version__``)."""
    monkeypatch.setattr(torch, "__version__", TorchVersion(version))


@pytest.mark.parametrize("version", ["2.10.0", "2.13.0+cpu"])
def test_a_worker_killed_by_sigbus_where_torch_reserves_shared_memory_up_front_is_a_shrunk_mapped_file(
    monkeypatch, version
):
    # That torch raises the allocation error where /dev/shm is full (out of memory): the SIGBUS came from elsewhere,
    # and out of memory would rule out larger batches and more workers (study/space.py) for a fault of the pipeline.
    torch_version(monkeypatch, version)
    assert not is_out_of_memory(BUS_ERROR)
    failure = describe_exception(WorkerKilledError("SIGBUS"))
    assert failure == Failure(
        FailureKind.SIGNAL,
        "a DataLoader worker was killed by SIGBUS, most likely a memory-mapped file the dataset reads became shorter "
        f"than when it was mapped (truncated or replaced while in use): torch {version} reserves each batch's shared "
        "memory before writing it, and a full /dev/shm raises an error instead",
    )


@pytest.mark.parametrize("version", ["2.9.1", "2.10.0a0+git1234567", "2.4.0"])
def test_a_worker_killed_by_sigbus_where_torch_writes_batches_unreserved_is_out_of_shared_memory(monkeypatch, version):
    # A worker writing its batch to a full /dev/shm dies of SIGBUS there; a pre-release of 2.10 counts as older.
    torch_version(monkeypatch, version)
    assert is_out_of_memory(BUS_ERROR)
    assert describe_exception(WorkerKilledError("SIGBUS")) == Failure(
        FailureKind.OUT_OF_MEMORY,
        "a DataLoader worker was killed by SIGBUS, most likely as shared memory (/dev/shm), where workers hand over "
        "their batches, ran out (or a memory-mapped file the dataset reads became shorter than when it was mapped)",
    )


def test_a_worker_killed_by_another_signal_is_typed_by_it():
    assert describe_exception(WorkerKilledError("SIGKILL")).kind is FailureKind.OUT_OF_MEMORY
    assert describe_exception(WorkerKilledError("SIGSEGV")).kind is FailureKind.SIGNAL
