"""Adopt forge results into a dispatch table (``kernforge stencil adopt``).

A forge run writes its own table (``--out``), starting from another (``--table``). Runs over
different cells, started from the same table, each hold only their own changes; and a forge
win is measured in the forge's session, not yet by the bench (session 11 had two the bench
refuted). This copies into the target table the entries whose operator a forge table changed
(against ``base``, the table the runs started from; by default the target itself):
with bench files, only where the latest bench row of the new operator is faster than the
latest row of the operator the target table dispatches (both passing the oracle); without,
every change (the forge's gate stands). Cells that two forge tables change differently are
decided by the bench, else left alone. The target is written atomically; ``dry_run`` writes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.jsonio import DamagedJSON, parse_json, write_json_atomic
from ..stencil import matrix as mx
from ..stencil.spec import Cell
from . import latest


@dataclass(frozen=True)
class Decision:
    cell: str
    old: str  # operator key the target dispatched
    new: str  # operator key a forge table dispatches
    source: str  # the forge table's file name
    adopted: bool
    reason: str
    ratio: float | None = None  # old bench time / new bench time


def _raw(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: no such dispatch table",
                          hint="give a matrix.json (a forge run's --out, or the committed one)")
    try:
        data = parse_json(path.read_text("utf-8", errors="replace"))
    except DamagedJSON as exc:
        raise ConfigError(f"{path}: {exc}", hint="restore it from git or the forge's output")
    if not isinstance(data, dict) or data.get("version") != mx.TABLE_VERSION:
        raise ConfigError(f"{path}: not a dispatch table of version {mx.TABLE_VERSION}",
                          hint="a matrix.json written by kernforge stencil forge")
    return data


def bench_times(paths: list[Path]) -> dict[tuple[str, str], tuple[float, str]]:
    """(cell, operator key) -> the latest passing bench time of our operator and its file
    (files oldest first, as ``kernforge stencil merge`` takes them)."""
    docs, _warnings = latest.ordered(paths)
    out: dict[tuple[str, str], tuple[float, str]] = {}
    for path, data in docs:
        for row in data["cells"]:
            ours = next((r for r in row["runners"] if r.get("name") == "ours"), None)
            if ours is None or ours.get("status") != "ok" or not ours.get("time_s") \
                    or not (ours.get("check") or {}).get("ok", False):
                continue
            out[(row["cell"], str(ours.get("key")))] = (float(ours["time_s"]), path.stem)
    return out


def decide(target: Path, forged: list[Path], bench: list[Path] | None = None,
           cells: set[str] | None = None, base: Path | None = None
           ) -> tuple[dict[str, Any], list[Decision]]:
    """The target table's JSON with the adopted entries, and one decision per cell a forge
    table changed against ``base`` (default: the target) to another operator than the
    target's."""
    data = _raw(target)
    now = mx.load_table(target)
    if base is not None:
        _raw(base)
    start = now if base is None else mx.load_table(base)
    times = bench_times(bench) if bench else None
    proposals: dict[str, list[tuple[str, dict[str, Any], str]]] = {}
    for path in forged:
        _raw(path)  # a typed error for a bad file
        table = mx.load_table(path)  # provisional entries: the entry from before that run
        for cid, entry in table.items():
            if cells is not None and cid not in cells:
                continue
            cell = Cell.parse(cid)
            new = mx.operator_for(cell, table).key
            if new != mx.operator_for(cell, start).key and new != mx.operator_for(cell, now).key \
                    and all(new != k for k, _e, _s in proposals.get(cid, [])):
                proposals.setdefault(cid, []).append((new, entry, str(path)))
    decisions = []
    for cid, options in sorted(proposals.items()):
        old = mx.operator_for(Cell.parse(cid), now).key
        if times is None:
            if len(options) > 1:
                decisions += [Decision(cid, old, k, s, False, "forge tables disagree; give "
                                       "--bench to decide") for k, _e, s in options]
                continue
            new, entry, src = options[0]
            data["cells"][cid] = entry
            decisions.append(Decision(cid, old, new, src, True, "forge gate (no bench given)"))
            continue
        before = times.get((cid, old))
        if before is None:
            decisions += [Decision(cid, old, new, src, False, "no passing bench row of the "
                                   "target's operator") for new, _e, src in options]
            continue
        scored = []
        for new, entry, src in options:
            after = times.get((cid, new))
            if after is None:
                decisions.append(Decision(cid, old, new, src, False,
                                          "no passing bench row of the new operator"))
                continue
            scored.append((before[0] / after[0], new, entry, src, after[1]))
        if not scored:
            continue
        best = max(scored, key=lambda s: s[0])  # decisions stay in the forge tables' order
        for ratio, new, entry, src, file in scored:
            won = ratio > 1.0 and new == best[1]
            if won:
                data["cells"][cid] = entry
            why = ("faster" if won else "not faster" if ratio <= 1.0
                   else "another forge table's was faster") + f": {file} vs {before[1]}"
            decisions.append(Decision(cid, old, new, src, won, why, ratio))
    return data, decisions


def adopt(target: Path, forged: list[Path], bench: list[Path] | None = None,
          cells: set[str] | None = None, *, base: Path | None = None,
          dry_run: bool = False) -> list[Decision]:
    data, decisions = decide(target, forged, bench, cells, base)
    if not dry_run and any(d.adopted for d in decisions):
        write_json_atomic(target, data)
    return decisions
