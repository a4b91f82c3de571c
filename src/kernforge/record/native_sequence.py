"""Sequence units: a time loop's consecutive launches recorded as one native unit.

``kernforge record --sequence N`` (``KERNFORGE_SEQUENCE``) makes the interposer record, from
the launch the instance selection picks, that launch and every launch after it on the same
stream until the kernel has launched N times, or until something could observe memory
(record/native/kf_sequence.c). Its spool unit is version 2: the first launch's fields as in
version 1, the regions' contents before the first launch and after the last, and
``sequence`` (requested, steps, why it ended) and ``launches`` (each launch's function,
image, geometry and parameter layout; ``p<j>.bin`` its parameter bytes).

As a recording unit it is native schema 3: a schema-2 unit plus ``sequence`` with every
launch (its entry, image blob, geometry, parameter bytes with the pointer words indexing the
unit's regions); the top-level kernel, launch and parameters are the first launch's. Schema-2
units (one launch) are written and read as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.native import FuncAttrs, NativeLaunch, NativeParam
from .spool_read import damaged, read_regular

SEQUENCE_SCHEMA = 3
PointerWords = Callable[[bytes, list[dict[str, Any]], list[dict[str, Any]]], list[list[list[int]]]]


def _layout(raw: bytes, params: list[dict[str, Any]], regions: list[dict[str, Any]],
            pointer_words: PointerWords) -> list[dict[str, Any]]:
    whole = params or [{"offset": 0, "size": len(raw)}]
    return [{"offset": p["offset"], "size": p["size"], "pointers": w}
            for p, w in zip(whole, pointer_words(raw, params, regions))]


def sequence_json(u: dict[str, Any], spool_unit: Path, save: Callable[[np.ndarray], str],
                  pointer_words: PointerWords) -> dict[str, Any]:
    """The manifest's ``sequence`` of a version-2 spool unit ``u`` (checked by
    :func:`~.spool_read.read_unit_json`); ``save`` stores a blob and returns its id."""
    images: dict[str, str] = {}
    launches = []
    for j, one in enumerate(u["launches"]):
        if one.get("image") is None:
            raise damaged(spool_unit, f"launch {j} ({one['function']}): its kernel's module "
                                      "image was not seen")
        if one["image"] not in images:
            path = spool_unit.parent / "images" / f"{one['image']}.bin"
            images[one["image"]] = save(np.frombuffer(read_regular(path), dtype=np.uint8))
        raw = read_regular(spool_unit / f"p{j}.bin", one["param_bytes"])
        launches.append({
            "entry": one["function"], "image": images[one["image"]],
            "image_kind": one.get("image_kind", ""), "grid": one["grid"], "block": one["block"],
            "shared_mem": one["shared_mem"], "api": one["api"],
            "attrs": one.get("launch_attrs", []),
            **({"func_attrs": one["func_attrs"]} if "func_attrs" in one else {}),
            "params": {"bytes": raw.hex(),
                       "layout": _layout(raw, one["params"], u["regions"], pointer_words)},
            "app_time_ms": one.get("app_time_ms"), "call": one.get("call")})
    seq = u["sequence"]
    return {"requested": seq["requested"], "steps": seq["steps"], "ended": seq["ended"],
            "launches": launches}


def sequence_timing(u: dict[str, Any]) -> dict[str, Any]:
    """A sequence's time in the application: the sum of its launches' event times."""
    return {"app_time_ms": u.get("app_time_ms"),
            "app_time_of": f"the recorded sequence of {len(u['launches'])} launches (events "
                           "around each, summed)"}


def load_steps(m: dict[str, Any]) -> tuple[tuple[NativeLaunch, ...], dict[str, Any]]:
    """A schema-3 manifest's launches and what the sequence says of itself (requested, steps,
    ended); ((), {}) for a one-launch unit. Malformed values raise KeyError, TypeError or
    ValueError (the caller names the manifest)."""
    seq = m.get("sequence")
    if seq is None:
        return (), {}
    steps = []
    for one in seq["launches"]:
        steps.append(NativeLaunch(
            entry=str(one["entry"]), image=str(one["image"]),
            grid=tuple(int(g) for g in one["grid"]),  # type: ignore[arg-type]
            block=tuple(int(b) for b in one["block"]),  # type: ignore[arg-type]
            shared_mem=int(one["shared_mem"]),
            params=tuple(NativeParam(int(p["offset"]), int(p["size"]),
                                     tuple((int(o), int(r)) for o, r in p.get("pointers", [])))
                         for p in one["params"]["layout"]),
            param_bytes=bytes.fromhex(one["params"]["bytes"]),
            launch_attrs=tuple(bytes.fromhex(a) for a in one.get("attrs", [])),
            app_time_ms=one.get("app_time_ms"),
            func_attrs=FuncAttrs.from_json(one.get("func_attrs"))))
        if len(steps[-1].grid) != 3 or len(steps[-1].block) != 3:
            raise ValueError(f"launch {len(steps) - 1}: grid and block must have 3 dimensions")
    if not steps:
        raise ValueError("a sequence without launches")
    info = {"requested": int(seq["requested"]), "steps": int(seq["steps"]),
            "ended": str(seq["ended"])}
    return tuple(steps), info
