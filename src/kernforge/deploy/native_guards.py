"""What a native deployment entry's kernel assumed besides the launch's parameters and geometry,
as the spec holds it and the interposer checks it (record/native/kf_guard.c).

- ``launch_attrs`` (a fused entry, and each of its companions): the launch attributes the
  launch was recorded with (``cuLaunchKernelEx``'s ``CUlaunchAttribute``, 72 bytes each, as
  hex). The interposer holds a launch only when it has exactly these (an absent list: none);
  a launch with others (a cluster, cooperative, a priority) runs as the original.
- ``guards`` (any entry): the module globals (``__constant__`` or ``__device__`` variables)
  whose values the entry's kernel baked in: ``symbol``, ``size`` in bytes, ``hash`` (the
  :func:`~kernforge.deploy.native.image_id` of the bytes: FNV-1a 64) and optionally ``image``,
  the id of the module image that holds it (absent: the replaced kernel's module, whatever
  image it is). Before the entry's kernel first runs, and again after a copy or memset that may
  have written one of them, the interposer reads them; another value turns the entry off (the
  program's own kernels run, one message).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

ATTR_SIZE = 72  # bytes of one CUlaunchAttribute (kf.h KF_ATTR_SIZE)
MAX_ATTRS = 16  # launch attributes of one launch in a line (kf_deploy.h MAX_ATTRS)
MAX_GUARDS = 8  # guarded globals of one entry (kf_deploy.h MAX_GUARD)
GUARD_LIMIT = 1 << 20  # bytes of one guarded global (kf_deploy.h GUARD_LIMIT)
_HEX = frozenset("0123456789abcdefABCDEF")


class Guard(NamedTuple):
    """A global the entry's kernel baked in: its ``symbol`` in the module, ``size`` bytes whose
    FNV-1a 64 is ``hash`` (16 hex digits), in the image ``image`` (None: the replaced
    kernel's)."""
    symbol: str
    size: int
    hash: str
    image: str | None = None

    def as_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"symbol": self.symbol, "size": self.size, "hash": self.hash}
        return d | ({"image": self.image} if self.image is not None else {})


def guard_for(symbol: str, value: bytes, image: str | None = None) -> Guard:
    """The guard of the global ``symbol`` whose bytes the kernel was built with (``value``)."""
    from .native import image_id

    return Guard(symbol, len(value), image_id(value), image)


def _is_hex16(v: Any, zero: bool = True) -> bool:
    return isinstance(v, str) and len(v) == 16 and set(v) <= _HEX and (zero or v.strip("0") != "")


def attrs_problem(attrs: Any) -> str | None:
    """What is wrong with a ``launch_attrs`` list as the spec holds it (JSON), or None."""
    if not isinstance(attrs, list) or len(attrs) > MAX_ATTRS or any(
            not isinstance(a, str) or len(a) != 2 * ATTR_SIZE or not set(a) <= _HEX
            for a in attrs):
        return (f"has launch_attrs that are not a list of at most {MAX_ATTRS} launch "
                f"attributes of {ATTR_SIZE} bytes as hex")
    return None


def guards_problem(guards: Any) -> str | None:
    """What is wrong with a ``guards`` list as the spec holds it (JSON), or None."""
    if not isinstance(guards, list) or len(guards) > MAX_GUARDS:
        return f"has guards that are not a list of at most {MAX_GUARDS}"
    seen = set()
    for g in guards:
        if not isinstance(g, Mapping) or set(g) - {"image"} != {"symbol", "size", "hash"}:
            return "has a guard that does not hold exactly symbol, size and hash (and image)"
        sym, size = g["symbol"], g["size"]
        if not isinstance(sym, str) or not sym or any(ch in sym for ch in "\t\n\r\0"):
            return "has a guard whose symbol is empty or holds a tab, a line break or a NUL byte"
        if type(size) is not int or not 1 <= size <= GUARD_LIMIT:
            return f"has a guard whose size is not 1 to {GUARD_LIMIT} bytes"
        if not _is_hex16(g["hash"]):
            return "has a guard whose hash is not 16 hex digits"
        if "image" in g and not _is_hex16(g["image"], zero=False):
            return "has a guard whose image is not 16 hex digits (not all 0): an image id"
        if (sym, g.get("image")) in seen:
            return f"guards the global {sym} twice"
        seen.add((sym, g.get("image")))
    return None


def tagged_fields(e: Mapping[str, Any]) -> list[str]:
    """The interposer's attrs: and guard: fields of entry ``e`` (after field 14 and the
    companions; kf_deploy.c): the recorded launch attributes of a fused entry's launches, and
    the guarded globals of any entry."""
    fields = []
    fuse = e.get("fuse")
    if fuse is not None:
        roles = [e.get("launch_attrs") or []] + [c.get("launch_attrs") or []
                                                 for c in fuse.get("companions") or []]
        fields += [f"attrs:{r}:{''.join(a)}" for r, a in enumerate(roles) if a]
    for g in e.get("guards") or []:
        fields.append(f"guard:{g.get('image') or '-'}:{g['size']}:{g['hash']}:{g['symbol']}")
    return fields


def with_guards(e: dict[str, Any], guards: Sequence[Guard]) -> dict[str, Any]:
    """``e`` with ``guards`` (none: unchanged)."""
    if guards:
        e["guards"] = [Guard(*g).as_json() for g in guards]
    return e
