"""Summarize a forge run: per cell the accepted operator against the naive kernel it started
from (both timed by the forge's gate on the same device), geometric means by precision, and a
PNG chart.

    kernforge stencil summary --table RUN/matrix.json --log RUN/perf-log.jsonl \
        --md OUT.md --png OUT.png
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from ..core import ConfigError
from ..stencil.matrix import read_table, table_entries


def rows(table: dict, log: list[dict]) -> list[dict]:
    naive: dict[str, float] = {}
    for rec in log:  # the first time each cell's naive incumbent was timed
        if rec.get("from", "").startswith("naive") and "seconds_from" in rec:
            naive.setdefault(rec["cell"], rec["seconds_from"])
    out = []
    for cid, entry in table.items():
        base = naive.get(cid, entry["seconds"] if entry["design"] == "naive" else None)
        out.append({"cell": cid, "design": entry["design"], "params": entry["params"],
                    "seconds": entry["seconds"], "naive_s": base, "error": entry["error"],
                    "speedup": base / entry["seconds"] if base else None})
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def markdown(rs: list[dict]) -> str:
    lines = ["| cell | design | params | time (ms) | naive (ms) | speedup | oracle error |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rs:
        p = ", ".join(f"{k}={v}" for k, v in sorted(r["params"].items()) if k != "steps")
        naive = f"{r['naive_s'] * 1e3:.3f}" if r["naive_s"] else "-"  # not timed in this log
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        lines.append(f"| {r['cell']} | {r['design']} | {p} | {r['seconds'] * 1e3:.3f} | "
                     f"{naive} | {speedup} | {r['error']:.1e} |")
    by: dict[str, list[float]] = defaultdict(list)
    for r in rs:
        if r["speedup"]:
            by[r["cell"].rsplit("/", 1)[1]].append(r["speedup"])
    lines.append("")
    lines.append("| precision | cells | geometric mean speedup over naive |")
    lines.append("|---|---:|---:|")
    for prec in sorted(by):
        lines.append(f"| {prec} | {len(by[prec])} | {geomean(by[prec]):.2f}x |")
    return "\n".join(lines) + "\n"


def chart(rs: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    precs = ["fp16", "fp32", "fp64"]
    fig, axes = plt.subplots(len(precs), 1, figsize=(14, 10), sharey=True)
    for ax, prec in zip(axes, precs, strict=True):
        sel = [r for r in rs if r["cell"].endswith("/" + prec) and r["speedup"]]
        labels = [r["cell"].rsplit("/", 1)[0] for r in sel]
        colors = ["tab:gray" if r["design"] == "naive" else "tab:blue" for r in sel]
        ax.bar(range(len(sel)), [r["speedup"] for r in sel], color=colors)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(sel)), labels, rotation=75, fontsize=6)
        ax.set_ylabel(f"{prec}: x naive")
    fig.suptitle("Forged operator vs naive one-thread-per-point kernel (H200, gate timings; "
                 "grey: naive kept)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def run(table: Path, log: Path, *, md: Path | None = None, png: Path | None = None) -> int:
    """Print the summary of one forge run (its ``table``, matrix.json, and ``log``,
    perf-log.jsonl), and write it to ``md`` and a chart to ``png``."""
    for path in (table, log):
        if not path.is_file():
            raise ConfigError(f"no file at {path}", hint="the matrix.json and perf-log.jsonl "
                              "a forge run wrote into its --out directory")
    entries = table_entries(read_table(table))  # provisional entries resolved
    try:
        records = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{log}: {exc}", hint="a forge run's perf-log.jsonl") from None
    rs = rows(entries, records)
    text = markdown(rs)
    print(text)
    if md:
        md.write_text(text)
    if png:
        chart(rs, png)
    return 0

