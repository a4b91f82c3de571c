"""Capture: record the launches of :class:`kernforge.Kernel` objects while an application runs.

>>> with record("recordings", kernels="heat_*", max_instances=2) as rec:
...     run_application()
>>> rec.paths
[PosixPath('recordings/heat_step-0'), PosixPath('recordings/heat_step-1')]

A launch observer snapshots every array argument before the launch (the prologue) and after it
(the epilogue) through the backend's ``to_host``, then writes one replay unit per launch with
:func:`kernforge.record.format.write_recording`. The application's arrays are only read.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import Compiled, Kernel, add_observer, remove_observer
from ..core import ConfigError, LaunchConfig, Param, Tolerance, Variant
from .format import PathLike, write_recording


@dataclass
class _Token:
    kernel: Kernel
    compiled: Compiled
    args: tuple[tuple[Param, Any], ...]
    launch: LaunchConfig
    prologue: dict[str, np.ndarray]


class Recorder:
    """The launch observer behind :func:`record`; ``paths`` lists the units written so far.

    ``seen`` counts the matching calls per kernel name, ``recorded`` the units written.
    """

    def __init__(self, root: PathLike, *, kernels: str | None = None,
                 max_instances: int | None = 4, skip: int = 0) -> None:
        if max_instances is not None and max_instances < 0:
            raise ConfigError(f"max_instances={max_instances} must be >= 0",
                              hint="give the number of launches to record per kernel")
        if skip < 0:
            raise ConfigError(f"skip={skip} must be >= 0",
                              hint="give the number of launches to skip per kernel")
        self.root = Path(root)
        self.kernels = kernels
        self.max_instances = max_instances
        self.skip = skip
        self.paths: list[Path] = []
        self.seen: dict[str, int] = {}
        self.recorded: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._lock = threading.Lock()

    def matches(self, name: str) -> bool:
        return self.kernels is None or fnmatchcase(name, self.kernels)

    def _reserve(self, name: str) -> bool:
        """Count the call; True when it is one to record (a slot is then reserved)."""
        with self._lock:
            call = self.seen.get(name, 0)
            self.seen[name] = call + 1
            taken = self._reserved.get(name, 0)
            if call < self.skip or (self.max_instances is not None
                                    and taken >= self.max_instances):
                return False
            self._reserved[name] = taken + 1
            return True

    def _release(self, name: str) -> None:
        with self._lock:
            self._reserved[name] -= 1

    @staticmethod
    def _snapshot(kernel: Kernel, pairs: Sequence[tuple[Param, Any]]) -> dict[str, np.ndarray]:
        """Host copies of every array argument; never a view of the application's memory."""
        out: dict[str, np.ndarray] = {}
        for p, a in pairs:
            if p.pointer:
                h = np.asarray(kernel.backend.to_host(a))
                if isinstance(a, np.ndarray) and np.may_share_memory(h, a):
                    h = h.copy()
                out[p.name] = h
        return out

    def before(self, kernel: Kernel, compiled: Compiled, args: Sequence[Any],
               launch: LaunchConfig) -> _Token | None:
        if not self.matches(kernel.name):
            return None
        sig = compiled.signature
        if len(args) != len(sig) or any(p.pointer and not kernel.backend.is_buffer(a)
                                        for p, a in zip(sig, args)):
            return None  # the launch itself will raise ArgumentError
        if not self._reserve(kernel.name):
            return None
        pairs = tuple(zip(sig, args))
        try:
            prologue = self._snapshot(kernel, pairs)
        except BaseException:
            self._release(kernel.name)
            raise
        return _Token(kernel, compiled, pairs, launch, prologue)

    def after(self, token: _Token | None, error: BaseException | None) -> None:
        if token is None:
            return
        name = token.kernel.name
        if error is not None:
            self._release(name)  # a failed launch does not use up an instance
            return
        try:
            epilogue = self._snapshot(token.kernel, token.args)
            v = token.compiled.variant
            path = write_recording(
                self.root, backend=token.kernel.backend,
                variant=Variant(v.source, v.options, token.launch, v.defines),
                args=token.args, prologue=token.prologue, epilogue=epilogue,
                policies={p.name: token.kernel.tolerance.get(p.name, Tolerance())
                          for p, _ in token.args if p.pointer})
        except BaseException:
            self._release(name)
            raise
        with self._lock:
            self.paths.append(path)
            self.recorded[name] = self.recorded.get(name, 0) + 1

    @property
    def count(self) -> int:
        """Units written so far."""
        with self._lock:
            return len(self.paths)


@contextlib.contextmanager
def record(root: PathLike, *, kernels: str | None = None, max_instances: int | None = 4,
           skip: int = 0) -> Iterator[Recorder]:
    """Record the launches of every :class:`Kernel` called inside the ``with`` block.

    ``kernels``: an fnmatch pattern on the entry name (None = all). Per kernel name, the first
    ``skip`` calls are passed over, then at most ``max_instances`` are recorded (None = all).
    """
    recorder = Recorder(root, kernels=kernels, max_instances=max_instances, skip=skip)
    add_observer(recorder)
    try:
        yield recorder
    finally:
        remove_observer(recorder)
