import math

import pytest

from benchmarks.run_order import Run, by_distance, flagged_against_rest, race_rounds


def _runs(throughputs, flagged=()):
    return [Run(place, 1, "copy", value, place in flagged) for place, value in enumerate(throughputs)]


def test_pairs_are_pooled_by_how_many_runs_apart_they_ran():
    pooled = by_distance(_runs([100.0, 110.0, 100.0]))
    assert set(pooled) == {"1", "2"}
    pairs, rms = pooled["1"]
    assert pairs == 2
    assert rms == pytest.approx(math.log(1.1)), "both neighbours differ by 1.1x, one up and one down"
    assert pooled["2"] == (1, pytest.approx(0.0)), "the two runs two apart read alike"


def test_distances_past_the_last_range_fall_into_the_open_one():
    runs = [Run(0, 1, "copy", 100.0, False), Run(40, 5, "copy", 200.0, False)]
    assert by_distance(runs) == {"18+": (1, pytest.approx(math.log(2.0)))}


def test_flagged_runs_are_compared_with_the_unflagged_by_geometric_means():
    ratio, flagged, rest = flagged_against_rest(_runs([90.0, 100.0, 100.0], flagged={0}))
    assert (flagged, rest) == (1, 2)
    assert ratio == pytest.approx(0.9)
    assert flagged_against_rest(_runs([90.0, 100.0])) is None, "no flagged run: nothing to compare"


class _Runner:
    """Stands for a TrialRunner: records each run's name and each new draw."""

    def __init__(self):
        self.names = []

    def new_draw(self):
        self.names.append("draw")

    def run(self, knobs, name):
        self.names.append(name)

        class Result:
            ok, failure, core_speed = True, None, None

            class timing:
                throughput = 100.0

        return Result()


def test_each_round_starts_with_a_new_draw_one_place_further_along_the_labels(capsys):
    runner = _Runner()
    runs = race_rounds(runner, {"baseline": {}, "copy1": {}, "copy2": {}}, 2)
    assert runner.names == [
        "draw", "round1-baseline", "round1-copy1", "round1-copy2",
        "draw", "round2-copy1", "round2-copy2", "round2-baseline",
    ]  # fmt: skip
    assert [r.place for r in runs] == list(range(6))
    assert [r.round for r in runs] == [1, 1, 1, 2, 2, 2]
