"""Tuners sharing one study (Optuna's journal file here; two tuner processes on a journal and on PostgreSQL in
tests/study/test_scale_out.py): trials shared out, none measured twice, a dead tuner's trial failed and measured
again, machines reported apart."""

from __future__ import annotations

import contextlib
import datetime
import errno
import io
import os
import threading
import time
from dataclasses import asdict, replace
from functools import partial
from types import SimpleNamespace

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune import app, rerender
from autotune.config.settings import STALE_BEATS, StudySettings
from autotune.errors import StudyMismatchError
from autotune.measure.environment import describe_machine, machine_id, this_machine_id
from autotune.measure.measurement import SystemReport
from autotune.measure.recorder import WindowPlan
from autotune.records import (
    ALIVE_ATTR,
    BASELINE_ATTR,
    CLAIM_ATTR,
    CONFIG_ATTR,
    INTERRUPTED_ATTR,
    RESULT_ATTR,
    config_key,
    measured_trials,
)
from autotune.results.model import load_results
from autotune.study import sharing
from autotune.study.clock import RunClock
from autotune.study.disturbed import again_if_disturbed
from autotune.study.search_state import Proposal, counted_trials, look
from autotune.study.sharing import (
    Turn,
    _await_claim,
    _claim_name,
    claimed,
    fail_interrupted_trials,
    fail_stale_trials,
    finishing,
    searching,
)
from autotune.study.space import SearchSpace
from autotune.study.start import open_study
from autotune.study.storage import StorageFaultError, create_study, is_shared
from autotune.study.tuner import StopReason, ensure_baseline, tune
from autotune.trial.result import TrialResult
from tests.conftest import fake_measurement
from tests.study.test_sharing_skew import Clocks
from tests.study.test_trim import BASELINE as TRIM_BASELINE
from tests.study.test_trim import WINNER, Pipeline, space_to
from tests.study.test_tuner import BASELINE, SPACE, fake_result, left_measuring
from tests.study.test_tuner import settings as tuner_settings

# What is tuned, with a measurement plan the reports can describe.
META = {
    "pipeline": {"name": "p"},
    "baseline": BASELINE,
    "space": SPACE.candidates,
    "device": "cpu",
    "measure": asdict(WindowPlan()),
}
# The heartbeat of the tests where no tuner dies: a live one is taken for dead only once unheard for STALE_BEATS
# beats (4 s), a stall a loaded host does not reach; the waits for the others it paces (each min(heartbeat_s,
# sharing._AWAIT_POLL_S)) fit within those tests' durations and bounds.
LIVE_HEARTBEAT_S = 1.0


class SlowMeasure:
    """A fake measurement taking ``seconds``, recording what it measured, from any thread."""

    def __init__(self, seconds: float):
        self.seconds, self.calls, self.lock = seconds, [], threading.Lock()

    def __call__(self, knobs, name, on_progress=None):
        time.sleep(self.seconds)
        with self.lock:
            self.calls.append((name, dict(knobs)))
        return fake_result(knobs)

    def measured(self) -> list[str]:
        return [config_key(knobs) for name, knobs in self.calls if name != "baseline"]


def journal(tmp_path, n_trials=4, **more) -> StudySettings:
    storage = f"journal://{tmp_path}/study.log"
    return StudySettings(name="s", storage=storage, n_trials=n_trials, timeout_s=None, seed=0, **more)


def tuner(settings: StudySettings, measure, described: dict | None = None, propose=None) -> None:
    study = open_study(settings, META, described)
    machine = machine_id(described) if described else None
    ensure_baseline(study, BASELINE, measure, machine)
    tune(study, SPACE, settings, measure, lambda event: None, propose, machine=machine)


def test_a_journal_file_or_a_database_server_is_shared_and_a_sqlite_file_is_not(tmp_path):
    assert is_shared(f"journal://{tmp_path}/s.log") and is_shared("postgresql://u:p@localhost/db")
    assert not is_shared(f"sqlite:///{tmp_path}/s.db") and not is_shared("sqlite://")


