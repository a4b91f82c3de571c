"""Replay engine: evaluate variants of a recorded launch in isolation (verify, then time).

The names are imported from their modules on first use, so that importing one module of the
package does not load the engine.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from ..core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from .engine import compare, evaluate_variant, replay
    from .prepare import Prepared, bind_args, prepare, resolve_policies

_EXPORTS = {"compare": "engine", "evaluate_variant": "engine", "replay": "engine",
            "Prepared": "prepare", "bind_args": "prepare", "prepare": "prepare",
            "resolve_policies": "prepare"}

__all__ = ["Prepared", "bind_args", "compare", "evaluate_variant", "prepare", "replay",
           "resolve_policies"]


class _Package(types.ModuleType):
    """This package's module type: the submodule :mod:`.prepare`, when imported, does not
    shadow the function of that name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
