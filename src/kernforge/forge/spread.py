"""How much a matrix summary moves between runs: repeated bench runs of the same cells.

The merged matrix (:mod:`.latest`) takes each cell's latest row, so its median of % of copy
mixes runs of many sessions, each with its own copy reference. Repeating one bench over the
same memory-bound cells (``kernforge stencil bench --cell-ids ... --baselines ''`` takes
24-40 s for the 60 single-sweep cells on an H200) gives the run-to-run spread of that median
instead: ``kernforge stencil spread RUN.json ...`` prints, per run, the median against the
copy measured before the cell and against the copy timed in the operator's own passes
(``copy_paired``, over the cells that have it in every run) and how many cells reach the goal;
per cell the lowest, median and highest % of copy over the runs (the cells whose range
straddles the goal decide the median); the PNG shows those ranges. Only cells present in every
run count; cells whose operator differs between runs are named (their spread is not noise).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.jsonio import write_bytes_atomic
from ..harness.stats import median
from . import latest
from .bench import memory_bound


def _memory_rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The passing memory-bound single-sweep rows of one run, by cell id."""
    out = {}
    for row in doc["cells"]:
        if row.get("temporal") or not memory_bound(row):  # as the bench's summary counts them
            continue
        ours = latest.ours(row) or {}
        paired = (row.get("copy_paired") or {}).get("pct_copy")  # None: not measured
        out[row["cell"]] = {"pct": float(ours["pct_copy"]), "key": ours.get("key"),
                            "paired": paired}
    return out


def spread(paths: list[Path], goal: float = 85.0) -> dict[str, Any]:
    """Per run and per cell figures over the memory-bound single-sweep cells every run has."""
    if not 0 < goal <= 100:  # also NaN
        raise ConfigError(f"goal {goal} is not a percentage of the copy bandwidth",
                          hint="e.g. --goal 85")
    if len(paths) < 2:
        raise ConfigError("a spread needs at least two bench runs",
                          hint="repeat kernforge stencil bench --cell-ids ... --json RUN_n.json")
    runs = [(p, latest.load(p)) for p in paths]
    rows = [_memory_rows(doc) for _, doc in runs]
    common = sorted(set.intersection(*(set(r) for r in rows)))
    if not common:
        raise ConfigError("no memory-bound single-sweep cell passed in every run",
                          hint="bench the same --cell-ids in each run")
    # the paired figures over the cells with a paired copy in every run, like the others
    both = [c for c in common if all(r[c]["paired"] is not None for r in rows)]
    names = [p.name for p in paths]
    names = names if len(set(names)) == len(names) else [str(p) for p in paths]
    per_run = []
    for (_, doc), r, name in zip(runs, rows, names, strict=True):
        pct = [r[c]["pct"] for c in common]
        paired = [r[c]["paired"] for c in both]
        per_run.append({"file": name, "date": doc.get("date"), "cells": len(common),
                        "median": median(pct), "at_goal": sum(v >= goal for v in pct),
                        "median_paired": median(paired) if paired else None,
                        "paired_cells": len(paired)})
    cells = []
    for c in common:
        values = sorted(r[c]["pct"] for r in rows)
        cells.append({"cell": c, "low": values[0], "median": median(values),
                      "high": values[-1], "operators": sorted({str(r[c]["key"]) for r in rows})})
    cells.sort(key=lambda x: x["median"])
    medians = [r["median"] for r in per_run]
    paired = [r["median_paired"] for r in per_run if r["median_paired"] is not None]
    return {"goal": goal, "runs": per_run, "cells": cells,
            "dropped": sorted(set().union(*(set(r) for r in rows)) - set(common)),
            "median_of_medians": median(medians), "medians": [min(medians), max(medians)],
            "runs_at_goal": sum(m >= goal for m in medians),
            "paired_medians": [min(paired), max(paired)] if paired else None,
            "paired_runs_at_goal": sum(m >= goal for m in paired),
            "straddling": [x["cell"] for x in cells if x["low"] < goal <= x["high"]],
            "mixed_operators": [x["cell"] for x in cells if len(x["operators"]) > 1]}


def report_lines(doc: dict[str, Any]) -> list[str]:
    g = doc["goal"]
    head = (f"{len(doc['runs'])} runs, {doc['runs'][0]['cells']} memory-bound single-sweep "
            f"cells in every run (goal {g:g}% of copy)")
    lines = [head]
    for r in doc["runs"]:
        paired = (f"{r['median_paired']:.2f}% over {r['paired_cells']}"
                  if r["median_paired"] is not None else "-")
        lines.append(f"  {r['file']} ({r['date']}): median {r['median']:.2f}%, paired {paired},"
                     f" {r['at_goal']} cells >= {g:g}%")
    lo, hi = doc["medians"]
    lines.append(f"median of the runs' medians {doc['median_of_medians']:.2f}% (range "
                 f"{lo:.2f}-{hi:.2f}); {doc['runs_at_goal']} of {len(doc['runs'])} runs >= {g:g}%")
    if doc["paired_medians"]:
        plo, phi = doc["paired_medians"]
        lines.append(f"against the paired copy: {plo:.2f}-{phi:.2f}; "
                     f"{doc['paired_runs_at_goal']} runs >= {g:g}%")
    if doc["straddling"]:
        lines.append(f"cells whose range straddles {g:g}%: {', '.join(doc['straddling'])}")
    if doc["mixed_operators"]:
        lines.append("cells with another operator in some run (not noise): "
                     + ", ".join(doc["mixed_operators"]))
    if doc["dropped"]:
        lines.append(f"left out (not in every run): {', '.join(doc['dropped'])}")
    return lines


def chart(doc: dict[str, Any], path: Path) -> Path:
    """Each cell's lowest-to-highest % of copy over the runs (sorted by its median), the goal
    line, and the runs' medians as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = doc["cells"]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.34 * len(cells) + 2), 5.4))  # a label per cell, readable
    xs = range(len(cells))
    ax.vlines(xs, [c["low"] for c in cells], [c["high"] for c in cells], color="tab:blue", lw=2)
    ax.plot(xs, [c["median"] for c in cells], "o", ms=3, color="tab:blue",
            label="per cell: median, lowest-highest over the runs")
    ax.axhline(doc["goal"], color="tab:red", lw=0.8, ls="--", label=f"goal {doc['goal']:g}%")
    lo, hi = doc["medians"]
    ax.axhspan(lo, hi, color="tab:orange", alpha=0.25,
               label=f"the runs' medians {lo:.1f}-{hi:.1f}%")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([c["cell"].replace("/", " ") for c in cells], rotation=90, fontsize=8)
    ax.set_ylabel("% of copy bandwidth")
    ax.set_title(f"{len(doc['runs'])} runs of the same {len(cells)} memory-bound cells")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return write_bytes_atomic(Path(path), buf.getvalue())
