"""The GPU half of lifted-program operators, run in a child process of its own.

``python -m kernforge.apps.program_gpu REQUEST.json RESULT.json``: the native unit is placed on
the device as its replay places it; its program is lifted (from its source when the recording
holds it, :func:`~.lift_source.lift_source`, else by probing the replayed kernel,
:func:`~.lift_probe.lift_probe`), bound to the kernel's parameters
(:mod:`.program_binding`), and each generated operator (:mod:`kernforge.stencil.program.designs`)
is wrapped in an adapter with the kernel's parameter layout (:mod:`.program_adapter`),
compiled, accepted on the recorded outputs and against the original kernel on fresh random
inputs (:mod:`.program_checks`), screened; with a search budget (``search_trials``), the
forge's search over the designs' knobs follows under the same gates (:mod:`.program_search`),
its best kept when at least as fast as the best preset interleaved; the fastest is timed
against the original with the replay's interleaved protocol. The result also gives the
operator's fraction of the device's copy bandwidth. A kernel that faults on a probe costs only
this process.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import CompileError, ConfigError, KernforgeError, Measurement, Status
from ..forge.program_space import ProgramSpace
from ..harness.compare import interleave
from ..record.native_format import read_native
from ..replay.native import NativeReplay
from ..stencil.program.designs import candidates
from . import narrow
from .adapter import layout
from .lift_includes import kernel_name, native_text, template_precision
from .lift_probe import Probed, lift_probe
from .lift_regions import Lifted
from .lift_source import lift_source
from .operator_gpu import RECORDED, ReplayTarget, built, pointer_table
from .phases import Phases, watch
from .process import child_main
from .program_adapter import ProgramAdapter, program_adapter
from .program_binding import bind_lifted, bind_probed
from .program_checks import copy_bandwidth, moved_bytes, scalar_values, validate
from .program_search import SearchObjective, search

LIMIT = 4  # candidate operators per kernel: each costs a compile, checks and timed runs


class LiftedRun:
    """The adapter loaded into the replay's context, launched with the recorded parameters."""

    def __init__(self, rp: NativeReplay, ad: ProgramAdapter, image: bytes) -> None:
        self.rp, self.ad = rp, ad
        self.fn = rp.drv.function(rp.drv.load(image), ad.entry)

    def run(self) -> None:
        self.rp.drv.launch(self.fn, self.ad.grid, self.ad.block, self.ad.shared_bytes,
                           self.rp.params, self.rp.rec.launch_attrs)
        self.rp.drv.synchronize()

    def time(self) -> float:
        self.rp.restore(only_written=True)
        self.rp.drv.flush_l2()
        return self.rp.drv.time_launch(self.fn, self.ad.grid, self.ad.block,
                                       self.ad.shared_bytes, self.rp.params,
                                       self.rp.rec.launch_attrs)


def refusal(t: ReplayTarget) -> str | None:
    """Why no generated operator may replace the unit whatever its program."""
    rec = t.rp.rec
    globs = [r for r in rec.regions if r.kind == "global"]
    if globs:
        return (f"the kernel's module has {len(globs)} global(s) the program set "
                f"({sum(r.size for r in globs)} bytes, e.g. __constant__ coefficients): the "
                "deployment's problem key does not see them, so a baked operator could not "
                "follow a change")
    for region in {b.region for b in t.buffers}:
        group = [b for b in t.buffers if b.region == region]
        if len(group) > 1 and any(b.written for b in group):
            return (f"parameters {', '.join(str(b.param) for b in group)} point into one "
                    "allocation the kernel writes: an operator reading the fields as they were "
                    "before the launch would not compute what the kernel computes")
    for b in t.buffers:
        if (n := pointer_table(rec, b.region)) > 0:
            return (f"parameter {b.param} points to memory holding {n} device pointers (a "
                    "table of pointers, not a grid)")
    return None


def lift(t: ReplayTarget) -> tuple[Any, str, dict[str, str]]:
    """(binding and program, or None; how it was lifted; why each path refused)."""
    rec = t.rp.rec
    why: dict[str, str] = {}
    if rec.source is not None:
        code, defines = native_text(rec.source)
        r = lift_source(code, kernel_name(rec.name), defines=defines,
                        precision=template_precision(rec.name))
        if isinstance(r, Lifted):
            ints = {i: v for i, v in enumerate(_ints(rec)) if v is not None}
            sizes = {i: p.size for i, p in enumerate(rec.params)}
            try:
                return (r.program, bind_lifted(r, ints, sizes)), "lifted from source", why
            except ConfigError as exc:
                why["source"] = exc.message
        else:
            why["source"] = r.reason
    else:
        why["source"] = "the recording holds no source"
    pr = lift_probe(t)
    if isinstance(pr, Probed):
        return (pr.program, bind_probed(pr)), "lifted by probing", why
    why["probing"] = pr.reason
    return None, "", why


def _ints(rec: Any) -> list[int | None]:
    out: list[int | None] = []
    for p in rec.params:
        raw = rec.param_bytes[p.offset:p.offset + p.size]
        out.append(int.from_bytes(raw, "little", signed=True) if p.size in (4, 8)
                   and not p.pointers else None)
    return out


def session(unit: str, out_dir: str, repeat: int, passes: int, search_trials: int = 0,
            search_seconds: float | None = None, prefer: Sequence[str] | None = None
            ) -> dict[str, Any]:
    """The child's work (the module docstring), its phase timings in the result's
    ``phases`` (:mod:`.phases`); ``prefer``: the presets to try, the others left out
    (:func:`.narrow.keep`)."""
    ph = Phases()
    res = _session(unit, out_dir, repeat, passes, search_trials, search_seconds, ph, prefer)
    res["phases"] = ph.figures(len(res.get("tried") or ()))
    return res


