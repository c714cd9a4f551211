"""Which operators' time is arithmetic, for the memory-bound rule: random number generation is on a CPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.environment import has_16_bit_units
from autotune.measure.profiling import OperatorStat
from autotune.results.diagnosis import COMPUTE_BOUND, MEMORY_BOUND, figures, is_compute_operator, verdict
from autotune.results.remedies import advise
from tests.conftest import NEUTRAL_KNOBS
from tests.results.profile_records import profile_result


def _with_dropout(device_busy: float | None = None):
    """A step whose operators are 30 % matrix products, 25 % dropout's random masks and 45 % elementwise."""
    result = profile_result(wait_share=0.05, device_busy=device_busy)
    ops = [OperatorStat("aten::mm", 10, 0.030, 0.030), OperatorStat("aten::bernoulli_", 10, 0.025, 0.025)]
    ops.append(OperatorStat("aten::add", 10, 0.045, 0.045))
    return replace(result, operators=replace(result.operators, top=ops, step_operators=ops))


@pytest.mark.parametrize("name", ["aten::bernoulli_", "aten::uniform_", "aten::normal_", "aten::random_"])
def test_random_number_generation_is_arithmetic_on_a_cpu_only(name):
    assert is_compute_operator(name, "cpu") and not is_compute_operator(name, "cuda")
    assert is_compute_operator("aten::addmm", "cuda") and not is_compute_operator("aten::add", "cpu")


def test_a_step_a_quarter_of_it_dropouts_masks_is_compute_bound_on_a_cpu_and_memory_bound_on_a_gpu():
    decided, rules = verdict(_with_dropout())
    assert decided == COMPUTE_BOUND
    assert str(rules[-1]).startswith("matrix products and convolutions and random numbers, of the operators' time:")
    assert verdict(_with_dropout(device_busy=0.9))[0] == MEMORY_BOUND


def test_halving_the_arithmetic_with_amp_counts_matrix_products_alone():
    found = figures(_with_dropout())
    assert (found.compute_share, found.product_share) == pytest.approx((0.55, 0.30))
    amp = next(a for a in advise(_with_dropout(), COMPUTE_BOUND, NEUTRAL_KNOBS, 2, None) if a.knob == "amp")
    rest = found.loop_s - found.wait_s
    assert amp.gain == pytest.approx(found.loop_s / (found.loop_s - 0.30 * found.operator_share * rest / 2))


def test_amp_is_not_advised_where_16_bit_arithmetic_is_emulated():
    advised = advise(_with_dropout(), COMPUTE_BOUND, NEUTRAL_KNOBS, 2, None, sixteen_bit=False)
    assert "amp" not in {a.knob for a in advised}, "a CPU without avx512_bf16 or AMX emulates bf16, slower than fp32"
    assert has_16_bit_units({"cpu_flags": ["avx2", "avx512_bf16"]}, "cpu") and has_16_bit_units({}, "cuda:0")
    assert has_16_bit_units({"gpu_bf16": True}, "cuda") and not has_16_bit_units({"gpu_bf16": False}, "cuda:0")
    assert not has_16_bit_units({"cpu_flags": ["avx2", "fma"]}, "cpu")
