"""Storage faults (a full disk, a read-only file or folder, a damaged SQLite file, a lock) are named by their cause and
the key study.storage, on opening and mid-run; a damaged study is refused before use and never written."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import sqlite3
import subprocess
import uuid
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path

import optuna
import psycopg
import pytest
from optuna.exceptions import StorageInternalError
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.pool import Pool

from autotune import app, rerender
from autotune.errors import ConfigError
from autotune.measure.environment import this_machine_id
from autotune.records import RESULT_ATTR, config_key, metric_attrs
from autotune.results.model import load_results
from autotune.runner import TrialRunner
from autotune.selfcheck import _configurations
from autotune.study.clock import SEARCH, RunClock
from autotune.study.lock import lock_file
from autotune.study.search_state import Proposal, counted_trials
from autotune.study.start import open_study
from autotune.study.storage import (
    StorageFaultError,
    create_study,
    load_study,
    open_storage,
    opening,
    storage_cause,
)
from autotune.study.tuner import StopReason, ensure_baseline, tune
from tests.study.test_tuner import BASELINE, FIXED, META, SPACE, FakeMeasure, fake_result, settings
from tests.test_cli import TINY

PAGE = 4096
STORED_TRIALS = 4


def sqlite_error(tmp_path: Path, fault: str) -> sqlite3.Error:
    """The error SQLite itself raises for ``fault``."""
    path = tmp_path / f"{fault}.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (randomblob(20000))")
    url, attempt = str(path), "SELECT count(*), sum(length(x)) FROM t;"
    if fault == "full":
        attempt = "PRAGMA max_page_count = 1; INSERT INTO t VALUES (randomblob(20000));"
    elif fault == "readonly":
        url, attempt = f"file:{path}?mode=ro", "INSERT INTO t VALUES (1);"
    elif fault in ("corrupt", "notadb"):
        damage(path, page=2 if fault == "corrupt" else 1)
    with closing(sqlite3.connect(path, isolation_level=None)) as holder:
        if fault == "locked":  # another connection holds the write lock past the busy timeout (0 here)
            holder.execute("BEGIN EXCLUSIVE")
        with closing(sqlite3.connect(url, uri=True, timeout=0, isolation_level=None)) as db:
            with pytest.raises(sqlite3.Error) as raised:
                db.executescript(attempt)
    return raised.value


def damage(path: Path, page: int) -> None:
    """Overwrite page ``page`` (from 1) of the SQLite file ``path`` with garbage, leaving the others as they were."""
    with open(path, "r+b") as file:
        file.seek((page - 1) * PAGE)
        file.write(bytes(range(256)) * (PAGE // 256))


def optuna_wrapped(error: BaseException) -> StorageInternalError:
    """``error`` as Optuna raises it from a commit: StorageInternalError from SQLAlchemy's error wrapping it (which
    quotes the statement and its values)."""
    try:
        try:
            raise OperationalError("INSERT INTO t VALUES (?)", ("it is read-only, and malformed",), error)
        except OperationalError as wrapped:
            raise StorageInternalError("raised during the commit, e.g. exceeding max length") from wrapped
    except StorageInternalError as outer:
        return outer


@pytest.mark.parametrize(
    "fault, cause",
    [
        ("full", "disk full"),
        ("readonly", "read-only"),
        ("corrupt", "malformed database"),
        ("notadb", "malformed database"),
        ("locked", "locked"),
    ],
)
def test_each_sqlite_fault_is_named_by_its_cause_also_as_optuna_wraps_it(tmp_path, fault, cause):
    error = sqlite_error(tmp_path, fault)
    assert storage_cause(error).name == cause
    assert storage_cause(optuna_wrapped(error)).name == cause


@pytest.mark.parametrize(
    "error, cause",
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "disk full"),
        (OSError(errno.EROFS, os.strerror(errno.EROFS)), "read-only"),
        (Exception('could not extend file "base/1/2": No space left on device'), "disk full"),  # PostgreSQL
        (Exception("cannot execute INSERT in a read-only transaction"), "read-only"),
        (sqlite3.OperationalError("disk I/O error"), "I/O error"),
        (psycopg.OperationalError("server closed the connection unexpectedly"), "connection lost"),  # PostgreSQL
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), "connection lost"),
        (psycopg.OperationalError('connection to server at "db" failed: Connection refused'), "connection lost"),
        (Exception(2006, "MySQL server has gone away"), "connection lost"),  # PyMySQL's: its code, then its message
        (Exception(2013, "Lost connection to MySQL server during query"), "connection lost"),
    ],
)
def test_other_drivers_and_the_systems_errors_are_named_by_their_words(error, cause):
    assert storage_cause(optuna_wrapped(error)).name == cause


MySQLIntegrityError = type("IntegrityError", (Exception,), {})  # PyMySQL's and mysqlclient's name it so (PEP 249)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.UniqueViolation(
            'duplicate key value violates unique constraint "studies_study_name_key"\n'
            "DETAIL:  Key (study_name)=(bert-read-only) already exists."
        ),
        MySQLIntegrityError(1062, "Duplicate entry 'malformed-inputs' for key 'studies.study_name'"),
        psycopg.OperationalError('database "optuna-read-only" does not exist'),
        OSError(errno.ENOENT, os.strerror(errno.ENOENT), "/data/read-only/malformed/study.log"),
    ],
)
def test_a_name_in_the_drivers_message_names_no_fault(error):
    """Optuna creates a study's name again on purpose (each resume and join, each claim taken): the duplicate is
    a broken constraint, whose message quotes the name, and a study named bert-read-only is no read-only storage."""
    assert storage_cause(error) is None and storage_cause(optuna_wrapped(error)) is None


def test_a_study_named_as_a_fault_is_created_and_resumed_on_postgresql(tmp_path):
    """The real driver's duplicate (its message quotes the name), as each resume meets it."""
    postgres = os.environ.get("AUTOTUNE_TEST_POSTGRES")
    if not postgres:
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES"):
            pytest.fail("AUTOTUNE_REQUIRE_POSTGRES is set but AUTOTUNE_TEST_POSTGRES gives no database")
        pytest.skip("no PostgreSQL: set AUTOTUNE_TEST_POSTGRES=postgresql://USER:PASSWORD@HOST/DB (.ci/run does)")
    named = replace(settings(tmp_path), name=f"bert-read-only-malformed-{uuid.uuid4().hex[:8]}", storage=postgres)
    open_study(named, META)
    assert open_study(named, META).user_attrs


