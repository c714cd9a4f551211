"""num_threads: its candidates hold the baseline's own thread count, which the probe anchors at."""

from __future__ import annotations

from autotune.knobs import KNOBS
from autotune.study.probe_model import anchor_knobs
from autotune.study.space import build_space
from tests.conftest import NEUTRAL_KNOBS, cpu_context


def test_a_baseline_thread_count_off_the_powers_of_two_is_a_candidate_and_the_probes_anchor():
    baseline = {**NEUTRAL_KNOBS, "num_threads": 12}
    ctx = cpu_context(cpu_count=16, baseline=baseline)
    assert KNOBS["num_threads"].default_candidates(ctx) == [1, 2, 4, 8, 12, 16]
    space = build_space(dict.fromkeys(KNOBS), ctx)
    assert anchor_knobs(space, baseline)["num_threads"] == 12, "the model step is timed as the baseline runs it"


def test_a_baseline_of_torchs_default_or_of_more_threads_than_worth_a_search_adds_no_candidate():
    knob = KNOBS["num_threads"]
    assert knob.default_candidates(cpu_context(cpu_count=16)) == [1, 2, 4, 8, 16]
    wasteful = cpu_context(cpu_count=2, baseline={**NEUTRAL_KNOBS, "num_threads": 9})
    assert knob.default_candidates(wasteful) == [1, 2], "9 threads on 2 cores: measured as the baseline, not searched"