def test_two_tuners_on_one_study_share_out_its_trials_and_measure_each_configuration_once(tmp_path):
    settings = journal(tmp_path, heartbeat_s=LIVE_HEARTBEAT_S)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))  # as a first tuner would have
    measure = SlowMeasure(0.3)
    threads = [threading.Thread(target=tuner, args=(settings, measure)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    measured = measure.measured()
    assert len(measured) == len(set(measured)), "each configuration once, none twice"
    # Each tuner counts the others' trials in flight: study.n_trials holds but for two tuners taking their last
    # trials within the milliseconds between one's marking its trial in flight and the other's counting.
    study = open_study(settings, META)
    assert settings.n_trials <= counted_trials(study) == len(measured) <= settings.n_trials + 1
    assert not study.get_trials(states=(TrialState.RUNNING,)), "no trial left running"
    assert [name for name in _storage_names(study) if "#measuring" in name] == [], "every claim ended"


def _die_before_claiming(study, trial, machine, key):
    trial.set_user_attr(CLAIM_ATTR, _claim_name(study, machine, key))  # named, not made


def _die_making_the_claim(study, trial, machine, key):
    _die_before_claiming(study, trial, machine, key)
    study._storage.create_new_study([StudyDirection.MAXIMIZE], _claim_name(study, machine, key))  # its trial unsaid


def _die_holding_the_claim(study, trial, machine, key):
    claimed(study, trial, machine, key, take_over=True).__enter__()


def _left_by_a_dead_tuner(study, settings, died=_die_making_the_claim) -> str:
    """A trial of this machine whose tuner ``died`` measuring it, unheard of since: its configuration."""
    machine, dead = this_machine_id(), study.ask()
    dead.set_user_attr(ALIVE_ATTR, [time.time(), settings.heartbeat_s])  # its last heartbeat
    key = config_key(left_measuring(dead))
    died(study, dead, machine, key)
    time.sleep(STALE_BEATS * settings.heartbeat_s + 0.1)
    return key


@pytest.mark.parametrize("died", [_die_before_claiming, _die_making_the_claim, _die_holding_the_claim])
def test_a_trial_whose_tuner_died_is_failed_once_unheard_of_and_its_configuration_measured_again(tmp_path, died):
    settings = journal(tmp_path, n_trials=2, heartbeat_s=0.1)
    study = open_study(settings, META)
    ensure_baseline(study, BASELINE, SlowMeasure(0))
    key = _left_by_a_dead_tuner(study, settings, died)
    measure = SlowMeasure(0)
    tuner(settings, measure)
    study = open_study(settings, META)
    dead = next(t for t in study.trials if t.user_attrs[CONFIG_ATTR] == key)
    assert dead.state is TrialState.FAIL
    assert measure.measured()[0] == key, "measured again, first, by the live tuner"
    measured = [t.number for t, _ in measured_trials(study, this_machine_id())]
    assert counted_trials(study) == 2 and dead.number not in measured
    assert [name for name in _storage_names(study) if "#measuring" in name] == [], "every claim ended"


def test_a_dead_tuners_configuration_is_owed_once_its_claim_has_ended(tmp_path):
    settings = journal(tmp_path, n_trials=1, heartbeat_s=0.1)
    study = open_study(settings, META)
    key = _left_by_a_dead_tuner(study, settings)
    assert [config_key(p.knobs) for p in look(study, settings, this_machine_id()).owed] == [], "not before it fails"
    assert len(fail_stale_trials(study)) == 1
    assert [name for name in _storage_names(study) if "#measuring" in name] == [], "a tuner taking it finds it free"
    assert [config_key(p.knobs) for p in look(study, settings, this_machine_id()).owed] == [key]


def test_a_dead_tuners_configuration_is_measured_again_on_its_machine_and_only_there(tmp_path):
    settings = journal(tmp_path, n_trials=2, heartbeat_s=0.1)
    elsewhere = {**describe_machine(), "cpu_model": "Another CPU", "cpu_flags": ["avx512_bf16"]}
    key = _left_by_a_dead_tuner(open_study(settings, META), settings)
    other_kind, same_kind = SlowMeasure(0), SlowMeasure(0)

    def all_but_the_dead_ones(observations, taken, ran_out):  # a guide: what it proposes is not the dead trial's
        return next((Proposal(k) for k in SPACE.configurations() if config_key(k) not in {*taken, key}), None)

    tuner(settings, other_kind, elsewhere, all_but_the_dead_ones)  # fails the dead trial, then tunes its machine
    tuner(settings, same_kind)
    assert key not in other_kind.measured(), "not taken by a tuner of another machine"
    assert same_kind.measured()[0] == key, "measured first by the next tuner of its machine"


def test_a_proposal_is_measured_by_its_tuner_though_another_tuner_asks_for_a_trial_in_between(tmp_path, monkeypatch):
    settings = journal(tmp_path, n_trials=1)
    study, another = open_study(settings, META), open_study(settings, META)
    ensure_baseline(study, BASELINE, SlowMeasure(0))
    proposed = next(k for k in SPACE.configurations() if (k["batch_size"], k["num_workers"]) == (32, 2))
    asked_in_between, ask = [], study.ask

    def another_tuner_asks_first():
        trial = another.ask()
        asked_in_between.append(SPACE.sample(trial))
        another.tell(trial, state=TrialState.FAIL)
        return ask()

    monkeypatch.setattr(study, "ask", another_tuner_asks_first)
    measure = SlowMeasure(0)
    tune(study, SPACE, settings, measure, lambda event: None, lambda *seen: Proposal(proposed))
    assert measure.measured() == [config_key(proposed)]
    assert asked_in_between and asked_in_between[0] != proposed, "the other tuner's trial is its own sampler's"


@pytest.mark.parametrize("holder", ["a finished trial", "nobody"])
def test_a_claim_outliving_its_trial_is_taken_over_by_the_next_trial_that_wants_it(tmp_path, holder):
    study = open_study(journal(tmp_path), META)
    machine, finished, wants = this_machine_id(), study.ask(), study.ask()
    study.tell(finished, state=TrialState.FAIL)
    claim = study._storage.create_new_study([StudyDirection.MAXIMIZE], _claim_name(study, machine, "k"))
    if holder == "a finished trial":
        study._storage.set_study_user_attr(claim, "trial", finished.number)
    with claimed(study, wants, machine, "k", take_over=True) as mine:
        assert mine


def test_a_claim_being_made_by_a_live_trial_is_not_taken(tmp_path):
    study = open_study(journal(tmp_path), META)
    machine, making, wants = this_machine_id(), study.ask(), study.ask()
    making.set_user_attr(CLAIM_ATTR, _claim_name(study, machine, "k"))  # named, made, its trial not yet recorded
    study._storage.create_new_study([StudyDirection.MAXIMIZE], _claim_name(study, machine, "k"))
    with claimed(study, wants, machine, "k", take_over=True) as mine:
        assert not mine
    assert study.trials[wants.number].user_attrs[CLAIM_ATTR] is None, "a trial that gave way names no claim"


def test_an_orphaned_claim_in_a_sqlite_study_is_left_to_the_next_opening(tmp_path):
    settings = StudySettings(name="s", storage=f"sqlite:///{tmp_path}/s.db", n_trials=1, timeout_s=None, seed=0)
    study = open_study(settings, META)
    machine, finished, wants = this_machine_id(), study.ask(), study.ask()
    study.tell(finished, state=TrialState.FAIL)
    claim = study._storage.create_new_study([StudyDirection.MAXIMIZE], _claim_name(study, machine, "k"))
    study._storage.set_study_user_attr(claim, "trial", finished.number)
    with claimed(study, wants, machine, "k", take_over=False) as mine:
        assert not mine, "a SQLite file reuses a study's id: a claim read may be another's by the time it is ended"


def test_waiting_for_the_study_to_end_reads_a_claim_ended_between_its_two_reads_as_ended(tmp_path, monkeypatch):
    study = open_study(journal(tmp_path), META)
    study._storage.create_new_study([StudyDirection.MAXIMIZE], "s#finishing@m")

    def ended(claim):
        raise KeyError(claim)

    monkeypatch.setattr(study._storage, "get_study_user_attrs", ended)
    _await_claim(study, "s#finishing@m")  # returns at once
    assert study._storage.get_study_id_from_name("s#finishing@m") is not None, "not ended here as unheard"


def test_a_trial_not_heard_of_yet_is_not_judged_by_a_start_time_another_zone_wrote(tmp_path):
    study = open_study(journal(tmp_path, heartbeat_s=0.1), META)
    hours_off = datetime.datetime.now() - datetime.timedelta(hours=5)  # Optuna writes the writer's local time
    template = FrozenTrial(
        number=0, state=TrialState.RUNNING, value=None, datetime_start=hours_off, datetime_complete=None,
        params={}, distributions={}, user_attrs={}, system_attrs={}, intermediate_values={}, trial_id=0,
    )  # fmt: skip
    study._storage.create_new_trial(study._study_id, template_trial=template)
    assert fail_stale_trials(study) == [], "a trial first seen now is not a minute silent"


def test_a_trial_is_heard_of_before_other_tuners_see_it_in_flight(tmp_path, monkeypatch):
    written, set_user_attr = [], optuna.Trial.set_user_attr
    monkeypatch.setattr(optuna.Trial, "set_user_attr", lambda trial, key, value: [
        written.append(key), set_user_attr(trial, key, value)])  # fmt: skip
    settings = journal(tmp_path, n_trials=1, heartbeat_s=60)  # a tuner dying in flight is failed in 4 of its beats
    tuner(settings, SlowMeasure(0))
    assert ALIVE_ATTR in written and written.index(ALIVE_ATTR) < written.index(CONFIG_ATTR)


def test_a_tuner_waiting_on_a_trial_that_ends_interrupted_measures_its_configuration(tmp_path):
    settings = journal(tmp_path, n_trials=2, heartbeat_s=0.2)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))

    def stopped(knobs, name, on_progress=None):
        time.sleep(1.0)
        raise KeyboardInterrupt  # its user pressed Ctrl-C mid-trial: its own tuner fails it, interrupted

    def other_tuner():
        with contextlib.suppress(KeyboardInterrupt):
            tuner(settings, stopped)

    other = threading.Thread(target=other_tuner)
    other.start()
    time.sleep(0.5)  # its trial in flight
    tuner(settings, SlowMeasure(0.1))  # measures a trial, then waits on the other's
    other.join()
    study = open_study(settings, META)
    assert counted_trials(study) == 2, "the interrupted trial's configuration measured by the tuner waiting on it"
    assert look(study, settings, this_machine_id()).owed == []


