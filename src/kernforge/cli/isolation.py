"""The ``--in-process`` / ``--eval-timeout`` options every command that runs candidate code
shares: by default candidates run in supervised worker processes
(:class:`kernforge.replay.isolate.Isolation`), so a crash or a hang costs that candidate only."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from ..replay.isolate import Isolation, Limits
from .checks import float_range

SECONDS = float_range(0.001)  # a limit: a positive, finite number of seconds


def add_isolation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--in-process", action="store_true",
                   help="run candidate code in this process (for debugging: a crashing "
                        "candidate then ends the command)")
    p.add_argument("--eval-timeout", type=SECONDS, default=None, metavar="S",
                   help="the shortest run-stage limit of one evaluation in seconds "
                        f"(default {Limits().min_timeout_s:g}; the limit is "
                        f"{Limits().timeout_factor:g}x the baseline's run time, at least this; "
                        "12x this before any baseline)")
    p.add_argument("--compile-timeout", type=SECONDS, default=None, metavar="S",
                   help="the limit of one candidate's compile stage in seconds (default "
                        f"{Limits().compile_timeout_s:g}; also the least a stencil check "
                        "gives its first cell)")


@contextmanager
def isolation(args: argparse.Namespace, workers: int = 1,
              backends: Iterable[str] = ()) -> Iterator[Isolation | None]:
    """The command's worker pool (None with ``--in-process``), closed at the end. Its
    workers make ``backends`` (those of the units the command will evaluate) ready while the
    command sets itself up."""
    if getattr(args, "in_process", False):
        yield None
        return
    with Isolation(workers=workers, limits=limits_of(args), warm=tuple(backends)) as iso:
        yield iso


def limits_of(args: argparse.Namespace) -> Limits:
    """The supervisor's limits that ``--eval-timeout`` and ``--compile-timeout`` ask for."""
    limits = Limits()
    timeout = getattr(args, "eval_timeout", None)
    if timeout is not None:
        limits = replace(limits, min_timeout_s=timeout, first_timeout_s=max(timeout, 1.0) * 12)
    compile_s = getattr(args, "compile_timeout", None)
    if compile_s is not None:
        limits = replace(limits, compile_timeout_s=compile_s)
    return limits
