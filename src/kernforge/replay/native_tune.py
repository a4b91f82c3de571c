"""Tuning a native unit without its source: launch geometry, shared-memory carveout, and PTX JIT
options when the image is PTX.

The space is small, so every candidate is evaluated (no sampler): each in a child process at the
recorded addresses, verified bitwise against the recorded outputs before it is timed; a
candidate that crashes costs only itself (the rest go on in a fresh child). The fastest verified
candidate is then compared with the recorded configuration interleaved (median of per-pass
ratios, bootstrap CI) and kept only when :func:`kernforge.deploy.gate.refusal` accepts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Measurement
from ..core.native import NativeRecording
from .native import NativeVariant
from .native_child import run_isolated

BLOCKS_1D = (64, 128, 256, 512, 1024)
BLOCKS_2D = ((16, 8), (16, 16), (32, 4), (32, 8), (32, 16), (64, 2), (64, 4), (128, 2),
             (128, 4), (256, 1))
BLOCKS_3D = ((32, 4, 2), (32, 4, 4), (32, 8, 2), (64, 4, 2), (16, 8, 4), (32, 2, 4))
CARVEOUTS = (0, 100)
PTX_JIT = ((("max_registers", 32),), (("max_registers", 64),), (("max_registers", 128),),
           (("optimization_level", 3),))


def candidates(rec: NativeRecording) -> list[NativeVariant]:
    """The recorded configuration first, then block shapes that launch the same threads per
    dimension, carveouts, and (PTX images) JIT options."""
    _, by, bz = rec.block
    if by == bz == 1:
        shapes = [(x, 1, 1) for x in BLOCKS_1D]
    elif bz == 1:
        shapes = [(x, y, 1) for x, y in BLOCKS_2D]
    else:
        shapes = list(BLOCKS_3D)
    out = [NativeVariant()]
    out += [NativeVariant(block=s) for s in shapes if s != rec.block]  # type: ignore[arg-type]
    out += [NativeVariant(carveout=c) for c in CARVEOUTS]
    if rec.image_kind == "ptx":
        out += [NativeVariant(jit=j) for j in PTX_JIT]
    return out


def evaluate_all(unit: Path, variants: Sequence[NativeVariant], *, repeat: int = 10,
                 warmup: int = 3, progress: Callable[[int, int], None] | None = None,
                 tolerance: str | None = None, dtype: str | None = None) -> list[Measurement]:
    """One measurement per variant; after a crash the remaining ones run in a fresh child."""
    done: list[Measurement] = []
    while len(done) < len(variants):
        rest = list(variants[len(done):])
        out = run_isolated(unit, rest, repeat=repeat, warmup=warmup, tolerance=tolerance,
                           dtype=dtype)
        ms = out["measurements"]
        ran = [m for m in ms if not m.message.startswith("not run: an earlier variant")]
        done += ran or ms[:1]
        if progress:
            progress(len(done), len(variants))
    return done


@dataclass
class NativeTuning:
    """What tuning one native unit found."""

    unit: Path
    rec: NativeRecording
    variants: list[NativeVariant]
    results: list[Measurement]
    best: int | None = None
    speedup: float | None = None
    ci: tuple[float, float] | None = None
    medians: tuple[float, float] | None = None  # recorded, best: from the interleaved passes
    refused: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def win(self) -> bool:
        return self.best is not None and self.refused is None

    def to_json(self) -> dict[str, Any]:
        r = self.rec
        return {"unit": str(self.unit), "kernel": r.entry, "name": r.name,
                "grid": list(r.grid), "block": list(r.block), "shared_mem": r.shared_mem,
                "identity": dict(r.identity),
                "evaluations": [{"variant": v.to_json(), "label": v.label(),
                                 "status": m.status.value, "message": m.message[:300],
                                 "median": m.median if m.samples else None}
                                for v, m in zip(self.variants, self.results)],
                "best": None if self.best is None else self.variants[self.best].to_json(),
                "best_label": None if self.best is None else self.variants[self.best].label(),
                "speedup": self.speedup, "ci": list(self.ci) if self.ci else None,
                "medians": list(self.medians) if self.medians else None,
                "win": self.win, "refused": self.refused, "notes": self.notes}


def tune_native(unit: Path, rec: NativeRecording, *, repeat: int = 10, passes: int = 7,
                refuse: Callable[[float, tuple[float, float]], str | None],
                progress: Callable[[int, int], None] | None = None,
                tolerance: str | None = None, dtype: str | None = None) -> NativeTuning:
    variants = candidates(rec)
    results = evaluate_all(unit, variants, repeat=repeat, progress=progress,
                           tolerance=tolerance, dtype=dtype)
    t = NativeTuning(unit, rec, variants, results)
    base = results[0]
    if not base.ok:
        t.refused = f"the recorded configuration does not replay: {base.status.value} {base.message}"
        return t
    ok = [i for i, m in enumerate(results) if i > 0 and m.ok]
    if not ok:
        t.refused = "no other configuration verified"
        return t
    best = min(ok, key=lambda i: results[i].median)
    if results[best].median >= base.median:
        t.refused = "no configuration was faster than the recorded one"
        return t
    t.best = best
    cmp = run_isolated(unit, [variants[0], variants[best]], repeat=3, warmup=1,
                       compare_pair=(0, 1), passes=passes, tolerance=tolerance,
                       dtype=dtype).get("compare")
    if not cmp:
        t.refused = "the interleaved comparison did not complete"
        return t
    t.speedup, t.ci = cmp["speedup"], (cmp["ci"][0], cmp["ci"][1])
    t.medians = (cmp["median_a"], cmp["median_b"])
    t.refused = refuse(t.speedup, t.ci)
    return t
