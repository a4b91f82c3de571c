"""M3a: operator matching. A recorded kernel that computes a stencil the operator matrix
covers is replaced by the matching operator (``kernforge.apps.operator_match``, built
separately): it returns a signed native deployment spec with the operator's adapter in place
of the kernel, accepted only when its outputs match the recorded ones and on fresh inputs.

A kernel the recognizer refuses (several fields, coefficient fields, a residual, an in-place
update...) is lifted (``lift_unit``: its stencil program from its source, else by probing)
and the operators generated for that program are tried the same way.

Beside the one-launch operator, a recognized kernel is also fused (``fuse_unit``): ``T``
launches of a time loop that swaps its input and output run as one launch of a generated
multi-step operator, which the interposer engages only where the program's launches really
rotate. The faster of the two paths that pass the deployment gate is kept per kernel; the
figures say which won and why the other was refused. When that module is not installed the
strategy is SKIPPED with the reason."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..process import head_text
from ..recording import app_driver
from . import Context, Outcome, Strategy, unit_rows

MODULE = "kernforge.apps.operator_match"
IN_PROCESS = ("recorded in-process (kernforge.Kernel or CuPy launches): operators replace "
              "native (driver-level) units only")
FUSE_FIELD = 13  # the interposer line's field that carries a fused entry's deferral


def interposer_fuses(spec: Path) -> bool:
    """Whether the deployment's interposer lines for a fused spec carry the deferral
    (``fuse:T:IN:OUT``, kf_deploy.c): a deployment that replaced every launch by T steps
    would be wrong, so without it the fused path is refused."""
    from ...deploy import native as nd

    lines = nd.interposer_lines(nd.read_spec(spec)).splitlines()[1:]
    return bool(lines) and all(
        len(f := line.split("\t")) > FUSE_FIELD and f[FUSE_FIELD].startswith("fuse:")
        for line in lines)


@contextlib.contextmanager
def driver_of(env: Mapping[str, str]) -> Iterator[None]:
    """Matching replays units in this process, which the manifest's ``env`` does not reach
    (the loader read ``LD_LIBRARY_PATH`` when it started): for as long as it runs,
    ``KERNFORGE_LIBCUDA`` names the driver the application runs on, as for M3b's tools."""
    lib = app_driver(env)
    old = os.environ.get("KERNFORGE_LIBCUDA")
    if lib is None or old is not None:
        yield
        return
    os.environ["KERNFORGE_LIBCUDA"] = lib
    try:
        yield
    finally:
        os.environ.pop("KERNFORGE_LIBCUDA", None)


def _paths(om: Any, unit: Path, out: Path, repeat: int, one: Any) -> dict[str, Any]:
    """One kernel's row: the one-launch match ``one``, fusion tried when it recognized a
    stencil, the faster deployable path chosen."""
    row: dict[str, Any] = {"recognized": getattr(one, "recognized", None)}
    found: dict[str, Any] = {}
    refused: dict[str, str] = {}
    if hasattr(one, "spec_path"):
        found["one-launch"] = one
    else:
        refused["one-launch"] = str(one.reason)
    fuse = getattr(om, "fuse_unit", None)
    if fuse is None or (not hasattr(one, "spec_path") and row["recognized"] is None):
        refused["fused"] = "not tried: " + ("no stencil recognized" if fuse else
                                            "this kernforge has no fusion")
    else:
        try:
            f = fuse(unit, out_dir=out / "fused", repeat=repeat)
        except Exception as exc:  # noqa: BLE001 - a fusion failure is this kernel's data
            f = None
            refused["fused"] = f"fusion failed: {type(exc).__name__}: {exc}"
        if f is not None and hasattr(f, "spec_path"):
            if interposer_fuses(f.spec_path):
                found["fused"] = f
            else:
                refused["fused"] = (f"{f.steps} steps fused at {f.speedup:.2f}x, not deployed: "
                                    "the interposer's line format carries no fusion")
            row["fused_figures"] = {"steps": f.steps, "speedup": f.speedup, "ci": list(f.ci),
                                    "gcells_s": f.gcells_s, "note": f.note}
        elif f is not None:
            refused["fused"] = str(f.reason)
            row["fused_tried"] = list(getattr(f, "tried", ()))
    _lifted(om, unit, out, repeat, row, found, refused,
            recognized=hasattr(one, "spec_path") or row["recognized"] is not None)
    if not found:
        return {**row, "matched": False, "reason": "; ".join(
            f"{k}: {v}" for k, v in refused.items()), "refused": refused}
    path, win = max(found.items(), key=lambda kv: kv[1].speedup)
    for k, v in found.items():
        if k != path:
            refused[k] = f"slower ({v.speedup:.2f}x against {win.speedup:.2f}x)"
    label = f"fused {win.steps} steps" if path == "fused" else \
        f"lifted program ({(win.figures or {}).get('design')})" if path == "lifted" else path
    return {**row, "matched": True, "path": label, "cell": win.cell, "speedup": win.speedup,
            "ci": list(win.ci), "note": win.note, "spec": str(win.spec_path),
            "refused": refused}


