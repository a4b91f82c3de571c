"""Recording format v1: names, the manifest checksum, and finding units on disk.

See docs/recording-format.md. :mod:`kernforge.record.format` re-exports everything public here.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core import RecordingNotFoundError
from ..core.jsonio import canonical_checksum, canonical_json, fsync_dir  # noqa: F401 (re-exported)

FORMAT = "kernforge-recording"
SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)
MANIFEST = "manifest.json"
BLOBS = "blobs"
TMP_PREFIX = ".tmp-"

PathLike = str | os.PathLike


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """The checksum over the canonical form of the manifest without its checksum field."""
    return canonical_checksum({k: v for k, v in manifest.items() if k != "checksum"})


def no_such_unit(p: Path) -> RecordingNotFoundError:
    """The error for a unit path that does not exist or is a file (a directory without a
    manifest exists: that one is a RecordingFormatError, an unusable recording)."""
    what = f"{p} is a file, not a recorded unit" if p.exists() else f"{p}: no such recorded unit"
    return RecordingNotFoundError(what, hint="give a unit directory written by kernforge record "
                                             "(it holds manifest.json)")


def recordings_root_error(unit: Path) -> RecordingNotFoundError | None:
    """For a directory without a manifest given where one unit is expected: when it is a
    recordings directory (units under it), the bad-input error naming its units; else None
    (the caller's error: a directory that is no unit is an unusable recording)."""
    try:
        units = find_recordings(unit)
    except RecordingNotFoundError:
        return None
    if not units:
        return None
    shown = ", ".join(str(u) for u in units[:3]) + (", ..." if len(units) > 3 else "")
    return RecordingNotFoundError(
        f"{unit} is a recordings directory ({len(units)} unit(s)), not one recorded unit",
        hint=f"this command takes one unit: give one of its units ({shown}); "
             f"kernforge inspect {unit} lists them")


def _unit_key(p: Path) -> tuple[Any, ...]:
    entry, _, n = p.name.rpartition("-")
    return (str(p.parent), entry, int(n)) if n.isdigit() else (str(p.parent), p.name, -1)


def _walk_dirs(root: Path) -> list[Path]:
    """Every directory under ``root`` (not descending into units or .tmp-* directories)."""
    out, stack = [], [root]
    while stack:
        d = stack.pop()
        for c in d.iterdir():
            if c.is_dir() and not c.is_symlink():
                out.append(c)
                if not c.name.startswith(TMP_PREFIX) and not (c / MANIFEST).is_file():
                    stack.append(c)
    return out


def find_recordings(path: PathLike) -> list[Path]:
    """``path`` itself if it is a unit, else every unit under it (sorted; .tmp-* ignored).
    A path that does not exist, or is a file, is a :class:`RecordingNotFoundError` (bad
    input, exit 2)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise RecordingNotFoundError(f"{p} is a file, not a recordings directory",
                             hint="give a directory written by kernforge record, or one unit "
                                  "in it")
    if not p.is_dir():
        raise RecordingNotFoundError(f"{p}: no such recordings directory",
                             hint="give a directory written by kernforge record, or one unit")
    if (p / MANIFEST).is_file() and not p.name.startswith(TMP_PREFIX):
        return [p]
    units = [d for d in _walk_dirs(p)
             if not d.name.startswith(TMP_PREFIX) and (d / MANIFEST).is_file()]
    return sorted(units, key=_unit_key)


def clean_partial(root: PathLike, *, older_than_s: float = 0.0) -> list[Path]:
    """Remove ``.tmp-*`` directories left by interrupted writers; return what was removed.

    Do not run it while a recorder writes into ``root`` unless ``older_than_s`` is set.
    """
    p = Path(root)
    if not p.is_dir():
        return []
    now, removed = time.time(), []
    for d in _walk_dirs(p):
        if d.name.startswith(TMP_PREFIX) and now - d.stat().st_mtime >= older_than_s:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return sorted(removed)
