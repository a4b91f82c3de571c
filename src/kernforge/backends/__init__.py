"""Backends: one small ABC (``base.Backend``) and one file per backend."""

from .base import BACKENDS, Backend, Compiled, Knob, get_backend
from .events import LaunchEvent, LaunchObserver, add_observer, notify_launch, remove_observer
from .kernel import Kernel
from .sanitize import SanitizerRun

__all__ = ["BACKENDS", "Backend", "Compiled", "Kernel", "Knob", "LaunchEvent", "LaunchObserver",
           "SanitizerRun", "add_observer", "get_backend", "notify_launch", "remove_observer"]
