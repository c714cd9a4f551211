import pytest

from benchmarks.pooled import PoolingError, pool, pooled_verdict, rivals


def run(rounds, configs, tuner_label, grid_wall_s=100.0):
    """An efficiency.json's content with one pipeline, 'p', whose grid varies knobs a and b."""
    entry = {
        "grid": {"size": 4, "wall_s": grid_wall_s},
        "varied_knobs": ["b", "a"],
        "check": {"configs": configs, "rounds": rounds, "tuner_label": tuner_label},
    }
    return {"pipelines": {"p": entry, "old": {"grid": {"size": 4, "wall_s": 1.0}, "varied_knobs": ["a"]}}}


FAST, SLOW = {"a": 1, "b": "x", "c": 0}, {"a": 2, "b": "x", "c": 0}


def test_rounds_of_several_runs_are_pooled_by_configuration_whatever_each_run_called_it():
    first = run(
        [{"grid1": 110.0, "tuner": 100.0}, {"grid1": 121.0, "tuner": 110.0}], {"grid1": FAST, "tuner": SLOW}, "tuner"
    )
    second = run([{"grid1": 90.0, "grid2": 99.0}], {"grid1": SLOW, "grid2": FAST}, "grid2")
    pooled = pool([first, second], ["one.json", "two.json"])
    assert list(pooled) == ["p"], "a pipeline without re-measured configurations is left out"
    data = pooled["p"]
    assert data["runs"] == 2 and len(data["rounds"]) == 3
    assert data["picks"] == {"a=2 b=x": 1, "a=1 b=x": 1}
    assert data["rounds"][2] == {"a=2 b=x": 90.0, "a=1 b=x": 99.0}
    ((other, interval),) = rivals(data["rounds"], "a=2 b=x")
    assert other == "a=1 b=x" and interval["n"] == 3
    assert interval["geomean"] == pytest.approx(1 / 1.1) and interval["low"] == pytest.approx(1 / 1.1)


def test_runs_of_different_grids_are_not_pooled():
    first = run([{"grid1": 1.0}], {"grid1": FAST}, "grid1")
    second = run([{"grid1": 1.0}], {"grid1": FAST}, "grid1", grid_wall_s=200.0)
    with pytest.raises(PoolingError, match="two.json: the p grid .* one.json"):
        pool([first, second], ["one.json", "two.json"])


def test_a_pick_meets_the_target_only_against_every_rival_and_misses_it_against_any():
    clear, spans, below = (
        {"geomean": g, "low": lo, "high": hi} for g, lo, hi in ((1.0, 0.98, 1.02), (0.99, 0.9, 1.05), (0.9, 0.85, 0.95))
    )
    assert pooled_verdict([("r1", clear), ("r2", clear)]) == ("met", "r1")
    assert pooled_verdict([("r1", spans), ("r2", clear)]) == ("unresolved", "r1")
    assert pooled_verdict([("r1", below), ("r2", spans)]) == ("missed", "r1")
    assert pooled_verdict([("r1", spans), ("r2", below)]) == ("missed", "r2")
    assert pooled_verdict([]) is None
