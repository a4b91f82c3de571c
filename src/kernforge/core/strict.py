"""Strict reading of configuration mappings (parsed YAML, TOML or JSON): an unknown key, or a
value that is not a mapping, is a :class:`ConfigError` that names it and lists what is allowed,
never a silently ignored setting. The one helper every configuration reader uses."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError


def field_names(cls: type) -> tuple[str, ...]:
    """The field names of a dataclass, in declaration order (the keys it accepts)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def strict_keys(data: Any, allowed: Iterable[str], where: str, *, source: str = "",
                hint: str | None = None) -> dict[str, Any]:
    """``data`` as a dict, after checking that it is a mapping whose keys are all in
    ``allowed``. ``where`` names the place in the configuration ("the search space",
    "proposers[0]"); ``source`` (a file name) prefixes the message; ``hint`` replaces the
    default hint (the allowed keys)."""
    prefix = f"{source}: " if source else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix}{where} must be a mapping, not {type(data).__name__}",
                          hint=hint or "write it as a table of key: value pairs")
    names = tuple(allowed)
    unknown = [str(k) for k in data if k not in names]
    if unknown:
        raise ConfigError(f"{prefix}unknown key {unknown[0]!r} in {where}",
                          hint=hint or f"allowed keys in {where}: {', '.join(names)}")
    return dict(data)
