"""Storage passwords never leave the process: redaction of URL forms, Hydra's overrides and every output."""

from __future__ import annotations

import io
import re
import time
from urllib.parse import quote, unquote

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep
from hypothesis import example, given
from hypothesis import strategies as st

from autotune.hydra_args import mask_override
from autotune.redact import RedactedStream, Secrets, redact_url, url_secrets
from tests.conftest import FAST_MEASURE, TEST_CONF, run_cli

SECRET = "s3cr%40t%3Aw0rd%2F%3F"  # s3cr@t:w0rd/? percent-encoded, as SQLAlchemy wants reserved characters


def quoted(text: str) -> str:
    """``text`` single-quoted as Hydra's grammar wants: a quote escaped, backslashes before one or the end doubled."""
    return "'" + re.sub(r"(\\*)('|\Z)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), text) + "'"


def hydra_escaped(text: str) -> str:
    """``text`` as Hydra prints an override in its launch line and its errors."""
    return re.sub(r"([\\()\[\]{}:=, \t])", r"\\\1", text)


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://bob:s3cr3t@localhost:5432/db", "postgresql://bob:***@localhost:5432/db"),
        ("postgresql://:s3cr3t@localhost/db", "postgresql://:***@localhost/db"),  # no user name
        (
            "mysql+pymysql://bob:s3cr3t@127.0.0.1:1/db?charset=utf8mb4",
            "mysql+pymysql://bob:***@127.0.0.1:1/db?charset=utf8mb4",
        ),
        (f"postgresql+psycopg2://bob:{SECRET}@h/db", "postgresql+psycopg2://bob:***@h/db"),
        ("postgresql://bob:p@ss:w/d@h/db", "postgresql://bob:***@h/db"),  # raw reserved characters, @ included
        ('postgresql://bob:it\'s "my" pw@h/db', "postgresql://bob:***@h/db"),  # quotes and spaces, as given
        ("postgresql://bob@h/db?password=s3cr3t&sslmode=require", "postgresql://bob@h/db?password=***&sslmode=require"),
        ("mysql+pymysql://bob@h/db?charset=utf8&passwd=s3cr3t", "mysql+pymysql://bob@h/db?charset=utf8&passwd=***"),
        ("postgresql://bob:s3cr3t@h/db?sslpassword=k3yp4ss", "postgresql://bob:***@h/db?sslpassword=***"),
        ("postgresql://bob:s3cr3t@h/db?password=s3cr3t", "postgresql://bob:***@h/db?password=***"),
        ("postgresql://bob:a@h/db", "postgresql://bob:***@h/db"),  # however short
        ("sqlite:///autotune.db", "sqlite:///autotune.db"),
        ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),
        ("postgresql://bob@localhost:5432/db", "postgresql://bob@localhost:5432/db"),
        ("postgresql://localhost:5432/db", "postgresql://localhost:5432/db"),
    ],
)
def test_every_url_form_is_shown_without_its_password(url, shown):
    assert redact_url(url) == shown
    assert redact_url(f"cannot open '{url}': refused") == f"cannot open '{shown}': refused", "inside a message too"
    assert redact_url(hydra_escaped(url)) == hydra_escaped(shown).replace("\\*", "*"), "as Hydra prints it"


def test_every_url_of_a_line_is_redacted_and_nothing_between():
    line = "'study.storage=a://b:s3cr3t@h/db', 'x=postgresql://:pw@k/db' end"
    assert redact_url(line) == "'study.storage=a://b:***@h/db', 'x=postgresql://:***@k/db' end"


def test_a_password_is_known_in_every_form_it_is_printed_in():
    forms = url_secrets(f"postgresql://bob:{SECRET}@h/db")
    assert {SECRET, "s3cr@t:w0rd/?", r"s3cr@t\:w0rd/?"} <= forms, "as given, percent-decoded, Hydra-escaped"
    assert url_secrets("postgresql://bob@h/db?password=a%2Bb+c") >= {"a%2Bb+c", "a+b c"}, "a query value, decoded"
    assert url_secrets("sqlite:///autotune.db") == set()


