"""Operator matching (M3a): put a matrix stencil operator in place of a recorded kernel.

``match_unit(unit_dir, out_dir=...)`` takes one native unit (a launch recorded from an unchanged
program by the driver interposer) and either returns an :class:`OperatorMatch`, whose signed
native deployment spec replaces that kernel's launches by an adapter around a generated
operator, or a :class:`NoMatch` with the precise reason. How (docs/applications-operators.md):

1. recognize: the replayed kernel is probed on impulses and random inputs
   (:mod:`.probe`): grid shape, offsets and coefficients, boundary rule; nonlinear, affine,
   variable-coefficient, multi-output, in-place and reduction kernels are refused;
2. generate: an operator of the matrix's designs for a stencil spec with *those* coefficients
   and that grid (the dispatch table's forged parameters first when the grid is a matrix
   shape), wrapped in an adapter with the kernel's exact parameter layout (:mod:`.adapter`);
3. accept: the adapter's outputs match the recorded outputs under the kernel's tolerance and
   match the original kernel on fresh random inputs;
4. time: the fastest accepted candidate against the original, interleaved (the native
   replay's protocol); a spec is written only when the win passes the one gate every
   deployment passes (:func:`kernforge.deploy.gate.refusal`).

The GPU work runs in a child process (:mod:`.operator_gpu`): a kernel that faults on a probe
costs that process, not the caller.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import KernforgeError
from ..core.errors import exit_cause
from ..core.native import NativeRecording
from ..deploy import native as nd
from ..deploy.gate import NOISE_BAND, refusal
from ..record.native_format import read_native
from .phases import with_wall
from .process import tail_text


@dataclass(frozen=True)
class NoMatch:
    """Why no operator replaces the kernel; ``recognized`` names the stencil when one was
    recognized (then the reason is a failed check or a win too small to deploy); ``tried``:
    one row per candidate operator (its key, why it was refused or its screened median and
    ``screen_speedup`` over the original)."""

    reason: str
    recognized: str | None = None
    tried: tuple[dict[str, Any], ...] = ()
    phases: dict[str, Any] | None = None  # the child's time per phase (apps/phases.py)


@dataclass(frozen=True)
class OperatorMatch:
    """A verified replacement: ``spec_path`` (signed native deployment spec, its adapter image
    beside it), the interleaved replay ``speedup`` and its ``ci`` (99%), the operator's ``cell``
    id, a ``note`` saying what was recognized and which operator runs, and ``tried`` (as
    :class:`NoMatch`'s)."""

    spec_path: Path
    speedup: float
    ci: tuple[float, float]
    cell: str
    note: str
    tried: tuple[dict[str, Any], ...] = ()
    figures: dict[str, Any] | None = None  # a lifted operator's: design, copy fraction...
    phases: dict[str, Any] | None = None  # the child's time per phase (apps/phases.py)


def _child(unit: Path, out_dir: Path, repeat: int, passes: int, timeout_s: float,
           module: str = "kernforge.apps.operator_gpu", **extra: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kf-opmatch-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps({"unit": str(unit), "out_dir": str(out_dir),
                                   "repeat": repeat, "passes": passes, **extra}))
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", module,
                                   str(req), str(res)], capture_output=True, text=True,
                                  timeout=timeout_s, check=False, env=env)
        except subprocess.TimeoutExpired:
            return {"nomatch": f"no result within {timeout_s:.0f} s (a probe hung?)"}
        if res.is_file():
            got = dict(json.loads(res.read_text()))
            got["phases"] = with_wall(got.get("phases"), time.perf_counter() - t0)
            return got
        tail = tail_text(proc.stderr, 600)
        return {"nomatch": f"the probing process {exit_cause(proc.returncode)} (a kernel that "
                           f"faults on probe inputs is no stencil we replace): {tail}"}


def _prefer(prefer: list[Any] | None) -> dict[str, Any]:
    """The request's ``prefer`` (the candidates a child tries), when there is one."""
    return {} if prefer is None else {"prefer": list(prefer)}


def match_unit(unit_dir: Path, *, out_dir: Path, repeat: int = 10, passes: int = 7,
               band: float = NOISE_BAND, timeout_s: float = 900.0,
               prefer: list[Any] | None = None) -> OperatorMatch | NoMatch:
    """Match one recorded native unit (see the module docstring); ``repeat`` timed runs
    screen each candidate, ``passes`` interleaved passes time the winner; ``prefer``: only
    these operators are tried (:func:`.narrow.keep`)."""
    unit_dir = Path(unit_dir)
    try:
        rec = read_native(unit_dir)
    except KernforgeError as exc:
        return NoMatch(f"not a native unit: {exc.message}")
    if not any(len(p.pointers) == 1 and p.size == 8 for p in rec.params):
        return NoMatch("the kernel takes no device pointer the recording followed")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = _child(unit_dir.resolve(), out_dir.resolve(), repeat, passes, timeout_s,
                 **_prefer(prefer))
    tried = tuple(res.get("tried") or ())
    if "nomatch" in res:
        return NoMatch(str(res["nomatch"]), res.get("recognized"), tried, res.get("phases"))
    return _deploy(rec, res, out_dir, band, tried, "operator-match", "adapter", "operator")


