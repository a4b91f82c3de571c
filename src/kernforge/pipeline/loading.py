"""Recorded units of both kinds loaded from a path: recordings (format v1) and native units
(format v2), damaged ones skipped with their reason while others remain."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from ..core import ConfigError, Recording, RecordingError
from ..core.native import NativeRecording
from ..record import find_recordings, load_recording
from ..record.native_format import is_native_unit, read_native
from .native_units import finalize_spooled, native_matches
from .notes import QUIET, Notes


@dataclass(frozen=True)
class Units:
    """The units under ``where``: ``recordings`` (format v1) and ``native`` units."""

    where: str
    recordings: list[Recording] = field(default_factory=list)
    native: list[NativeRecording] = field(default_factory=list)

    @property
    def backends(self) -> list[str]:
        """The backends the recordings replay on (the worker pool makes them ready)."""
        return sorted({r.backend for r in self.recordings})


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
    units = Units(str(path))
    damaged: list[RecordingError] = []
    seen: set[str] = set()  # every kernel recorded, for a pattern that matches none
    for p in paths:
        try:
            if is_native_unit(p):
                n = read_native(p, verify=True)
                seen.add(n.name or n.entry)
                if native_matches(n, pattern):
                    units.native.append(n)
            else:
                rec = load_recording(p, verify=True)
                seen.add(rec.source.entry)
                if not pattern or fnmatchcase(rec.source.entry, pattern):
                    units.recordings.append(rec)
        except RecordingError as exc:
            if len(paths) == 1:
                raise
            damaged.append(exc)
    if damaged and not units.recordings and not units.native:
        raise damaged[0]
    if pattern and seen and not units.recordings and not units.native:
        shown = sorted(seen)
        raise ConfigError(f"no recorded kernel under {path} matches --kernels {pattern!r}",
                          hint=f"recorded kernels: {', '.join(shown[:12])}"
                               + (f" and {len(shown) - 12} more" if len(shown) > 12 else ""))
    for bad in damaged:
        notes.damaged(bad)
    return units
