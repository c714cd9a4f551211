"""Whether an exception raised in a trial says memory ran out: behind whatever the user's code raised over it."""

from __future__ import annotations

import torch

from autotune.trial.exceptions import is_out_of_memory


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


def test_a_chain_that_loops_is_followed_once():
    first, second = ValueError("first"), ValueError("second")
    first.__context__, second.__context__ = second, first  # each raised while the other was handled
    assert not is_out_of_memory(first)
    second.__cause__ = MemoryError()
    assert is_out_of_memory(first)


def test_a_dataloader_whose_worker_was_killed_out_of_shared_memory_is_out_of_memory():
    # As the probe's DataLoader raises it, where a trial's worker killed by SIGBUS is out of memory too.
    killed = RuntimeError(
        "DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's workers are "
        "out of shared memory. Please try to raise your shared memory limit."
    )
    assert is_out_of_memory(killed)
