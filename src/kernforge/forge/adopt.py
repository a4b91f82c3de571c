"""Adopt forge results into a dispatch table (``kernforge stencil adopt``).

A forge run writes its own table (``--out``), starting from another (``--table``). Runs over
different cells, started from the same table, each hold only their own changes; and a forge
win is measured in the forge's session, not yet by the bench (session 11 had two the bench
refuted). This copies into the target table the entries whose operator a forge table changed
(against ``base``, the table the runs started from; by default the target itself):

- with bench files, only where the latest bench row of the new operator agrees: faster than
  the latest row of the operator the target dispatches (by ``band``, default 0: the forge's
  gate already asked 2% of an interleaved A/B; rows of two bench runs differ by about 1-3%, so
  the bench refutes, it does not re-gate). A later failing row of an operator vetoes its
  earlier times. Cells that several forge tables change differently go to the fastest;
- without, every change (the forge's gate stands), except where forge tables disagree.

Never adopted: an entry that does not build, one older than the target's entry for the cell
(a stale table would revert a newer result), and the entries of a run that did not reach its
final pass (provisional entries left in its table: its zero-regression pass never ran). Each changed
operator gets a :class:`Decision`; ``undecided`` ones (no evidence either way) make the command
exit 1. The target is written atomically; ``dry_run`` writes nothing.
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

Times = dict[tuple[str, str], tuple[float, str] | None]  # None: its latest row failed


@dataclass(frozen=True)
class Decision:
    cell: str
    old: str  # operator key the target dispatched
    new: str  # operator key a forge table holds
    source: str  # the forge table
    adopted: bool
    reason: str
    ratio: float | None = None  # old bench time / new bench time
    undecided: bool = False  # no evidence either way (not a verdict against it)


def _raw(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: no such dispatch table",
                          hint="give a matrix.json (a forge run's --out, or the committed one)")
    try:
        data = parse_json(path.read_text("utf-8"))
    except (DamagedJSON, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}", hint="restore it from git or the forge's output")
    if not isinstance(data, dict) or data.get("version") != mx.TABLE_VERSION \
            or not isinstance(data.get("cells"), dict):
        raise ConfigError(f"{path}: not a dispatch table of version {mx.TABLE_VERSION}",
                          hint="a matrix.json written by kernforge stencil forge")
    return data


def bench_times(paths: list[Path], by_date: bool = False) -> tuple[Times, list[str]]:
    """(cell, operator key) -> the latest bench time of our operator and its file, None where
    that latest row failed (files oldest first, or ``by_date``, as ``kernforge stencil merge``
    takes them); and the order warnings."""
    docs, warnings = latest.ordered(paths, by_date)
    out: Times = {}
    for path, data in docs:
        for row in data["cells"]:
            try:
                ours = next((r for r in row["runners"] if r.get("name") == "ours"), None)
                if ours is None or not ours.get("key"):
                    continue
                t = float(ours.get("time_s") or 0.0)
                ok = ours.get("status") == "ok" and bool((ours.get("check") or {}).get("ok"))
            except (TypeError, ValueError, AttributeError) as exc:
                raise ConfigError(f"{path}: {row.get('cell')}: a malformed row ({exc})",
                                  hint="a file written by kernforge stencil bench --json") \
                    from None
            out[(row["cell"], str(ours["key"]))] = (t, path.stem) if ok and t > 0 else None
    return out, warnings


def _proposals(forged: list[Path], start: dict[str, Any], now: dict[str, Any],
               cells: set[str] | None) -> dict[str, list[tuple[str, dict[str, Any], str, str]]]:
    """Per cell, each distinct operator the forge tables changed it to: (key, entry, table,
    why it cannot be adopted or '')."""
    out: dict[str, list[tuple[str, dict[str, Any], str, str]]] = {}
    for path in forged:
        unfinished = any(isinstance(e, dict) and "provisional" in e
                         for e in _raw(path)["cells"].values())
        table = mx.load_table(path)  # provisional entries: the entry from before that run
        for cid, entry in table.items():
            if cells is not None and cid not in cells:
                continue
            cell = Cell.parse(cid)
            new = mx.operator_for(cell, table).key
            if new == mx.operator_for(cell, start).key or \
                    any(new == k for k, *_ in out.get(cid, [])):
                continue
            why = ""
            if mx.build(entry.get("design", ""), cell, entry.get("params", {})) is None:
                why = "its entry does not build (dispatch would fall back to defaults)"
            elif str(entry.get("date", "")) < str((now.get(cid) or {}).get("date", "")):
                why = "older than the target's entry (a stale table)"
            elif unfinished:
                why = "its run did not reach the final pass (provisional entries)"
            out.setdefault(cid, []).append((new, entry, str(path), why))
    return out


def decide(target: Path, forged: list[Path], bench: list[Path] | None = None,
           cells: set[str] | None = None, base: Path | None = None, *, band: float = 0.0,
           by_date: bool = False) -> tuple[dict[str, Any], list[Decision], list[str]]:
    """The target table's JSON with the adopted entries, one decision per operator a forge
    table changed a cell to (against ``base``, default the target), and warnings."""
    data = _raw(target)
    now = mx.load_table(target)
    if base is not None:
        _raw(base)  # a typed error for a bad file
    start = now if base is None else mx.load_table(base)
    times, warnings = bench_times(bench, by_date) if bench else (None, [])
    decisions = []
    for cid, options in sorted(_proposals(forged, start, now, cells).items()):
        old = mx.operator_for(Cell.parse(cid), now).key
        usable = [o for o in options if not o[3] and o[0] != old]  # (one may be the target's)
        decisions += [Decision(cid, old, k, s, False, why) for k, _e, s, why in options if why]
        if not usable:
            continue
        if times is None:
            if len({o[0] for o in options if not o[3]}) > 1:
                decisions += [Decision(cid, old, k, s, False, "forge tables disagree; give "
                                       "bench files to decide", undecided=True)
                              for k, _e, s, _w in usable]
                continue
            new, entry, src, _why = usable[0]
            data["cells"][cid] = entry
            decisions.append(Decision(cid, old, new, src, True, "forge gate (no bench given)"))
            continue
        before = times.get((cid, old))
        if before is None:
            decisions += [Decision(cid, old, k, s, False, "no passing latest bench row of "
                                   "the target's operator", undecided=True)
                          for k, _e, s, _w in usable]
            continue
        scored = []
        for new, entry, src, _why in usable:
            after = times.get((cid, new))
            if after is None:
                decisions.append(Decision(cid, old, new, src, False, "no passing latest bench "
                                          "row of the new operator", undecided=True))
            else:
                scored.append((before[0] / after[0], new, entry, src, after[1]))
        best = max(scored, key=lambda s: s[0]) if scored else None
        for ratio, new, entry, src, file in scored:  # in the forge tables' order
            won = ratio > 1 + band and best is not None and new == best[1]
            if won:
                data["cells"][cid] = entry
            why = ("faster" if won else f"not faster by {band:.1%}" if ratio <= 1 + band
                   else "another forge table's was faster")
            decisions.append(Decision(cid, old, new, src, won, f"{why}: {file} vs {before[1]}",
                                      ratio))
    return data, decisions, warnings


def adopt(target: Path, forged: list[Path], bench: list[Path] | None = None,
          cells: set[str] | None = None, *, base: Path | None = None, band: float = 0.0,
          by_date: bool = False, dry_run: bool = False) -> tuple[list[Decision], list[str]]:
    data, decisions, warnings = decide(target, forged, bench, cells, base, band=band,
                                       by_date=by_date)
    if not dry_run and any(d.adopted for d in decisions):
        write_json_atomic(target, data)
    return decisions, warnings
