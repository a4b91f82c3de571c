"""One native deployment entry for recorded launches that differ only in scalar parameters.

A native entry replaces a launch only when its parameter bytes equal the recorded ones outside
pointers (:func:`kernforge.deploy.native.problem_key`). A kernel that a program launches with a
parameter that changes from launch to launch (a time step, a coefficient) is recorded as one
unit per launch (``--max-instances``), each tuned on its own; exported as they are, each entry
would replace only the launch it was recorded from, and every later launch would fall back.

When two or more exported entries replace the same kernel, recorded with the same geometry and
parameter layout, by the same tuned configuration (the same image, entry, JIT options,
geometry and carveout), that configuration was verified and found significantly faster on
each of those launches. They become one entry whose key leaves out the parameters in which
the recorded launches differ (a scalar of up to 8 bytes whole, a larger parameter, a struct
passed by value, by the 8-byte words that differ), and keeps every other byte. The evidence of
each recorded launch stays in the entry (``evidence["launches"]``). Entries whose winners
differ stay apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# what the launch replaced and what runs instead must be the same for entries to be merged
_SAME = ("kernel", "source_image", "grid", "block", "shared_mem", "device", "image_sha256", "jit",
         "new_grid", "new_block", "carveout", "entry", "new_shared_mem")


def differing_bytes(keys: Sequence[str]) -> list[int]:
    """Offsets of the compared bytes (two hex digits each in a key, ``xx`` not compared) that
    the keys do not all share."""
    return [i // 2 for i in range(0, len(keys[0]), 2)
            if len({k[i:i + 2] for k in keys}) > 1]


def widen(offsets: Sequence[int], params: Sequence[tuple[int, int]]) -> list[int]:
    """``offsets`` widened to what is left out: the whole parameter (offset, size) for one of
    up to 8 bytes, the 8-byte word of a larger one (a struct's field); itself outside them."""
    out: set[int] = set()
    for o in offsets:
        off, size = next(((a, n) for a, n in params if a <= o < a + n), (o, 1))
        if size > 8:  # the word of the struct that holds the byte
            word = off + (o - off) // 8 * 8
            off, size = word, min(8, off + size - word)
        out.update(range(off, off + size))
    return sorted(out)


def merged_key(keys: Sequence[str], params: Sequence[tuple[int, int]] = ()) -> str:
    """The first key with every byte of :func:`widen` (:func:`differing_bytes`) as ``xx``."""
    key = list(keys[0])
    for o in widen(differing_bytes(keys), params):
        key[2 * o:2 * o + 2] = "xx"
    return "".join(key)


def _ranges(offsets: Sequence[int]) -> str:
    spans: list[list[int]] = []
    for o in offsets:
        if spans and o == spans[-1][1] + 1:
            spans[-1][1] = o
        else:
            spans.append([o, o])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def generalize(entries: Sequence[dict[str, Any]],
               params: Sequence[Sequence[tuple[int, int]]]) -> tuple[list[dict[str, Any]],
                                                                   list[str]]:
    """The entries with those of the same launch shape and tuned configuration merged (first
    occurrence order kept), and one line per merge saying which bytes are no longer compared;
    ``params[i]``: the (offset, size) of each parameter of the launch ``entries[i]`` replaces."""
    groups: dict[str, list[tuple[dict[str, Any], tuple[tuple[int, int], ...]]]] = {}
    for e, p in zip(entries, params, strict=True):
        spans = tuple((int(a), int(n)) for a, n in p)
        sig = json.dumps([e.get(k) for k in _SAME] + [len(e["key"] or ""), spans],
                         sort_keys=True)
        groups.setdefault(sig, []).append((e, spans))
    out, notes = [], []
    for group in groups.values():
        keys = [e["key"] or "" for e, _ in group]
        if len(set(keys)) == 1:  # the same launch recorded more than once: one entry
            out.append(group[0][0])
            continue
        merged = dict(group[0][0])
        merged["key"] = merged_key(keys, group[0][1])
        merged["evidence"] = {**merged["evidence"], "launches": [e["evidence"] for e, _ in group]}
        out.append(merged)
        left = widen(differing_bytes(keys), group[0][1])
        notes.append(f"{merged['name']}: one entry for {len(group)} recorded launches with the "
                     f"same winner ({merged['evidence'].get('variant') or 'tuned'}); their "
                     f"parameter bytes {_ranges(left)} differ and are not compared")
    return out, notes
