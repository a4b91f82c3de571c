"""Replay engine: evaluate variants of a recorded launch in isolation (verify, then time)."""

from .engine import compare, evaluate_variant, replay
from .prepare import Prepared, bind_args, prepare, resolve_policies

__all__ = ["Prepared", "bind_args", "compare", "evaluate_variant", "prepare", "replay",
           "resolve_policies"]
