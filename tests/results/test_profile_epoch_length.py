"""The epoch a restart of workers is costed once in (``epochs._epoch``): the spacing of the timed steps
that began one where two or more did; else the dataset's full batches, but for a stream every worker reads whole,
whose epochs are as many times longer as it has workers (unknown, as a stream without a length)."""

from __future__ import annotations

from dataclasses import replace

from tests.results.test_profile_advice_review import restarting
from tests.results.test_profile_advice_second_review import RESTART_S, persist_advice


def restarts_at(starts: list[int], steps: int = 40, dataset_len: int | None = 16 * 8, repeats: bool = False):
    """``steps`` timed steps waiting 1 ms for data, ``RESTART_S`` at each of ``starts``, which began an epoch; a
    dataset of ``dataset_len`` samples (16 a batch), a stream every worker reads whole where ``repeats``."""
    waits = [0.001] * steps
    for step in starts:
        waits[step] = RESTART_S
    return replace(restarting(waits, starts, dataset_len=dataset_len), repeats_in_workers=repeats)


def test_the_epoch_is_the_spacing_of_the_steps_that_began_one_where_two_did():
    # A stream of 128 samples that each of the 2 workers reads whole: 16 steps an epoch, not 128 // 16.
    (persist,) = persist_advice(restarts_at([5, 21, 37], repeats=True))
    assert persist.effect.endswith("once an epoch of 16 steps")
    (persist,) = persist_advice(restarts_at([5, 25], dataset_len=16 * 8))
    assert persist.effect.endswith("once an epoch of 20 steps"), "as measured, over the dataset's length"


def test_a_stream_every_worker_reads_whole_has_an_unknown_epoch_where_one_start_was_timed():
    (persist,) = persist_advice(restarts_at([5], repeats=True))
    assert persist.effect.endswith("as often as the timed steps held them")


def test_a_datasets_full_batches_are_its_epoch_where_one_start_was_timed():
    (persist,) = persist_advice(restarts_at([5], dataset_len=16 * 30))
    assert persist.effect.endswith("once an epoch of 30 steps")