def test_a_live_tuners_trial_is_not_failed_by_a_tuner_that_joins_while_it_runs(tmp_path):
    # Stale after 2 s without a beat: longer than a loaded machine's hiccup in the heartbeat's thread.
    settings = journal(tmp_path, n_trials=1, heartbeat_s=0.5)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))
    first = threading.Thread(target=tuner, args=(settings, SlowMeasure(3 * STALE_BEATS * settings.heartbeat_s)))
    first.start()
    time.sleep(2 * STALE_BEATS * settings.heartbeat_s)  # its trial runs, heard of every heartbeat_s
    open_study(settings, META)  # a second tuner joining fails only stale trials
    first.join()
    study = open_study(settings, META)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE]


def test_results_of_two_machines_are_kept_and_reported_apart(tmp_path):
    settings = journal(tmp_path, n_trials=2)
    elsewhere = {**describe_machine(), "cpu_model": "Another CPU", "cpu_flags": ["avx512_bf16"]}
    tuner(settings, SlowMeasure(0))
    tuner(settings, SlowMeasure(0), elsewhere)
    study = open_study(settings, META)
    mine, theirs = load_results(study), load_results(study, machine_id(elsewhere))
    assert len(mine.trials) == len(theirs.trials) == 2, "each machine measured its own n_trials"
    assert mine.baseline is not None and theirs.baseline is not None
    assert {t.label for t in mine.trials}.isdisjoint({t.label for t in theirs.trials})
    assert theirs.machine["cpu_model"] == "Another CPU" and list(mine.other_machines) == [theirs.machine_id]
    files = rerender.run("s", settings.storage, tmp_path / "reports", out=io.StringIO())
    folders = {path.parent.name for path in files.values()}
    assert folders == {f"machine-{mine.machine_id}", f"machine-{theirs.machine_id}"}, "one report per machine"
    assert "Another CPU" in files[f"{mine.machine_id}/report.md"].read_text(), "the other machine is named"


