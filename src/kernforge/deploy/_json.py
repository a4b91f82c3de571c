"""The checksum rule shared with recordings (docs/recording-format.md) and directory fsync."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, ASCII, strict (no NaN/Infinity literals)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def canonical_checksum(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
