"""Merge stencil bench results into the latest measurement per cell and summarize the matrix.

    kernforge stencil merge OLD.json ... NEW.json --out latest.json [--png chart.png]

Each input is a ``kernforge stencil bench --json`` file (a later file's row of a cell replaces
an earlier one's). Writes a compact JSON (per cell: the file it came from, our operator, time,
percent of the copy bandwidth measured in that run, roofline bound, oracle verdict, best
baseline and the interleaved speedup over it) with the matrix summary of
:func:`kernforge.forge.bench.summary` over the merged rows, prints that summary, and optionally
draws the merged matrix (:func:`kernforge.forge.report.chart`).

Each single-sweep row also gets its roofline ceiling: the speedup over the same best baseline
(its measured time) if our operator ran at the roofline bound of that run, i.e. in
``max(compulsory bytes / copy bandwidth, FLOPs / measured FMA peak)``; the summary carries the
ceilings' geometric mean by precision (what no operator can exceed against these baselines).
fp16 rows count only where their run measured the half2 FMA rate (``peak_ctype`` "half2"; older
bench files used the fp32 rate, which the half2 kernels exceed).

Baseline drift (an integrity check): a change to a baseline's build can make it slower, and our
speedup over it then grows without our operator changing (a change to the Halide build once
did this to one cell). For every cell, each baseline's time in the row kept is compared with the fastest
time that baseline passed the oracle in over *all* the files; slower by more than
``--drift`` (10% by default), or now failing, skipped or absent where it once passed, is listed
under ``baseline_drift`` and printed. Where the fastest baseline time ever measured for the cell is
below the kept row's best baseline, the cell's speedup may be overstated: the row's
``speedup_floor`` scales its speedup by that ratio, and the summary gives the geometric means
of those floors by precision beside the measured ones.

With ``--table`` (a dispatch table, matrix.json), the merge describes that table: a cell keeps
its latest row whose operator is the table's, so a row measured for an operator the table no
longer holds (a forge acceptance the bench refuted, then reverted) does not stand for the cell.
A cell with no row of the table's operator keeps its latest row and is listed under
``table_mismatch`` (bench it again).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.jsonio import write_json_atomic
from ..stencil.spec import Cell
from .bench import FUSED, summary

Fastest = dict[tuple[str, str], tuple[float, str]]  # (cell, baseline) -> (seconds, file)


def _kind_of(runner: dict[str, Any]) -> str:
    """The runner's kind as the bench wrote it (or would have: ours, fused, baseline)."""
    return str(runner.get("kind") or {"ours": "ours", FUSED: "ours-fused"}.get(
        str(runner.get("name")), "baseline"))


def load(path: Path) -> dict[str, Any]:
    """A bench JSON file, checked for what merging needs (a typed error otherwise)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})",
                          hint="give the bench JSON files written by --json") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})",
                          hint="a bench JSON file written by --json") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ConfigError(f"{path}: not a stencil bench JSON (no 'cells' list)",
                          hint="a file written by kernforge stencil bench --json")
    for row in data["cells"]:
        if not isinstance(row, dict) or "cell" not in row:
            raise ConfigError(f"{path}: a row without a 'cell' id",
                              hint="a file written by kernforge stencil bench --json")
        if "runners" not in row:
            raise ConfigError(f"{path}: {row.get('cell')} has no runners (a compact file?)",
                              hint="merge the bench files, not an earlier merge's output")
    return data


def ordered(paths: list[Path], by_date: bool = False) -> tuple[list[tuple[Path, dict[str, Any]]],
                                                               list[str]]:
    """The files loaded, oldest first: as given, or ``by_date`` by the date each run recorded;
    and a warning per file given after a file of a later run (its rows would replace newer
    ones: a shell glob sorts ``...-11-29.json`` after ``...-11-29-b.json``)."""
    docs = [(p, load(p)) for p in paths]
    if by_date:
        undated = [p.name for p, d in docs if not d.get("date")]
        if undated:
            raise ConfigError(f"no recorded date in {', '.join(undated)}",
                              hint="give the files oldest first, without --by-date")
        docs.sort(key=lambda pd: str(pd[1]["date"]))
    warnings, latest = [], ("", "")
    for p, d in docs:
        date = str(d.get("date") or "")
        if date and date < latest[0]:
            warnings.append(f"{p.name} (run {date}) comes after {latest[1]} (run {latest[0]}):"
                            " its rows replace those of a later run (use --by-date)")
        if date > latest[0]:
            latest = (date, p.name)
    return docs, warnings


def ours(row: dict[str, Any]) -> dict[str, Any] | None:
    """A bench row's runner of our operator."""
    return next((r for r in row["runners"] if r["name"] == "ours"), None)


def _ours_key(row: dict[str, Any]) -> str | None:
    return (ours(row) or {}).get("key")


