"""Storing a bound source in a recorded native unit.

A unit of an nvcc-built program holds no source; a CUDA file bound to its kernel (an
application manifest's ``[integrate] sources``) is stored in its manifest as ``source``, as
NVRTC's program is for a unit whose kernel was compiled at run time. The manifest's checksum
is computed again over the new content; the rest of the unit is unchanged.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..core import RecordingFormatError
from ..core.jsonio import parse_json, write_json_atomic
from ..core.native import NativeRecording, NativeSource
from ._layout import MANIFEST, manifest_checksum
from .native_format import is_native, read_native


def attach_source(unit: Path, src: NativeSource) -> NativeRecording:
    """Store ``src`` as the source of the native unit at ``unit``; the unit as read again."""
    path = Path(unit) / MANIFEST
    m = parse_json(path.read_text("utf-8"))
    if not isinstance(m, dict) or not is_native(m):
        raise RecordingFormatError(f"{path}: not a native unit", hint="bind sources to the "
                                   "native units kernforge record wrote")
    if m.get("checksum") != manifest_checksum(m):
        raise RecordingFormatError(f"{path}: checksum mismatch: the manifest was altered or "
                                   "damaged", hint="record the program again")
    d = src.to_json()
    d["code_sha256"] = hashlib.sha256(src.code.encode("utf-8")).hexdigest()
    m["source"] = d
    m["checksum"] = manifest_checksum(m)
    write_json_atomic(path, m)
    return read_native(unit)