def test_a_connection_refused_on_opening_is_said_as_the_driver_says_it(tmp_path):
    """Nothing was connected to be lost."""
    refused = psycopg.OperationalError('connection to server at "127.0.0.1", port 1 failed: Connection refused')
    with pytest.raises(ConfigError, match=r"^study.storage: cannot open Optuna storage .*Connection refused$"):
        with opening("postgresql://u:p@127.0.0.1:1/db"):
            raise optuna_wrapped(refused)


def test_a_connection_lost_mid_run_is_named_with_what_to_do(tmp_path):
    study = open_study(settings(tmp_path), META)

    def lost(connection, cursor, statement, parameters, context, executemany) -> None:  # as a driver says it
        raise sqlite3.OperationalError("server closed the connection unexpectedly")

    event.listen(study._storage._backend.engine, "before_cursor_execute", lost)
    with pytest.raises(StorageFaultError) as raised:
        study.set_user_attr("x", 1)
    assert str(raised.value) == (
        f"study.storage: connection lost: Optuna storage 'sqlite:///{tmp_path}/study.db' failed mid-run "
        "(OperationalError: server closed the connection unexpectedly); check that its database server is up and this "
        "machine reaches it, then run the same command again to resume from what the study stored"
    )


@pytest.mark.parametrize("stopped_by", ["the fault", "Ctrl-C"])
def test_a_run_stopped_whose_study_cannot_be_read_back_says_so_with_the_fault_and_keeps_the_error(tmp_path, stopped_by):
    """Ctrl-C's error line is "interrupted": the summary's line names the fault, once."""
    study = open_study(settings(tmp_path), META)

    def lost(connection, cursor, statement, parameters, context, executemany) -> None:
        raise sqlite3.OperationalError("server closed the connection unexpectedly")

    event.listen(study._storage._backend.engine, "before_cursor_execute", lost)
    fault = (
        f"study.storage: connection lost: Optuna storage 'sqlite:///{tmp_path}/study.db' failed mid-run "
        "(OperationalError: server closed the connection unexpectedly); check that its database server is up and this "
        "machine reaches it, then run the same command again to resume from what the study stored"
    )
    error = StorageFaultError(fault) if stopped_by == "the fault" else KeyboardInterrupt()
    out, stop = io.StringIO(), StopReason(fault if stopped_by == "the fault" else "interrupted", aborted=True)
    with pytest.raises(type(error)) as raised:
        try:
            raise error
        finally:
            assert app._report(study, this_machine_id(), tmp_path, stop, out) == {}
    assert raised.value is error
    said = "" if stopped_by == "the fault" else f": {fault}"
    assert out.getvalue() == f"Stopped: {stop.message}. The study could not be read back to write the reports{said}.\n"
    with pytest.raises(StorageFaultError, match="connection lost"):  # nothing else failing: the fault is the error
        app._report(study, this_machine_id(), tmp_path, stop, io.StringIO())


