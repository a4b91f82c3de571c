"""The tables of native (driver-level) units: ``kernforge inspect`` and ``tune`` print them
from what :mod:`kernforge.pipeline.units` returns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core.fmt import fmt_time
from .output import console


def print_native_inspect(recs: Sequence[Any]) -> None:
    table = Table(title=f"{len(recs)} native launch(es) (driver level)")
    for col in ("unit", "kernel", "image", "launch", "params", "regions", "written", "size"):
        table.add_column(col)
    for r in recs:
        written = sum(1 for g in r.regions if g.epilogue is not None)
        seq = f" (sequence: {len(r.steps)} launches)" if r.steps else ""
        table.add_row(escape(r.path.name), escape(r.name[:50]) + seq,
                      r.image_kind + (f" + {r.source.origin} source" if r.source else ""),
                      f"grid={r.grid} block={r.block} smem={r.shared_mem}",
                      f"{len(r.params)} ({len(r.param_bytes)} B)", str(len(r.regions)),
                      str(written), f"{r.nbytes / 2**20:.2f} MiB")
    console.print(table)


def print_native_tuning(done: Sequence[Any], result: Path) -> None:
    table = Table(title=f"native tuning ({result})")
    for col in ("unit", "kernel", "tried", "verified", "best", "recorded", "tuned",
                "speedup [CI]", "kept"):
        table.add_column(col)
    for t in done:
        ok = sum(1 for m in t.results if m.ok)
        ci = f"{t.speedup:.3f}x [{t.ci[0]:.3f}, {t.ci[1]:.3f}]" if t.speedup and t.ci else "-"
        med = t.medians or (None, None)
        table.add_row(escape(t.unit.name), escape(t.rec.name[:40]), str(len(t.results)),
                      str(ok), escape(t.variants[t.best].label() if t.best else "-"),
                      fmt_time(med[0]), fmt_time(med[1]), ci,
                      "yes" if t.win else escape(f"no: {t.refused}"))
    console.print(table)
