"""A value the study measured slower than the baseline beyond noise in every configuration it ran with it is said so,
with its figures, and is never the advice to follow next, whichever knob advises it; a value measured slower in one
configuration and not in another, or measured alike but for its knob, is judged as before."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from autotune.measure.page_faults import PageFaults
from autotune.measure.profiling import OperatorStat, ProfileResult
from autotune.report.profiles import ALL_MEASURED_NO_GAIN, to_follow
from autotune.results.diagnosis import COMPUTE_BOUND, DATA_BOUND, OVERHEAD_BOUND
from autotune.results.profile import ProfileRecord
from autotune.results.remedies import advise, first_to_follow
from autotune.results.remedy_model import Advice, Tried
from autotune.results.tried import tries_of
from tests.results.profile_records import profile_result
from tests.results.test_summary import BASELINE, results_with, trial

FAULTING = PageFaults(steps=10, minor_faults=40_000, user_s=0.8, system_s=0.2, page_bytes=4096)
# The reviewed study: two compiled trials read 0.10x and 0.16x the baseline's 100 samples/s; the recommendation
# (trial 2) does not compile.
RECOMMENDED = {"batch_size": 64, "num_workers": 3, "amp": "bf16", "optimizer_impl": "fused", "malloc": "keep"}
REVIEWED = (
    trial("0", 10.0, num_workers=4, amp="bf16", compile="default", optimizer_impl="fused"),
    trial("1", 16.0, batch_size=64, num_workers=3, compile="default", optimizer_impl="fused", malloc="keep"),
    trial("2", 142.0, **RECOMMENDED),
)


def advice_for(knob: str, advice: list[Advice]) -> Advice:
    (found,) = [a for a in advice if a.knob == knob]
    return found


def test_compiling_measured_slower_in_every_compiled_trial_is_said_with_its_figures_and_not_advised_next():
    tried = tries_of(results_with(*REVIEWED))
    assert tried.against_baseline["compile=default"] == [0.1, 0.16]
    assert tried.says("compile", "default", "off") == (
        "the tuner measured compile=default at 0.10x to 0.16x the baseline (single runs of the 2 configurations with "
        "it, each more than 15% under the baseline's: beyond a single run's noise) and did not race it (study 's')"
    )
    advice = advise(profile_result(wait_share=0.05), COMPUTE_BOUND, {**BASELINE, **RECOMMENDED}, 8, tried)
    compiling = advice_for("compile", advice)
    assert compiling.measured_no_gain and first_to_follow(advice) is None
    assert to_follow(advice) == ALL_MEASURED_NO_GAIN, "the terminal's next step is not to compile"


def test_a_value_measured_slower_in_one_configuration_and_not_in_another_stays_unmeasured_in_words():
    compiled = [trial("0", 10.0, compile="default", amp="bf16"), trial("1", 120.0, compile="default", malloc="keep")]
    tried = tries_of(results_with(*compiled, trial("2", 150.0, batch_size=32)))  # trial 2 is recommended
    assert tried.against_baseline["compile=default"] == [0.1, 1.2] and "compile=off->default" not in tried.twins
    assert not tried.measured_slower("compile", "default")
    assert tried.says("compile", "default", "off").startswith("the tuner measured compile=default and did not")
    compiling = advice_for("compile", advise(profile_result(wait_share=0.05), COMPUTE_BOUND, BASELINE, 8, tried))
    assert not compiling.measured_no_gain


@pytest.mark.parametrize(("throughput", "slower"), [(84.0, True), (85.0, False), (90.0, False)])
def test_slower_beyond_noise_is_more_than_a_single_runs_window_under_the_baseline_as_printed(throughput, slower):
    tried = tries_of(results_with(trial("0", throughput, compile="default", set_to_none=False)))
    assert tried.measured_slower("compile", "default") is slower
    assert ("the baseline (a single run of the one configuration" in tried.says("compile", "default")) is slower


def test_configurations_measured_alike_but_for_the_knob_decide_over_the_baseline():
    # Compiled with channels_last: 0.60x the baseline, yet 1.2x the same settings without compiling.
    tried = tries_of(
        results_with(trial("0", 60.0, compile="default", channels_last=True), trial("1", 50.0, channels_last=True))
    )
    assert tried.measured_slower("compile", "default") and tried.twins["compile=off->default"] == [1.2]
    assert not tried.no_gain("compile", "off", "default"), "the pair alike but for compiling decides"
    assert "at 1.20x the same settings with compile=off (one pair" in tried.says("compile", "default", "off")


def _convolved() -> ProfileResult:
    result = replace(profile_result(wait_share=0.05), input_ndim=4)
    ops = result.operators
    convolution = OperatorStat("aten::mkldnn_convolution", 10, ops.step_operators[0].self_cpu_s)
    return replace(result, operators=replace(ops, step_operators=[convolution, *ops.step_operators]))


# Each knob's advice path: the profile and verdict that advise it, and the value it advises.
PATHS = {
    "amp": (profile_result(faults=FAULTING, gc_share=0.01), "", "bf16"),
    "malloc": (profile_result(faults=FAULTING, gc_share=0.01), "", "keep"),
    "channels_last": (_convolved(), COMPUTE_BOUND, True),
    "compile": (profile_result(small_operators=0.8, optimizer_share=0.2), OVERHEAD_BOUND, "default"),
    "optimizer_impl": (profile_result(small_operators=0.8, optimizer_share=0.2), OVERHEAD_BOUND, "foreach"),
    "batch_size": (profile_result(small_operators=0.8, optimizer_share=0.2), OVERHEAD_BOUND, 32),
    "num_workers": (profile_result(wait_share=0.75), DATA_BOUND, 3),
}


@pytest.mark.parametrize("knob", PATHS)
def test_every_knobs_advice_measured_slower_in_every_configuration_comes_last_and_is_not_followed(knob):
    result, verdict, value = PATHS[knob]
    unmeasured = advice_for(knob, advise(result, verdict, BASELINE, 8, None))
    assert f"set {knob}={value}" in unmeasured.action, "the value each path advises"
    # set_to_none changed too: no pair alike but for the knob, so the baseline rule decides.
    slower = tries_of(results_with(trial("0", 50.0, set_to_none=False, **{knob: value})))
    advice = advise(result, verdict, BASELINE, 8, slower)
    flagged = advice_for(knob, advice)
    assert flagged.measured_no_gain and first_to_follow(advice) is not flagged
    assert advice[-1] == flagged, "ranked last"
    assert "0.50x the baseline (a single run of the one configuration with it" in flagged.tried
    if flagged.gain is not None:
        assert "did not bear out: the change read 0.50x the baseline" in flagged.effect
    within = tries_of(results_with(trial("0", 90.0, set_to_none=False, **{knob: value})))
    assert not advice_for(knob, advise(result, verdict, BASELINE, 8, within)).measured_no_gain


def test_what_a_study_read_against_its_baseline_is_stored_with_the_profile_and_older_profiles_read_back():
    tried = tries_of(results_with(*REVIEWED))
    assert tried.against_baseline["compile=off"] == [1.0, 1.42], "the baseline's own among them"
    record = ProfileRecord("p", "cpu", "recommended", BASELINE, {}, "s", None, tried=tried)
    assert ProfileRecord.from_dict(json.loads(json.dumps(record.to_dict()))).tried == tried
    older = {key: value for key, value in asdict(tried).items() if key != "against_baseline"}
    assert Tried(**older).against_baseline == {} and not Tried(**older).measured_slower("compile", "default")
    assert tries_of(replace(results_with(*REVIEWED), baseline=None)).against_baseline == {}, "no baseline measured"
