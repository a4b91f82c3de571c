"""A fused entry's one-launch replacement, run where the interposer runs held launches unfused.

The interposer holds a time loop's launches and runs every T of them as one fused launch; what
it holds when something could observe memory (the loop's end, a copy, a sync) and the step it
keeps after each fused launch run one at a time (record/native/kf_defer.c). A loop of 20
launches under T=3 runs 18 of them fused and 2 so. A fused entry (deploy/native.py) may hold
``"fuse": {..., "one_launch": ENTRY}``: ENTRY is an ordinary (one-launch) entry of the same
kernel, geometry and source image, whose key matches some launch the fused entry's does, e.g.
the one-launch operator M3a also found for it. Its interposer line follows the fused entry's,
which ends with ``unfused:next``
(record/native/kf_unfused.c): a held launch run unfused then runs ENTRY's function wherever
ENTRY would replace that launch on its own (its key, geometry, source image and guards), else
the program's kernel. It stays an ordinary line: with fusion off (``KERNFORGE_FUSE=0``), or
for a launch the fused entry does not hold, it replaces the launches it matches. Where fusion
is refused (a guard of the fused entry no longer holds, its function fails to load or launch),
the program's own kernel runs from then on, ENTRY's launches included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# what an ordinary entry holds for the interposer's line (deploy/native.py interposer_lines)
ONE_LAUNCH_KEYS = ("kernel", "name", "grid", "block", "shared_mem", "key", "image",
                   "image_sha256", "jit", "new_grid", "new_block")
# what must be the same as the fused entry's for ENTRY to replace the launches it holds
SAME_LAUNCH = ("kernel", "source_image", "grid", "block", "shared_mem")


def _key_bytes(key: Any) -> list[str] | None:
    """A key's bytes as the interposer compares them (two hex digits, "xx": not compared);
    None for any launch ("" or "*")."""
    return None if not key or key == "*" else [key[i:i + 2] for i in range(0, len(key), 2)]


def key_covers(one: Any, fused: Any) -> bool:
    """Whether key ``one`` matches every launch key ``fused`` matches: the interposer then
    runs the one-launch entry for every held launch (bar its guards and image)."""
    o, f = _key_bytes(one), _key_bytes(fused)
    if o is None or f is None:
        return o is None
    return len(o) == len(f) and all(a == "xx" or a == b != "xx" for a, b in zip(o, f))


def keys_disjoint(one: Any, fused: Any) -> bool:
    """Whether no launch matches both keys: another length, or a byte both compare that
    differs (another problem size, another scalar)."""
    o, f = _key_bytes(one), _key_bytes(fused)
    if o is None or f is None:
        return False
    return len(o) != len(f) or any(a != b for a, b in zip(o, f) if "xx" not in (a, b))


def one_launch_problem(one: Any, fused: Mapping[str, Any]) -> str | None:
    """What is wrong with ``one`` as fused entry ``fused``'s ``one_launch``, or None."""
    if not isinstance(one, Mapping) or any(k not in one for k in ONE_LAUNCH_KEYS):
        return ("has a one_launch that is not an ordinary entry (" + ", ".join(ONE_LAUNCH_KEYS)
                + ")")
    if one.get("fuse") is not None:
        return "has a one_launch that is itself fused"
    if not isinstance(one["key"], str) or not isinstance(one["jit"], Mapping):
        return "has a one_launch whose key or JIT options are not a string and a mapping"
    differ = [k for k in SAME_LAUNCH if one.get(k) != fused.get(k)]
    if keys_disjoint(one["key"], fused.get("key")):
        differ.append("key")
    if differ:
        return f"has a one_launch for another launch (its {', '.join(differ)} differ)"
    return None


def parts(e: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The entry and, for a fused entry that holds one, its one-launch entry: each names an
    image of the spec."""
    fuse = e.get("fuse")
    one = fuse.get("one_launch") if isinstance(fuse, Mapping) else None
    return [e] if one is None else [e, one]


def with_one_launch(fused: Mapping[str, Any], one: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of fused entry ``fused`` whose held launches run unfused as ``one`` (an ordinary
    entry of the same launch: :func:`one_launch_problem`) runs them."""
    why = one_launch_problem(one, fused)
    if why is not None:
        raise ValueError(f"the fused entry of {fused.get('name')} {why}")
    return {**fused, "fuse": {**fused["fuse"], "one_launch": dict(one)}}


def paired(fused: Iterable[Mapping[str, Any]], ones: Iterable[Mapping[str, Any]]
           ) -> tuple[list[dict[str, Any]], int]:
    """The entries ``fused``, each fused one given the first of ``ones`` that replaces the
    same launch (none: unchanged), one whose key matches every launch the fused entry's
    does before one that matches some of them; and how many were given one."""
    candidates = [o for o in ones if o.get("fuse") is None]
    out, n = [], 0
    for e in fused:
        fits = [o for o in candidates if e.get("fuse") is not None
                and one_launch_problem(o, e) is None]
        match = next((o for o in fits if key_covers(o["key"], e.get("key"))),
                     fits[0] if fits else None)
        out.append(with_one_launch(e, match) if match is not None else dict(e))
        n += match is not None
    return out, n