def test_errors_that_are_no_fault_of_the_storage_have_no_cause():
    """The statement and values SQLAlchemy quotes are user data: "read-only" there names nothing."""
    assert storage_cause(optuna_wrapped(sqlite3.OperationalError("no such table: t"))) is None
    duplicate = IntegrityError("INSERT", ("read-only",), sqlite3.IntegrityError("UNIQUE constraint failed: s.name"))
    assert storage_cause(duplicate) is None


@contextmanager
def disk_full_from_now(path: Path):
    """Every connection to ``path`` checked out from now on may not grow the file: SQLite's own SQLITE_FULL."""
    with closing(sqlite3.connect(path)) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]

    def cap(connection, record, proxy) -> None:
        connection.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(Pool, "checkout", cap)
    try:
        yield
    finally:
        event.remove(Pool, "checkout", cap)


@contextmanager
def read_only_from_now():
    """Every connection checked out from now on may not write, as on a file system remounted read-only: SQLite's own
    SQLITE_READONLY, on each write, the run's record of its time included."""

    def only_read(connection, record, proxy) -> None:
        connection.execute("PRAGMA query_only = ON")

    def writable_again(connection, record) -> None:  # as the pool takes it back: other tests' connections write
        if connection is not None:  # None: invalidated
            connection.execute("PRAGMA query_only = OFF")

    event.listen(Pool, "checkout", only_read)
    event.listen(Pool, "checkin", writable_again)
    try:
        yield
    finally:
        event.remove(Pool, "checkout", only_read)
        event.remove(Pool, "checkin", writable_again)


def test_the_run_clocks_last_saves_leave_the_storage_fault_that_stopped_the_run_to_say_why(tmp_path):
    """A fault that blocks every write meets the saves in the ``finally`` blocks of the stage and of the run too:
    the first fault is what the run stops with, and the reports follow it."""
    study = open_study(settings(tmp_path), META)
    clock, first = RunClock(), []
    clock.attach(study, this_machine_id())
    with read_only_from_now():
        with pytest.raises(StorageFaultError) as raised:
            try:
                with clock.stage(SEARCH):
                    try:
                        study.set_user_attr("x", 1)  # a trial's write
                    except StorageFaultError as fault:
                        first.append(fault)
                        raise
            finally:
                clock.save(finished=False)  # as the run's own finally saves it, before its reports
        assert raised.value is first[0] and str(raised.value).startswith("study.storage: read-only: ")
        with pytest.raises(StorageFaultError, match=r"^study.storage: read-only: "):
            clock.save()  # nothing else failing: said
    clock.save()
    assert any(key.startswith("autotune.tuner_time") for key in study.user_attrs), "and stored once it can be"