def _storage_names(study) -> list[str]:
    return [summary.study_name for summary in study._storage.get_all_studies()]


def test_of_tuners_making_one_study_at_once_with_other_settings_one_describes_it_and_the_other_is_refused(
    tmp_path, monkeypatch
):
    settings = journal(tmp_path, heartbeat_s=0.5)
    read, both_read, first_reads = optuna.Study.user_attrs.fget, threading.Barrier(2, timeout=30), set()

    def user_attrs(study):  # each tuner's first read, before either has described the study
        found = read(study)
        if threading.get_ident() not in first_reads:
            first_reads.add(threading.get_ident())
            both_read.wait()
        return found

    monkeypatch.setattr(optuna.Study, "user_attrs", property(user_attrs))
    assert _made_at_once(settings) == ["described", "study 's' in the storage was created with other settings"]


def test_a_description_claimed_by_a_tuner_that_died_is_taken_over_by_one_of_those_waiting(tmp_path):
    """Waiting past its silence, each would otherwise store its own description, and none be refused."""
    settings = journal(tmp_path, heartbeat_s=0.5)
    study = create_study(settings.storage, study_name="s", directions=["maximize"])
    dead = study._storage.create_new_study([StudyDirection.MAXIMIZE], f"s#describing@{study._study_id}")
    study._storage.set_study_user_attr(dead, ALIVE_ATTR, [time.time() - 60, 0.5])
    assert _made_at_once(settings) == ["described", "study 's' in the storage was created with other settings"]
    assert _storage_names(study) == ["s"], "the claim ended"


def test_a_description_claim_no_longer_heard_is_ended_as_other_orphans_are(tmp_path):
    study = open_study(journal(tmp_path), META)
    dead = study._storage.create_new_study([StudyDirection.MAXIMIZE], f"s#describing@{study._study_id}")
    study._storage.set_study_user_attr(dead, ALIVE_ATTR, [time.time() - 60, 0.5])
    live = study._storage.create_new_study([StudyDirection.MAXIMIZE], f"s#describing@{study._study_id + 1}")
    study._storage.set_study_user_attr(live, ALIVE_ATTR, [time.time(), 0.5])
    assert fail_stale_trials(study) == []
    assert _storage_names(study) == ["s", f"s#describing@{study._study_id + 1}"]


def _made_at_once(settings: StudySettings) -> list[str]:
    """What two tuners making study ``s`` at once with other settings are told: "described", or why refused."""
    outcomes = []

    def making(meta) -> None:
        try:
            open_study(settings, meta)
            outcomes.append("described")
        except StudyMismatchError as refused:
            outcomes.append(str(refused).split(": ")[1])

    tuners = [threading.Thread(target=making, args=(meta,)) for meta in (META, {**META, "device": "cuda"})]
    for each in tuners:
        each.start()
    for each in tuners:
        each.join()
    return sorted(outcomes)


def test_a_study_of_an_earlier_autotune_is_refused_naming_the_key(tmp_path):
    settings = journal(tmp_path)
    open_study(settings, META).set_user_attr(BASELINE_ATTR, {})  # the baseline as one machine's study held it
    with pytest.raises(StudyMismatchError, match=r"^study.name: .* made by an earlier autotune"):
        open_study(settings, META)


