"""The verdict's few words beside a profile (``Diagnosis.gist``) say what each share is of: the wait for data is a
share of the step, the host's overhead and the GPU's busy time of the model step, the arithmetic of the operators'
time; side by side, shares of wholes left unsaid read as parts of one (25% and 84%, as if 109%)."""

from __future__ import annotations

from autotune.results.diagnosis import MODEL_STEP, STEP_UNKNOWN, Rule, rules
from autotune.results.profile import ProfileRecord
from tests.conftest import NEUTRAL_KNOBS
from tests.results.profile_records import profile_result


def gist(result) -> str:
    """The gist of a profile of ``result``."""
    return ProfileRecord(
        "tiny", "cpu", "baseline", NEUTRAL_KNOBS, {"cpu_count": 2}, "tiny", result=result
    ).diagnosis.gist


def test_the_wait_and_the_host_overhead_each_say_what_they_are_a_share_of():
    said = gist(profile_result(wait_share=0.25, small_operators=0.84))
    assert said == "host-overhead-bound (waiting for data 25% of the step, host overhead 84% of the model step)"


def test_the_gpus_busy_share_is_of_the_model_step():
    busy = rules(profile_result(wait_share=0.1, device_busy=0.3))[1]
    assert busy.gist == "the GPU busy 30% of the model step"


def test_a_data_bound_verdict_says_its_wait_is_of_the_step():
    assert gist(profile_result(wait_share=0.6)) == "data-bound (waiting for data 60% of the step)"


def test_a_figure_that_cannot_be_read_is_said_unknown_with_no_whole():
    assert Rule("host overhead, of the model step:", None, 0.5, True, STEP_UNKNOWN, of=MODEL_STEP).gist == (
        "host overhead unknown"
    )
