"""Supervised forge sessions: candidate code runs in a worker process, never in the forge's.

:class:`IsolatedSessions` is a session factory for :class:`~.loop.Forge` whose sessions send
every screen, check and compare to a worker of the supervisor the command holds
(``kernforge.replay.isolate.Isolation``, reached through its ``call``; the worker side is
:mod:`.session_worker`). The worker runs the same measurement code an in-process session runs,
on inputs drawn from the seeds this process draws (in the in-process order), so the figures and
the checks are those of an in-process run.

A candidate that kills its worker (a signal; on the GPU a sticky fault, after which the worker
ends itself) or runs past its limit raises :class:`CandidateLost` (a
:class:`KernelRuntimeError` with status RUNTIME_FAILED or TIMEOUT, its cause and a hint): the
loop rejects that candidate, the supervisor replaces the worker, and the next request opens the
cell's session again in the fresh worker, with the inputs it held.

Limits per request, from the supervisor's ``Limits``: a session's first request, and the first
after a lost worker, ``first_timeout_s`` (a worker start, a device context, the fields); then a
screen ``timeout_factor`` times the fastest screen of the session, at least ``min_timeout_s``
(``--eval-timeout``); a compare ten times that; a check ``first_timeout_s`` (the oracle runs on
the host).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..core import CompileError, KernelRuntimeError, LaunchError, Status
from ..core.errors import WorkerLost
from ..stencil.spec import Cell
from .compile import Built

TARGET = "kernforge.forge.session_worker:request"
HINT = ("the worker was replaced and the forge went on; run the candidate with --in-process "
        "under compute-sanitizer (GPU) or gdb (--emulate) to see where it fails")


# what costs a candidate only (the loop rejects it and goes on): a compile or launch refusal,
# a fault on the device or in the emulator, a crash or a hang in its worker
RUN_ERRORS = (CompileError, LaunchError, KernelRuntimeError)


class Supervisor(Protocol):
    """What the forge needs of ``kernforge.replay.isolate.Isolation``."""

    @property
    def limits(self) -> Any: ...

    def call(self, target: str, *args: Any, timeout_s: float | None = None,
             **kwargs: Any) -> Any: ...


class CandidateLost(KernelRuntimeError):
    """A candidate killed its worker, or hung and was killed: RUNTIME_FAILED or TIMEOUT."""

    def __init__(self, lost: WorkerLost) -> None:
        super().__init__(lost.message, hint=HINT)
        self.status = lost.status
        self.cause = lost.cause


def describe_failure(exc: Exception) -> str:
    """A rejected candidate's reason: its status (when it has one) and its message."""
    status = getattr(exc, "status", None)
    tag = status.name if isinstance(status, Status) and isinstance(exc, KernelRuntimeError) \
        else type(exc).__name__
    return f"{tag}: {exc}"


class IsolatedSession:
    """One cell's session in the supervisor's worker (see the module docstring)."""

    def __init__(self, supervisor: Supervisor, kind: str, cell: Cell, seed: int) -> None:
        self.sup, self.kind, self.cell = supervisor, kind, cell
        self.opened = self.data = seed
        self.fresh = True  # the next request may have to open the session in a new worker
        self.screen_s: float | None = None

    def _limit(self, method: str) -> float:
        lim = self.sup.limits
        if self.fresh or self.screen_s is None or method == "check":
            return float(lim.first_timeout_s)
        runs = 10 if method == "compare" else 1
        return float(lim.run_limit(self.screen_s, runs))

    def _call(self, method: str, args: tuple[Any, ...], seed: int | None = None) -> Any:
        limit = self._limit(method)
        t0 = time.monotonic()
        try:
            out = self.sup.call(TARGET, self.kind, self.cell, self.opened, self.data, method,
                                args, seed, timeout_s=limit)
        except WorkerLost as lost:
            self.fresh = True
            raise CandidateLost(lost) from None
        except Exception:
            self.fresh = True  # a sticky fault ends the worker: the next one starts afresh
            raise
        finally:
            if seed is not None:  # a check refreshed (or was to refresh) the inputs
                self.data = seed
        took = time.monotonic() - t0
        if method == "screen":
            self.screen_s = took if self.screen_s is None else min(self.screen_s, took)
        self.fresh = False
        return out

    def screen(self, built: Built) -> float:
        return float(self._call("screen", (built,)))

    def compare(self, a: Built, b: Built) -> tuple[float, float, float, float, float]:
        return tuple(self._call("compare", (a, b)))  # type: ignore[return-value]

    def check(self, built: Built, seed: int | None = None) -> tuple[bool, float, str]:
        from .sessions import _seed

        return tuple(self._call("check", (built,), _seed(seed)))  # type: ignore[return-value]


@dataclass
class IsolatedSessions:
    """A session factory (``sessions(cell, seed=None)``) whose sessions run in workers of
    ``supervisor``; ``kind`` "gpu" or "emulated" (the host emulator)."""

    supervisor: Supervisor
    kind: str = "gpu"

    @contextlib.contextmanager
    def __call__(self, cell: Cell, seed: int | None = None) -> Iterator[IsolatedSession]:
        from .sessions import _seed

        yield IsolatedSession(self.supervisor, self.kind, cell, _seed(seed))

    def identity(self) -> dict[str, Any]:
        """The worker's device (so that this process needs no device context of its own)."""
        return dict(self.supervisor.call("kernforge.forge.session_worker:identity",
                                         timeout_s=float(self.supervisor.limits.first_timeout_s)))
