"""Adopt forge results into a dispatch table (``kernforge stencil adopt``).

A forge run writes its own table (``--out``), starting from another (``--table``). Runs over
different cells, started from the same table, each hold only their own changes; and a forge
win is measured in the forge's session, not yet by the bench (the bench has refuted
forge wins before). This copies into the target table the entries whose operator a forge table changed
(against ``base``, the table the runs started from; by default the target itself):

- with bench files, only where the latest bench row of the new operator agrees: faster than
  the latest row of the operator the target dispatches (by ``band``, default 0: the forge's
  gate already asked 2% of an interleaved A/B; rows of two bench runs differ by about 1-3%, so
  the bench refutes, it does not re-gate). A later failing row of an operator vetoes its
  earlier times. Cells that several forge tables change differently go to the fastest;
- without, every change (the forge's gate stands), except where forge tables disagree (or
  disagree with the target's own change since ``base``).

Never adopted: an entry that does not build; an entry its run's final pass did not confirm
(the ``forge-summary.json`` beside the table, written after that pass, does not list the cell
ending with that operator unregressed; provisional entries mean the pass never ran;
``allow_unfinished`` lifts this). Where the target itself changed a cell since ``base``
(another run adopted), a forge table's other operator for it competes with the target's: the
bench decides, else it stays undecided. With no ``base``, an entry dated before the target's
entry for its cell is refused (a stale table would revert a newer result). Each changed
operator gets a :class:`Decision`; ``undecided`` ones (no evidence either way) make the command
exit 1. The target is written atomically; ``dry_run`` writes nothing.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.jsonio import DamagedJSON, parse_json, write_json_atomic
from ..core.paths import inside_package
from ..stencil import matrix as mx
from ..stencil.spec import Cell
from . import latest

Times = dict[tuple[str, str], tuple[float, str]]  # time 0.0: its latest row failed


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
    data = mx.read_table(path)
    if not isinstance(data.get("cells"), dict):
        raise ConfigError(f"{path}: not a dispatch table (no 'cells' object)",
                          hint="a matrix.json written by kernforge stencil forge")
    return data


def bench_times(paths: list[Path], by_date: bool = False) -> tuple[Times, list[str]]:
    """(cell, operator key) -> the latest bench time of our operator and its file, 0.0 where
    that latest row failed (files oldest first, or ``by_date``, as ``kernforge stencil merge``
    takes them); and the order warnings."""
    docs, warnings = latest.ordered(paths, by_date)
    out: Times = {}
    for path, data in docs:
        for row in data["cells"]:
            try:
                mine = latest.ours(row)
                if mine is None or not mine.get("key"):
                    continue
                t = float(mine.get("time_s") or 0.0)
                ok = mine.get("status") == "ok" and bool((mine.get("check") or {}).get("ok"))
            except (TypeError, ValueError, AttributeError, KeyError) as exc:
                raise ConfigError(f"{path}: {row.get('cell')}: a malformed row ({exc})",
                                  hint="a file written by kernforge stencil bench --json") \
                    from None
            out[(str(row["cell"]), str(mine["key"]))] = (t if ok and t > 0 else 0.0, path.stem)
    return out, warnings


def _date(entry: dict[str, Any]) -> _dt.datetime | None:
    try:
        d = _dt.datetime.fromisoformat(str(entry.get("date")))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=_dt.UTC)


def final_pass(path: Path, raw: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Why no entry of this table can have passed its run's final pass ('' when some may), and
    the operator each cell ended with in that pass (``forge-summary.json`` beside the table,
    written after the pass; a multi-GPU run's lists every process's cells)."""
    if any(isinstance(e, dict) and "provisional" in e for e in raw["cells"].values()):
        return "its run did not reach the final pass (provisional entries)", {}
    try:
        done = parse_json((path.parent / "forge-summary.json").read_text("utf-8"))
        finals = {str(r["cell"]): str(r["final"]) for r in done["final"]
                  if not r.get("regressed")}
    except (OSError, DamagedJSON, UnicodeDecodeError, KeyError, TypeError):
        return "no readable forge-summary.json beside it: its run may not have finished", {}
    return "", finals


# key, entry, forge table, why refused ('' none), and whether that is an open question
Option = tuple[str, dict[str, Any], str, str, bool]


def _key(cell: Cell, table: dict[str, Any], path: Path) -> str:
    try:
        return mx.operator_for(cell, table).key
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: {cell.id}: a malformed entry ({exc!r})",
                          hint="a matrix.json written by kernforge stencil forge") from None


