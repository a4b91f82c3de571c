"""A native unit's time in the program, from what the interposer timed with events.

The interposer (``kf_record.c``) times, around a launch it leaves alone, the kernel queued
behind a spinning one, and keeps each time with the launch's work key (``kf_work_key``: the
function, geometry, launch attributes and parameter bytes, a word pointing into a known
allocation counted as 0). Once a launch of a function is recorded, only launches doing a
recorded launch's work are timed: a kernel that a program launches on arrays of several sizes
(a CuPy ufunc's) is timed on the size the unit replays. The recorded launch's own time is the
fallback: it is the same launch, but the first of its function and right after the
recorder's copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

AppTimes = dict[tuple[int, str], list[tuple[float, str | None]]]


def app_times(summaries: Iterable[Mapping[str, Any]]) -> AppTimes:
    """(pid, kernel name) -> (milliseconds, work key) of each launch the interposer timed
    (``summary-<pid>.json``), of every function of that name: CuPy names a ufunc's kernel
    alike for every dtype, the key (which holds the function) tells them apart. A summary
    without keys gives None for each."""
    out: AppTimes = {}
    for s in summaries:
        for k in s.get("kernels", []):
            ms, keys = k.get("app_ms") or [], k.get("app_keys")
            if not isinstance(keys, list) or len(keys) != len(ms):
                keys = [None] * len(ms)
            out.setdefault((s["pid"], k["name"]), []).extend(zip(ms, keys))
    return out


def unit_timing(u: Mapping[str, Any], app: AppTimes) -> dict[str, Any]:
    """A unit's ``capture`` timing fields: the median of the launches timed that did the
    recorded launch's work (``work_key`` of its ``unit.json``), else the recorded launch's own
    time. A unit without a key takes every time of its function's name."""
    key = u.get("work_key")
    times = [ms for ms, k in app.get((int(u.get("pid", -1)), u["function"])) or []
             if key is None or k == key]
    if times:
        return {"app_time_ms": float(np.median(times)), "app_time_of": f"{len(times)} "
                "unrecorded launches of the same work (events)",
                "recorded_launch_ms": u.get("app_time_ms")}
    return {"app_time_ms": u.get("app_time_ms"), "app_time_of": "the recorded launch (events; "
            "no other launch of the same work was timed)"}
