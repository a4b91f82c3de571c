"""Resuming a stencil bench: an earlier run's results file, checked, and the fields that carry
over (``kernforge stencil bench --resume``, :func:`kernforge.forge.bench.bench`).

A bench of the whole matrix with every baseline outlasts one device call; the results file is
rewritten after every cell, so a later call can go on where the earlier one stopped. It may do
so only with the same settings on the same kind of device, and it reuses the earlier run's
seed: each cell's inputs derive from that seed and the cell's position in the list, so every
cell gets the inputs it would have had in one uninterrupted run.
"""

from __future__ import annotations

from typing import Any

from ..core import ConfigError

RESUME_KEYS = ("baselines", "warmup", "repeat", "passes", "per_pass", "points", "table")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def resumable_seed(earlier: dict[str, Any], now: dict[str, Any], schema: str,
                   identity: dict[str, Any]) -> Any:
    """The seed to go on with, or a :class:`ConfigError` that names what differs between the
    earlier run (``earlier``: its results) and this one (``now``: its config as a dict)."""
    if earlier.get("schema") != schema or not isinstance(earlier.get("cells"), list):
        raise ConfigError("the file to resume is not a stencil bench results file",
                          hint="resume the --json file an earlier bench wrote")
    before = earlier.get("config") or {}
    differ = [k for k in RESUME_KEYS if _plain(before.get(k)) != _plain(now.get(k))]
    if now.get("seed") is not None and before.get("seed") not in (None, now["seed"]):
        differ.append("seed")
    name = (earlier.get("device") or {}).get("device")
    if name and name != identity.get("device"):
        differ.append(f"device ({name} before)")
    if differ:
        raise ConfigError(f"cannot resume: {', '.join(differ)} differ from the earlier run",
                          hint="run with the earlier settings, or write a new --json file")
    return before.get("seed", now.get("seed"))


def resumed_fields(earlier: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """The run's first date, the dates it was resumed at, and the seconds of all its calls."""
    return {"date": earlier.get("date", out["date"]),
            "resumed": [*earlier.get("resumed", []), out["date"]],
            "seconds": float(earlier.get("seconds") or 0) + float(out["seconds"])}