def test_a_journal_that_fails_mid_run_is_one_line_naming_the_key_and_the_cause(tmp_path, monkeypatch):
    study = open_study(journal(tmp_path), META)

    def disk_full(self, logs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(JournalFileBackend, "append_logs", disk_full)
    with pytest.raises(StorageFaultError, match=r"^study.storage: disk full: Optuna storage 'journal://.*free space"):
        study.set_user_attr("x", 1)


def _stale(self, log_number_from):
    raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))  # NFS: the file's handle is stale as it is read
    yield  # a generator, as Optuna's: the file is read as its logs are iterated


@pytest.mark.parametrize("fault", ["stale handle", "a folder"])
def test_a_journal_that_fails_while_it_is_read_is_one_line_naming_the_key(tmp_path, monkeypatch, fault):
    study = open_study(journal(tmp_path), META)
    if fault == "a folder":  # the file replaced by a folder
        (tmp_path / "study.log").unlink()
        (tmp_path / "study.log").mkdir()
        said = r"\(IsADirectoryError: \[Errno 21\] Is a directory: .*\); mend what it says, then run"
    else:
        monkeypatch.setattr(JournalFileBackend, "read_logs", _stale)
        said = r"\(OSError: \[Errno 116\] Stale file handle\); check its disk"
    with pytest.raises(StorageFaultError, match=rf"^study.storage: (I/O error: )?Optuna storage 'journal://.*{said}"):
        study.get_trials()


@pytest.mark.parametrize("when", ["asked", "measuring", "telling"])
def test_a_tuner_whose_trial_another_took_for_dead_drops_it_and_goes_on(tmp_path, monkeypatch, when):
    """Its tuner stopped past the stale time (SIGSTOP, a suspended laptop) and woke: the trial is failed
    interrupted, and the tuner measures on."""
    settings = journal(tmp_path, n_trials=2)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))
    other, taken, measure = open_study(settings, META), [], SlowMeasure(0)

    def take_it_for_dead() -> None:  # as another tuner does
        if not taken:
            taken.extend(other.get_trials(states=(TrialState.RUNNING,)))
            fail_interrupted_trials(other, taken)

    def measured(knobs, name, on_progress=None):
        take_it_for_dead()
        return measure(knobs, name, on_progress)

    sample, tell = SearchSpace.sample, optuna.Study.tell

    def sampled(space, trial):
        take_it_for_dead()
        return sample(space, trial)

    def told(study, *args, **kwargs):
        take_it_for_dead()
        return tell(study, *args, **kwargs)

    if when == "asked":
        monkeypatch.setattr(SearchSpace, "sample", sampled)
    elif when == "telling":
        monkeypatch.setattr(optuna.Study, "tell", told)
    study = open_study(settings, META)
    tune(study, SPACE, settings, measured if when == "measuring" else measure, lambda event: None)
    (dropped,) = [trial for trial in study.get_trials() if trial.number == taken[0].number]
    assert dropped.state is TrialState.FAIL and dropped.user_attrs[INTERRUPTED_ATTR]
    assert counted_trials(study) == settings.n_trials and look(study, settings, this_machine_id()).owed == []


def test_a_tuner_whose_every_trial_another_takes_for_dead_says_so_and_stops(tmp_path):
    """Their clocks apart by more than the stale time: each trial is failed as it is measured, and its configuration
    owed again. No timeout and no budget: nothing else would stop it."""
    settings = journal(tmp_path, n_trials=2, max_consecutive_failures=3)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))
    other, measure, events = open_study(settings, META), SlowMeasure(0), []

    def taken_for_dead(knobs, name, on_progress=None):
        assert len(measure.calls) < 10, "measured and dropped on and on"
        fail_interrupted_trials(other, other.get_trials(states=(TrialState.RUNNING,)))
        return measure(knobs, name, on_progress)

    stop = tune(open_study(settings, META), SPACE, settings, taken_for_dead, events.append)
    said = (
        f"another tuner took this one for dead (no heartbeat for {STALE_BEATS} x study.heartbeat_s=15s by its clock) "
        "and failed {}; check that the machines' clocks agree (NTP) and that this machine does not stall that long "
        "(suspended), else raise study.heartbeat_s"
    )
    assert [(event.result, event.dropped) for event in events] == [(None, said.format("it"))] * 3, "a line each"
    assert stop == StopReason(
        f"the last 3 trials were dropped: {said.format('each')} (study.max_consecutive_failures)", aborted=True
    )