def _lifted(om: Any, unit: Path, out: Path, repeat: int, row: dict[str, Any],
            found: dict[str, Any], refused: dict[str, str], *, recognized: bool) -> None:
    """The lifted-program path, tried when the recognizer refused the kernel (several
    fields, coefficient fields, a residual, in place...): its program lifted (source first,
    else probing) and generated operators put in its place."""
    lift = getattr(om, "lift_unit", None)
    if lift is None or recognized:
        refused["lifted"] = "not tried: " + ("this kernforge has no lifted operators"
                                             if lift is None else "the recognized stencil "
                                             "takes the matrix's operators")
        return
    try:
        r = lift(unit, out_dir=out / "lifted", repeat=repeat)
    except Exception as exc:  # noqa: BLE001 - a lifting failure is this kernel's data
        refused["lifted"] = f"lifting failed: {type(exc).__name__}: {exc}"
        return
    if hasattr(r, "spec_path"):
        found["lifted"] = r
        row["lifted_figures"] = {"speedup": r.speedup, "ci": list(r.ci), "note": r.note,
                                 **(r.figures or {})}
    else:
        refused["lifted"] = str(r.reason)
        row["lifted_tried"] = list(getattr(r, "tried", ()))
        if getattr(r, "recognized", None):
            row["lifted_program"] = r.recognized


class OperatorStrategy(Strategy):
    milestone = "M3a"
    title = "operator matching"
    resumable = True  # a unit matched before the run was stopped is not matched again

    def apply(self, ctx: Context) -> Outcome:
        try:
            om = importlib.import_module(MODULE)
            match_unit = om.match_unit
        except (ImportError, AttributeError) as exc:
            return Outcome("SKIPPED", "operator matching not available",
                           {"error": f"{type(exc).__name__}: {exc}"})
        tried: list[dict[str, Any]] = []
        specs: list[str] = []
        units = ctx.units()
        if units and all(k.get("kind") == "source" for k, _ in units):
            return Outcome("SKIPPED", IN_PROCESS + " (M3b tunes and evolves them)",
                           {"kernels": [{"kernel": k["name"], "unit": str(u), "matched": False,
                                         "reason": IN_PROCESS} for k, u in units]})
        kept = 0
        for k, unit in units:
            if k.get("kind") == "source":
                tried.append({"kernel": k["name"], "unit": str(unit), "matched": False,
                              "reason": IN_PROCESS})
                continue
            out = self.workdir(ctx.out) / unit.parent.name / unit.name
            row = unit_rows.load(out)
            if row is not None:
                kept += 1
                ctx.progress(f"{ctx.manifest.name}: {k['name'][:60]} ({unit.parent.name}/"
                             f"{unit.name}) matched before the run was stopped: kept")
            else:
                ctx.progress(f"{ctx.manifest.name}: matching {k['name'][:60]} "
                             f"({unit.parent.name}/{unit.name}) against the operator matrix")
                with unit_rows.attempt(out) as done:
                    row = self._match(om, match_unit, ctx, k, unit, out)
                    done(row)
            tried.append(row)
            if row["matched"]:
                specs.append(row["spec"])
        figures: dict[str, Any] = {"kernels": tried}
        if kept:
            figures["kept_units"] = kept
        if not tried:
            return Outcome("SKIPPED", "no recorded kernel to match", figures)
        if not specs:
            why = "; ".join(dict.fromkeys(  # one kernel's reason once, for all its units
                f"{head_text(t['kernel'], 40)}: {t['reason']}" for t in tried))
            return Outcome("FAILED", f"no kernel matched an operator ({why})", figures)
        cells = ", ".join(f"{head_text(t['kernel'], 40)} -> {t['cell']} ({t['path']}, "
                          f"{t['speedup']:.2f}x" + "".join(
                              f"; {k} refused: {head_text(v, 120)}"
                              for k, v in (t.get("refused") or {}).items()) + ")"
                          for t in tried if t["matched"])
        return Outcome("DONE", f"{len(specs)} kernel(s) matched: {cells}", figures,
                       native_specs=tuple(specs))

    @staticmethod
    def _match(om: Any, match_unit: Any, ctx: Context, k: dict[str, Any], unit: Path,
               out: Path) -> dict[str, Any]:
        """One unit's row: its one-launch, fused and lifted paths (a matcher's failure is
        the unit's data)."""
        repeat = ctx.manifest.integrate.match_repeat
        try:
            with driver_of(ctx.manifest.env):
                r = match_unit(unit, out_dir=out, repeat=repeat)
                row = _paths(om, unit, out, repeat, r)
        except Exception as exc:  # noqa: BLE001 - a matcher failure is this kernel's data
            return {"kernel": k["name"], "unit": str(unit), "matched": False,
                    "reason": f"matching failed: {type(exc).__name__}: {exc}"}
        return {"kernel": k["name"], "unit": str(unit), **row}
