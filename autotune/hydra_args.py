"""The command line's arguments in the terms of Hydra's parser, before it reads them: Hydra's flags moved before the
overrides (``flags_first``), the password of every URL in an override masked and the override written back in
Hydra's override grammar (``mask_override``, ``quoted``), and the config folder the arguments give
(``config_dir``). The command line that reads them is ``autotune/cli.py``.
"""

from __future__ import annotations

import re
from typing import Any

from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, QuotedString
from hydra.errors import HydraException

from autotune.redact import Secrets, redact_url


def flags_first(args: list[str]) -> list[str]:
    """``args`` with Hydra's flags (``-cd DIR``, ``-m``, ...) and their values moved before the overrides, in their
    order: Hydra's parser takes no flag after an override (``pipeline=mine -cd ./myconf`` fails with "unrecognized
    arguments")."""
    nargs = {
        option: action.nargs
        for action in get_args_parser()._actions  # Hydra's own parser: its flags, and the values each takes
        for option in action.option_strings
    }
    flags, overrides, without, index = [], [], [], 0
    while index < len(args):
        arg, index = args[index], index + 1
        name = arg.partition("=")[0]
        if name not in nargs:
            overrides.append(arg)
            continue
        following = args[index] if index < len(args) and "=" not in arg else None
        # An override (key=value) is never a flag's value: a flag missing its value goes last, to keep its own error.
        value = following is not None and "=" not in following and not following.startswith("-")
        if value and nargs[name] in (None, "?"):
            flags += [arg, following]
            index += 1
        else:
            (without if nargs[name] is None and "=" not in arg else flags).append(arg)
    return [*flags, *overrides, *without]


def mask_override(arg: str, secrets: Secrets) -> str:
    """The command-line argument ``arg`` with the password of every URL in its value masked (``secrets`` keeps the
    URL it stands for), written back in Hydra's override grammar."""
    if redact_url(arg) == arg:
        return arg
    try:
        override = OverridesParser.create().parse_override(arg)
    except HydraException:  # Hydra will report the override it cannot parse: as masked
        return secrets.add(arg)
    value = override.value()
    if isinstance(value, ChoiceSweep):
        masked = ",".join(_as_override_value(choice, secrets) for choice in value.list)
    elif isinstance(value, QuotedString | str | list | dict):
        masked = _as_override_value(value, secrets)
    else:  # a range, an interval, a glob: no value that is a URL
        return arg
    return f"{override.get_key_element()}={masked}"


def _as_override_value(value: Any, secrets: Secrets) -> str:
    """A value parsed from an override, in the override grammar again, its URLs masked."""
    if isinstance(value, QuotedString | str):
        return quoted(secrets.add(getattr(value, "text", value)))
    if isinstance(value, list):
        return f"[{','.join(_as_override_value(item, secrets) for item in value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_as_override_value(item, secrets)}" for key, item in value.items()) + "}"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


def quoted(text: str) -> str:
    """``text`` as a quoted string of Hydra's override grammar, which unescapes backslashes before a quote only."""
    return "'" + re.sub(r"(\\*)('|\Z)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), text) + "'"


def config_dir(args: list[str]) -> str | None:
    """The config folder the command line ``args`` give (``-cd DIR``, ``--config-dir DIR``), None where none."""
    return get_args_parser().parse_known_args(args)[0].config_dir