def in_order(observations, known: set[str], ran_out) -> Proposal | None:
    """A guide proposing the configurations of SPACE in order, each once."""
    return next((Proposal(knobs) for knobs in SPACE.configurations() if config_key(knobs) not in known), None)


def test_a_full_disk_mid_run_is_named_and_the_study_keeps_what_it_stored(tmp_path):
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    measure = FakeMeasure()
    tune(study, SPACE, settings(tmp_path, n_trials=1), measure, lambda e: None, in_order)
    database = tmp_path / "study.db"
    with disk_full_from_now(database), pytest.raises(StorageFaultError) as raised:
        tune(study, SPACE, settings(tmp_path, n_trials=5), measure, lambda e: None, in_order)
    message = str(raised.value)
    assert message.startswith(f"study.storage: disk full: Optuna storage 'sqlite:///{database}' failed mid-run (")
    assert "database or disk is full" in message and "\n" not in message and raised.value.exit_code == 1
    assert sqlite3.connect(database).execute("PRAGMA quick_check").fetchall() == [("ok",)]
    stored = counted_trials(study)
    resumed = open_study(settings(tmp_path), META)
    assert counted_trials(resumed) == stored >= 1, "what was told before the fault is kept"
    tune(resumed, SPACE, settings(tmp_path, n_trials=5), measure, lambda e: None, in_order)
    reported = sorted(config_key(r.result.knobs) for r in load_results(resumed).trials)
    others = sorted(config_key(k) for k in SPACE.configurations() if k != {**FIXED, **BASELINE})
    assert counted_trials(resumed) == 5 and reported == others, "each configuration but the baseline, once"


def test_a_result_stored_for_a_trial_never_told_is_measured_again(tmp_path):
    """A fault (or a kill) between storing a trial's result and telling Optuna leaves half a trial: not a result."""
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    half = study.ask()
    knobs = SPACE.sample(half)
    result = fake_result(knobs)
    half.set_user_attr(RESULT_ATTR, result.to_dict())
    for key, value in metric_attrs(result).items():
        half.set_user_attr(key, value)
    measure = FakeMeasure()
    resumed = open_study(settings(tmp_path), META)
    tune(resumed, SPACE, settings(tmp_path, n_trials=1), measure, lambda e: None)
    assert [called for _, called in measure.calls] == [knobs], "measured again, first"
    assert [r.result.knobs for r in load_results(resumed).trials] == [knobs], "and reported once"


