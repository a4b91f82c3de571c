"""The table of native (driver-level) units' tuning: ``kernforge tune`` prints it from what
:mod:`kernforge.pipeline.units` returns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core.fmt import fmt_time
from .output import console


def print_native_tuning(done: Sequence[Any], out: Path) -> None:
    table = Table(title=f"native tuning ({out}/<unit>/result.json)")
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
