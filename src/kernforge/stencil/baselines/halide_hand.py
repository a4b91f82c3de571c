"""Halide with a hand-written GPU schedule (the algorithm is ``halide_common.define``).

Every computed Func (the output, and each intermediate stage of a temporal cell, computed at
root) is ``gpu_tile``d over x, y AND z: Halide 21 would otherwise keep z as a host loop with one
kernel launch per slice. Options (``HandSchedule``):

- ``tile``: threads per block in (x, y, z), default (32, 8, 1): one warp-wide row in x.
- ``zloop``: interior points per thread along z (a serial, unrolled loop inside each thread),
  so neighbouring z planes share loads in registers; 1 = one point per thread. Default 8: the
  fastest of ``CANDIDATES`` on the H200 at 512^3 fp32 for five of the six stencils (star_1:
  zloop=4, 0.5% faster), 1.2-2.3x faster than one point per thread (docs/stencil-baselines.md).
- ``shared``: stage the input tile (with its halo) in shared memory per block, loaded
  cooperatively by the block's threads (single-sweep cells only).

Ragged tiles use Halide's default tail (``ShiftInwards``: the last tile shifts back and
recomputes a few points) and ``GuardWithIf`` where an extent is smaller than the tile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec import Cell
from .halide_common import (
    CUDA_TARGET,
    Algorithm,
    HalideRunner,
    build_fixed_or_large,
    define,
    schedule_cpu,
    target_for,
)


@dataclass(frozen=True)
class HandSchedule:
    tile: tuple[int, int, int] = (32, 8, 1)
    zloop: int = 1
    shared: bool = False

    @property
    def key(self) -> str:
        t = "x".join(str(v) for v in self.tile)
        return f"tile={t},zloop={self.zloop}" + (",shared" if self.shared else "")


DEFAULT = HandSchedule((32, 8, 1), zloop=8)

CANDIDATES: tuple[HandSchedule, ...] = (
    HandSchedule((32, 8, 1)), HandSchedule((32, 4, 2)), HandSchedule((64, 4, 1)),
    HandSchedule((32, 8, 1), zloop=4), HandSchedule((32, 8, 1), zloop=8),
    HandSchedule((32, 8, 1), shared=True), HandSchedule((32, 8, 1), zloop=4, shared=True),
)
"""What ``tune`` tries: a few tilings, per-thread z loops and shared-memory staging."""


def schedule_gpu(alg: Algorithm, sched: HandSchedule = DEFAULT) -> None:
    hl = alg.hl
    x, y, z = alg.vars
    tx, ty, tz = sched.tile
    zl = max(1, sched.zloop)
    for f in alg.funcs:
        ex, ey, ez = alg.extent(f)
        fits = ex >= tx and ey >= ty and ez >= tz * zl
        tail = hl.TailStrategy.Auto if fits else hl.TailStrategy.GuardWithIf
        xo, yo, zo = hl.Var("xo"), hl.Var("yo"), hl.Var("zo")
        xi, yi, zi, zs = hl.Var("xi"), hl.Var("yi"), hl.Var("zi"), hl.Var("zs")
        if f is not alg.output:
            f.compute_root()
        if zl == 1:
            f.gpu_tile(x, y, z, xo, yo, zo, xi, yi, zi, tx, ty, tz, tail)
        else:
            (f.split(x, xo, xi, tx, tail).split(y, yo, yi, ty, tail)
              .split(z, zo, zi, tz * zl, tail).split(zi, zi, zs, zl, hl.TailStrategy.Auto)
              .reorder(zs, xi, yi, zi, xo, yo, zo).unroll(zs)
              .gpu_blocks(xo, yo, zo).gpu_threads(xi, yi, zi))
        if sched.shared and f is alg.output and not alg.stages:
            for param in alg.params.values():
                staged = param.in_(f)
                sx, sy, sz = staged.args()[:3]
                (staged.compute_at(f, xo).store_in(hl.MemoryType.GPUShared)
                 .gpu_threads(sx, sy))
                del sz


def build(cell: Cell, arrays: Any, *, target: str = CUDA_TARGET,
          schedule: HandSchedule | None = None) -> HalideRunner:
    """A runner of the hand-scheduled pipeline (``target`` without a GPU: the CPU schedule)."""
    sched = schedule or DEFAULT

    def make(large: bool) -> HalideRunner:
        alg = define(cell, large)
        if "cuda" in target:
            schedule_gpu(alg, sched)
            info = {"schedule": sched.key}
        else:
            schedule_cpu(alg)
            info = {"schedule": "cpu"}
        return HalideRunner("halide", alg, target_for(target, large), arrays, info)

    return build_fixed_or_large(cell, make)
