"""What every recorded unit is, whatever recorded it: one launch of one kernel, with its
memory before and after.

Two recorders make units today: the capture inside Python (:class:`~.recording.Recording`,
recording format v1: the kernel's source, its arguments by name) and the driver interposer
(``NativeRecording``, format v2: the module image the program loaded, raw
parameter bytes, the allocations they point into; the source too when NVRTC compiled it in the
recorded process). What differs is what the unit holds (:data:`HOLDS`), which the backend that
replays it handles; loading, describing, selecting with ``--kernels``, choosing the cache
state, replaying (:mod:`kernforge.replay.unit_replay`) and validating
(:mod:`kernforge.pipeline.validation`) read only this protocol and dispatch on ``backend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

HOLDS = ("source", "image")  # the kernel's source text; the module image the program loaded


@runtime_checkable
class Unit(Protocol):
    """One recorded launch, ready to replay."""

    @property
    def path(self) -> Path:
        """The unit's directory."""

    @property
    def unit(self) -> str:
        """The unit's name (its directory's)."""

    @property
    def kernel(self) -> str:
        """The kernel's readable name."""

    @property
    def backend(self) -> str:
        """The backend that replays it (``driver``: the CUDA driver, from the module image)."""

    @property
    def identity(self) -> Mapping[str, Any]:
        """The device and software it was recorded on (``l2_bytes`` when known)."""

    @property
    def holds(self) -> frozenset[str]:
        """What of the kernel the unit holds: a subset of :data:`HOLDS`, never empty."""

    @property
    def nbytes(self) -> int:
        """The bytes of the memory the launch may read or write."""

    @property
    def in_program_s(self) -> float | None:
        """The launch's time in the recorded program (seconds), when the recorder timed it."""

    def matches(self, pattern: str | None) -> bool:
        """Whether ``--kernels PATTERN`` (a glob; None: every unit) selects the unit."""

    def describe(self, cache: Mapping[str, Any]) -> dict[str, Any]:
        """What the unit holds as ``kernforge inspect --json`` prints it; ``cache``: the cache
        state it replays in (decided above the core, from the unit and its directory)."""
