"""The stencil bench's results as tables (rich and Markdown) and a PNG chart.

Tables: the single-sweep matrix (our operator per cell against the best passing baseline), the
temporal cells (effective updates per second with the number of fused steps), every runner of
every cell (baselines included, with why one failed or was skipped), and the geometric means
of the speedup split by precision. Column meanings: docs/stencil.md.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core.fmt import fmt_time
from ..core.jsonio import write_bytes_atomic

Rows = tuple[list[str], list[list[str]]]


def _num(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:{spec}}{suffix}"


def _runner(row: dict[str, Any], name: str | None) -> dict[str, Any]:
    return next((r for r in row["runners"] if r["name"] == name), {}) if name else {}


def _error(entry: dict[str, Any]) -> str:
    check = entry.get("check")
    if not check:
        return "-"
    err = check.get("error")
    return "inf" if err is None else f"{err:.1e}"


def _status(entry: dict[str, Any]) -> str:
    status = entry.get("status", "-")
    return status if status == "ok" else f"{status}: {entry.get('reason', '')}"[:60]


def _best(row: dict[str, Any]) -> str:
    best = _runner(row, row.get("best_baseline"))
    return f"{best['name']} {fmt_time(best.get('time_s'))}" if best else "-"


def matrix_rows(results: dict[str, Any]) -> Rows:
    headers = ["cell", "design", "time", "GCells/s", "GB/s", "% copy", "% copy (paired)",
               "copy GB/s", "bound", "% peak", "best baseline", "speedup", "error", "status"]
    rows = []
    for row in results["cells"]:
        if row["temporal"]:
            continue
        ours = _runner(row, "ours")
        rows.append([row["cell"], str(ours.get("design", "-")), fmt_time(ours.get("time_s")),
                     _num(ours.get("gcells_per_s"), ".2f"), _num(ours.get("gb_per_s"), ".0f"),
                     _num(ours.get("pct_copy"), ".1f", "%"),
                     _num((row.get("copy_paired") or {}).get("pct_copy"), ".1f", "%"),
                     _num(row["copy"]["bytes_per_s"] / 1e9, ".0f"),
                     str((row.get("roofline") or {}).get("bound", "-")),
                     _num(ours.get("pct_peak_flops"), ".1f", "%"), _best(row),
                     _num(row.get("speedup"), ".2f", "x"), _error(ours), _status(ours)])
    return headers, rows


def temporal_rows(results: dict[str, Any]) -> Rows:
    headers = ["cell", "steps", "design", "time", "eff. GUpdates/s", "GB/s", "% copy",
               "best baseline", "speedup", "error", "status", "fused (steps/launch)",
               "fused eff. GUpdates/s"]
    rows = []
    for row in results["cells"]:
        if not row["temporal"]:
            continue
        ours = _runner(row, "ours")
        fused = _runner(row, "fused") or (ours if ours.get("design") == "temporal" else {})
        # steps per launch: a temporal operator of ours may split the steps (fs) over launches
        steps = fused.get("fused_steps") or (row["steps"] // max(1, int(fused.get("launches", 1)))
                                             if fused else None)
        rows.append([row["cell"], str(row["steps"]), str(ours.get("design", "-")),
                     fmt_time(ours.get("time_s")), _num(ours.get("gcells_per_s"), ".2f"),
                     _num(ours.get("gb_per_s"), ".0f"), _num(ours.get("pct_copy"), ".1f", "%"),
                     _best(row), _num(row.get("speedup"), ".2f", "x"), _error(ours),
                     _status(ours),
                     f"{fmt_time(fused.get('time_s'))} ({steps})" if fused else "-",
                     _num(fused.get("gcells_per_s"), ".2f")])
    return headers, rows


def runner_rows(results: dict[str, Any]) -> Rows:
    headers = ["cell", "runner", "status", "time", "GCells/s", "GB/s", "% copy", "error",
               "seed"]
    rows = []
    for row in results["cells"]:
        for r in row["runners"]:
            seed = (r.get("check") or {}).get("seed")
            rows.append([row["cell"], r["name"], _status(r), fmt_time(r.get("time_s")),
                         _num(r.get("gcells_per_s"), ".2f"), _num(r.get("gb_per_s"), ".0f"),
                         _num(r.get("pct_copy"), ".1f", "%"), _error(r),
                         "-" if seed is None else str(seed)])
    return headers, rows


def summary_rows(results: dict[str, Any]) -> Rows:
    headers = ["cells", "precision", "n", "geomean speedup", "median", "min", "max"]
    rows = []
    for label in ("single_sweep", "temporal"):
        part = results["summary"].get(label) or {}
        for prec, s in (part.get("speedup_by_precision") or {}).items():
            rows.append([label.replace("_", "-"), prec, str(s["n"]),
                         _num(s["geomean"], ".2f", "x"), _num(s["median"], ".2f", "x"),
                         _num(s["min"], ".2f", "x"), _num(s["max"], ".2f", "x")])
    return headers, rows


def _tables(results: dict[str, Any]) -> list[tuple[str, Rows]]:
    return [("stencil operator matrix (single sweep)", matrix_rows(results)),
            ("temporal blocking (effective updates, fused steps)", temporal_rows(results)),
            ("geometric mean of the speedup over the best passing baseline, by precision",
             summary_rows(results)),
            ("every runner", runner_rows(results))]


def rich_tables(results: dict[str, Any]) -> list[Table]:
    out = []
    for title, (headers, rows) in _tables(results):
        if not rows:
            continue
        table = Table(title=title)
        for h in headers:
            table.add_column(h, justify="left" if h in ("cell", "status", "runner") else "right")
        for r in rows:
            table.add_row(*(escape(c) for c in r))
        out.append(table)
    return out


def markdown(results: dict[str, Any]) -> str:
    dev = results.get("device") or {}
    intro = (f"{results.get('date', '')}, {len(results['cells'])} cells, `kernforge stencil "
             f"bench` (columns: docs/stencil.md).")
    lines = [f"# Stencil operator matrix: {dev.get('device', '?')}", "", intro, ""]
    for title, (headers, rows) in _tables(results):
        if not rows:
            continue
        lines += [f"## {title}", "", "| " + " | ".join(headers) + " |",
                  "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        lines.append("")
    return "\n".join(lines)


def chart(results: dict[str, Any], path: str | Path) -> Path:
    """Grouped bars of % of the copy bandwidth per cell and runner, one panel per precision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    precisions = sorted({row["precision"] for row in results["cells"]})
    names = _runner_names(results["cells"])
    fig, axes = plt.subplots(len(precisions) or 1, 1, squeeze=False,
                             figsize=(max(8.0, 0.9 * _max_cells(results) + 3), 3.6 * max(1, len(
                                 precisions))))
    for ax, prec in zip(axes[:, 0], precisions, strict=False):
        rows = [r for r in results["cells"] if r["precision"] == prec]
        width = 0.8 / max(1, len(names))
        for k, name in enumerate(names):
            values = [_runner(r, name).get("pct_copy") or 0.0 for r in rows]
            xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(rows))]
            ax.bar(xs, values, width, label=name)
        for i, r in enumerate(rows):
            if r.get("speedup"):
                top = max((_runner(r, n).get("pct_copy") or 0.0) for n in names)
                ax.annotate(f"{r['speedup']:.2f}x", (i, top), ha="center", va="bottom",
                            fontsize=7)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([_short(r) for r in rows], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("% of copy bandwidth")
        ax.set_title(f"{prec}: achieved / device-to-device copy (speedup over best baseline)")
        ax.axhline(100, color="grey", lw=0.6, ls="--")
        ax.legend(fontsize=7, ncol=len(names))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return write_bytes_atomic(Path(path), buf.getvalue())


def _runner_names(rows: Sequence[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for row in rows:
        for r in row["runners"]:
            if r.get("status") == "ok" and r["name"] not in names:
                names.append(r["name"])
    return names


def _max_cells(results: dict[str, Any]) -> int:
    counts: dict[str, int] = {}
    for row in results["cells"]:
        counts[row["precision"]] = counts.get(row["precision"], 0) + 1
    return max(counts.values(), default=1)


def _short(row: dict[str, Any]) -> str:
    steps = f" ({row['steps']} steps)" if row["temporal"] else ""
    return f"{row['stencil']} {row['shape']}{steps}"
