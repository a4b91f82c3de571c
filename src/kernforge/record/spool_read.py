"""Reading the interposer's spool without trusting it.

A spool unit (``<root>/.spool/<pid>-<seq>/``) is what a C library wrote inside someone's
program, in a directory others may write to: every name is checked before it is read. Only
real directories and regular files are opened (never through a symbolic link, never a FIFO,
which would block), each file's size is checked against the unit's layout before its bytes are
used, and ``unit.json`` is checked field by field. What fails raises a
:class:`~kernforge.core.RecordingFormatError` whose message says which file and why, so
:func:`~kernforge.record.native_format.finalize_spool` names each damaged unit with its reason.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ..core import RecordingFormatError
from ..core.jsonio import DamagedJSON, parse_json

SPOOL = ".spool"
JSON_LIMIT = 256 << 20  # bytes of unit.json / nvrtc.json read at most
_HEX16 = re.compile(r"[0-9a-f]{16}")
_HINT = "re-record the launch (kernforge record -- COMMAND)"


class _Bad(Exception):
    """A field of unit.json that is missing or of the wrong type or range."""


def damaged(path: Path, problem: str) -> RecordingFormatError:
    return RecordingFormatError(f"{path.name}: {problem}", hint=_HINT)


def real_dir(path: Path) -> bool:
    """Whether ``path`` is a directory itself (not a link to one)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def spool_dir(root: Path) -> Path | None:
    """``root/.spool`` when it is a real directory; None when absent. A link or a file there
    is refused: nothing is read from, or removed in, what it points to."""
    spool = root / SPOOL
    try:
        mode = os.lstat(spool).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordingFormatError(f"{spool}: cannot be read: {exc.strerror}",
                                   hint="check the directory's permissions") from None
    if not stat.S_ISDIR(mode):
        raise RecordingFormatError(
            f"{spool} is not a directory (a symbolic link, file or FIFO): it was not read",
            hint="remove it, and record into a directory only you write to")
    return spool


