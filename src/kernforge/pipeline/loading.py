"""Recorded units loaded from a path, whatever recorded them (:class:`~kernforge.core.Unit`:
recordings, format v1, and native units, format v2), damaged ones skipped with their reason
while others remain."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core import ConfigError, Recording, RecordingError, Unit
from ..core.native import NativeRecording
from ..record import find_recordings, read_unit
from ..record.native_format import finalize_spool
from .notes import QUIET, Notes


@dataclass(frozen=True)
class Units:
    """The units under ``where``, in the order found (``every``)."""

    where: str
    every: list[Unit] = field(default_factory=list)

    @property
    def recordings(self) -> list[Recording]:
        """The units the capture inside Python recorded (format v1)."""
        return [u for u in self.every if isinstance(u, Recording)]

    @property
    def native(self) -> list[NativeRecording]:
        """The units the driver interposer recorded (format v2)."""
        return [u for u in self.every if isinstance(u, NativeRecording)]

    @property
    def backends(self) -> list[str]:
        """The backends the recordings replay on (the worker pool makes them ready)."""
        return sorted({r.backend for r in self.recordings})


def finalize_spooled(path: str | Path, notes: Notes) -> None:
    """Spool units a killed recording left, turned into units; each one that cannot be is
    named with its reason (``notes.warn``: the units that are fine are used)."""
    for line in finalize_spool(path)[1]:
        notes.warn(line)


def _read(paths: list[Path], pattern: str | None, strict: bool
          ) -> tuple[list[Unit], list[RecordingError], set[str]]:
    """The units at ``paths`` that ``pattern`` selects, the errors of the damaged ones (raised
    at once when ``strict``), and every kernel seen."""
    found: list[Unit] = []
    damaged: list[RecordingError] = []
    seen: set[str] = set()
    for p in paths:
        try:
            u = read_unit(p, verify=True)
        except RecordingError as exc:
            if strict:
                raise
            damaged.append(exc)
            continue
        seen.add(u.kernel)
        if u.matches(pattern):
            found.append(u)
    return found, damaged, seen


def load_units(path: str | Path, pattern: str | None = None, notes: Notes = QUIET) -> Units:
    """Every recorded unit under ``path``, of both kinds, whose kernel matches ``pattern``
    (native units also by readable name or unit directory); spool units a killed recording
    left are turned into units first (``notes.warn`` names those that cannot be). A damaged
    unit of either kind (a manifest too damaged to tell its kind included) is skipped
    (``notes.damaged``) while other units remain; when none remains, its error is raised. One
    unit named directly is loaded strictly. A path holding no unit at all is a ConfigError."""
    if Path(path).is_dir():
        finalize_spooled(path, notes)
    paths = find_recordings(path)
    if not paths:
        raise ConfigError(f"no recorded units in {path}: record with kernforge record "
                          f"-o {path} -- COMMAND")
    found, damaged, seen = _read(paths, pattern, strict=len(paths) == 1)
    if damaged and not found:
        raise damaged[0]
    if pattern and seen and not found:
        shown = sorted(seen)
        raise ConfigError(f"no recorded kernel under {path} matches --kernels {pattern!r}",
                          hint=f"recorded kernels: {', '.join(shown[:12])}"
                               + (f" and {len(shown) - 12} more" if len(shown) > 12 else ""))
    for bad in damaged:
        notes.damaged(bad)
    return Units(str(path), found)
