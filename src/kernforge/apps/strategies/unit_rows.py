"""Per-unit results of a strategy that a stopped run keeps (M3a): each recorded unit's row is
written as it finishes (``WORKDIR/DATASET/UNIT/row.json``), so a run stopped at its budget
and resumed matches only the units it had not finished. A unit stopped in flight leaves
``unfinished.json`` with how long it had run (the longest attempt): it starts from scratch
next time, and the batch does not start it on a share shorter than that
(:mod:`kernforge.apps.batch_estimate`)."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...core.jsonio import parse_json, write_json_atomic

ROW = "row.json"
UNFINISHED = "unfinished.json"


def load(out: Path) -> dict[str, Any] | None:
    """The unit's finished row, or None (not finished, or unreadable: matched again)."""
    try:
        row = parse_json((out / ROW).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and "matched" in row else None


def unfinished_s(out: Path) -> float:
    """How long the longest stopped attempt of the unit ran (0 when none was stopped)."""
    try:
        d = parse_json((out / UNFINISHED).read_text("utf-8"))
        return float(d["seconds"]) if isinstance(d, dict) else 0.0
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def finished_s(workdir: Path) -> dict[str, float]:
    """DATASET/UNIT -> how long matching it took, of the units finished."""
    out = {}
    for f in sorted(workdir.glob(f"*/*/{ROW}")):
        row = load(f.parent)
        if row is not None and isinstance(row.get("seconds"), (int, float)):
            out[f"{f.parent.parent.name}/{f.parent.name}"] = float(row["seconds"])
    return out


def longest_unfinished(workdir: Path) -> tuple[float, str]:
    """(seconds, DATASET/UNIT) of the unfinished unit whose stopped attempt ran longest."""
    best = (0.0, "")
    for f in sorted(workdir.glob(f"*/*/{UNFINISHED}")):
        if not (f.parent / ROW).is_file():
            s = unfinished_s(f.parent)
            if s > best[0]:
                best = (s, f"{f.parent.parent.name}/{f.parent.name}")
    return best


def _clear(out: Path, keep: str) -> None:
    """Empty ``out`` (what a stopped attempt left) except the file ``keep``."""
    if not out.is_dir():
        return
    for p in out.iterdir():
        if p.name == keep:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


@contextlib.contextmanager
def attempt(out: Path) -> Iterator[Callable[[dict[str, Any]], None]]:
    """One attempt at a unit, from scratch; the ``done(row)`` it gives writes the row. When
    the run is stopped in it (SIGINT, KeyboardInterrupt), ``unfinished.json`` keeps how long
    it ran (the longest of its attempts) and the interruption goes on up."""
    _clear(out, UNFINISHED)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    def done(row: dict[str, Any]) -> None:
        write_json_atomic(out / ROW, {**row, "seconds": round(time.monotonic() - t0, 3)})
        (out / UNFINISHED).unlink(missing_ok=True)

    try:
        yield done
    except KeyboardInterrupt:
        ran = max(unfinished_s(out), time.monotonic() - t0)
        write_json_atomic(out / UNFINISHED, {"seconds": round(ran, 3)})
        raise