def _proposals(forged: list[Path], start: dict[str, Any], now: dict[str, Any],
               cells: set[str] | None, stale_rule: bool, allow_unfinished: bool
               ) -> dict[str, list[Option]]:
    """Per cell, each distinct operator the forge tables changed it to against ``start``."""
    out: dict[str, list[Option]] = {}
    for path in forged:
        raw = _raw(path)
        refused, finals = ("", {}) if allow_unfinished else final_pass(path, raw)
        table = mx.table_entries(raw)  # provisional entries: the entry from before that run
        for cid, entry in table.items():
            if cells is not None and cid not in cells:
                continue
            cell = Cell.parse(cid)
            new = _key(cell, table, path)
            if new == _key(cell, start, path):
                continue
            why, open_question = refused, bool(refused)  # no verdict: undecided
            if not why and not allow_unfinished and finals.get(cid) != new:
                why, open_question = "not confirmed by its run's final pass", True
            if not isinstance(entry, dict) or \
                    mx.build(entry.get("design", ""), cell, entry.get("params") or {}) is None:
                why = "its entry does not build (dispatch would fall back to defaults)"
                open_question = False
            elif stale_rule:
                mine, theirs = _date(entry), _date(now.get(cid) or {})
                if mine is not None and theirs is not None and mine < theirs:
                    why = "dated before the target's entry (a stale table; give --base)"
                    open_question = False
            options = out.setdefault(cid, [])
            same = next((n for n, o in enumerate(options) if o[0] == new), None)
            if same is None:
                options.append((new, entry, str(path), why, open_question))
            elif options[same][3] and not why:  # a refused copy does not hide a good one
                options[same] = (new, entry, str(path), why, open_question)
    return out


def decide(target: Path, forged: list[Path], bench: list[Path] | None = None,
           cells: set[str] | None = None, base: Path | None = None, *, band: float = 0.0,
           by_date: bool = False, allow_unfinished: bool = False,
           start_from: Path | None = None
           ) -> tuple[dict[str, Any], list[Decision], list[str]]:
    """The target table's JSON with the adopted entries, one decision per operator a forge
    table changed a cell to (against ``base``, default the target), and warnings.
    ``start_from``: the table whose entries a target that does not exist yet starts with."""
    if not band >= 0:  # also NaN
        raise ConfigError(f"band {band} must be >= 0", hint="e.g. 0.02 for 2%")
    data = _raw(start_from if start_from is not None and not target.is_file() else target)
    now = mx.table_entries(data)
    start = now if base is None else mx.table_entries(_raw(base))
    times, warnings = bench_times(bench, by_date) if bench else (None, [])
    decisions = []
    proposals = _proposals(forged, start, now, cells, base is None, allow_unfinished)
    for cid, options in sorted(proposals.items()):
        cell = Cell.parse(cid)
        old = _key(cell, now, target)
        moved = old != _key(cell, start, base or target)  # another run's result since base
        decisions += [Decision(cid, old, k, s, False, why, undecided=q)
                      for k, _e, s, why, q in options if why]
        good = [o for o in options if not o[3]]
        usable = [o for o in good if o[0] != old]
        if not usable:
            continue
        if times is None:
            if len(good) > 1 or moved:
                why = ("forge tables disagree" if len(good) > 1 else
                       "the target changed this cell since --base") + "; give bench files"
                decisions += [Decision(cid, old, k, s, False, why, undecided=True)
                              for k, _e, s, _w, _q in usable]
                continue
            new, entry, src, _why, _q = usable[0]
            data["cells"][cid] = entry
            decisions.append(Decision(cid, old, new, src, True, "forge gate (no bench given)"))
            continue
        before = times.get((cid, old))
        if before is None:
            decisions += [Decision(cid, old, k, s, False, "no bench row of the target's "
                                   "operator", undecided=True) for k, _e, s, _w, _q in usable]
            continue
        scored = []
        for new, entry, src, _why, _q in usable:
            after = times.get((cid, new))
            if after is None:
                decisions.append(Decision(cid, old, new, src, False, "no bench row of the new "
                                          "operator", undecided=True))
            elif not after[0]:
                decisions.append(Decision(cid, old, new, src, False,
                                          f"its latest bench row failed ({after[1]})"))
            else:  # the target's operator failing its latest row: any passing one is better
                ratio = before[0] / after[0] if before[0] else math.inf
                scored.append((ratio, new, entry, src, after[1]))
        best = max(scored, key=lambda s: s[0]) if scored else None
        for ratio, new, entry, src, file in scored:  # in the forge tables' order
            won = ratio > 1 + band and best is not None and new == best[1]
            if won:
                data["cells"][cid] = entry
            why = ("faster" if won else f"not faster by {band:.1%}" if ratio <= 1 + band
                   else "another forge table's was faster")
            if math.isinf(ratio):
                why += " (the target's operator failed its latest bench row)"
            decisions.append(Decision(cid, old, new, src, won, f"{why}: {file} vs {before[1]}",
                                      None if math.isinf(ratio) else ratio))
    return data, decisions, warnings


def adopt(target: Path, forged: list[Path], bench: list[Path] | None = None,
          cells: set[str] | None = None, *, base: Path | None = None, band: float = 0.0,
          by_date: bool = False, allow_unfinished: bool = False, dry_run: bool = False,
          start_from: Path | None = None) -> tuple[list[Decision], list[str]]:
    if inside_package(target):
        raise ConfigError(f"{target}: kernforge does not write into its own package (this is "
                          f"the packaged dispatch table)",
                          hint="leave --into out to adopt into your own table "
                               f"({mx.user_table()}), or name another file; the packaged table "
                               "changes only by a developer's commit (copy a reviewed table "
                               "over it in the source tree)")
    data, decisions, warnings = decide(target, forged, bench, cells, base, band=band,
                                       by_date=by_date, allow_unfinished=allow_unfinished,
                                       start_from=start_from)
    if not dry_run and any(d.adopted for d in decisions):
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(target, data)
    return decisions, warnings