def test_a_trial_its_tuner_told_as_another_took_it_for_dead_is_counted(tmp_path, monkeypatch):
    """The other marks it interrupted, then fails it: its own tuner's result told in between stands."""
    settings = journal(tmp_path, n_trials=1)
    study, other = open_study(settings, META), open_study(settings, META)
    trial = study.ask()
    knobs = left_measuring(trial)
    trial.set_user_attr(RESULT_ATTR, TrialResult(knobs=knobs, measurement=fake_measurement(100.0)).to_dict())
    unpatched = other.tell

    def told_first(*args, **kwargs):
        study.tell(trial, [100.0])
        return unpatched(*args, **kwargs)

    monkeypatch.setattr(other, "tell", told_first)
    assert fail_interrupted_trials(other, other.get_trials(states=(TrialState.RUNNING,))) == []
    assert INTERRUPTED_ATTR in study.trials[trial.number].user_attrs, "marked all the same"
    assert [t.number for t, _ in measured_trials(study, this_machine_id())] == [trial.number]
    assert look(study, settings, this_machine_id()).owed == []


@pytest.mark.parametrize("first_ends", ["done", "stopped"])
def test_the_tuners_of_a_machine_end_the_study_in_turn_however_the_one_before_ended(tmp_path, monkeypatch, first_ends):
    settings = journal(tmp_path, heartbeat_s=LIVE_HEARTBEAT_S)
    machine, held = this_machine_id(), []
    holds, waited = threading.Event(), threading.Event()
    await_claim = sharing._await_claim

    def awaits_the_first(*args, **kwargs) -> None:
        waited.set()
        await_claim(*args, **kwargs)

    monkeypatch.setattr(sharing, "_await_claim", awaits_the_first)

    def first() -> None:
        with contextlib.suppress(KeyboardInterrupt):
            with finishing(open_study(settings, META), settings, machine) as (turn, _):
                held.append(("first", turn))
                holds.set()
                waited.wait(30)  # until the second waits for its turn, however slow the host
                ended.append(time.monotonic())
                if first_ends == "stopped":  # Ctrl-C, SIGTERM (a cluster's time limit), a storage fault
                    raise KeyboardInterrupt

    holder, ended = threading.Thread(target=first), []
    holder.start()
    assert holds.wait(30)
    with finishing(open_study(settings, META), settings, machine) as (turn, _):
        held.append(("second", turn))
        assert ended, "held until the first ended (it held the turn as this one came), not beside it"
    holder.join()
    assert held == [("first", Turn.FIRST), ("second", Turn.AFTER_ANOTHER)], "the second waited, did what was left"


def test_a_tuner_whose_budget_is_spent_leaves_the_study_to_the_tuners_of_its_machine_still_at_it(tmp_path):
    """study.budget_s bounds the whole run: past it (``waits()`` no longer holds), a tuner waits neither for another
    tuner's search nor for another ending the study, and leaves the study's end to either; without it, it waits for
    both (the tests above)."""
    settings, machine = journal(tmp_path, n_trials=2, heartbeat_s=LIVE_HEARTBEAT_S), this_machine_id()
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))
    release, held = threading.Event(), threading.Event()

    def other(holds) -> None:  # searches, or ends the study, until released
        with holds(open_study(settings, META), settings, machine):
            held.set()
            release.wait(60)

    for holds in (searching, finishing):
        release.clear()
        held.clear()
        thread = threading.Thread(target=other, args=(holds,))
        thread.start()
        assert held.wait(10)
        began = time.monotonic()

        def waits(spent: float = began + 0.5) -> bool:
            return time.monotonic() < spent

        try:
            study = open_study(settings, META)
            if holds is searching:
                stop = tune(study, SPACE, settings, SlowMeasure(0), lambda event: None, waits=waits)
                assert not stop.aborted and counted_trials(study) == 2
            with finishing(study, settings, machine, waits) as (turn, _):  # the race must see the other's trials
                assert turn is Turn.LEFT
            assert thread.is_alive() and time.monotonic() - began < 0.5 + 2 * sharing._AWAIT_POLL_S
        finally:
            release.set()
            thread.join()
    with finishing(open_study(settings, META), settings, machine, lambda: False) as (turn, _):
        assert turn is Turn.FIRST, "a turn nobody holds is taken, the budget spent or not"


def test_a_tuner_that_died_ending_the_study_is_taken_over(tmp_path):
    settings = journal(tmp_path, heartbeat_s=0.1)
    study = open_study(settings, META)
    claim = study._storage.create_new_study([StudyDirection.MAXIMIZE], f"s#finishing@{this_machine_id()}")
    study._storage.set_study_user_attr(claim, ALIVE_ATTR, [time.time(), settings.heartbeat_s])  # then it died
    with finishing(study, settings, this_machine_id()) as (turn, _):
        assert turn is Turn.AFTER_ANOTHER


