"""A dataset that is a stream (an IterableDataset): read in its own order, perhaps with no length, and loaded by more
than one DataLoader worker only where it splits itself across them."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy
import pytest
import torch
from torch.utils.data import DataLoader

from autotune.app import STREAM_NOTE
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.measure.loading import InstrumentedStream, instrumented
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.inspect import inspect_pipeline
from autotune.pipeline.setup import Trainer
from autotune.pipeline.streams import repeats_in_workers, same_sample
from autotune.study.space import build_space, check_baseline
from autotune.trial.plain import run_plain
from autotune.trial.probe import run_probe
from autotune.trial.result import ProbePlan
from tests.conftest import FAST_MEASURE, NEUTRAL_KNOBS, TEST_CONF, cpu_context, fixed_search, trial_request
from tests.fixtures.streams import SplitStream, WholeStream
from tests.trial.test_plain import PLAN


def _spec(dataset: str, length: int = 64):
    return trial_request(dataset=dataset, length=length).pipeline


def test_a_stream_is_inspected_by_iterating_it_and_whether_its_workers_repeat_one_another_is_read():
    split = inspect_pipeline(_spec("streams.SplitStream"))
    assert split.dataset_len is None and split.input_ndim == 4 and not split.repeats_in_workers
    whole = inspect_pipeline(_spec("streams.WholeStream"))
    assert whole.dataset_len is None and whole.repeats_in_workers
    sized = inspect_pipeline(_spec("inspection.SizedStream"))  # says its length, and gives each worker all of it
    assert sized.dataset_len == 16 and sized.repeats_in_workers
    assert not inspect_pipeline(_spec("tiny.TinyImages")).repeats_in_workers, "a map-style dataset is split by index"


def test_an_empty_stream_is_refused_naming_the_dataset():
    with pytest.raises(ConfigError, match=r"^pipeline.dataset: SplitStream is empty: iterating it yields nothing$"):
        inspect_pipeline(_spec("streams.SplitStream", length=0))


def test_workers_repeat_a_stream_where_their_first_samples_are_the_same():
    assert repeats_in_workers(WholeStream(8)) and not repeats_in_workers(SplitStream(8))
    assert repeats_in_workers(WholeStream(1)), "one sample, which each worker yields"
    assert not repeats_in_workers(SplitStream(1)), "the second worker has nothing to yield: nothing repeated"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (torch.ones(2), torch.ones(2), True),
        (torch.ones(2), torch.ones(3), False),
        (torch.ones(2), torch.ones(2, dtype=torch.int64), False),
        ({"x": torch.ones(2), "y": 1}, {"x": torch.ones(2), "y": 1}, True),
        ({"x": torch.ones(2), "y": 1}, {"x": torch.ones(2), "y": 2}, False),
        ((torch.zeros(1), "a"), [torch.zeros(1), "a"], True),
        ((torch.zeros(1),), (torch.zeros(1), 0), False),
        (numpy.arange(3), numpy.arange(3), True),
        (numpy.arange(3), numpy.arange(1, 4), False),
        (numpy.arange(3), torch.arange(3), False),
        ("text", "text", True),
    ],
)
def test_samples_are_the_same_where_every_value_in_them_is(a, b, same):
    assert same_sample(a, b) is same


def test_a_trainer_reads_a_stream_in_its_own_order_epoch_after_epoch_each_sample_once_an_epoch():
    pipeline = build_pipeline(_spec("streams.SplitStream", length=32))
    knobs = {**NEUTRAL_KNOBS, "batch_size": 4, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    batches = Trainer(pipeline, knobs, torch.device("cpu")).batches()
    try:
        epochs = [torch.cat([next(batches)[1] for _ in range(8)]) for _ in range(2)]
    finally:
        batches.close()
    expected = torch.tensor([index % 4 for index in range(32)])  # TinyImages' labels, in the stream's order
    assert all(torch.equal(epoch.sort().values, expected.sort().values) for epoch in epochs)


def test_a_stream_whose_workers_each_hold_less_than_a_batch_says_so():
    pipeline = build_pipeline(_spec("streams.SplitStream", length=16))
    knobs = {**NEUTRAL_KNOBS, "batch_size": 16, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}
    batches = Trainer(pipeline, knobs, torch.device("cpu")).batches()
    with pytest.raises(ValueError, match=r"larger than the dataset \(a stream: than each worker's share of it\)$"):
        next(batches)


def test_the_plain_loop_times_a_stream_by_its_window_as_its_epochs_length_is_unknown():
    pipeline = build_pipeline(_spec("streams.SplitStream", length=64))
    knobs = {**NEUTRAL_KNOBS, "batch_size": 16, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    run = run_plain(pipeline, knobs, torch.device("cpu"), PLAN, None)
    assert run.warmup_steps == 3 and run.steps >= 12 and run.samples == 16 * run.steps


def test_a_stream_is_timed_batch_by_batch_in_the_worker_that_draws_it():
    data = instrumented(SplitStream(32), None)
    assert isinstance(data, InstrumentedStream)
    loader = DataLoader(data, batch_size=4, num_workers=2, collate_fn=data.collate)
    items = list(loader)
    assert len(items) == 8 and all(item.samples == 4 and item.fetch_s > 0 for item in items)
    assert {item.pid for item in items}.isdisjoint({os.getpid()}) and len({item.pid for item in items}) == 2
    assert sorted(torch.cat([item.batch[1] for item in items]).tolist()) == sorted(i % 4 for i in range(32))


def test_workers_that_would_repeat_a_stream_are_not_searched_and_a_baseline_with_them_is_refused():
    repeated = cpu_context(dataset_len=None, repeats_in_workers=True, cpu_count=4)
    space = build_space(dict.fromkeys(KNOBS), repeated)
    assert space.candidates["num_workers"] == [0, 1]
    assert space.candidates["batch_size"][-1] == 4 * NEUTRAL_KNOBS["batch_size"], "no length bounds the batch"
    with pytest.raises(ConfigError, match=r"^search.num_workers: 2 cannot run here: the dataset, an IterableData"):
        build_space({**dict.fromkeys(KNOBS), "num_workers": [0, 2]}, repeated)
    with pytest.raises(ConfigError, match=r"^pipeline.baseline.num_workers: 2: the dataset, an IterableDataset, "):
        check_baseline({**NEUTRAL_KNOBS, "num_workers": 2}, repeated)
    check_baseline({**NEUTRAL_KNOBS, "num_workers": 1}, repeated)
    split = replace(repeated, repeats_in_workers=False)
    assert build_space(dict.fromkeys(KNOBS), split).candidates["num_workers"][-1] == 8


def test_the_probe_times_a_streams_loader_with_its_workers_and_its_model_step():
    pipeline = build_pipeline(_spec("streams.SplitStream", length=64))
    computes = [{**NEUTRAL_KNOBS, "batch_size": 8}]
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}, {"batch_size": 8, "num_workers": 2}], computes, 0.05)
    result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert not result.failed and len(result.loader_throughputs) == 2
    assert all(rate > 0 for rate in result.loader_throughputs + result.compute_throughputs)


@pytest.mark.slow
def test_a_stream_is_tuned_with_its_workers_raced_and_profiled_as_a_map_style_dataset_is(tmp_path, cli_here):
    args = ["-cd", str(TEST_CONF), "pipeline=tiny", *FAST_MEASURE, "study.diagnose=true", "study.probe=false"]
    args += ["pipeline.dataset._target_=tests.fixtures.streams.SplitStream", "study.n_trials=3"]
    args += fixed_search(batch_size=[16, 32], num_workers=[0, 2], prefetch_factor=[2], persistent_workers=[True])
    proc = cli_here([*args, "study.confirm_rounds=1", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "FAILED" not in proc.stdout, proc.stdout
    assert "[profile baseline]" in proc.stdout and "[profile recommended]" in proc.stdout, proc.stdout
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["trials"]
    measured = {(row["batch_size"], row["num_workers"]) for row in rows}  # pruned ones too: a busy machine's
    assert measured == {(16, 0), (16, 2), (32, 0), (32, 2)}, "the baseline and the space's three others"


@pytest.mark.slow
def test_a_tune_of_a_stream_that_every_worker_reads_whole_says_so_and_measures_at_most_one_worker(tmp_path, cli_here):
    args = ["-cd", str(TEST_CONF), "pipeline=tiny", *FAST_MEASURE, "study.probe=false", "study.confirm_rounds=0"]
    args += ["pipeline.dataset._target_=tests.fixtures.streams.WholeStream", "study.n_trials=3"]
    args += fixed_search(batch_size=[16], num_workers=None, prefetch_factor=[2], persistent_workers=[True])
    proc = cli_here([*args, f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"\nnote: {STREAM_NOTE}\n" in proc.stdout
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["trials"]
    assert {row["num_workers"] for row in rows} == {0, 1}, "the space's two configurations"