def _deploy(rec: NativeRecording, res: dict[str, Any], out_dir: Path, band: float,
            tried: tuple[dict[str, Any], ...], method: str, stem: str, spec_stem: str
            ) -> OperatorMatch | NoMatch:
    """The signed spec of a verified one-launch replacement, when its win passes the gate."""
    speedup, ci = float(res["speedup"]), (float(res["ci"][0]), float(res["ci"][1]))
    note = (f"{res['recognized']}; operator {res['operator']} for {res['cell']}; "
            f"{'; '.join(res['checks'])}")
    why = refusal(verified=True, idle=None, speedup=speedup, ci=ci, band=band)
    if why is not None:
        return NoMatch(f"matched by {res['operator']} ({res['cell']}), not deployed: {why}",
                       res["recognized"], tried, res.get("phases"))
    image = Path(res["image"]).read_bytes()
    name = f"{rec.path.name}.{stem}.cubin"
    evidence = {"method": method, "verified": True, "idle": None,
                "speedup": speedup, "ci": list(ci), "median_original_s":
                res["median_original_s"], "median_tuned_s": res["median_adapter_s"],
                "ratios": res["ratios"], "recognized": res["recognized"], "cell": res["cell"],
                "operator": res["operator"], "checks": res["checks"], "unit": rec.path.name,
                "arch": res["arch"]}
    figures: dict[str, Any] = {k: res[k] for k in ("design", "how", "copy_fraction", "bytes",
                                                   "copy_bw", "lift_refused", "search")
                               if k in res}
    if figures:
        figures["operator"] = res["operator"]
    evidence.update(figures)
    entry = nd.replacement_entry(rec, image=name, image_bytes=image, entry_name=res["entry"],
                                 grid=res["grid"], block=res["block"],
                                 shared_mem=res["shared_mem"], carveout=res["carveout"],
                                 evidence=evidence)
    spec = nd.write_spec(out_dir / f"{rec.path.name}.{spec_stem}.json", [entry], {name: image})
    return OperatorMatch(spec, speedup, ci, str(res["cell"]), note, tried, figures or None,
                         res.get("phases"))


def lift_unit(unit_dir: Path, *, out_dir: Path, repeat: int = 10, passes: int = 7,
              band: float = NOISE_BAND, timeout_s: float = 900.0,
              search_trials: int = 0, prefer: list[Any] | None = None
              ) -> OperatorMatch | NoMatch:
    """Lift the program of one recorded native unit (from its source when the recording
    holds it, else by probing) and put the fastest verified generated operator in its place
    (:mod:`.program_gpu`); ``NoMatch`` says why lifting, every design or the gate refused.
    ``search_trials``: candidates the forge's search over the designs' knobs may evaluate
    past the presets (0: the presets only), within half of ``timeout_s``; ``prefer``: only
    these presets are tried (:func:`.narrow.keep`)."""
    unit_dir = Path(unit_dir)
    try:
        rec = read_native(unit_dir)
    except KernforgeError as exc:
        return NoMatch(f"not a native unit: {exc.message}")
    if not any(len(p.pointers) == 1 and p.size == 8 for p in rec.params):
        return NoMatch("the kernel takes no device pointer the recording followed")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = _child(unit_dir.resolve(), out_dir.resolve(), repeat, passes, timeout_s,
                 "kernforge.apps.program_gpu", search_trials=search_trials,
                 search_seconds=timeout_s / 2 if search_trials else None, **_prefer(prefer))
    tried = tuple(res.get("tried") or ())
    if "nomatch" in res:
        return NoMatch(str(res["nomatch"]), res.get("recognized"), tried, res.get("phases"))
    return _deploy(rec, res, out_dir, band, tried, "lifted-operator", "lifted", "lifted")


@dataclass(frozen=True)
class FusedMatch:
    """A verified fused operator: ``spec_path`` (signed native deployment spec whose entry
    holds ``fuse``: the interposer runs every ``steps`` launches of the time loop as one launch
    of it), the interleaved ``speedup`` of one fused launch over ``steps`` original launches
    with its ``ci`` (99%), ``gcells_s`` (grid points times steps per second, fused), and
    ``tried`` (one row per candidate, as :class:`NoMatch`'s, with ``steps``)."""

    spec_path: Path
    speedup: float
    ci: tuple[float, float]
    cell: str
    steps: int
    note: str
    gcells_s: float | None = None
    tried: tuple[dict[str, Any], ...] = ()
    # the step's other launches (a sequence unit's): name, role (folded or elided) and does
    companions: tuple[dict[str, Any], ...] = ()
    phases: dict[str, Any] | None = None  # the child's time per phase (apps/phases.py)


