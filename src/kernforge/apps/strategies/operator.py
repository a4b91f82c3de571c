"""M3a: operator matching. A recorded kernel that computes a stencil the operator matrix
covers is replaced by the matching operator (``kernforge.apps.operator_match``, built
separately): it returns a signed native deployment spec with the operator's adapter in place
of the kernel, accepted only when its outputs match the recorded ones and on fresh inputs.
When that module is not installed the strategy is SKIPPED with the reason."""

from __future__ import annotations

import importlib
from typing import Any

from ..process import head_text
from . import Context, Outcome, Strategy

MODULE = "kernforge.apps.operator_match"


class OperatorStrategy(Strategy):
    milestone = "M3a"
    title = "operator matching"

    def apply(self, ctx: Context) -> Outcome:
        try:
            om = importlib.import_module(MODULE)
            match_unit = om.match_unit
        except (ImportError, AttributeError) as exc:
            return Outcome("SKIPPED", "operator matching not available",
                           {"error": f"{type(exc).__name__}: {exc}"})
        tried: list[dict[str, Any]] = []
        specs: list[str] = []
        for k, unit in ctx.units():
            ctx.progress(f"{ctx.manifest.name}: matching {k['name'][:60]} ({unit.parent.name}/"
                         f"{unit.name}) against the operator matrix")
            try:
                r = match_unit(unit, out_dir=self.workdir(ctx.out) / unit.parent.name / unit.name,
                               repeat=ctx.manifest.integrate.match_repeat)
            except Exception as exc:  # noqa: BLE001 - a matcher failure is this kernel's data
                tried.append({"kernel": k["name"], "unit": str(unit), "matched": False,
                              "reason": f"matching failed: {type(exc).__name__}: {exc}"})
                continue
            if hasattr(r, "spec_path"):
                specs.append(str(r.spec_path))
                tried.append({"kernel": k["name"], "unit": str(unit), "matched": True,
                              "cell": r.cell, "speedup": r.speedup, "ci": list(r.ci),
                              "note": r.note, "spec": str(r.spec_path)})
            else:
                tried.append({"kernel": k["name"], "unit": str(unit), "matched": False,
                              "reason": str(r.reason),
                              "recognized": getattr(r, "recognized", None)})
        figures = {"kernels": tried}
        if not tried:
            return Outcome("SKIPPED", "no recorded kernel to match", figures)
        if not specs:
            why = "; ".join(dict.fromkeys(  # one kernel's reason once, for all its units
                f"{head_text(t['kernel'], 40)}: {t['reason']}" for t in tried))
            return Outcome("FAILED", f"no kernel matched an operator ({why})", figures)
        cells = ", ".join(f"{head_text(t['kernel'], 40)} -> {t['cell']} ({t['speedup']:.2f}x)"
                          for t in tried if t["matched"])
        return Outcome("DONE", f"{len(specs)} kernel(s) matched: {cells}", figures,
                       native_specs=tuple(specs))
