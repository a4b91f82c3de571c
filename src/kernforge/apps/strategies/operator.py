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
rotate. For the kernel of a time loop (:mod:`..loop_sequence`: launched often enough, the
hottest such kernel or a recognized stencil), the loop is recorded as a sequence unit in one
more run of the dataset, and ``fuse_unit`` fuses whole recorded steps on it (the "fused step"
path: the step's boundary kernels folded, its diagnostics elided) instead of re-launching the
kernel alone. The fastest path that passes the deployment gate is kept per kernel; the row
says which won (one-launch, fused alone, fused whole steps with N companions folded or
elided, lifted) and why each other was refused, and keeps every path found with its spec
and replay speedup (``alternatives``: M4 runs a fused winner's one-launch spec beside it).
When that module is not installed the strategy is SKIPPED with the reason."""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import loop_sequence
from ..phases import summary
from ..process import head_text
from ..recording import app_driver
from . import Context, Outcome, Strategy, narrowing, unit_rows

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


def _paths(om: Any, unit: Path, out: Path, repeat: int, one: Any,
           seq: dict[str, Any] | str | None = None, search: int = 0,
           progress: Callable[[str], None] = lambda _: None,
           narrow: narrowing.Narrowing | None = None) -> dict[str, Any]:
    """One kernel's row: the one-launch match ``one``, fusion tried when it recognized a
    stencil or the kernel's time loop was recorded, the faster deployable path chosen.
    ``seq``: the recorded time loop (:func:`loop_sequence.summary`) or why there is none
    (None: no sequence was considered); ``search``: the lifted path's search budget;
    ``progress`` is told which path is being tried (each takes a while on a GPU);
    ``narrow``: the candidates of an earlier dataset each path tries first
    (:mod:`.narrowing`)."""
    row: dict[str, Any] = {"recognized": getattr(one, "recognized", None)}
    found: dict[str, Any] = {}
    refused: dict[str, str] = {}
    timed(row, "one-launch", one, progress)
    if hasattr(one, "spec_path"):
        found["one-launch"] = one
    else:
        refused["one-launch"] = str(one.reason)
    fuse = getattr(om, "fuse_unit", None)
    if seq is not None:
        row["sequence"] = seq
    if isinstance(seq, dict):  # whole steps: the sequence is fusion's reference
        progress(f"fusing whole steps of the recorded time loop ({seq.get('steps')} "
                 "steps held; each candidate compiled, verified and timed in replay)")
        _fused_step(fuse, seq, out, repeat, row, found, refused, progress, narrow)
        refused["fused"] = "not tried: the kernel's time loop was recorded (the fused step " \
                           "is tried on it)"
    elif fuse is None or (not hasattr(one, "spec_path") and row["recognized"] is None):
        if isinstance(seq, str):
            refused["fused step"] = seq
        refused["fused"] = "not tried: " + ("no stencil recognized" if fuse else
                                            "this kernforge has no fusion")
    else:
        if isinstance(seq, str):
            refused["fused step"] = seq
        progress("fusing several steps of the recognized stencil into one launch "
                 "(each candidate compiled, verified and timed in replay)")
        _try_fuse(lambda: narrowing.attempt(narrow, "fused", lambda **kw: fuse(
            unit, out_dir=out / "fused", repeat=repeat, **kw), row), "fused", row,
                  found, refused, progress)
    recognized = hasattr(one, "spec_path") or row["recognized"] is not None
    if getattr(om, "lift_unit", None) is not None and not recognized:
        progress("lifting the kernel's program and timing generated operators")
    _lifted(om, unit, out, repeat, row, found, refused, recognized=recognized,
            search=search, progress=progress, narrow=narrow)
    if not found:
        return {**row, "matched": False, "reason": "; ".join(
            f"{k}: {v}" for k, v in refused.items()), "refused": refused}
    path, win = max(found.items(), key=lambda kv: kv[1].speedup)
    for k, v in found.items():
        if k != path:
            refused[k] = f"slower ({v.speedup:.2f}x against {win.speedup:.2f}x)"
    spec = win.spec_path
    if path in ("fused", "fused step") and "one-launch" in found:  # for the steps run unfused
        from ...deploy.merge import merge_one_launch

        spec, row["unfused_steps"] = merge_one_launch(spec, found["one-launch"].spec_path)
    label = f"fused {win.steps} steps alone" if path == "fused" else \
        _step_label(win) if path == "fused step" else \
        f"lifted program ({(win.figures or {}).get('design')})" if path == "lifted" else path
    # every path found, the winner's too: M4 runs the one-launch spec beside a fused winner
    alternatives = {k: {"spec": str(spec if k == path else v.spec_path), "speedup": v.speedup,
                        "ci": list(v.ci)} for k, v in found.items()}
    return {**row, "matched": True, "path": label, "cell": win.cell, "speedup": win.speedup,
            "ci": list(win.ci), "note": win.note, "spec": str(spec),
            "refused": refused, "alternatives": alternatives}


def timed(row: dict[str, Any], key: str, got: Any, progress: Callable[[str], None]) -> None:
    """A path's phase timings (its child's, apps/phases.py) in the row's ``phases`` and as
    one line of progress, when its child reported them."""
    figures = getattr(got, "phases", None)
    if figures:
        row.setdefault("phases", {})[key] = figures
        progress(summary(key, figures))


def _step_label(f: Any) -> str:
    """A fused step's path: its steps and what became of the step's other launches."""
    comps = list(getattr(f, "companions", ()))
    if not comps:
        return f"fused {f.steps} steps alone (the recorded step is this kernel's launch only)"
    roles = {r: sum(c.get("role") == r for c in comps) for r in ("folded", "elided")}
    return (f"fused {f.steps} whole steps with {len(comps)} companion(s): "
            + ", ".join(f"{n} {r}" for r, n in roles.items() if n))


def _fused_step(fuse: Any, seq: dict[str, Any], out: Path, repeat: int, row: dict[str, Any],
                found: dict[str, Any], refused: dict[str, str],
                progress: Callable[[str], None] = lambda _: None,
                narrow: narrowing.Narrowing | None = None) -> None:
    """Fusion of whole recorded steps: ``fuse_unit`` on the sequence unit, for the step
    counts the program let the sequence hold."""
    if fuse is None:
        refused["fused step"] = "not tried: this kernforge has no fusion"
        return
    steps, why = loop_sequence.fusable_steps(int(seq.get("steps") or 0))
    if not steps:
        refused["fused step"] = f"not tried: {why} (the sequence ended: {seq.get('ended')})"
        return
    _try_fuse(lambda: narrowing.attempt(narrow, "fused step", lambda **kw: fuse(
        Path(seq["unit"]), out_dir=out / "fused-step", repeat=repeat, steps=steps, **kw), row),
        "fused step", row, found, refused, progress)


def _try_fuse(call: Any, key: str, row: dict[str, Any], found: dict[str, Any],
              refused: dict[str, str], progress: Callable[[str], None] = lambda _: None
              ) -> None:
    """One fusion path (``key``): its spec found when it passed and the interposer's lines
    carry its deferral, else why not; its figures in the row."""
    name = key.replace(" ", "_")
    try:
        f = call()
    except Exception as exc:  # noqa: BLE001 - a fusion failure is this kernel's data
        refused[key] = f"fusion failed: {type(exc).__name__}: {exc}"
        return
    timed(row, key, f, progress)
    if f is not None and hasattr(f, "spec_path"):
        if interposer_fuses(f.spec_path):
            found[key] = f
        else:
            refused[key] = (f"{f.steps} steps fused at {f.speedup:.2f}x, not deployed: "
                            "the interposer's line format carries no fusion")
        row[f"{name}_figures"] = {"steps": f.steps, "speedup": f.speedup, "ci": list(f.ci),
                                  "gcells_s": f.gcells_s, "note": f.note,
                                  "companions": list(getattr(f, "companions", ()))}
    elif f is not None:
        refused[key] = str(f.reason)
        row[f"{name}_tried"] = list(getattr(f, "tried", ()))


def _lifted(om: Any, unit: Path, out: Path, repeat: int, row: dict[str, Any],
            found: dict[str, Any], refused: dict[str, str], *, recognized: bool,
            search: int = 0, progress: Callable[[str], None] = lambda _: None,
            narrow: narrowing.Narrowing | None = None) -> None:
    """The lifted-program path, tried when the recognizer refused the kernel (several
    fields, coefficient fields, a residual, in place...): its program lifted (source first,
    else probing) and generated operators put in its place: the designs' presets, then the
    forge's search over their knobs for ``search`` more candidates."""
    lift = getattr(om, "lift_unit", None)
    if lift is None or recognized:
        refused["lifted"] = "not tried: " + ("this kernforge has no lifted operators"
                                             if lift is None else "the recognized stencil "
                                             "takes the matrix's operators")
        return
    try:
        r = narrowing.attempt(narrow, "lifted", lambda **kw: lift(
            unit, out_dir=out / "lifted", repeat=repeat, search_trials=search, **kw), row)
    except Exception as exc:  # noqa: BLE001 - a lifting failure is this kernel's data
        refused["lifted"] = f"lifting failed: {type(exc).__name__}: {exc}"
        return
    timed(row, "lifted", r, progress)
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
        loops = loop_sequence.loop_kernels(ctx.candidates())
        firsts: narrowing.Firsts = {}  # per kernel: its first matched dataset's rankings
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
                narrow = narrowing.for_unit(firsts, k["name"], unit.parent.name,
                                            ctx.manifest.integrate.narrow_after_first)
                ctx.progress(f"{ctx.manifest.name}: matching {k['name'][:60]} "
                             f"({unit.parent.name}/{unit.name}) against the operator matrix"
                             + (f" ({narrow.note})" if narrow else ""))
                with unit_rows.attempt(out) as done:
                    row = self._match(om, match_unit, ctx, k, unit, out, loops, narrow)
                    done(row)
            narrowing.remember(firsts, k["name"], unit.parent.name, row)
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
               out: Path, loops: set[str], narrow: narrowing.Narrowing | None = None
               ) -> dict[str, Any]:
        """One unit's row: its one-launch, fused and lifted paths (a matcher's failure is
        the unit's data); the kernel's time loop recorded as a sequence in between when it
        is one (:mod:`..loop_sequence`); ``narrow``: the earlier dataset's candidates each
        path tries first (:mod:`.narrowing`)."""
        repeat = ctx.manifest.integrate.match_repeat
        t0 = time.perf_counter()
        pre: dict[str, Any] = {}  # the one-launch path's ranking and narrowing
        try:
            with driver_of(ctx.manifest.env):
                r = narrowing.attempt(narrow, "one-launch", lambda **kw: match_unit(
                    unit, out_dir=out, repeat=repeat, **kw), pre)
            t1 = time.perf_counter()
            seq = _sequence(om, ctx, k, unit, out, r, loops)
            t_seq = time.perf_counter() - t1
            with driver_of(ctx.manifest.env):
                row = _paths(om, unit, out, repeat, r, seq,
                             ctx.manifest.integrate.lift_search_trials,
                             progress=lambda what: ctx.progress(
                                 f"{ctx.manifest.name}: {k['name'][:60]} "
                                 f"({unit.parent.name}): {what}"), narrow=narrow)
            narrowing.merge(row, pre)
        except Exception as exc:  # noqa: BLE001 - a matcher failure is this kernel's data
            return {"kernel": k["name"], "unit": str(unit), "matched": False,
                    "reason": f"matching failed: {type(exc).__name__}: {exc}"}
        if isinstance(seq, dict):  # the time loop's recording: one more run of the program
            row.setdefault("phases", {})["sequence"] = {"wall_s": round(t_seq, 3)}
        return {"kernel": k["name"], "unit": str(unit), **row,
                "wall_s": round(time.perf_counter() - t0, 3)}


def _sequence(om: Any, ctx: Context, k: dict[str, Any], unit: Path, out: Path, one: Any,
              loops: set[str]) -> dict[str, Any] | str:
    """The kernel's time loop on the unit's dataset recorded as a sequence unit (one more
    run of the program), summarized; or why not."""
    if getattr(om, "fuse_unit", None) is None:
        return "not recorded: this kernforge has no fusion"
    recognized = hasattr(one, "spec_path") or getattr(one, "recognized", None) is not None
    why = loop_sequence.why_not(k, loops, recognized)
    if why is not None:
        return why
    ctx.progress(f"{ctx.manifest.name}: recording the time loop of {k['name'][:60]} on "
                 f"{unit.parent.name} ({loop_sequence.sequence_length()} launches after "
                 f"{loop_sequence.SKIP}): one more run of the program")
    got = loop_sequence.record(ctx.harness, unit, k["name"], out / "sequence")
    return got if isinstance(got, str) else loop_sequence.summary(got)