def test_a_tuner_paused_past_the_stale_time_learns_that_another_took_its_turn(tmp_path, monkeypatch):
    """SIGSTOP, Ctrl-Z, a suspended laptop: the tuner ending the study is not heard of for longer than the stale
    time, and the next tuner of its machine takes its turn. Woken, it must learn so, not race beside that one."""
    settings, machine = journal(tmp_path, heartbeat_s=0.1), this_machine_id()
    paused, study = threading.Event(), open_study(settings, META)
    write = study._storage.set_study_user_attr

    def beats_unless_paused(claim, key, value) -> None:
        if not (paused.is_set() and key == ALIVE_ATTR):
            write(claim, key, value)

    monkeypatch.setattr(study._storage, "set_study_user_attr", beats_unless_paused)
    with finishing(study, settings, machine) as (turn, lost):
        assert turn is Turn.FIRST and not lost()
        time.sleep(STALE_BEATS * settings.heartbeat_s)
        assert not lost(), "a holder heard of keeps its turn however long it holds it"
        paused.set()
        with finishing(open_study(settings, META), settings, machine) as (taken, _):
            assert taken is Turn.AFTER_ANOTHER, "the other took the paused one for dead"
            paused.clear()  # it wakes
            assert lost(), "it learns that its turn was taken"


def test_a_tuner_whose_search_was_taken_for_dead_ends_its_search(tmp_path):
    """Another tuner that took this one's search for dead (it was paused) no longer waits for it: this one's search
    ends (``StopReason.left_to_others``), and it races in its turn as any tuner of its machine."""
    settings = journal(tmp_path, n_trials=3, heartbeat_s=0.1)
    study = open_study(settings, META)
    ensure_baseline(study, BASELINE, SlowMeasure(0))
    other = open_study(settings, META)

    def taken_for_dead(knobs, name, on_progress=None):  # another tuner ends this one's search claim meanwhile
        for summary in other._storage.get_all_studies():
            if summary.study_name.startswith(f"s{sharing._SEARCHING}"):
                other._storage.delete_study(summary._study_id)
        return fake_result(knobs)

    stop = tune(study, SPACE, settings, taken_for_dead, lambda event: None)
    assert stop.left_to_others and not stop.aborted
    alone = tune(open_study(settings, META), SPACE, settings, SlowMeasure(0), lambda event: None)
    assert not alone.left_to_others, "a search whose claim was kept races"


def test_a_tuner_whose_turn_was_taken_stops_at_its_next_step_and_stores_nothing_more(tmp_path):
    """Its next step: after the run it was in when it woke, before its race's round is stored, or the trim."""
    study = open_study(tuner_settings(tmp_path), META)
    pipeline = Pipeline()
    ensure_baseline(study, TRIM_BASELINE, pipeline)
    study.enqueue_trial(WINNER)
    tune(study, space_to(WINNER), tuner_settings(tmp_path, n_trials=1), pipeline, lambda event: None)
    full = SimpleNamespace(study=replace(tuner_settings(tmp_path), confirm_rounds=3, diagnose=False))
    runner, ran = SimpleNamespace(new_draw=lambda: None), []

    def show(name: str, result: TrialResult) -> None:
        ran.append(name)

    def lost() -> bool:  # the turn taken while its first run ran
        return bool(ran)

    with pytest.raises(app._TurnTaken):
        app._finish(study, this_machine_id(), full, runner, pipeline, tmp_path, show, io.StringIO(), RunClock(), lost)
    assert len(ran) == 1, "no run after it learnt"
    results = load_results(study)
    assert results.confirmation is None and results.trim == [], "nothing stored over the other tuner's race"


def test_no_tuner_races_while_another_of_its_machine_searches_whatever_stopped_its_own_search(tmp_path):
    settings = journal(tmp_path, n_trials=4, heartbeat_s=LIVE_HEARTBEAT_S)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))
    raced: list[int] = []

    def run(own: StudySettings, between_trials_s: float) -> None:
        study = open_study(own, META)
        tune(study, SPACE, own, SlowMeasure(0.2), lambda event: time.sleep(between_trials_s))
        with finishing(study, own, this_machine_id()):
            raced.append(counted_trials(study))

    # The first stops at its timeout after one trial; the second pauses between its trials, measuring nothing then.
    tuners = [
        threading.Thread(target=run, args=(replace(settings, timeout_s=0.1), 0.0)),
        threading.Thread(target=run, args=(settings, 0.6)),
    ]
    for each in tuners:
        each.start()
    for each in tuners:
        each.join(timeout=60)
    assert raced[0] == counted_trials(open_study(settings, META)) == 4, "the first to race sees every trial"


def test_a_tuner_stopped_before_its_trials_measurement_leaves_a_trial_the_next_tuner_fails(tmp_path, monkeypatch):
    settings = journal(tmp_path, heartbeat_s=0.1)
    ensure_baseline(open_study(settings, META), BASELINE, SlowMeasure(0))

    def stopped(self, trial):  # Ctrl-C, SIGTERM, a kill, between Optuna's ask and the trial's first heartbeat
        raise KeyboardInterrupt

    monkeypatch.setattr(SearchSpace, "sample", stopped)
    with pytest.raises(KeyboardInterrupt):
        tune(open_study(settings, META), SPACE, settings, SlowMeasure(0), lambda event: None)
    monkeypatch.undo()
    (left,) = open_study(settings, META).get_trials(states=(TrialState.RUNNING,))
    time.sleep((STALE_BEATS + 1) * settings.heartbeat_s)
    next_tuner = open_study(settings, META)  # a study opened anew: nothing watched of its trials yet
    assert next_tuner.trials[left.number].state is TrialState.FAIL


