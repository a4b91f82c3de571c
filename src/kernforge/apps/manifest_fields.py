"""The application manifest's field readers (:mod:`.manifest`): each reads one key strictly
and raises :class:`AppManifestError` naming the key, with a hint saying what to write."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from typing import Any

from ..core import ConfigError
from ..core.strict import strict_keys as _strict_keys


class AppManifestError(ConfigError):
    """A manifest that cannot be used as written (exit 2); the hint says what to change."""


def strict_keys(data: Any, allowed: tuple[str, ...], where: str, *, source: str
                ) -> dict[str, Any]:
    """:func:`kernforge.core.strict.strict_keys`, its error as an :class:`AppManifestError`."""
    try:
        return _strict_keys(data, allowed, where, source=source)
    except ConfigError as exc:
        raise AppManifestError(exc.message, hint=exc.hint) from None


def _err(where: str, what: str, hint: str) -> AppManifestError:
    return AppManifestError(f"{where}: {what}", hint=hint)


def _str(d: Mapping[str, Any], key: str, where: str, *, required: bool = True,
         hint: str = "") -> str | None:
    v = d.get(key)
    if v is None:
        if required:
            raise _err(where, f"missing key {key!r}", hint or f"add {key} = \"...\"")
        return None
    if not isinstance(v, str) or (required and not v.strip()):
        raise _err(where, f"{key!r} must be a non-empty string, not {v!r}",
                   hint or f"write {key} = \"...\"")
    return v


def _num(d: Mapping[str, Any], key: str, where: str, default: float, *, lo: float = 0.0,
         integer: bool = False) -> Any:
    v = d.get(key, default)
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or math.isnan(v) or v < lo:
        kind = "an integer" if integer else "a number"
        raise _err(where, f"{key!r} must be {kind} >= {lo:g}, not {v!r}",
                   f"write {key} = {default}")
    return int(v) if integer else float(v)


def _flag(d: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise _err(where, f"{key!r} must be true or false, not {v!r}",
                   f"write {key} = {str(default).lower()} (TOML booleans take no quotes)")
    return v


def _command(command: str, key: str, where: str) -> str:
    """A command line that splits as a shell would split it (a quote left open would only
    fail when the command runs)."""
    try:
        if not shlex.split(command):
            raise ValueError("no words")
    except ValueError as exc:
        raise _err(where, f"{key} = {command!r} cannot be split into words ({exc})",
                   "close every quote; write sh -c '...' for pipes or &&") from None
    return command


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _choice(d: Mapping[str, Any], key: str, where: str, allowed: tuple[str, ...],
            default: str) -> str:
    v = d.get(key, default)
    if v not in allowed:
        raise _err(where, f"{key!r} is {v!r}", f"choose one of: {', '.join(allowed)}")
    return str(v)


def _regex(pattern: str, where: str) -> str:
    try:
        re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise _err(where, f"pattern {pattern!r} is not a regular expression ({exc})",
                   "write a Python regular expression; escape ( ) . with a backslash") from None
    return pattern