def table_keys(path: Path, cells: set[str]) -> dict[str, str]:
    """The operator key dispatch picks for each cell from a dispatch table (matrix.json; the
    design's defaults where the table has no buildable entry); a typed error otherwise."""
    from ..stencil import matrix as mx

    if not path.is_file():
        raise ConfigError(f"{path}: no such dispatch table",
                          hint="give a matrix.json, e.g. src/kernforge/stencil/data/matrix.json")
    table = mx.load_table(path)
    return {cid: mx.operator_for(Cell.parse(cid), table).key for cid in cells}


def merge(docs: list[tuple[Path, dict[str, Any]]], keys: dict[str, str] | None = None
          ) -> tuple[list[dict[str, Any]], dict[str, str], Fastest]:
    """The latest row per cell (with ``keys``, the latest of the table's operator where there
    is one), each row's file name, and each baseline's fastest passing time in any file."""
    rows: dict[str, dict[str, Any]] = {}
    source: dict[str, str] = {}
    fastest: Fastest = {}
    for path, data in docs:
        for row in data["cells"]:
            cid = row["cell"]
            if keys is None or cid not in rows or _ours_key(row) == keys[cid] \
                    or _ours_key(rows[cid]) != keys[cid]:
                rows[cid] = row
                source[cid] = path.name
            for r in row["runners"]:
                t = r.get("time_s")
                if _kind_of(r) == "baseline" and r.get("status") == "ok" and t:
                    key = (row["cell"], r["name"])
                    if key not in fastest or t < fastest[key][0]:
                        fastest[key] = (float(t), path.name)
    return list(rows.values()), source, fastest


def drift(rows: list[dict[str, Any]], fastest: Fastest, tol: float) -> list[dict[str, Any]]:
    """Baselines of the kept rows slower than their fastest passing time in any file (by more
    than ``tol``), or not passing there any more."""
    found = []
    for row in rows:
        present = {r["name"] for r in row["runners"]}
        for (cell, name), (t_best, src) in sorted(fastest.items()):
            if cell == row["cell"] and name not in present:  # not run in the kept row at all
                found.append({"cell": cell, "baseline": name, "status": "absent",
                              "time_s": None, "fastest_s": t_best, "fastest_from": src,
                              "ratio": None})
        for r in row["runners"]:
            best = fastest.get((row["cell"], r["name"]))
            if _kind_of(r) != "baseline" or best is None:
                continue
            t = r.get("time_s") if r.get("status") == "ok" else None
            if t is None or t > best[0] * (1 + tol):
                found.append({"cell": row["cell"], "baseline": r["name"],
                              "status": r.get("status"), "time_s": t, "fastest_s": best[0],
                              "fastest_from": best[1],
                              "ratio": None if t is None else float(t) / best[0]})
    return found


def speedup_floor(row: dict[str, Any], fastest: Fastest) -> float | None:
    """The row's speedup scaled by (fastest baseline time ever measured for the cell) / (the
    row's best baseline time), when that is below 1; else the speedup."""
    base = next((r for r in row["runners"] if r["name"] == row.get("best_baseline")), None)
    speedup = row.get("speedup")
    if not base or not base.get("time_s") or not speedup:
        return None
    ever = min((t for (cell, _), (t, _) in fastest.items() if cell == row["cell"]),
               default=float(base["time_s"]))
    return float(speedup) * min(1.0, ever / float(base["time_s"]))


def floor_geomeans(rows: list[dict[str, Any]], fastest: Fastest) -> dict[str, dict[str, float]]:
    logs: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        f = speedup_floor(row, fastest)
        if f is not None and f > 0:
            kind = "temporal" if row["temporal"] else "single_sweep"
            logs.setdefault(kind, {}).setdefault(row["cell"].rsplit("/", 1)[1], []).append(
                math.log(f))
    return {k: {p: math.exp(sum(v) / len(v)) for p, v in sorted(d.items())}
            for k, d in sorted(logs.items())}


def ceiling(row: dict[str, Any]) -> float | None:
    """The speedup over the row's best baseline at the roofline bound (single sweep only)."""
    base = next((r for r in row["runners"] if r["name"] == row.get("best_baseline")), None)
    copy_bps = (row.get("copy") or {}).get("bytes_per_s")
    peak = (row.get("roofline") or {}).get("peak")
    half2 = (row.get("roofline") or {}).get("peak_ctype") == "half2"
    if (row["temporal"] or (row["cell"].endswith("/fp16") and not half2) or not base
            or not base.get("time_s") or not copy_bps or not peak):
        return None
    cell = Cell.parse(row["cell"])
    bound_s = max(cell.compulsory_bytes / copy_bps, cell.flops / peak)
    return float(base["time_s"]) / bound_s


def ceilings(rows: list[dict[str, Any]]) -> dict[str, float]:
    logs: dict[str, list[float]] = {}
    for row in rows:
        c = ceiling(row)
        if c is not None:
            logs.setdefault(row["cell"].rsplit("/", 1)[1], []).append(math.log(c))
    return {p: math.exp(sum(v) / len(v)) for p, v in sorted(logs.items())}


