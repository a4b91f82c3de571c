"""The checks of a fused (temporal) deployment entry as the spec holds it: what the
interposer's ``fuse:`` field (kf_spec.c) can run. Read through :mod:`.native`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core import ConfigError
from .native_guards import attrs_problem
from .native_unfused import one_launch_problem

FUSE_STEPS = range(3, 64, 2)  # the fused step counts the interposer runs
MAX_COMPANIONS = 8  # companions of a fused entry (kf_deploy.h MAX_COMP)
PARAMS_LIMIT = 32768  # parameter bytes of one launch the interposer reads (KEY_LIMIT)
GEOMETRY = ("grid", "block", "shared_mem")  # a companion's optional recorded geometry


class FusedEntryError(ConfigError):
    """A fused (temporal) deployment entry the interposer could not run as written."""


def check_fuse(e: Mapping[str, Any], where: str) -> None:
    """Raise :class:`FusedEntryError` unless ``e`` is a one-launch entry or a fused entry the
    interposer runs: odd steps from 3 to 63, IN and OUT two distinct 8-byte-aligned pointers
    within the key, neither compared by it, at most 8 companions (:func:`companion_problem`)."""
    fuse = e.get("fuse")
    if fuse is None:
        return
    name = e.get("name") or e.get("kernel")
    hint = "export the fused operator again from the tuning run"

    def refuse(why: str) -> FusedEntryError:
        return FusedEntryError(f"{where}: the fused entry of {name} {why}", hint=hint)

    fields = ("steps", "in_offset", "out_offset")
    if not isinstance(fuse, Mapping) or set(fuse) - {"companions", "one_launch"} != set(
            fields) or any(type(fuse[k]) is not int for k in fields):
        raise refuse("does not hold exactly the integers steps, in_offset and out_offset "
                     "(and companions, one_launch)")
    steps, i, o = (fuse[k] for k in fields)
    if steps not in FUSE_STEPS:
        raise refuse(f"fuses {steps} steps; the interposer fuses an odd number from 3 to 63")
    key = e.get("key")
    if not isinstance(key, str) or not key or key == "*" or len(key) % 2:
        raise refuse("has no parameter key, so its pointers' offsets cannot be checked")
    n = len(key) // 2
    for what, off in (("in_offset", i), ("out_offset", o)):
        if off < 0 or off % 8 or off + 8 > n:
            raise refuse(f"has {what} {off}, not an 8-byte-aligned pointer within the "
                         f"{n} parameter bytes")
        if key[2 * off:2 * off + 16] != "x" * 16:
            raise refuse(f"compares the pointer at {what} {off}; the time loop swaps it")
    if i == o:
        raise refuse("has the same offset for IN and OUT")
    why = attrs_problem(e.get("launch_attrs", []))
    if why:
        raise refuse(why)
    comps = fuse.get("companions", [])
    if not isinstance(comps, list) or len(comps) > MAX_COMPANIONS:
        raise refuse(f"has companions that are not a list of at most {MAX_COMPANIONS}")
    for k, c in enumerate(comps):
        why = companion_problem(c)
        if why:
            raise refuse(f"has a companion (#{k}) that {why}")
    if "one_launch" in fuse and (why := one_launch_problem(fuse["one_launch"], e)):
        raise refuse(why)


def companion_problem(c: Any) -> str | None:
    """What is wrong with a companion as the spec holds it (JSON), or None."""
    keys = ("name", "params", "in_slots", "out_slots")
    if not isinstance(c, Mapping) or set(c) - {"same_slots", "image", "launch_attrs",
                                               *GEOMETRY} != set(keys):
        return ("does not hold exactly name, params, in_slots and out_slots (and same_slots, "
                "image, grid, block, shared_mem, launch_attrs)")
    if "launch_attrs" in c and (why := attrs_problem(c["launch_attrs"])):
        return why
    if "image" in c and not is_image_id(c["image"]):
        return "has an image that is not 16 hex digits (not all 0): an image id"
    if any(k in c for k in GEOMETRY) and not _is_geometry(c):
        return ("has a geometry that is not grid and block (3 integers each, 1 to 2^31-1) and "
                "shared_mem (0 to 2^32-1), all three")
    name, params = c["name"], c["params"]
    if not isinstance(name, str) or not name or any(ch in name for ch in "\t\n\r\0"):
        return "has no name, or one holding a tab, a line break or a NUL byte"
    if not isinstance(params, str) or len(params) % 2 or len(params) // 2 > PARAMS_LIMIT or \
            any(ch not in "0123456789abcdefABCDEF" for ch in params):
        return f"has params that are not the hex of at most {PARAMS_LIMIT} bytes"
    slots = [c["in_slots"], c["out_slots"], c.get("same_slots", [])]
    if any(not isinstance(x, list) or any(type(o) is not int for o in x) for x in slots):
        return "has slots that are not lists of integers"
    every = slots[0] + slots[1] + slots[2]
    n = len(params) // 2
    if any(o < 0 or o % 8 or o + 8 > n for o in every):
        return f"has a slot that is not an 8-byte-aligned word within its {n} parameter bytes"
    if len(set(every)) != len(every):
        return "names a slot twice"
    return None



def _is_geometry(c: Mapping[str, Any]) -> bool:
    def dims(v: Any) -> bool:
        return isinstance(v, list) and len(v) == 3 and all(
            type(x) is int and 1 <= x < 2**31 for x in v)
    m = c.get("shared_mem")
    return dims(c.get("grid")) and dims(c.get("block")) and type(m) is int and 0 <= m < 2**32


def is_image_id(v: Any) -> bool:
    """Whether ``v`` is an :func:`.native.image_id` as the interposer reads one (kf_spec.c)."""
    return isinstance(v, str) and len(v) == 16 and v.strip("0") != "" and all(
        ch in "0123456789abcdefABCDEF" for ch in v)
