"""The run's record of its time holds what it spent however it ends (stored after every counted process), and says
where it waited for other tuners or left a parallel slot idle rather than calling that the tuner's own work."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import optuna
import pytest

from autotune import app
from autotune.results.tuner_time import IDLE, TUNER, WAITING, TunerTime, load_tuner_time
from autotune.study import clock as clock_module
from autotune.study.clock import SEARCH, RunClock
from autotune.study.sharing import Turn, never
from tests.study.test_budget import measured


@pytest.fixture
def now(monkeypatch) -> list[float]:
    """The clock's time, set by the test."""
    at = [0.0]
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(monotonic=lambda: at[0], time=lambda: 1.7e9))
    return at


def test_a_run_killed_in_a_stage_keeps_in_its_record_what_its_processes_took(now):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    clock = RunClock()
    clock.attach(study, "m")
    with clock.stage("baseline"):
        now[0] += 20.0
        clock.count(measured(20.0))
    search = clock.stage(SEARCH)  # held: the stage never ends, as where kill -9 or the OOM killer ends the run
    search.__enter__()
    for _ in range(100):
        now[0] += 30.0
        clock.count(measured(30.0))
    (run,) = load_tuner_time(study.user_attrs, "m").runs
    assert run.wall_s == 3020.0 and not run.finished, "not the 20 s stored when the baseline's stage ended"
    assert TunerTime([run]).stages() == pytest.approx({"baseline": 20.0, SEARCH: 3000.0, TUNER: 0.0})


def test_a_slot_with_nothing_left_to_run_while_another_runs_is_idle_not_the_tuners_own_work(now):
    clock = RunClock()
    with clock.stage(SEARCH, 2):  # slot A runs a 10 s trial, slot B one of 300 s
        now[0] = 10.0
        slot_a = threading.Thread(target=clock.count, args=(measured(10.0, startup_s=0.2),))
        slot_a.start()
        slot_a.join()
        now[0] = 300.0
        clock.count(measured(300.0, startup_s=0.2))  # slot B: this thread, alive throughout
    search = TunerTime([clock.record(finished=True)]).by_stage()[SEARCH]
    assert search[IDLE] == pytest.approx((300.0 - 10.0) / 2), "slot A, idle for 290 of the stage's 300 s"
    assert search[TUNER] == pytest.approx(0.0), "not 145 s of the tuner's own work"
    assert sum(search.values()) == pytest.approx(300.0)
    alone = RunClock()
    with alone.stage(SEARCH):
        now[0] += 10.0
        alone.count(measured(8.0))
    assert IDLE not in alone.record().processes[SEARCH], "one slot is never idle: the stage waits on what it runs"


def test_the_searchs_wait_for_other_tuners_is_waiting_until_its_next_process_starts_or_the_stage_ends(now):
    clock = RunClock()
    with clock.stage(SEARCH):
        now[0] = 10.0
        clock.count(measured(10.0))
        now[0] = 12.0
        clock.awaited()  # sharing.await_others looks: another tuner's trial runs
        now[0] = 15.0
        clock.awaited()  # and again
        now[0] = 25.0
        clock.count(measured(5.0))  # an owed trial, from 20 s
        now[0] = 27.0
        clock.awaited()
        now[0] = 40.0
    search = TunerTime([clock.record(finished=True)]).by_stage()[SEARCH]
    assert search[WAITING] == pytest.approx((20.0 - 12.0) + (40.0 - 27.0))
    assert search[TUNER] == pytest.approx(40.0 - 15.0 - 21.0)


def test_the_wait_for_the_turn_at_the_race_is_waiting_on_a_shared_study_alone(now, monkeypatch):
    @contextmanager
    def finishing(study, settings, machine, waits) -> Iterator[tuple[Turn, object]]:
        now[0] += 30.0  # another tuner of this machine races first
        yield Turn.AFTER_ANOTHER, never

    monkeypatch.setattr(app, "finishing", finishing)
    settings = SimpleNamespace(study=SimpleNamespace(storage="journal:///shared.log"))
    clock = RunClock()
    with app._finishing_timed(None, settings, "m", clock, lambda: True) as (turn, lost):
        now[0] += 5.0  # its own race: not waiting
    assert turn is Turn.AFTER_ANOTHER and clock.record().processes[TUNER] == {WAITING: 30.0}
    assert TunerTime([clock.record(finished=True)]).by_stage()[TUNER] == {WAITING: 30.0, TUNER: 5.0}
    alone = RunClock()
    with app._finishing_timed(None, SimpleNamespace(study=SimpleNamespace(storage="sqlite:///a.db")), "m", alone, None):
        pass
    assert TUNER not in alone.record().processes, "alone on its study, a tuner waits for no one"
