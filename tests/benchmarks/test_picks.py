import pytest
import yaml

from benchmarks import picks as picks_module
from benchmarks.picks import compare, picks_of


def test_each_pick_is_read_from_its_recommendation_and_compared_with_the_fastest_round_by_round(tmp_path, monkeypatch):
    for label, batch in (("a", 32), ("b", 64)):
        (tmp_path / f"{label}.yaml").write_text(yaml.safe_dump({"knobs": {"batch_size": batch}}))
    picks = picks_of([f"a={tmp_path / 'a.yaml'}", f"b={tmp_path / 'b.yaml'}"])
    assert picks == {"a": {"batch_size": 32}, "b": {"batch_size": 64}}
    rounds = [{"baseline": 100.0, "a": 180.0, "b": 200.0}, {"baseline": 110.0, "a": 220.0, "b": 200.0},
              {"baseline": 90.0, "a": 190.0, "b": 210.0}]  # fmt: skip
    seen = {}

    def remeasured(settings, configs, count, workdir, cache):
        seen.update(configs=configs, count=count)
        return rounds[:count], []

    monkeypatch.setattr(picks_module, "remeasure_interleaved", remeasured)
    settings = type("Settings", (), {"baseline": {"batch_size": 16}})()
    outcome = compare(settings, picks, 3)
    assert seen == {"configs": {"baseline": {"batch_size": 16}, **picks}, "count": 3}
    assert outcome["fastest_pick"] == "b", "by geometric mean: 203.3 against 196.3"
    a = outcome["summary"]["a"]
    assert a["median_sps"] == 190.0 and a["against_fastest_pick"]["geomean"] == pytest.approx(
        (0.9 * 1.1 * 190 / 210) ** (1 / 3)
    )
    assert outcome["summary"]["b"]["against_fastest_pick"] is None
    assert outcome["summary"]["baseline"]["against_baseline"]["geomean"] == pytest.approx(1.0)
