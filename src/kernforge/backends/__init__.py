"""Backends: one small ABC (``base.Backend``) and one file per backend."""

from .base import BACKENDS, Backend, Compiled, Knob, get_backend
from .kernel import Kernel, LaunchObserver, add_observer, remove_observer

__all__ = ["BACKENDS", "Backend", "Compiled", "Kernel", "Knob", "LaunchObserver",
           "add_observer", "get_backend", "remove_observer"]
