"""Passwords in URLs, kept out of everything autotune prints or writes.

A storage URL (``postgresql://user:PASSWORD@host/db``, ``mysql+pymysql://:PASSWORD@host/db``,
``…/db?password=PASSWORD``) carries a secret. ``redact_url`` hides the secret of every URL in a text by its place in
the URL; ``Secrets`` also hides the secrets it was given wherever they appear in a text, in every form they can be
printed in (as written, percent-decoded, escaped by Hydra or by Python's repr), which is what a stream of console
output needs: a library's message may print a password apart from its URL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TextIO
from urllib.parse import unquote, unquote_plus

MASK = "***"
# A secret shorter than this is hidden inside its URL only: hiding every "ab" of the console would garble it. One
# this long is hidden wherever it appears, in words it is part of too (a password "host" in "localhost").
MIN_SECRET_LEN = 4
# scheme://[user]:PASSWORD@: the password runs to the last @ of the line before another URL, so a raw @ in it (a
# typo SQLAlchemy would read as the host) is hidden whole. Backslashes: Hydra's escaped form (postgresql\://bob\:…).
_PASSWORD = re.compile(
    r"(?P<head>(?<![\w+.-])[A-Za-z][\w+.-]*\\?://(?:[^\s:/\\]|\\[^:])*\\?:)(?P<secret>(?:(?!\\?://).)*)(?P<tail>@)"
)
# ?password=PASSWORD (also passwd, sslpassword, pwd, secret, token) in a query string, which drivers read too.
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;][^=?&;\s]*(?:pass|pwd|secret|token)[^=?&;\s]*\\?=)(?P<secret>[^&;\s'\"#]*)(?P<tail>)", re.IGNORECASE
)
_HYDRA_SPECIAL = re.compile(r"([\\()\[\]{}:=, \t])")  # what Hydra escapes when it prints an override


def redact_url(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ***, fit to print."""
    for pattern in (_PASSWORD, _QUERY_SECRET):
        text = pattern.sub(rf"\g<head>{MASK}\g<tail>", text)
    return text


def url_secrets(text: str) -> set[str]:
    """The passwords of the URLs in ``text``, each in every form it may be printed in: as written, percent-decoded
    (as SQLAlchemy reads it), escaped as Hydra prints an override, and any of these as Python's repr prints it."""
    # SQLAlchemy reads a password to its first @, this module hides it to the last: both are secrets.
    written = {part for m in _PASSWORD.finditer(text) for part in (m["secret"], m["secret"].partition("@")[0])}
    plain = {form for raw in written for form in (raw, unquote(raw))}
    plain |= {form for m in _QUERY_SECRET.finditer(text) for form in (m["secret"], unquote_plus(m["secret"]))}
    plain -= {"", MASK}
    plain |= {_HYDRA_SPECIAL.sub(r"\\\1", form) for form in plain}
    return plain | {repr(form)[1:-1] for form in plain}


class Secrets:
    """The URL secrets this process knows of, and the URL each masked one stands for."""

    def __init__(self) -> None:
        self._forms: list[str] = []
        self._urls: dict[str, str] = {}

    def add(self, text: str) -> str:
        """Learn the secrets of the URLs in ``text``; returns ``text`` redacted, remembering what it stands for."""
        known = set(self._forms) | {form for form in url_secrets(text) if len(form) >= MIN_SECRET_LEN}
        self._forms = sorted(known, key=len, reverse=True)  # the longest first: no form is left half-hidden
        masked = self.redact(text)
        if masked != text:
            self._urls[masked] = text
        return masked

    def unmask(self, text: str) -> str:
        """The text ``add`` was given, for the masked text it returned; any other text as it is."""
        return self._urls.get(text, text)

    def redact(self, text: str) -> str:
        """``text`` with the password of every URL in it and every known secret replaced by ***."""
        text = redact_url(text)
        for form in self._forms:
            text = text.replace(form, MASK)
        return text


class RedactedStream:
    """A text stream (stdout, stderr) that passes on what is written to it with ``secrets`` redacted."""

    def __init__(self, stream: TextIO, secrets: Secrets) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        self._stream.write(self._secrets.redact(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
