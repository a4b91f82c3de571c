"""Fused operators: ``T`` steps of a program's time loop in one launch (issue 42).

A time loop launches a recognized stencil kernel (apps/probe.py) once per step with its input
and output buffers swapped between launches. With deferral, the driver interposer holds such
launches and runs every ``T`` of them (``T`` odd) as one launch of a fused kernel, given the
parameter buffer of the group's first launch. The contract (a native spec entry's ``fuse``:
:func:`fuse_field`):

- the fused kernel takes exactly the recorded kernel's parameter layout (the adapter's slots,
  apps/adapter.py);
- it leaves in OUT's buffer what ``T`` launches of the original leave in the buffer the last
  one writes (OUT, since ``T`` is odd), within the kernel's tolerance over ``T`` steps
  (:func:`tolerance_steps`), everywhere the original writes, and everything else of OUT as the
  original sequence would;
- it only reads IN's buffer (the next, unfused launch rewrites it).

The operators: the matrix's temporal design (3D star of radius 1, boundary ``copy``: it keeps
the input's ring at every step) and overlapped tiling (stencil/kernels/overlap.py: 2D and 3D,
any radius, every recognized boundary rule, ``keep`` reading the ring of the buffer each step
reads). A step may also launch boundary kernels after the stencil (a face held at a value, a
face copying its inner neighbour): lifted to face rules (apps/lift_companion.py), they fold
into overlapped tiling over the ``keep``, ``copy`` and ``zero`` rules and into both temporal
kernels (stencil/kernels/temporal_faces.py, temporal_pipe_faces.py) (``faces``), and the fused kernel
then does each whole step. The adapter around them is this module's; the GPU
half is apps/fused_gpu.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from ..core import ConfigError
from ..stencil import faces as fc
from ..stencil import matrix as mx
from ..stencil.kernels import overlap, temporal
from ..stencil.kernels.common import DoesNotFit
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from .adapter import MAX_STATIC_SHARED, Adapter, Slot, _params, _point, check_layout
from .probe import Recognized, tolerance

STEPS = (3, 5, 7)  # the fused steps tried, smallest halo first
MIN_STEPS, MAX_STEPS = 3, 63  # the interposer's bounds (odd only)
# the temporal design's parameters tried, best guess first: the dispatch table's for star_1_t4
# on 256^3 fp32 (pipelined, two rows per thread), a smaller pipelined tile, the first design;
# one point per thread in x (cx=1: no vector load, so any pointer alignment)
TEMPORAL_TILES = ({"tx": 64, "ty": 16, "lz": 128, "pipe": 1, "cy": 2, "zo": 1},
                  {"tx": 32, "ty": 16, "lz": 64, "pipe": 1, "fi": 1},
                  {"tx": 32, "ty": 32, "lz": 64})


def check_steps(steps: int) -> None:
    """``steps`` must be odd, 3 to 63 (a ConfigError otherwise): with ``T`` odd the last of
    ``T`` swapped launches writes OUT, the buffer the fused kernel writes."""
    if not isinstance(steps, int) or steps % 2 == 0 or not MIN_STEPS <= steps <= MAX_STEPS:
        raise ConfigError(f"{steps} fused steps: the interposer fuses an odd number of "
                          f"launches, {MIN_STEPS} to {MAX_STEPS}",
                          hint="with an even count the last output lands in IN's buffer, "
                               "which the fused kernel must only read; choose 3, 5, 7, ...")


def refusal(match: Recognized, in_bytes: int | None = None, out_bytes: int | None = None,
            faces: fc.Groups = ()) -> str | None:
    """Why ``match`` cannot be fused (None when it can): an in-place kernel, IN and OUT of
    different sizes (a time loop swaps equal buffers), a boundary rule or element type the
    fused designs do not build, face rules (the step's boundary kernels,
    apps/lift_companion.py) they do not fold."""
    if match.in_param == match.out_param:
        return "the kernel updates one buffer in place: a fused kernel needs IN and OUT apart"
    if in_bytes is not None and out_bytes is not None and in_bytes != out_bytes:
        return (f"IN ({in_bytes} bytes) and OUT ({out_bytes} bytes) differ in size: a time "
                "loop that swaps them is not what this kernel is launched in")
    if match.boundary not in overlap.RULES:
        return (f"boundary rule {match.boundary!r}: fused operators reproduce "
                f"{', '.join(overlap.RULES)}")
    if match.dtype not in ("float32", "float64"):
        return f"{match.dtype} grids: fused operators build float32 and float64"
    if faces and match.boundary not in overlap.FACE_BASES:
        return (f"boundary kernels after a stencil of boundary rule {match.boundary!r}: they "
                f"fold into rules {', '.join(overlap.FACE_BASES)}")
    nx, ny, nz = match.shape
    return fc.check(faces, (nz, ny, nx), match.cell.stencil.radii) if faces else None


def fuse_field(slots: Sequence[Slot], match: Recognized, steps: int) -> dict[str, int]:
    """A native spec entry's ``fuse``: ``steps`` and the byte offsets, in the recorded
    parameter block, of the two device pointers the time loop swaps."""
    check_steps(steps)
    for p in (match.in_param, match.out_param):
        if p >= len(slots) or not slots[p].pointer:
            raise ConfigError(f"parameter {p} is no device pointer of the recorded layout",
                              hint="fusion swaps the kernel's two grid pointers")
    return {"steps": steps, "in_offset": slots[match.in_param].offset,
            "out_offset": slots[match.out_param].offset}


def tolerance_steps(match: Recognized, scale: float, steps: int) -> tuple[float, float]:
    """(rtol, atol) of ``steps`` fused steps: each step may add the one-step bound
    (:func:`.probe.tolerance`), and a step carries the earlier errors amplified by at most
    ``sum|w|`` (taken as at least 1)."""
    s = max(1.0, sum(abs(w) for w in match.weights.values()))
    grow = sum(s ** k for k in range(steps))
    eps = float(np.finfo(np.dtype(match.dtype)).eps)
    return 8 * eps * steps, tolerance(match.dtype, match.weights, scale) * grow


# the temporal design with face rules, the pipelined kernel first (stencil/kernels/
# temporal_pipe_faces.py), from the matrix's best star_1_t4 operators on the H200 (256^3 fp32:
# 64x16 threads, two rows each, zo=1; fp64: a 32x32 tile, pf=3) within 48 KiB of shared memory:
# the 64x32 tile fits T=3 in fp32, the 32x32 tile T=3 and 5 in fp32, the 32x16 tile T=3, 5, 7
# in fp32 and T=3, 5 in fp64; 512-thread blocks two per SM in fp32 (ptxas 13, sm_90, the demo
# at 256^3: 64 registers, no spill; fp64 needs more: the design refuses it); ``gb=1`` (the
# gathers' own buffer, a barrier less in the blocks on a face) where its planes fit too
FACE_PIPE_TILES = ({"tx": 64, "ty": 16, "lz": 128, "pipe": 1, "cy": 2, "zo": 1, "fi": 1},
                   {"tx": 32, "ty": 16, "lz": 128, "pipe": 1, "cy": 2, "pf": 2, "fi": 1,
                    "minb": 2, "gb": 1},
                   {"tx": 32, "ty": 16, "lz": 128, "pipe": 1, "cy": 2, "pf": 2, "fi": 1,
                    "minb": 2},
                   {"tx": 32, "ty": 16, "lz": 128, "pipe": 1, "pf": 3, "fi": 1, "zo": 1,
                    "minb": 2},
                   {"tx": 32, "ty": 16, "lz": 128, "pipe": 1, "pf": 3, "fi": 1, "zo": 1, "gb": 1},
                   {"tx": 32, "ty": 16, "lz": 128, "pipe": 1, "pf": 3, "fi": 1, "zo": 1})
# then its first kernel (each stage gathers the faces), best
# guess first: two 1024-thread blocks per SM (ptxas 13, sm_90, the demo at 256^3: T=3 fits
# 32 registers without a spill, T=5 spills 16 bytes), then one; 48 KiB of shared memory leave
# T=7 the 32x24 tile
FACE_TILES = ({"tx": 32, "ty": 32, "lz": 64, "minb": 2}, {"tx": 32, "ty": 32, "lz": 64},
              {"tx": 32, "ty": 32, "lz": 32}, {"tx": 64, "ty": 16, "lz": 64},
              {"tx": 32, "ty": 24, "lz": 64})


def _temporal(match: Recognized, steps: int, tile: dict[str, int], faces: fc.Groups = ()
              ) -> Operator | None:
    """The matrix's temporal design for ``steps`` steps (3D star_1, boundary copy), each
    followed by the ``faces`` groups' rules; None where it does not apply or fit."""
    if match.dims != 3 or match.kind != "star" or match.radius != 1 or match.boundary != "copy":
        return None
    spec = dataclasses.replace(match.spec, steps=steps, name=f"{match.spec.name}_t{steps}")
    cell = Cell(spec, match.cell.shape, match.cell.precision)
    if not faces:
        return mx.build("temporal", cell, dict(tile))
    try:
        return temporal.generate(cell, **tile, faces=faces)
    except DoesNotFit:
        return None


