"""A database server's connection bounded in time as it is made (not on every query, nor over libpq's own bound) and
tested as it is taken, and a SQLite file in a folder that does not exist named as such: what a user sees of a storage
that cannot be reached."""

from __future__ import annotations

import socket
import time

import psycopg
import pytest

from autotune.errors import ConfigError
from autotune.study import storage
from autotune.study.storage import open_storage, storage_cause
from tests.study.test_storage_faults import optuna_wrapped


@pytest.mark.timeout(60)  # without a bound the driver waits for ever on a server that never answers
def test_a_database_server_that_never_answers_is_refused_within_the_connect_timeout(monkeypatch):
    monkeypatch.setattr(storage, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as silent:  # the kernel accepts its connections; nothing ever answers on them
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql://user:secret@127.0.0.1:{silent.getsockname()[1]}/autotune"
        began = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            open_storage(url)
    assert time.monotonic() - began < 10, "a try or two of 1 s (psycopg tries with SSL, then without)"
    said = str(refused.value)
    assert said.startswith("study.storage: cannot open Optuna storage 'postgresql://user:") and "secret" not in said
    assert said.endswith("ConnectionTimeout: connection timeout expired")


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("postgresql://u@db/a", {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}),
        ("mysql+pymysql://u@db/a", {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}),
        # a bound on every read of the socket too: a query or lock wait past it would read as a connection lost
        ("postgresql+pg8000://u@db/a", {"pool_pre_ping": True}),
        ("mysql+mysqlconnector://u@db/a", {"pool_pre_ping": True}),
        ("postgresql://u@db/a?connect_timeout=3", {"pool_pre_ping": True}),  # the URL's own bound stands
        ("oracle+oracledb://u@db/a", {"pool_pre_ping": True}),  # a driver whose bound autotune does not know
        ("sqlite:///studies.db", {}),  # a file of this machine: nothing to wait for, no connection to drop
        ("nosuchdb://x", {}),  # Optuna's error names it
    ],
)
def test_each_database_driver_gets_its_connect_timeout_and_connections_are_tested_as_taken(monkeypatch, url, options):
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    assert storage._engine_options(url) == options


@pytest.mark.parametrize(
    ("url", "environment"),
    [
        ("postgresql://u@db/a", {"PGCONNECT_TIMEOUT": "60"}),
        ("postgresql+psycopg2://u@db/a", {"PGCONNECT_TIMEOUT": "60"}),
        ("postgresql://u@db/a", {"PGSERVICE": "tuning"}),
        ("postgresql:///a?service=tuning", {}),
    ],
    ids=["PGCONNECT_TIMEOUT", "psycopg2 and PGCONNECT_TIMEOUT", "PGSERVICE", "service= in the URL"],
)
def test_libpqs_own_connect_timeout_is_not_overridden(monkeypatch, url, environment):
    # An explicit connect_timeout overrides libpq's environment and a service file's: each is left to stand.
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert storage._engine_options(url) == {"pool_pre_ping": True}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "60")
    assert "connect_args" in storage._engine_options("mysql+pymysql://u@db/a"), "libpq's environment is libpq's"


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.ConnectionTimeout("connection timeout expired"),  # psycopg 3; libpq's: "timeout expired"
        Exception(2003, "Can't connect to MySQL server on 'db' (timed out)"),  # PyMySQL's
    ],
)
def test_a_connection_that_cannot_be_made_again_mid_run_is_lost(error):
    assert storage_cause(optuna_wrapped(error)).name == "connection lost"
    assert storage_cause(optuna_wrapped(error), connected=False) is None, "on opening, the driver's words say it"


@pytest.mark.parametrize("url", ["sqlite:///~/studies.db", "sqlite:///nowhere/studies.db"])
def test_a_sqlite_file_in_a_folder_that_does_not_exist_is_named_as_such(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    folder = url.removeprefix("sqlite:///").partition("/")[0]
    home = " (~ is not expanded: give the path from /)" if folder == "~" else ""
    with pytest.raises(ConfigError) as refused:
        open_storage(url)
    assert str(refused.value) == (
        f"study.storage: no folder {tmp_path / folder} for the SQLite file of '{url}'{home}; make it, or give a file "
        "in a folder that exists"
    )
    assert not any(tmp_path.iterdir()), "nothing made"