def test_a_trial_is_not_failed_while_a_dead_writer_holds_the_journal_files_lock(tmp_path, monkeypatch):
    # Its tuner's heartbeats wait for the lock too, until Optuna breaks it (30 s): silence counts from after.
    settings = journal(tmp_path, heartbeat_s=0.1)
    study = open_study(settings, META)
    clocks = Clocks()  # the judge's clocks, moved by hand: no time passes between the two looks at the lock's end
    monkeypatch.setattr(sharing, "time", clocks)
    live = study.ask()
    live.set_user_attr(ALIVE_ATTR, [clocks.time(), settings.heartbeat_s])
    lock = tmp_path / "study.log.lock"
    lock.symlink_to(tmp_path / "gone")  # as Optuna's lock makes it, taken 5 s ago by a writer since killed
    os.utime(lock, (time.time() - 5, time.time() - 5), follow_symlinks=False)
    clocks.advance((STALE_BEATS + 1) * settings.heartbeat_s)
    assert fail_stale_trials(study) == [], "silent while its writes wait"
    lock.unlink()  # broken: the writes go on
    assert fail_stale_trials(study) == [], "silence counts from the lock's end"
    clocks.advance((STALE_BEATS + 1) * settings.heartbeat_s)
    assert fail_stale_trials(study) == [live.number], "and a tuner silent after it is dead"


def test_a_lock_seen_long_after_optuna_would_have_broken_it_delays_no_judgement(tmp_path):
    study = open_study(journal(tmp_path, heartbeat_s=0.1), META)
    lock = tmp_path / "study.log.lock"
    lock.symlink_to(tmp_path / "gone")  # a file system still showing a lock taken a minute ago
    os.utime(lock, (time.time() - 60, time.time() - 60), follow_symlinks=False)
    now = time.time()
    blocked = sharing._blocked_until(study, now)
    assert sharing._unheard([now - 1, 0.1], 0.0, now, blocked), "its writes went on 30 s after it was taken"


def test_a_dead_tuners_search_claim_is_ended_by_the_next_to_open_the_study(tmp_path):
    settings = journal(tmp_path, heartbeat_s=0.1)
    study = open_study(settings, META)
    claim = study._storage.create_new_study([StudyDirection.MAXIMIZE], f"s#searching@{this_machine_id()}:dead")
    study._storage.set_study_user_attr(claim, ALIVE_ATTR, [time.time() - 10, settings.heartbeat_s])  # then it died
    open_study(settings, META)
    assert not [s for s in study._storage.get_all_studies() if s.study_name.startswith("s#searching@")]


def test_a_slot_never_ends_the_search_claim_or_fails_the_trial_of_a_sibling_slot_of_its_own_process(tmp_path):
    """After a suspend the wall clock has jumped past a beat the heartbeat thread has not written yet: another slot
    of the same tuner, looking, must not take its sibling for dead (its trial would be measured again, its search
    left)."""
    settings, machine = journal(tmp_path, heartbeat_s=60.0), this_machine_id()
    study = open_study(settings, META)
    with searching(study, settings, machine) as lost:
        (claim,) = [s for s in study._storage.get_all_studies() if sharing._SEARCHING in s.study_name]
        study._storage.set_study_user_attr(claim._study_id, ALIVE_ATTR, [time.time() - 3600, 60.0])  # as if asleep
        assert sharing._searching_others(study, machine), "its sibling searches"
        sharing._end_orphan_claims(study)
        assert not lost(), "nor is it ended as an orphan"
    trial = study.ask()
    with sharing.heartbeat(trial, 60.0):
        study._storage.set_trial_user_attr(trial._trial_id, ALIVE_ATTR, [time.time() - 3600, 60.0])  # as if asleep
        assert sharing.fail_stale_trials(study) == [], "its sibling's trial runs"
    assert sharing.fail_stale_trials(study) == [trial.number], "one no slot of it beats is another's, and dead"


def test_a_run_slowed_as_the_turn_was_taken_is_not_measured_again(tmp_path):
    """The other tuner's runs beside it slow it: measured again, it would run beside that tuner's race once more."""
    lines, turn, names = app._RunLines(io.StringIO()), app._Turn(), []

    def slowed(knobs, name, on_progress=None):
        names.append(name)
        busy = SystemReport(100.0, [100.0, 100.0], 1.0)  # other processes took a whole core
        return TrialResult(knobs, measurement=replace(fake_measurement(100.0), system=busy))

    measured = again_if_disturbed(slowed, partial(app._measured_again, lines, turn))
    with turn.held(lambda: True), pytest.raises(app._TurnTaken):
        measured({}, "confirm-1-baseline")
    assert names == ["confirm-1-baseline"], "not measured again"
    measured({}, "baseline")
    assert names[1:] == ["baseline", "baseline-again"], "outside the turn's hold, measured again as ever"