def fuse_unit(unit_dir: Path, *, out_dir: Path, steps: tuple[int, ...] | None = None,
              repeat: int = 10, passes: int = 7, band: float = NOISE_BAND,
              timeout_s: float = 900.0, prefer: list[Any] | None = None
              ) -> FusedMatch | NoMatch:
    """Fuse ``steps`` (odd; default apps.fused.STEPS) launches of one recorded native unit's
    kernel, as a time loop that swaps its input and output runs them, into one launch of a
    generated operator (apps/fused.py); the spec is written only when one fused launch beats
    that many original ones through the gate every deployment passes. ``prefer``: only
    these ``[T, operator]`` pairs are tried (:func:`.narrow.keep`)."""
    from .fused import STEPS, check_steps  # the generators: only when fusing

    unit_dir = Path(unit_dir)
    for s in steps or STEPS:
        check_steps(s)
    try:
        rec = read_native(unit_dir)
    except KernforgeError as exc:
        return NoMatch(f"not a native unit: {exc.message}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = _child(unit_dir.resolve(), out_dir.resolve(), repeat, passes, timeout_s,
                 "kernforge.apps.fused_gpu", steps=list(steps or STEPS), **_prefer(prefer))
    tried = tuple(res.get("tried") or ())
    if "nomatch" in res:
        return NoMatch(str(res["nomatch"]), res.get("recognized"), tried, res.get("phases"))
    speedup, ci = float(res["speedup"]), (float(res["ci"][0]), float(res["ci"][1]))
    s = int(res["steps"])
    folded = f"; each step's boundary kernels folded: {res['faces']}" if res.get("faces") \
        else ""
    gone = [str(c["name"]) for c in res.get("companions") or () if c.get("role") == "elided"]
    if gone:
        folded += f"; elided (the held step re-runs them): {', '.join(gone)}"
    note = (f"{res['recognized']}{folded}; {s} steps fused by {res['operator']}; "
            f"{'; '.join(res['checks'])}")
    why = refusal(verified=True, idle=None, speedup=speedup, ci=ci, band=band)
    if why is not None:
        return NoMatch(f"fused {s} steps by {res['operator']}, not deployed: {why}",
                       res["recognized"], tried, res.get("phases"))
    spec = fused_spec(rec, res, out_dir)
    comps = tuple({"name": str(c["name"]), "role": str(c.get("role")), "does": c.get("does")}
                  for c in res.get("companions") or ())
    return FusedMatch(spec, speedup, ci, str(res["cell"]), s, note, res.get("gcells_s"), tried,
                      comps, res.get("phases"))


def _geometry(c: dict[str, Any]) -> nd.Geometry | None:
    """A companion's recorded (grid, block, shared memory), when the result gives it."""
    if c.get("grid") is None:
        return None
    g, b = (tuple(int(x) for x in c[k]) for k in ("grid", "block"))
    return (g[0], g[1], g[2]), (b[0], b[1], b[2]), int(c["shared_mem"])


def fused_spec(rec: NativeRecording, res: dict[str, Any], out_dir: Path) -> Path:
    """The signed spec of a fused result (fused_gpu's): one entry replacing the recorded
    kernel by the fused adapter, with ``fuse`` (steps, the offsets of IN and OUT, and the step's
    boundary kernels the operator folds: the interposer holds them with the stencil)."""
    s, speedup, ci = int(res["steps"]), float(res["speedup"]), list(res["ci"])
    image = Path(res["image"]).read_bytes()
    name = f"{rec.path.name}.fused{s}.cubin"
    evidence = {"method": "fused-operator", "verified": True, "idle": None,
                "speedup": speedup, "ci": ci, "steps": s,
                "median_original_s": res["median_original_s"],
                "median_tuned_s": res["median_fused_s"], "ratios": res["ratios"],
                "recognized": res["recognized"], "cell": res["cell"],
                "operator": res["operator"], "checks": res["checks"], "unit": rec.path.name,
                "arch": res["arch"], "gcells_s": res.get("gcells_s"),
                "points": res.get("points"), "device": res.get("device")}
    if res.get("companions"):  # every companion of the step, folded or elided
        evidence.update(companions=res["companions"], faces=res.get("faces"))
    fuse = res["fuse"]
    companions = [nd.Companion(str(c["name"]), bytes.fromhex(c["params"]),
                               tuple(int(o) for o in c["in_slots"]),
                               tuple(int(o) for o in c["out_slots"]),
                               tuple(int(o) for o in c.get("same_slots") or ()),
                               str(c["image"]) if c.get("image") else None,
                               _geometry(c),
                               tuple(bytes.fromhex(a) for a in c.get("launch_attrs") or ()))
                  for c in res.get("companions") or ()]
    entry = nd.fused_entry(rec, image=name, image_bytes=image, entry_name=res["entry"],
                           grid=res["grid"], block=res["block"], shared_mem=res["shared_mem"],
                           carveout=res["carveout"], evidence=evidence,
                           steps=int(fuse["steps"]), in_offset=int(fuse["in_offset"]),
                           out_offset=int(fuse["out_offset"]), companions=companions)
    return nd.write_spec(out_dir / f"{rec.path.name}.fused.json", [entry], {name: image})
