"""A lazy plugin registry: one line per plugin, imported only when first asked for."""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

from .errors import PluginNotFoundError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps a plugin name to ``"module:attribute"``; imports the module on first use."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, T] = {}

    def register(self, name: str, target: str) -> None:
        self._targets[name] = target
        self._loaded.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._targets)

    def get(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._targets:
            raise PluginNotFoundError(
                f"no {self.family} named {name!r}",
                hint=f"choose one of: {', '.join(self.names()) or '(none registered)'}",
            )
        module, _, attr = self._targets[name].partition(":")
        obj = getattr(importlib.import_module(module), attr)
        self._loaded[name] = obj
        return obj