def read_regular(path: Path, size: int | None = None, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (of exactly ``size`` bytes when given)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise damaged(path.parent, f"{path.name} is missing") from None
    except OSError as exc:
        raise damaged(path.parent, f"{path.name} cannot be opened ({exc.strerror}): a "
                                   "symbolic link or unreadable") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise damaged(path.parent, f"{path.name} is not a regular file")
        if size is not None and st.st_size != size:
            raise damaged(path.parent, f"{path.name} holds {st.st_size} bytes, not the "
                                       f"{size} its unit.json gives (truncated?)")
        if limit is not None and st.st_size > limit:
            raise damaged(path.parent, f"{path.name} is larger than {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
        if len(data) != st.st_size:
            raise damaged(path.parent, f"{path.name} changed while it was read")
        return data
    finally:
        os.close(fd)


def _int(u: dict[str, Any], key: str, lo: int = 0, hi: int = (1 << 64) - 1) -> int:
    v = u.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _Bad(f"{key} is {v!r}, not an integer from {lo} to {hi}")
    return v


def _list(u: dict[str, Any], key: str) -> list[Any]:
    v = u.get(key)
    if not isinstance(v, list):
        raise _Bad(f"{key} is {v!r}, not a list")
    return v


def _dicts(u: dict[str, Any], key: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for i, item in enumerate(_list(u, key)):
        if not isinstance(item, dict):
            raise _Bad(f"{key}[{i}] is not an object")
        for f in fields:
            _int(item, f, -(1 << 31) if f == "kind" else 0)
        out.append(item)
    return out


def _check_launch(u: dict[str, Any]) -> None:
    """One launch's fields (a version 1 unit's, or one of a sequence's launches)."""
    for key in ("function", "api"):
        if not isinstance(u.get(key), str) or not u[key]:
            raise _Bad(f"{key} is {u.get(key)!r}, not a name")
    for key in ("grid", "block"):
        dims = _list(u, key)
        if len(dims) != 3 or any(isinstance(d, bool) or not isinstance(d, int)
                                 or not 0 <= d < 1 << 32 for d in dims):
            raise _Bad(f"{key} is {dims!r}, not three unsigned integers")
    _int(u, "shared_mem", 0, (1 << 32) - 1)
    _int(u, "param_bytes")
    for key in ("pid", "call", "stream"):
        if key in u:
            _int(u, key)
    if u.get("image") is not None and (not isinstance(u["image"], str)
                                       or not _HEX16.fullmatch(u["image"])):
        raise _Bad(f"image is {u['image']!r}, not a 16-digit image id")
    t = u.get("app_time_ms", 0)
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise _Bad(f"app_time_ms is {u.get('app_time_ms')!r}, not a number")
    attrs = u.get("launch_attrs", [])
    if not isinstance(attrs, list) or not all(isinstance(a, str) and re.fullmatch(
            r"(?:[0-9a-f]{2})*", a) for a in attrs):
        raise _Bad("launch_attrs is not a list of hex strings")
    fa = u.get("func_attrs", {})
    if not isinstance(fa, dict) or not isinstance(fa.get("set", []), list) or not all(
            isinstance(kv, list) and len(kv) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) for x in kv)
            for kv in fa.get("set", [])) or any(
            fa.get(k) is not None and (not isinstance(fa[k], int) or isinstance(fa[k], bool))
            for k in ("cache_config", "shared_config")):
        raise _Bad("func_attrs is not {set: [[id, value], ...], cache_config, shared_config}")
    for p in _dicts(u, "params", ("offset", "size")):
        if p["offset"] + p["size"] > u["param_bytes"]:
            raise _Bad(f"a parameter at offset {p['offset']} of {p['size']} bytes ends "
                             f"past param_bytes {u['param_bytes']}")


def _check_fields(u: Any) -> None:
    """Version 1: one launch; version 2: a sequence (its first launch's fields, ``sequence``
    and ``launches``, kf_sequence.c)."""
    if not isinstance(u, dict) or u.get("format") != "kernforge-spool" or \
            u.get("version") not in (1, 2):
        raise _Bad("not a kernforge-spool version 1 or 2 document")
    _check_launch(u)
    if "work_key" in u and (not isinstance(u["work_key"], str)
                            or not _HEX16.fullmatch(u["work_key"])):
        raise _Bad(f"work_key is {u['work_key']!r}, not a 16-digit key")
    if u["version"] == 2:
        seq = u.get("sequence")
        if not isinstance(seq, dict) or not isinstance(seq.get("ended"), str):
            raise _Bad("sequence is not an object with why it ended")
        _int(seq, "requested", 2)
        _int(seq, "steps", 1)
        launches = _list(u, "launches")
        if not launches:
            raise _Bad("launches is empty")
        for i, one in enumerate(launches):
            if not isinstance(one, dict):
                raise _Bad(f"launches[{i}] is not an object")
            try:
                _check_launch(one)
            except _Bad as exc:
                raise _Bad(f"launches[{i}]: {exc}") from None
    for r in _dicts(u, "regions", ("address", "size", "kind")):
        if r.get("changed", 0) not in (0, 1) or isinstance(r.get("changed"), bool):
            raise _Bad(f"a region's changed is {r.get('changed')!r}, not 0 or 1")


def read_unit_json(unit: Path) -> dict[str, Any]:
    """The unit's checked ``unit.json``, and its ``params.bin`` and region files checked
    against it (present, regular, of the sizes it gives)."""
    if not real_dir(unit):
        raise damaged(unit, "not a directory (a symbolic link, file or FIFO)")
    text = read_regular(unit / "unit.json", limit=JSON_LIMIT).decode("utf-8", errors="replace")
    try:
        u = parse_json(text)
        _check_fields(u)
    except DamagedJSON as exc:
        raise damaged(unit, f"unit.json: {exc}") from None
    except _Bad as exc:
        raise damaged(unit, f"unit.json: {exc}") from None
    launches = [(f"p{j}.bin", one["param_bytes"]) for j, one in enumerate(u.get("launches", []))]
    for name, size in [("params.bin", u["param_bytes"]), *launches] + [
            (f"r{i}.{part}", r["size"]) for i, r in enumerate(u["regions"])
            for part in ("pre", "post") if part == "pre" or r.get("changed")]:
        path = unit / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise damaged(unit, f"{name} is missing") from None
        if not stat.S_ISREG(st.st_mode):
            raise damaged(unit, f"{name} is not a regular file")
        if st.st_size != size:
            raise damaged(unit, f"{name} holds {st.st_size} bytes, not the {size} its "
                                "unit.json gives (truncated?)")
    return u