TILES_PER_STEPS = 3  # overlapped tiling presets tried per T: the first that fit


def candidates(match: Recognized, steps: Sequence[int] = STEPS, limit: int | None = None,
               faces: fc.Groups = ()) -> list[tuple[int, Operator]]:
    """(T, operator) pairs to try, each applying ``T`` steps in one launch: the temporal design
    where it applies, then overlapped tiling's presets, for each ``T`` of ``steps``; each step
    followed by the ``faces`` groups' rules (the step's boundary kernels, in launch order);
    those that do not fit (48 KiB of shared memory) are left out; ``limit``: at most that
    many."""
    why = refusal(match, faces=faces)
    if why:
        raise ConfigError(f"not fusable: {why}", hint="the one-launch operator still applies")
    for t in steps:
        check_steps(t)
    out: list[tuple[int, Operator]] = []
    for t in steps:
        temporal = [_temporal(match, t, tile, faces)
                    for tile in ((*FACE_PIPE_TILES, *FACE_TILES) if faces else TEMPORAL_TILES)]
        out += [(t, op) for op in temporal if op is not None
                and op.launches[0].shared_bytes <= MAX_STATIC_SHARED and len(op.launches) == 1]
        fit = 0
        for tile in overlap.presets(match.cell, t):
            if fit == TILES_PER_STEPS:
                break
            try:
                out.append((t, overlap.generate(match.cell, match.boundary, t, **tile,
                                                faces=faces)))
                fit += 1
            except DoesNotFit:
                continue
    return out[:limit]