@pytest.fixture(scope="module")
def study_file(tmp_path_factory) -> Path:
    """A study of a few trials, as autotune stores it."""
    where = tmp_path_factory.mktemp("study")
    study = open_study(settings(where), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    tune(study, SPACE, settings(where, n_trials=STORED_TRIALS), FakeMeasure(), lambda e: None, in_order)
    return where / "study.db"


@pytest.mark.slow
def test_a_study_damaged_anywhere_is_refused_before_use_and_left_as_it_is(study_file, tmp_path, tiny_settings):
    """Tuning, mode=report and mode=selfcheck refuse it, whichever page is garbage; Optuna alone reads some of these
    files as the whole study."""
    pages, fooled = study_file.stat().st_size // PAGE, []
    for page in range(2, pages + 1):
        damaged = tmp_path / "study.db"
        shutil.copyfile(study_file, damaged)
        damage(damaged, page)
        before = damaged.read_bytes()
        url = f"sqlite:///{damaged}"
        with pytest.raises(ConfigError, match=r"^study.storage: malformed database: ") as tuning:
            open_study(settings(tmp_path), META)
        with pytest.raises(ConfigError, match=r"^study.storage: malformed database: "):
            rerender.run("s", url, tmp_path / "reports")
        selfcheck = replace(tiny_settings, study=replace(tiny_settings.study, name="s", storage=url))
        with pytest.raises(ConfigError, match=r"^study.storage: malformed database: "):
            _configurations(selfcheck, this_machine_id())
        assert damaged.read_bytes() == before, f"page {page}: {tuning.value}"
        with contextlib.suppress(Exception):
            fooled += [page] if len(optuna.load_study(study_name="s", storage=url).trials) == STORED_TRIALS else []
    assert pages > 20 and fooled and not (tmp_path / "reports").exists()


def test_a_read_only_storage_is_named_on_opening_and_still_renders(study_file, tmp_path):
    url = f"sqlite:///file:{study_file}?mode=ro&uri=true"  # SQLite opens it read-only, whatever the user
    with pytest.raises(ConfigError, match=r"^study.storage: read-only: cannot open Optuna storage .*readonly database"):
        create_study(url, study_name="s", load_if_exists=True)
    assert len(load_study("s", url).trials) == STORED_TRIALS


@contextmanager
def unwritable(path: Path):
    """``path`` unwritable for this user while inside: by its mode, or, for root, whom modes do not stop, by the
    immutable attribute."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("root, and this file system has no immutable attribute (chattr +i) to stop it writing")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("which", ["file", "folder"])
def test_a_file_or_folder_this_user_cannot_write_is_read_only_and_still_renders(study_file, tmp_path, which):
    """Decided before SQLite would write (it writes a journal beside the file, so the folder counts too)."""
    stored = tmp_path / "kept" / "study.db"
    stored.parent.mkdir()
    shutil.copyfile(study_file, stored)
    url = f"sqlite:///{stored}"
    with unwritable(stored if which == "file" else stored.parent):
        with pytest.raises(ConfigError) as raised:
            create_study(url, study_name="s", load_if_exists=True)
        assert len(load_study("s", url).trials) == STORED_TRIALS
    refused = stored if which == "file" else stored.parent
    assert str(raised.value) == (
        f"study.storage: read-only: '{url}' cannot be written by this user ({refused} is not writable), and the "
        "study stores each result as it is measured; make the file and its folder writable"
    )
    assert stored.read_bytes() == study_file.read_bytes()


@pytest.mark.slow
def test_the_command_line_refuses_a_damaged_study_in_one_line(study_file, tmp_path, cli_here):
    damaged = tmp_path / "studies.db"
    shutil.copyfile(study_file, damaged)
    damage(damaged, page=damaged.stat().st_size // PAGE // 2)
    before = damaged.read_bytes()
    proc = cli_here([*TINY, f"study.storage=sqlite:///{damaged}", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("autotune: error: study.storage: malformed database: ")
    assert f"'sqlite:///{damaged}'" in proc.stderr and "(the file is left as it is)" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and damaged.read_bytes() == before


@pytest.mark.slow
def test_the_command_line_names_a_full_disk_mid_run_exits_1_and_writes_the_reports(tmp_path, cli_here, monkeypatch):
    """From the first tuning trial on, the study's file cannot grow: SQLite's own "database or disk is full"."""
    database, screen, filled = tmp_path / "studies.db", TrialRunner.screen, []
    args = [*TINY, "study.n_trials=3", f"study.storage=sqlite:///{database}", f"hydra.run.dir={tmp_path}/out"]
    with contextlib.ExitStack() as full:

        def screen_on_a_full_disk(self, *args, **kwargs):
            if not filled:
                filled.append(full.enter_context(disk_full_from_now(database)))
            return screen(self, *args, **kwargs)

        monkeypatch.setattr(TrialRunner, "screen", screen_on_a_full_disk)
        proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    fault = (
        f"study.storage: disk full: Optuna storage 'sqlite:///{database}' failed mid-run "
        "(OperationalError: database or disk is full); free space on its disk, then run the same command again to "
        "resume from what the study stored"
    )
    assert proc.stderr.startswith(f"autotune: error: {fault}")
    assert f"\nStopped: {fault}.\n" in proc.stdout, "the summary says why the run stopped"
    assert "baseline" in (tmp_path / "out" / "trials.csv").read_text(), "the reports cover what was stored"


@pytest.mark.slow
def test_the_command_line_names_a_storage_that_turned_read_only_mid_run_and_writes_the_reports(
    tmp_path, cli_here, monkeypatch
):
    """From the first tuning trial on, no write succeeds (a read-only remount), the run's record of its time neither."""
    database, screen, turned = tmp_path / "studies.db", TrialRunner.screen, []
    args = [*TINY, "study.n_trials=3", f"study.storage=sqlite:///{database}", f"hydra.run.dir={tmp_path}/out"]
    with contextlib.ExitStack() as read_only:

        def screen_read_only(self, *args, **kwargs):
            if not turned:
                turned.append(read_only.enter_context(read_only_from_now()))
            return screen(self, *args, **kwargs)

        monkeypatch.setattr(TrialRunner, "screen", screen_read_only)
        proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    fault = proc.stderr.removeprefix("autotune: error: ").strip()
    assert fault.startswith(f"study.storage: read-only: Optuna storage 'sqlite:///{database}' failed mid-run (")
    assert f"\nStopped: {fault}.\n" in proc.stdout, "the summary says why the run stopped"
    assert "baseline" in (tmp_path / "out" / "trials.csv").read_text(), "the reports cover what was stored"


def test_a_storage_in_a_folder_that_does_not_exist_is_named_as_such(tmp_path, cli_here):
    storage = f"sqlite:///{tmp_path}/nowhere/studies.db"
    proc = cli_here([*TINY, f"study.storage={storage}", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lock = lock_file(tmp_path / "nowhere" / "studies.db", "tiny")
    assert f"error: study.storage: cannot create {lock} beside the" in proc.stderr
    assert "No such file or directory" in proc.stderr and not (tmp_path / "out").exists()


def test_a_journal_in_a_folder_that_does_not_exist_is_named_as_such(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as raised:
        open_storage("journal://~/s.log")
    assert str(raised.value) == (
        "study.storage: no folder ~ for the journal file of 'journal://~/s.log' (~ is not expanded: give the path "
        "from /); make it, or give a file in a folder that exists"
    )


@pytest.mark.parametrize("which", ["file", "folder"])
def test_a_journal_this_user_cannot_write_is_refused_for_tuning_and_still_renders(tmp_path, which):
    stored = tmp_path / "kept" / "study.log"
    stored.parent.mkdir()
    url = f"journal://{stored}"
    open_study(replace(settings(tmp_path), storage=url), META)
    with unwritable(stored if which == "file" else stored.parent):
        with pytest.raises(ConfigError, match=r"^study.storage: read-only: .* cannot be written by this user"):
            open_storage(url)
        assert load_study("s", url).user_attrs, "read: what mode=report renders"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:s?mode=memory&uri=true"])
def test_an_in_memory_sqlite_database_is_refused_for_tuning_naming_the_key(tmp_path, url):
    """Lost when the run ends (no resume, no mode=report), and one database for each thread of study.parallel."""
    with pytest.raises(ConfigError) as raised:
        open_study(replace(settings(tmp_path), storage=url), META)
    assert str(raised.value) == (
        f"study.storage: '{url}' is a SQLite database in memory, lost when the run ends; give a file: sqlite:///PATH"
    )


def test_a_file_that_cannot_be_written_after_the_study_ran_fails_the_run_naming_it(tmp_path, cli_here, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out" / "report.json"))

    monkeypatch.setattr(app, "write_reports", disk_full)
    args = [*TINY, "study.n_trials=0", f"study.storage=sqlite:///{tmp_path}/s.db", f"hydra.run.dir={tmp_path}/out"]
    proc = cli_here(args, cwd=tmp_path)
    assert proc.returncode == 1, "a failure, not refused input"
    assert proc.stderr.strip() == f"autotune: error: cannot write {tmp_path}/out/report.json: No space left on device"
    assert (tmp_path / "out" / "config.yaml").exists(), "the record of what ran stays"


def test_a_run_folder_that_cannot_be_written_is_refused_naming_hydra_run_dir(tmp_path, cli_here):
    (tmp_path / "out").mkdir()
    with unwritable(tmp_path / "out"):
        proc = cli_here([*TINY, f"study.storage=sqlite:///{tmp_path}/s.db", f"hydra.run.dir={tmp_path}/out"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: hydra.run.dir: cannot create or write {tmp_path}/out/" in proc.stderr
