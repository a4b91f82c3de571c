"""JSON on disk, written so that a crash never leaves a half-written file.

One implementation for every record kernforge keeps (recordings' manifests, tuning results,
deployment specs, run summaries, ledgers' side files): a temporary sibling with a unique name,
``fsync``, ``os.replace``, then ``fsync`` of the directory. The canonical form (sorted keys, no
whitespace, ASCII, no NaN/Infinity) is what checksums are computed over.
"""

from __future__ import annotations

import functools
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
    """sha256 (hex) of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


CHECKSUM_KEY = "checksum"


def signature(doc: dict[str, Any]) -> str:
    """sha256 over a document's canonical JSON without its ``checksum`` field (values JSON
    cannot hold written as ``str``, as :func:`write_json_atomic` writes them; NaN allowed), so
    the signature of a document read back from disk equals that of the one written."""
    body = {k: v for k, v in doc.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def sign(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``checksum`` (:func:`signature`): an edit of any field shows."""
    return {**{k: v for k, v in doc.items() if k != CHECKSUM_KEY},
            CHECKSUM_KEY: signature(doc)}


def signature_ok(doc: dict[str, Any]) -> bool | None:
    """True when ``doc``'s checksum matches its content, False when not, None when unsigned."""
    if CHECKSUM_KEY not in doc:
        return None
    return doc[CHECKSUM_KEY] == signature(doc)


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    """The process's umask (read once: reading it means setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` into ``path`` atomically: readers see the old file or the new one. The
    file gets the mode a plain ``open`` would give it (0666 less the umask), not
    ``mkstemp``'s private 0600."""
    import tempfile  # writing only: a deployed process reads specs at start-up, and no more

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return path


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 2) -> Path:
    """``data`` as (human-readable) JSON, written atomically."""
    text = json.dumps(data, indent=indent, default=str)
    return write_bytes_atomic(Path(path), (text + "\n").encode())


class DamagedJSON(ValueError):
    """A document that does not parse; the message says where it broke."""


def parse_json(text: str) -> Any:
    """``json.loads(text)``; a truncated or damaged document raises :class:`DamagedJSON` with
    the line, column and offset where parsing stopped (callers add the path and a hint)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if not text.strip():
            raise DamagedJSON("not valid JSON: it is empty") from None
        # "Unterminated string starting at" (json's words) reads on with "line ... column"
        what = exc.msg.removesuffix(" at")
        raise DamagedJSON(f"not valid JSON (truncated or damaged): {what} at line "
                          f"{exc.lineno} column {exc.colno} (char {exc.pos} of {len(text)})"
                          ) from None