def test_known_secrets_are_hidden_wherever_they_appear():
    secrets = Secrets()
    assert secrets.add(f"postgresql://bob:{SECRET}@h/db") == "postgresql://bob:***@h/db"
    said = secrets.redact("FATAL: password 's3cr@t:w0rd/?' rejected; argv ['s3cr@t\\\\:w0rd/?']")
    assert said == "FATAL: password '***' rejected; argv ['***']"


def test_a_short_password_is_hidden_in_its_url_only():
    secrets = Secrets()
    secrets.add("postgresql://bob:pw@h/db")
    assert secrets.redact("upw postgresql://bob:pw@h/db") == "upw postgresql://bob:***@h/db", "pw alone is left"


@pytest.mark.parametrize("line", ["a" * 200_000, "http://" + "a" * 200_000, ";pass" * 40_000, "x://u:" + ":@" * 99_999])
def test_a_long_line_is_redacted_in_linear_time(line):
    start = time.perf_counter()
    Secrets().redact(line)
    assert time.perf_counter() - start < 2, "a regex that backtracks quadratically would take minutes"


def test_the_stream_passes_on_what_is_written_redacted():
    secrets, sink = Secrets(), io.StringIO()
    stream = RedactedStream(sink, secrets)
    secrets.add("postgresql://bob:s3cr3t@h/db")
    assert stream.write("it is s3cr3t\n") == len("it is s3cr3t\n")
    stream.writelines(["postgresql://x:y@z ", "s3cr3t"])
    print("s3cr3t", file=stream)
    assert sink.getvalue() == "it is ***\npostgresql://x:***@z ******\n"
    assert stream.getvalue() == sink.getvalue(), "everything else is the stream's own"


PARSER = OverridesParser.create()


def parsed(arg: str) -> list[str]:
    value = PARSER.parse_override(arg).value()
    return [getattr(v, "text", v) for v in value.list] if isinstance(value, ChoiceSweep) else [value]


@pytest.mark.parametrize(
    "arg, urls",
    [
        ("study.storage=postgresql://bob:s3cr3t@localhost:1/db", ["postgresql://bob:s3cr3t@localhost:1/db"]),
        ("+study.storage='postgresql://:s3,cr3t@h/db?x=1'", ["postgresql://:s3,cr3t@h/db?x=1"]),
        (r"study.storage=postgresql://bob:s3\,cr3t@h/db", ["postgresql://bob:s3,cr3t@h/db"]),
        (r"study.storage='postgresql://bob:it\'s\\@h/db'", [r"postgresql://bob:it's\\@h/db"]),
        ('study.storage="mysql+pymysql://bob@h/db?password=s3cr3t"', ["mysql+pymysql://bob@h/db?password=s3cr3t"]),
        ("study.storage=a://b:s3cr3t@h/db,sqlite:///x.db", ["a://b:s3cr3t@h/db", "sqlite:///x.db"]),  # a sweep
        ("study.storage=choice(a://b:s3cr3t@h/db,c://:s3cr3t@h)", ["a://b:s3cr3t@h/db", "c://:s3cr3t@h"]),
    ],
)
def test_hydra_gets_each_url_masked_and_the_run_gets_it_back(arg, urls):
    secrets = Secrets()
    masked = mask_override(arg, secrets)
    assert "s3" not in masked and masked.startswith(arg.partition("=")[0] + "=")
    assert [secrets.unmask(url) for url in parsed(masked)] == urls


def test_a_url_in_a_dict_or_a_list_is_masked_and_the_rest_kept():
    secrets = Secrets()
    arg = "study={storage: 'postgresql://bob:s3cr3t@h/db', seed: 1.5e-05, probe: false, name: null, x: [1, a://:s3cr3t@h]}"
    value = PARSER.parse_override(mask_override(arg, secrets)).value()
    masked = {"storage": "postgresql://bob:***@h/db", "seed": 1.5e-05, "probe": False, "name": None}
    assert value == {**masked, "x": [1, "a://:***@h"]}
    assert secrets.unmask(value["storage"]) == "postgresql://bob:s3cr3t@h/db"


def test_an_override_hydra_cannot_parse_is_masked_as_typed():
    arg = "study.storage=postgresql://bob:s3cr3t@localhost:1/db'"
    assert mask_override(arg, Secrets()) == "study.storage=postgresql://bob:***@localhost:1/db'"