def _session(unit: str, out_dir: str, repeat: int, passes: int, search_trials: int,
             search_seconds: float | None, ph: Phases,
             prefer: Sequence[str] | None = None) -> dict[str, Any]:
    with ph("setup"):
        rec = read_native(unit)
        rp = NativeReplay(rec)
        t = ReplayTarget(rp)
        watch(ph, rp, t)
        why = refusal(t)
        if why:
            return {"nomatch": why}
        lifted, how, refused = lift(t)
    if lifted is None:
        return {"nomatch": "not lifted: " + "; ".join(f"{k}: {v}" for k, v in refused.items()),
                "lift_refused": refused}
    prog, binding = lifted
    desc = f"{how}: " + prog.describe().replace("\n", "; ")
    arch = f"sm_{rp.drv.attribute('cc_major')}{rp.drv.attribute('cc_minor')}"
    params = scalar_values(rec, binding)
    kernels, design_refused = candidates(prog, binding, limit=LIMIT)
    kernels = narrow.keep(kernels, prefer, lambda k: k.key)
    tried: list[dict[str, Any]] = [{"operator": d, "refused": m}
                                   for d, m in design_refused.items()]
    with ph("baseline"):
        for _ in range(2):
            rp.time(RECORDED)
        original = statistics.median(rp.time(RECORDED) for _ in range(repeat))
    best: tuple[float, LiftedRun, bytes, list[str]] | None = None
    cache: dict[int, Any] = {}  # fresh inputs and the original's outputs, for every candidate
    known: dict[str, Measurement] = {}  # the presets' outcomes, which the search reuses
    runs: dict[str, tuple[float, Any, bytes, list[str]]] = {}
    with ph("compile"):
        made = built(kernels, lambda k: program_adapter(
            k, prog, binding, layout(rec), len(rec.param_bytes)), arch)
    ph.count("compile", sum(not isinstance(a, KernforgeError) for _, a, _ in made))
    for k, ad, image in made:
        row: dict[str, Any] = {"operator": k.key}
        tried.append(row)
        try:
            if isinstance(ad, KernforgeError):
                raise ad
            if isinstance(image, CompileError):
                raise image
            with ph("load", 1):
                run = LiftedRun(rp, ad, image)
            with ph("check", 1):  # from the recorded state and on fresh inputs
                bad, done = validate(t, prog, binding, run.run, params, cache)
        except (ConfigError, CompileError, KernforgeError) as exc:
            row["refused"] = exc.message
            known[k.key] = Measurement(exc.status or Status.RUNTIME_FAILED, exc.message)
            continue
        if bad:
            row["refused"] = bad
            known[k.key] = Measurement(Status.WRONG_RESULT, bad)
            continue
        with ph("screen", 1):
            for _ in range(2):
                run.time()
            times = tuple(run.time() for _ in range(repeat))
        med = statistics.median(times)
        row.update(median_s=med, screen_speedup=original / med if med > 0 else None)
        known[k.key] = Measurement(Status.OK, k.key, times)
        runs[k.key] = (med, run, image, done)
        if best is None or med < best[0]:
            best = (med, run, image, done)
    searched: dict[str, Any] | None = None
    if best is not None and search_trials > 0:
        try:
            ps = ProgramSpace(prog, binding)
        except ConfigError as exc:
            searched = {"refused": exc.message}
        else:
            obj = SearchObjective(ps, t, lambda ad, im: LiftedRun(rp, ad, im), arch, params,
                                  cache, repeat, layout(rec), len(rec.param_bytes), known, runs)
            with ph("search"):
                best, searched, rows = search(obj, best, trials=search_trials,
                                              seconds=search_seconds,
                                              storage=Path(out_dir) / "search", passes=passes)
            tried += rows
    if best is None:
        reasons = "; ".join(f"{x['operator']}: {x.get('refused')}" for x in tried)
        return {"nomatch": f"{desc}; no operator passed: {reasons}", "recognized": desc,
                "tried": tried, "lift_refused": refused, "original_screen_s": original}
    _, run, image, done = best
    with ph("final", 1):
        for _ in range(3):
            rp.time(RECORDED)
        ab = interleave(lambda: rp.time(RECORDED), run.time, passes=passes, per_pass=3)
        moved = moved_bytes(prog, binding)
        bw = copy_bandwidth(rp.drv, arch, moved)
        stem = Path(out_dir) / f"{rec.path.name}.lifted"
        stem.with_suffix(".cu").write_text(run.ad.source)
        stem.with_suffix(".cubin").write_bytes(image)
    return {"recognized": desc, "cell": f"program {prog.key}", "operator": run.ad.kernel.key,
            "design": run.ad.kernel.design, "how": how, "lift_refused": refused,
            "program": prog.to_json(),
            "entry": run.ad.entry, "grid": list(run.ad.grid), "block": list(run.ad.block),
            "shared_mem": run.ad.shared_bytes, "carveout": None,
            "image": str(stem.with_suffix(".cubin")), "source": str(stem.with_suffix(".cu")),
            "arch": arch, "device": rp.drv.identity(), "checks": done, "tried": tried,
            "original_screen_s": original, "speedup": ab.speedup,
            "ci": [ab.ci_low, ab.ci_high], "median_original_s": ab.median_a,
            "median_adapter_s": ab.median_b, "ratios": list(ab.ratios),
            "bytes": moved, "copy_bw": bw, "search": searched,
            "copy_fraction": moved / ab.median_b / bw if ab.median_b > 0 else None}


def main(argv: Sequence[str]) -> int:
    return child_main(argv, lambda req: session(
        req["unit"], req["out_dir"], int(req["repeat"]), int(req["passes"]),
        int(req.get("search_trials") or 0), req.get("search_seconds"), req.get("prefer")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