def fused_adapter(op: Operator, match: Recognized, slots: Sequence[Slot], total: int,
                  steps: int) -> Adapter:
    """The fused operator ``op`` (``steps`` steps, one launch of ``in`` -> ``out``) in an
    ``extern "C"`` kernel with the recorded kernel's parameter layout; a ConfigError when the
    layout cannot be reproduced."""
    check_steps(steps)
    if len(op.launches) != 1 or set(op.launches[0].args) != {"in", "out"}:
        raise ConfigError(f"{op.key}: a fused adapter runs one launch reading in and writing "
                          "out", hint="a fused design with all steps in one launch")
    if int(op.params.get("steps", steps)) != steps:
        raise ConfigError(f"{op.key} fuses {op.params.get('steps')} steps, not {steps}")
    fuse_field(slots, match, steps)
    check_layout(slots, total)
    launch = op.launches[0]
    prec = match.cell.precision
    t, acc = prec.ctype, prec.acc_ctype
    params, structs = _params(slots, match, t)
    block = launch.block
    threads = block[0] * block[1] * block[2]
    bnd, point = "", ""
    if op.design == "temporal" and "faces" not in op.params:
        # it writes the interior only: the ring is in's at every step (with face rules it
        # writes every point)
        point = _point(match, t, acc)
        nx, ny, nz = match.shape
        nb = nx * ny * nz - (nz - 2) * (ny - 2) * (nx - 2)
        bnd = f"""  {{  // the boundary ring: in's (rule copy), shared by every thread of the grid
    const long n = (long)gridDim.x * gridDim.y * gridDim.z * {threads};
    for (long k = kf_block * {threads} + kf_tid; k < {nb}L; k += n)
      kf_point(kf_in, kf_out, kf_boundary(k));
  }}
"""
    call = ", ".join({"in": "kf_in", "out": "kf_out"}[a] for a in launch.args)
    minb = int(op.params.get("minb", 1))  # the design's blocks per SM, kept on the entry
    bounds = f"{threads}, {minb}" if minb > 1 else f"{threads}"
    digest = hashlib.sha256((op.source + params + repr(sorted(match.weights.items()))
                             + match.boundary + str(steps)).encode()).hexdigest()[:12]
    entry = f"kf_fused_{digest}"
    folded = f"\n// then per step: {op.params['faces']}" if "faces" in op.params else ""
    source = f"""// kernforge fused operator adapter: {steps} steps of {match.describe()}{folded}
// operator {op.cell_id} {op.key}
#pragma push_macro("__global__")
#pragma push_macro("__launch_bounds__")
#undef __global__
#define __global__ __device__ __forceinline__
#undef __launch_bounds__
#define __launch_bounds__(...)
{op.source}
#pragma pop_macro("__launch_bounds__")
#pragma pop_macro("__global__")
{point}{structs}
extern "C" __global__ void __launch_bounds__({bounds}) {entry}({params}) {{
  const long kf_tid = threadIdx.x + {block[0]} * (threadIdx.y + {block[1]} * threadIdx.z);
  const long kf_block = ((long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  (void)kf_tid; (void)kf_block;
{bnd}  {launch.entry}({call});
}}
"""
    return Adapter(source, entry, launch.grid, launch.block, launch.shared_bytes,
                   launch.carveout, op)


def steps_model(match: Recognized, x: np.ndarray, y: np.ndarray, steps: int,
                faces: fc.Groups = ()) -> np.ndarray:
    """What ``steps`` launches of the recognized kernel, each followed by the ``faces``
    groups' rules, IN (``x``) and OUT (``y``) swapped after each step, leave in the buffer the
    last step writes: the float64 oracle."""
    from .probe import model

    a, b = x.astype(np.float64), y.astype(np.float64)
    for _ in range(steps):
        new = model(match, a, b)
        a, b = fc.apply(new, faces).reshape(-1), a
    return a
