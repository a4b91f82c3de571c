"""The program's original files, by hash: kernforge never changes them.

:func:`snapshot` hashes every file under the source directory (symbolic links by their
target). M1 takes one before the build and one after the build and the first runs; the files
the build and runs created or rewrote are the program's *products*, everything else is the
*original*, kept in ``OUT/original.json``. After the agent step and after M4,
:func:`changed` lists the original files whose hash differs (none, or the run says so).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..core.jsonio import parse_json, write_json_atomic

ORIGINAL = "original.json"


def _hash(p: Path) -> str:
    if p.is_symlink():
        return "link:" + os.readlink(p)
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (``link:<target>`` for links)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in sorted(filenames) + [d for d in dirnames if os.path.islink(Path(dirpath, d))]:
            p = Path(dirpath, n)
            try:
                out[str(p.relative_to(root))] = _hash(p)
            except OSError:
                out[str(p.relative_to(root))] = "unreadable"
    return out


def save_original(out: Path, before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """The original files: those of ``before`` that the build and runs left as they were."""
    original = {k: v for k, v in before.items() if after.get(k) == v}
    products = sorted(k for k in after if before.get(k) != after[k])
    write_json_atomic(out / ORIGINAL, {"files": original, "products": products})
    return original


def load_original(out: Path) -> dict[str, str]:
    return dict(parse_json((out / ORIGINAL).read_text("utf-8"))["files"])


def changed(root: Path, original: dict[str, str]) -> list[str]:
    """Original files that are now missing or different."""
    bad = []
    for rel, digest in original.items():
        p = root / rel
        try:
            now = _hash(p) if (p.exists() or p.is_symlink()) else None
        except OSError:
            now = None
        if now != digest:
            bad.append(rel)
    return bad
