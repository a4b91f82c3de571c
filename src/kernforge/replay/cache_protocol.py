"""Each unit's cache state for replay (:mod:`kernforge.harness.cache`): decided from the
recording, stored with the unit, used by every replay of it (``kernforge replay``, tune, the
gates of validate and export).

The choice is kept in the unit's directory as ``cache.json`` (written atomically) when it was
measured (a native unit's time in the program against its replays both ways) or given by the
user; otherwise it is derived again from the recording on every use (the footprint against the
cache of the device it replays on), which gives the same answer each time. A replay that names
its protocol (``flush=True/False``) uses that; ``flush=None`` means: the unit's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ..core import Recording
from ..core.jsonio import parse_json, write_json_atomic
from ..core.native import NativeRecording
from ..harness.cache import CacheChoice, by_footprint, by_program_time, user_choice

STORE = "cache.json"


def footprint(rec: Recording) -> int:
    """The bytes of every array argument of the launch (what it may read or write)."""
    import numpy as np

    total = 0
    for a in rec.args:
        if a.is_array:
            total += np.dtype(a.dtype).itemsize * math.prod(a.shape)
    return total


def cache_size(rec: Recording) -> tuple[int | None, str]:
    """The cache the unit's data competes for on the device it replays on: (bytes or None,
    its name)."""
    l2 = rec.identity.get("l2_bytes")
    if isinstance(l2, int) and l2 > 0:
        return l2, "L2"
    if rec.backend == "cpu":
        from ..backends.cpu import llc_bytes

        return llc_bytes(), "last-level cache"
    return None, "cache"


def stored(unit: Path) -> CacheChoice | None:
    """The choice stored with the unit, or None (none, or a file that is not one)."""
    try:
        return CacheChoice.from_json(parse_json((Path(unit) / STORE).read_text("utf-8")))
    except (OSError, ValueError):
        return None


def store(unit: Path, choice: CacheChoice) -> Path:
    return write_json_atomic(Path(unit) / STORE, choice.to_json())


def protocol_for(rec: Recording, mode: str = "auto") -> CacheChoice:
    """The unit's protocol: the user's (``mode`` warm/flushed), else the one stored with it,
    else by its footprint."""
    choice = user_choice(mode) or stored(rec.path)
    if choice is not None:
        return choice
    size, what = cache_size(rec)
    return by_footprint(footprint(rec), size, what)


def native_protocol_for(rec: NativeRecording, mode: str = "auto") -> CacheChoice:
    """A native unit's protocol: the user's, the stored one (measured against its time in the
    program: :func:`calibrate`), else by the bytes of the allocations it touches against an L2
    the recording names (else flushed)."""
    choice = user_choice(mode) or stored(rec.path)
    if choice is not None:
        return choice
    l2 = rec.identity.get("l2_bytes")
    return by_footprint(sum(r.size for r in rec.regions), l2 if isinstance(l2, int) else None,
                        "L2")


def in_program_s(rec: NativeRecording) -> float | None:
    """The launch's time in the program (seconds), when the recording holds it."""
    ms = rec.capture.get("app_time_ms")
    return float(ms) / 1e3 if isinstance(ms, (int, float)) and ms > 0 else None


def calibrate(rec: NativeRecording, replay_s: Callable[[bool], float | None]) -> CacheChoice:
    """Replay the unit both ways (``replay_s(flush)``: the median, or None when it failed),
    choose the protocol nearer to its time in the program and store it; without that time
    (or a replay), the choice of :func:`native_protocol_for`, not stored."""
    app = in_program_s(rec)
    if app is None:
        return native_protocol_for(rec)
    flushed, warm = replay_s(True), replay_s(False)
    if not flushed or not warm:
        return native_protocol_for(rec)
    choice = by_program_time(app, flushed, warm)
    store(rec.path, choice)
    return choice


def resolve(rec: Recording, flush: bool | None) -> bool:
    """``flush`` when the caller named it, else the unit's protocol."""
    return protocol_for(rec).flush if flush is None else flush


def apply_mode(unit: Path, mode: str) -> None:
    """What ``--cache MODE`` keeps with the unit, for every later use of it (tune's gates,
    export, replays): ``warm``/``flushed`` stored as the user's choice; ``auto`` drops a
    stored user's choice (a measured one stays). A unit that cannot be written to keeps what
    it had (the command itself still uses ``MODE``)."""
    choice = user_choice(mode)
    try:
        if choice is not None:
            store(unit, choice)
        elif (old := stored(unit)) is not None and old.by == "user":
            (Path(unit) / STORE).unlink()
    except OSError:
        pass
