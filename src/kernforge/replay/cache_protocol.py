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

from collections.abc import Callable
from pathlib import Path

from ..core import Unit
from ..core.jsonio import parse_json, write_json_atomic
from ..harness.cache import CacheChoice, by_footprint, by_program_time, user_choice

STORE = "cache.json"


def footprint(unit: Unit) -> int:
    """The bytes of the memory the launch may read or write (of a recording: every array
    argument; of a native unit: every allocation its parameters point into)."""
    return unit.nbytes


def cache_size(unit: Unit) -> tuple[int | None, str]:
    """The cache the unit's data competes for on the device it replays on: (bytes or None,
    its name)."""
    l2 = unit.identity.get("l2_bytes")
    if isinstance(l2, int) and l2 > 0:
        return l2, "L2"
    if unit.backend == "cpu":
        from ..backends.cpu import llc_bytes

        return llc_bytes(), "last-level cache"
    return None, "L2" if unit.backend == "driver" else "cache"


def stored(unit: Path) -> CacheChoice | None:
    """The choice stored with the unit, or None (none, or a file that is not one)."""
    try:
        return CacheChoice.from_json(parse_json((Path(unit) / STORE).read_text("utf-8")))
    except (OSError, ValueError):
        return None


def store(unit: Path, choice: CacheChoice) -> Path:
    return write_json_atomic(Path(unit) / STORE, choice.to_json())


def protocol_for(unit: Unit, mode: str = "auto") -> CacheChoice:
    """The unit's protocol: the user's (``mode`` warm/flushed), else the one stored with it (a
    native unit's measured against its time in the program: :func:`calibrate`), else by its
    footprint against the cache it replays in (not known: flushed)."""
    choice = user_choice(mode) or stored(unit.path)
    if choice is not None:
        return choice
    size, what = cache_size(unit)
    return by_footprint(footprint(unit), size, what)


def calibrate(unit: Unit, replay_s: Callable[[bool], float | None]) -> CacheChoice:
    """Replay the unit both ways (``replay_s(flush)``: the median, or None when it failed),
    choose the protocol nearer to its time in the program and store it; without that time
    (or a replay), the choice of :func:`protocol_for`, not stored."""
    app = unit.in_program_s
    if app is None:
        return protocol_for(unit)
    flushed, warm = replay_s(True), replay_s(False)
    if not flushed or not warm:
        return protocol_for(unit)
    choice = by_program_time(app, flushed, warm)
    store(unit.path, choice)
    return choice


def choose(unit: Unit, mode: str | None, replay_s: Callable[[bool], float | None]
           ) -> CacheChoice:
    """The cache state a replay of ``unit`` runs in, for ``--cache MODE`` (None: not given).
    A unit whose time in the program is known is calibrated (:func:`calibrate`, with
    ``replay_s``) under ``auto``, or when not given and no user's choice is kept; otherwise
    ``mode``, when given, is kept with the unit (:func:`apply_mode`) and the unit's protocol
    is returned (:func:`protocol_for`)."""
    kept = stored(unit.path)
    measure = mode == "auto" or (mode is None and (kept is None or kept.by != "user"))
    if measure and unit.in_program_s is not None:
        return calibrate(unit, replay_s)
    if mode is not None:
        apply_mode(unit.path, mode)
    return protocol_for(unit, mode or "auto")


def resolve(rec: Unit, flush: bool | None) -> bool:
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