def compact(row: dict[str, Any], source: str, fastest: Fastest) -> dict[str, Any]:
    mine: dict[str, Any] = ours(row) or {}
    check = mine.get("check") or {}
    return {"cell": row["cell"], "from": source, "operator": mine.get("key"),
            "time_s": mine.get("time_s"), "pct_copy": mine.get("pct_copy"),
            "pct_copy_paired": (row.get("copy_paired") or {}).get("pct_copy"),
            "bound": (row.get("roofline") or {}).get("bound"), "temporal": row["temporal"],
            "oracle_ok": check.get("ok"), "error": check.get("error"),
            "best_baseline": row.get("best_baseline"), "speedup": row.get("speedup"),
            "speedup_floor": speedup_floor(row, fastest), "roofline_speedup": ceiling(row)}


def merged(inputs: list[Path], *, drift_tol: float = 0.10, note: str = "",
           by_date: bool = False, table: Path | None = None
           ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The merged document (summary, baseline drift, compact cells) and the full kept rows."""
    if not 0 <= drift_tol < 10:
        raise ConfigError(f"drift {drift_tol}: a fraction", hint="e.g. 0.10 for 10%")
    docs, warnings = ordered(inputs, by_date)
    keys = (table_keys(table, {r["cell"] for _, d in docs for r in d["cells"]})
            if table is not None else None)
    rows, source, fastest = merge(docs, keys)
    summ = summary(rows)
    summ["single_sweep"]["roofline_geomean_by_precision"] = ceilings(rows)
    floors = floor_geomeans(rows, fastest)
    for label in ("single_sweep", "temporal"):
        summ[label]["speedup_floor_geomean_by_precision"] = floors.get(label, {})
    doc = {"note": note or "latest measurement of each cell: "
           + ", ".join(p.name for p, _ in docs) + " (a later file replaces an earlier one)",
           "order_warnings": warnings,
           "summary": summ, "baseline_drift": drift(rows, fastest, drift_tol),
           "cells": [compact(r, source[r["cell"]], fastest) for r in rows]}
    if keys is not None:
        doc["table"] = str(table)
        doc["table_mismatch"] = [{"cell": r["cell"], "table": keys[r["cell"]],
                                  "measured": _ours_key(r)} for r in rows
                                 if _ours_key(r) != keys[r["cell"]]]
    return doc, rows


def write(doc: dict[str, Any], rows: list[dict[str, Any]], out: Path,
          png: Path | None = None) -> None:
    write_json_atomic(out, doc)
    if png:
        from .report import chart

        chart({"cells": rows}, png)


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The summary as printed: geomeans, medians, ceilings, floors, each baseline drift."""
    summ = doc["summary"]
    lines = [f"warning: {w}" for w in doc.get("order_warnings", [])]
    for label in ("single_sweep", "temporal"):
        s = summ[label]
        geo = {p: round(v["geomean"], 3) for p, v in s["speedup_by_precision"].items()}
        med = s["median_pct_copy"]
        lines.append(f"{label}: {s['cells']} cells, ours passing {s['ours_passing']}, geomean "
                     f"by precision {geo}, median % of copy over {s['memory_bound_cells']} "
                     f"memory-bound cells {'-' if med is None else f'{med:.1f}'}")
        if s.get("paired_cells"):
            lines.append(f"{label}: median % of a copy timed in the operator's passes, over "
                         f"the {s['paired_cells']} memory-bound cells measured so: "
                         f"{s['median_pct_copy_paired']:.1f}")
    roof = summ["single_sweep"]["roofline_geomean_by_precision"]
    lines.append("single_sweep roofline ceiling (geomean speedup over the same baselines at "
                 "100% of copy or of the FMA peak; fp16 only from runs with the half2 peak): "
                 + ", ".join(f"{p} {v:.3f}" for p, v in roof.items()))
    for label in ("single_sweep", "temporal"):
        fl = summ[label]["speedup_floor_geomean_by_precision"]
        lines.append(f"{label} speedup floor (each speedup scaled down where a baseline was "
                     "ever measured faster than the kept row's best): "
                     + ", ".join(f"{p} {v:.3f}" for p, v in fl.items()))
    for m in doc.get("table_mismatch", []):
        lines.append(f"table mismatch: {m['cell']}: no row measures the table's {m['table']}; "
                     f"kept the latest ({m['measured']}): bench the cell again")
    for d in doc["baseline_drift"]:
        now = (f"{d['time_s'] * 1e3:.3f} ms ({d['ratio']:.2f}x)" if d["time_s"] is not None
               else f"status {d['status']}")
        lines.append(f"baseline drift: {d['cell']} {d['baseline']}: {now}, fastest "
                     f"{d['fastest_s'] * 1e3:.3f} ms in {d['fastest_from']}")
    return lines
