"""Backends: one small ABC (``base.Backend``) and one file per backend.

The names are imported from their modules on first use: a process that needs one module (the
launch events of a deployed program, the driver's JIT option ids) does not import them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from .base import BACKENDS, Backend, Compiled, Knob, get_backend
    from .events import (
        LaunchEvent,
        LaunchObserver,
        add_observer,
        notify_launch,
        remove_observer,
    )
    from .kernel import Kernel
    from .sanitize import SanitizerRun

_EXPORTS = {"BACKENDS": "base", "Backend": "base", "Compiled": "base", "Knob": "base",
            "get_backend": "base", "LaunchEvent": "events", "LaunchObserver": "events",
            "add_observer": "events", "notify_launch": "events", "remove_observer": "events",
            "Kernel": "kernel", "SanitizerRun": "sanitize"}

__all__ = ["BACKENDS", "Backend", "Compiled", "Kernel", "Knob", "LaunchEvent", "LaunchObserver",
           "SanitizerRun", "add_observer", "get_backend", "notify_launch", "remove_observer"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