def test_other_arguments_are_left_as_they_are():
    args = ["-cd", "conf", "--multirun", "pipeline=mymodel", "study.storage=sqlite:///a.db", "x=glob(a://b:c@d*)"]
    assert [mask_override(arg, Secrets()) for arg in args] == args


# Any password, raw (a raw "://" would start another URL) or percent-encoded (the form SQLAlchemy documents).
PASSWORDS = st.text(st.characters(exclude_categories=("Cc", "Cs"), exclude_characters="*"), min_size=4).filter(
    lambda pw: "://" not in pw
)


@given(password=PASSWORDS, encode=st.booleans())
@example(password="host", encode=False)  # a secret is hidden wherever it appears: in "localhost" too
def test_any_password_is_hidden_from_every_output_and_given_back(password, encode):
    written = quote(password, safe="") if encode else password
    url = f"postgresql://bob:{written}@localhost:1/db"
    secrets = Secrets()
    arg = mask_override(f"study.storage={quoted(url)}", secrets)
    assert parsed(arg) == [secrets.redact("postgresql://bob:***@localhost:1/db")]
    assert secrets.unmask(parsed(arg)[0]) == url
    outputs = [url, f"launch: {hydra_escaped(url)}", repr([url]), f"auth failed for {unquote(written)!r}"]
    for shown in map(secrets.redact, outputs):
        assert written not in shown and unquote(written) not in shown, shown


# End to end: one run per output mode, each with a storage that cannot connect (no driver, or a closed port).
PLAIN = f"postgresql://:{SECRET}@127.0.0.1:1/db"  # no user name
FROM_ENV = "'postgresql://bob:${oc.env:AUTOTUNE_TEST_PASSWORD}@127.0.0.1:1/db?password=" + SECRET + "'"
ENV_SECRET = "s3cr3t-from-env"
FORMS = [SECRET, unquote(SECRET), hydra_escaped(unquote(SECRET)), ENV_SECRET]


@pytest.mark.parametrize(
    "flags, overrides, debug, code, shown",
    [
        (
            ["--multirun"],
            [f"study.storage={PLAIN}", "hydra.verbose=true"],
            False,
            2,
            "postgresql://:***@127.0.0.1:1/db",
        ),
        (["--multirun"], [f"study.storage={FROM_ENV}"], True, 2, "postgresql://bob:***@127.0.0.1:1/db?password=***"),
        ([], [f"study.storage={PLAIN}'"], False, 2, "postgresql://:***@127.0.0.1:1/db'"),
        (["--cfg", "job"], [f"study.storage={PLAIN}"], False, 0, "postgresql://:***@127.0.0.1:1/db"),
    ],
    ids=["multirun-verbose", "debug-env-query", "parse-error", "cfg-job"],
)
@pytest.mark.slow
def test_the_password_appears_in_no_output_and_no_file(tmp_path, flags, overrides, debug, code, shown):
    where = [f"hydra.run.dir={tmp_path}/out", f"hydra.sweep.dir={tmp_path}/multi", "hydra.output_subdir=.hydra"]
    env = {"AUTOTUNE_TEST_PASSWORD": ENV_SECRET, **({"AUTOTUNE_DEBUG": "1"} if debug else {})}
    args = [*flags, "-cd", str(TEST_CONF), "pipeline=tiny", *FAST_MEASURE, *overrides, *where]
    proc = run_cli(args, cwd=tmp_path, env=env)
    assert proc.returncode == code, proc.stderr
    written = [path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file()]
    assert not [form for form in FORMS for text in [proc.stdout, proc.stderr, *written] if form in text]
    if debug:
        assert "Traceback" in proc.stderr and shown in proc.stderr
    elif code == 2:
        assert proc.stderr.startswith("autotune: error: study.storage: ") and shown in proc.stderr, proc.stderr
    if flags == ["--multirun"]:
        assert (tmp_path / "multi" / "multirun.yaml").exists() and (tmp_path / "multi" / "0" / ".hydra").is_dir()
        assert f"storage: {shown}" in (tmp_path / "multi" / "0" / "config.yaml").read_text(), "the run's record"
    if "--cfg" in flags:
        assert f"storage: {shown}" in proc.stdout
