"""A dataset that is a stream (an IterableDataset): read in its own order, perhaps with no length, and loaded by more
than one DataLoader worker only where it splits itself across them."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
from dataclasses import dataclass, replace

import pytest
import torch
from torch.utils.data import DataLoader

from autotune import benchmark as benchmark_mode
from autotune import diagnose as diagnose_mode
from autotune.app import STREAM_NOTE
from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.measure.loading import InstrumentedStream
from autotune.pipeline import streams
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.inspect import inspect_pipeline
from autotune.pipeline.setup import Trainer
from autotune.pipeline.streams import repeats_in_workers, same_sample
from autotune.study.space import build_space, check_baseline
from autotune.trial.plain import run_plain
from autotune.trial.probe import run_probe
from autotune.trial.result import ProbePlan
from tests.conftest import (
    FAST_MEASURE,
    NEUTRAL_KNOBS,
    TEST_CONF,
    cpu_context,
    fixed_search,
    tiny_config,
    trial_request,
)
from tests.fixtures.streams import AugmentedWholeStream, SplitStream, WholeStream, WorkerHatingStream
from tests.fixtures.tiny import TinyImages
from tests.test_benchmark import _recommended_yaml
from tests.trial.test_plain import PLAN


@dataclass
class Pair:
    tensor: torch.Tensor
    name: str


def _spec(dataset: str, length: int = 64):
    return trial_request(dataset=dataset, length=length).pipeline


def test_a_stream_is_inspected_by_iterating_it_and_whether_its_workers_repeat_one_another_is_read():
    split = inspect_pipeline(_spec("streams.SplitStream"))
    assert split.dataset_len is None and split.input_ndim == 4 and not split.repeats_in_workers
    whole = inspect_pipeline(_spec("streams.WholeStream"))
    assert whole.dataset_len is None and whole.repeats_in_workers
    sized = inspect_pipeline(_spec("inspection.SizedStream", length=16))  # says its length, each worker reads it all
    assert sized.dataset_len == 16 and sized.repeats_in_workers
    assert not inspect_pipeline(_spec("tiny.TinyImages")).repeats_in_workers, "a map-style dataset is split by index"
    handle = inspect_pipeline(_spec("streams.HandleStream"))
    assert handle.repeats_in_workers, "read before this process reads it, as a trial's workers start"
    assert inspect_pipeline(_spec("streams.UnknownLengthStream")).dataset_len is None, "a stream needs no length"


def test_an_empty_stream_is_refused_naming_the_dataset():
    with pytest.raises(ConfigError, match=r"^pipeline.dataset: SplitStream is empty: iterating it yields nothing$"):
        inspect_pipeline(_spec("streams.SplitStream", length=0))


def test_workers_repeat_a_stream_where_their_first_samples_are_the_same():
    assert repeats_in_workers(WholeStream(8)) and not repeats_in_workers(SplitStream(8))
    assert repeats_in_workers(AugmentedWholeStream(8)), "each worker seeded alike: the noise does not hide it"
    assert repeats_in_workers(WholeStream(1)), "one sample, which each worker yields"
    assert not repeats_in_workers(SplitStream(1)), "the second worker has nothing to yield: nothing repeated"
    assert not repeats_in_workers(WorkerHatingStream(8)), "its trials with workers fail, and rule those out"
    assert not multiprocessing.active_children(), "the check's workers are gone, after a failure too"


def test_workers_that_cannot_start_read_as_not_repeating_the_stream(monkeypatch):
    """Spawned, not forked, workers pickle the stream: one holding a lock cannot start them."""

    class Unstartable(DataLoader):
        def __iter__(self):
            raise TypeError("cannot pickle '_thread.lock' object")

    monkeypatch.setattr(streams, "DataLoader", Unstartable)
    assert not repeats_in_workers(WholeStream(8)), "its trials with workers fail, and rule those out"


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
        (torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]), True),
        (torch.tensor([float("nan"), 1.0]), torch.tensor([0.0, 1.0]), False),
        (Pair(torch.ones(2), "a"), Pair(torch.ones(2), "a"), True),
        (Pair(torch.ones(2), "a"), Pair(torch.zeros(2), "a"), False),
        ("text", "text", True),
    ],
)
def test_samples_are_the_same_where_every_value_in_them_is(a, b, same):
    assert same_sample(a, b) is same


def _key(image: torch.Tensor) -> float:
    """A TinyImages sample by its first pixel, drawn from a generator seeded by its index: one value a sample."""
    return round(float(image[0, 0, 0]), 6)


@pytest.mark.parametrize("persistent", [True, False])
def test_a_trainer_reads_a_stream_in_its_own_order_epoch_after_epoch_each_sample_once_an_epoch(persistent):
    pipeline = build_pipeline(_spec("streams.SplitStream", length=32))
    knobs = {**NEUTRAL_KNOBS, "batch_size": 4, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": persistent}
    batches = Trainer(pipeline, knobs, torch.device("cpu")).batches()
    try:
        epochs = [[_key(image) for _ in range(8) for image in next(batches)[0]] for _ in range(3)]
    finally:
        batches.close()
    samples = [_key(TinyImages(32)[index][0]) for index in range(32)]
    assert all(sorted(epoch) == sorted(samples) for epoch in epochs), "every sample once an epoch, three epochs"
    assert epochs[0][:8] == [samples[index] for index in (0, 2, 4, 6, 1, 3, 5, 7)], "the workers' batches in turn"


def test_a_stream_whose_workers_each_hold_less_than_a_batch_says_so():
    pipeline = build_pipeline(_spec("streams.SplitStream", length=16))
    knobs = {**NEUTRAL_KNOBS, "batch_size": 16, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False}
    batches = Trainer(pipeline, knobs, torch.device("cpu")).batches()
    with pytest.raises(ValueError, match=r"larger than the dataset \(a stream: than each worker's share of it\)$"):
        next(batches)


def test_the_plain_loop_times_a_stream_by_its_window_though_it_says_its_length():
    # 4 steps an epoch: a map-style dataset's would be timed in whole epochs, its warm-up run to an epoch's end.
    pipeline = build_pipeline(_spec("inspection.SizedStream", length=16))
    run = run_plain(pipeline, {**NEUTRAL_KNOBS, "batch_size": 4}, torch.device("cpu"), PLAN, None)
    assert run.warmup_steps == 3 and run.steps >= 12 and run.samples == 4 * run.steps


def test_a_stream_is_timed_batch_by_batch_in_the_worker_that_draws_it():
    data = InstrumentedStream(SplitStream(32), None)
    loader = DataLoader(data, batch_size=4, num_workers=2, collate_fn=data.collate)
    items = list(loader)
    assert len(items) == 8 and all(item.samples == 4 and item.fetch_s > 0 for item in items)
    assert {item.pid for item in items}.isdisjoint({os.getpid()}) and len({item.pid for item in items}) == 2
    assert sorted(torch.cat([item.batch[1] for item in items]).tolist()) == sorted(i % 4 for i in range(32))


def test_the_samples_of_a_part_batch_a_stream_drops_are_counted_in_no_batch():
    data = InstrumentedStream(SplitStream(10), None)
    loader = DataLoader(data, batch_size=4, drop_last=True, collate_fn=data.collate)
    epochs = [[item.samples for item in loader] for _ in range(2)]
    assert epochs == [[4, 4], [4, 4]], "the 2 samples left over each epoch join no batch of the next"


def test_workers_that_would_repeat_a_stream_are_not_searched_and_a_baseline_with_them_is_refused():
    repeated = cpu_context(dataset_len=None, repeats_in_workers=True, cpu_count=4)
    space = build_space(dict.fromkeys(KNOBS), repeated)
    assert space.candidates["num_workers"] == [0, 1]
    assert space.candidates["batch_size"][-1] == 4 * NEUTRAL_KNOBS["batch_size"], "no length bounds the batch"
    with pytest.raises(ConfigError, match=r"^search.num_workers: 2 cannot run here: the dataset, an IterableData"):
        build_space({**dict.fromkeys(KNOBS), "num_workers": [0, 2]}, repeated)
    with pytest.raises(ConfigError, match=r"^pipeline.baseline.num_workers: 2 cannot run here: the dataset, an "):
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
    changed = "Keep your current settings" not in proc.stdout  # a busy machine may keep the baseline
    assert "[profile baseline]" in proc.stdout and ("[profile recommended]" in proc.stdout) == changed, proc.stdout
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


def test_the_baseline_in_any_mode_and_a_recommendation_to_measure_refuse_workers_that_read_a_stream_whole(
    tmp_path, monkeypatch
):
    """The baseline's, in the inspection every mode runs; a recommendation's, before mode=benchmark's rounds."""
    monkeypatch.setattr(benchmark_mode, "measure_rounds", None)  # called, it would fail the test
    whole = {"_target_": "tests.fixtures.streams.WholeStream", "length": 64}
    workers = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    config = tiny_config(pipeline={**tiny_config()["pipeline"], "dataset": whole})
    with pytest.raises(ConfigError, match=r"^recommended: .*knobs.num_workers=2 cannot run here \(the dataset, an "):
        recommended = _recommended_yaml(tmp_path, workers)
        benchmark_mode.run(
            load_settings({**config, "mode": "benchmark", "recommended": str(recommended)}, "tiny"),
            tmp_path / "out",
            io.StringIO(),
        )
    config["pipeline"]["baseline"] = {**config["pipeline"]["baseline"], **workers}
    with pytest.raises(ConfigError, match=r"^pipeline.baseline.num_workers: 2 cannot run here: the dataset, an "):
        diagnose_mode.run(load_settings({**config, "mode": "profile"}, "tiny"), tmp_path / "out", io.StringIO())
