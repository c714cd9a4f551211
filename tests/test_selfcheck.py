"""Which configurations mode=selfcheck checks."""

from __future__ import annotations

from dataclasses import replace

from autotune.measure.environment import this_machine_id
from autotune.selfcheck import _configurations


def test_without_a_tuned_study_only_the_baseline_is_checked(tiny_settings, tmp_path):
    settings = replace(tiny_settings, study=replace(tiny_settings.study, storage=f"sqlite:///{tmp_path}/none.db"))
    configurations, source = _configurations(settings, this_machine_id())
    assert configurations == {"baseline": settings.baseline}
    assert source.startswith("the baseline only: no study 'tiny'")
