"""Where a long run's step differs from the timed steps' (an epoch's start among them: ``results/epochs.py``), each
place that states a waiting share says which it is: the verdict's gist says its share is of a long run's step, and
the stage tables stay the timed steps' with one line beside them naming the epoch's start and the long run's step
(the profile's page and lines, the tuning report's side by side and its terminal lines)."""

from __future__ import annotations

import io

from autotune.report.diagnosis import print_profile, profile_document
from autotune.report.markdown import to_markdown
from autotune.report.profiles import print_tuned_profile, side_by_side_rows, summary_lines
from autotune.results.profile import ProfileRecord, TunedProfiles
from tests.results.test_profile_advice_review import REST_S, WORKERS
from tests.results.test_verdict_long_run import STEADY_S, one_epoch_start

# Step 12 of 30 began an epoch of 1000 steps and waited 250 ms, the others 1 ms: a long run's step is the rest and
# the steady wait, and the start's excess over that wait once in 1000 steps.
LONG_WAIT_S = STEADY_S + (0.250 - STEADY_S) / 1000
LINE = (
    f"a long run: {(REST_S + LONG_WAIT_S) * 1e3:.1f} ms a step, waiting {LONG_WAIT_S / (REST_S + LONG_WAIT_S):.0%} "
    "(step 12 began an epoch and waited 250 ms, the others 1.0 ms: the excess counted once an epoch of 1000 steps)"
)


def record(wait_s: float) -> ProfileRecord:
    """Two workers' 30 timed steps, step 12 beginning an epoch of 1000 steps and waiting ``wait_s`` for data, the
    others ``STEADY_S``."""
    return ProfileRecord("p", "cpu", "baseline", WORKERS, {"cpu_count": 8}, "p", one_epoch_start(wait_s, epoch=1000))


def test_the_profiles_page_and_lines_keep_the_timed_steps_and_name_the_long_runs_step_beside_them(tmp_path):
    profiled = record(0.250)
    timed_ms = profiled.result.stages.loop_s * 1e3
    document = profile_document(profiled, tmp_path)
    (stages,) = [section for section in document.sections if section.heading == "Where a step's time goes"]
    assert stages.table.rows[-1] == ["step", f"{timed_ms:.2f}", "100%"], "what was measured"
    assert stages.bullets == [LINE]
    assert f"- {LINE}" in to_markdown(document)
    out = io.StringIO()
    print_profile(profiled, {}, out)
    assert f"  per step {timed_ms:.1f} ms: " in out.getvalue() and f"\n  {LINE}\n" in out.getvalue()


def test_the_tuning_reports_side_by_side_and_its_lines_say_which_share_they_give():
    profiles = TunedProfiles(record(0.250))
    gist = "compute-bound (waiting for data 7% of a long run's step, "
    _, rows = side_by_side_rows(profiles)
    cells = {row[0]: row[1] for row in rows}
    assert cells["verdict"].startswith(gist)
    assert cells["  waiting for data"].endswith("(35%)"), "the timed steps' stage"
    assert cells["a long run"] == LINE.removeprefix("a long run: ")
    assert summary_lines(profiles)[0].startswith(f"What limits it: baseline {gist}")
    out = io.StringIO()
    print_tuned_profile(profiles.baseline, stored=True, out=out)
    assert out.getvalue().startswith(f"[profile baseline, stored] {gist}")


def test_where_the_long_run_reads_as_the_timed_steps_nothing_more_is_said(tmp_path):
    profiled = record(STEADY_S)  # the epoch's start waited as every other step did
    assert "long run" not in profiled.diagnosis.gist and "epoch" not in profiled.diagnosis.rules[0]
    document = profile_document(profiled, tmp_path)
    (stages,) = [section for section in document.sections if section.heading == "Where a step's time goes"]
    assert not stages.bullets
    _, rows = side_by_side_rows(TunedProfiles(profiled))
    assert "a long run" not in [row[0] for row in rows]
