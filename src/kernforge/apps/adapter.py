"""The adapter that puts a matrix operator in place of a recorded kernel.

The driver interposer replaces a launch by calling another function with the *original*
parameter buffer (record/native/kf_deploy.c), so the replacement must take exactly the recorded
kernel's parameters. The adapter is one ``extern "C" __global__`` function with that layout:
the input and output grids at their parameters' places (typed), every other parameter a
placeholder of the same size and alignment. Its body:

- the operator's generated source, unchanged, compiled as a ``__device__`` function (the
  ``__global__`` and ``__launch_bounds__`` macros are redefined around it and restored after),
  runs the interior on the operator's own grid;
- before it, the threads of that grid share the boundary points (a grid-stride loop over
  their enumeration) and apply the recognized rule (copy, zero, zero-padded or periodic
  stencil; ``keep`` needs none): no extra blocks, which would cost a wave each;
- when the grids are not aligned as the operator's vector loads need (the problem key the
  interposer matches holds no pointers), every block instead walks all points with the plain
  per-point formula, so the adapter is correct for any pointers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import ConfigError
from ..core.native import NativeRecording
from ..stencil import matrix as mx
from ..stencil.kernels.common import literal
from ..stencil.operator import Operator
from .probe import Recognized, radii

SCALARS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


@dataclass(frozen=True)
class Slot:
    """One recorded parameter: ``size`` bytes at ``offset``, ``pointer`` when it is a device
    pointer into a recorded allocation."""

    offset: int
    size: int
    pointer: bool = False


def layout(rec: NativeRecording) -> tuple[Slot, ...]:
    return tuple(Slot(p.offset, p.size, p.size == 8 and len(p.pointers) == 1
                      and p.pointers[0][0] == p.offset) for p in rec.params)


def _align(offset: int, size: int) -> int:
    """The alignment a placeholder gets: the largest power of two (at most 16) dividing both
    its recorded offset and its size."""
    a = 16
    while a > 1 and (offset % a or size % a):
        a //= 2
    return a


def check_layout(slots: Sequence[Slot], total: int) -> None:
    """The placeholders must land at the recorded offsets (a ConfigError otherwise)."""
    off = 0
    for i, s in enumerate(slots):
        a = 8 if s.pointer else (s.size if s.size in SCALARS else _align(s.offset, s.size))
        off = -(-off // a) * a
        if off != s.offset:
            raise ConfigError(f"parameter {i} ({s.size} bytes) would sit at offset {off}, the "
                              f"recording has {s.offset}", hint="a parameter layout the "
                              "adapter cannot reproduce (packed or over-aligned structs)")
        off += s.size
    if total and off > total:
        raise ConfigError(f"the adapter's parameters take {off} bytes, the recording {total}")


def _params(slots: Sequence[Slot], match: Recognized, t: str) -> tuple[str, str]:
    """The adapter's parameter list and the struct declarations of its placeholders."""
    decls, structs = [], []
    for i, s in enumerate(slots):
        if i == match.in_param:
            decls.append(f"const {t}* __restrict__ kf_in")
        elif i == match.out_param:
            decls.append(f"{t}* __restrict__ kf_out")
        elif s.size in SCALARS:
            decls.append(f"{SCALARS[s.size]} kf_p{i}")
        else:
            structs.append(f"struct __align__({_align(s.offset, s.size)}) kf_blob{i} "
                           f"{{ unsigned char b[{s.size}]; }};\n")
            decls.append(f"kf_blob{i} kf_p{i}")
    return ", ".join(decls), "".join(structs)


def _point(match: Recognized, t: str, acc: str) -> str:
    """``kf_point(src, dst, i)``: grid point ``i`` by the kernel's rule (the stencil inside,
    the boundary rule outside)."""
    nx, ny, nz = match.shape
    rz, ry, rx = radii(match)
    prec = match.cell.precision
    terms_in, terms_b = [], []
    for k, (dz, dy, dx) in enumerate(sorted(match.weights)):
        lin = (dz * ny + dy) * nx + dx
        terms_in.append(f"KF_W{k} * ({acc})src[i + ({lin}L)]")
        if match.boundary == "periodic":
            terms_b.append(f"KF_W{k} * ({acc})src[(((z + ({dz}) + KF_NZ) % KF_NZ) * KF_NY + "
                           f"((y + ({dy}) + KF_NY) % KF_NY)) * KF_NX + "
                           f"((x + ({dx}) + KF_NX) % KF_NX)]")
        elif match.boundary == "zeropad":
            conds = [f"{v} + ({d}) >= 0 && {v} + ({d}) < KF_N{v.upper()}"
                     for v, d in (("z", dz), ("y", dy), ("x", dx)) if d]
            cond = " && ".join(conds) or "true"
            terms_b.append(f"(({cond}) ? KF_W{k} * ({acc})src[i + ({lin}L)] : ({acc})0)")
    weights = "".join(f"constexpr {acc} KF_W{k} = {literal(match.weights[o], prec)};\n"
                      for k, o in enumerate(sorted(match.weights)))
    rule = {"keep": "return;", "copy": "dst[i] = src[i];", "zero": f"dst[i] = ({t})0;",
            "zeropad": f"dst[i] = ({t})({' + '.join(terms_b)});",
            "periodic": f"dst[i] = ({t})({' + '.join(terms_b)});"}[match.boundary]
    return f"""constexpr long KF_NX = {nx}, KF_NY = {ny}, KF_NZ = {nz}, KF_N = {nx * ny * nz};
constexpr long KF_RZ = {rz}, KF_RY = {ry}, KF_RX = {rx};
{weights}__device__ __forceinline__ void kf_point(const {t}* __restrict__ src,
                                                {t}* __restrict__ dst, long i) {{
  const long x = i % KF_NX, y = i / KF_NX % KF_NY, z = i / (KF_NX * KF_NY);
  if (z >= KF_RZ && z < KF_NZ - KF_RZ && y >= KF_RY && y < KF_NY - KF_RY &&
      x >= KF_RX && x < KF_NX - KF_RX) {{
    dst[i] = ({t})({' + '.join(terms_in)});
    return;
  }}
  {rule}
}}
// the t-th boundary point: the z faces, then the y faces of the inner planes, then the x faces
__device__ __forceinline__ long kf_boundary(long t) {{
  constexpr long BZ = 2 * KF_RZ * KF_NY * KF_NX, BY = (KF_NZ - 2 * KF_RZ) * 2 * KF_RY * KF_NX;
  if (t < BZ) {{
    const long p = t / (KF_NY * KF_NX), z = p < KF_RZ ? p : KF_NZ - 2 * KF_RZ + p;
    return z * KF_NY * KF_NX + t % (KF_NY * KF_NX);
  }}
  t -= BZ;
  if (t < BY) {{
    const long r = t / KF_NX % (2 * KF_RY), z = KF_RZ + t / (2 * KF_RY * KF_NX);
    const long y = r < KF_RY ? r : KF_NY - 2 * KF_RY + r;
    return (z * KF_NY + y) * KF_NX + t % KF_NX;
  }}
  t -= BY;
  const long c = t % (2 * KF_RX), row = t / (2 * KF_RX);
  const long y = KF_RY + row % (KF_NY - 2 * KF_RY), z = KF_RZ + row / (KF_NY - 2 * KF_RY);
  return (z * KF_NY + y) * KF_NX + (c < KF_RX ? c : KF_NX - 2 * KF_RX + c);
}}
"""


def boundary_points(match: Recognized) -> int:
    if match.boundary == "keep":
        return 0
    nx, ny, nz = match.shape
    rz, ry, rx = radii(match)
    return nx * ny * nz - (nz - 2 * rz) * (ny - 2 * ry) * (nx - 2 * rx)


@dataclass(frozen=True)
class Adapter:
    """The adapter's source, entry and launch (the operator's)."""

    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    carveout: int
    operator: Operator


def adapter(op: Operator, match: Recognized, slots: Sequence[Slot], total: int) -> Adapter:
    """The adapter for ``op`` (one launch of ``in`` -> ``out``) in place of the kernel whose
    parameters are ``slots``; a ConfigError when the layout cannot be reproduced."""
    if len(op.launches) != 1 or set(op.launches[0].args) != {"in", "out"}:
        raise ConfigError(f"{op.key}: an adapter runs one launch reading in and writing out",
                          hint="a single-step design")
    if match.in_param >= len(slots) or not slots[match.in_param].pointer or \
            not slots[match.out_param].pointer:
        raise ConfigError("the recognized grids are not plain pointer parameters")
    check_layout(slots, total)
    launch = op.launches[0]
    prec = match.cell.precision
    t, acc = prec.ctype, prec.acc_ctype
    params, structs = _params(slots, match, t)
    block = launch.block
    threads = block[0] * block[1] * block[2]
    nb = boundary_points(match)
    # the vector loads of every design but naive need aligned grids (16 bytes, or the vector)
    align = prec.itemsize if op.design == "naive" else \
        max(16, int(op.params.get("vx", 1)) * prec.itemsize)
    call = ", ".join({"in": "kf_in", "out": "kf_out"}[a] for a in launch.args)
    digest = hashlib.sha256((op.source + params + repr(sorted(match.weights.items()))
                             + match.boundary).encode()).hexdigest()[:12]
    entry = f"kf_adapter_{digest}"
    guard = "" if align <= prec.itemsize else f"""  if ((reinterpret_cast<unsigned long long>(kf_in) |
       reinterpret_cast<unsigned long long>(kf_out)) % {align}) {{  // the operator's vectors
    const long n = (long)gridDim.x * gridDim.y * gridDim.z * {threads};
    for (long i = kf_block * {threads} + kf_tid; i < KF_N; i += n) kf_point(kf_in, kf_out, i);
    return;
  }}
"""
    bnd = "" if not nb else f"""  {{  // the boundary points, shared by every thread of the operator's grid
    const long n = (long)gridDim.x * gridDim.y * gridDim.z * {threads};
    for (long k = kf_block * {threads} + kf_tid; k < {nb}L; k += n)
      kf_point(kf_in, kf_out, kf_boundary(k));
  }}
"""
    source = f"""// kernforge operator adapter: {match.describe()}
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
{_point(match, t, acc)}{structs}
extern "C" __global__ void __launch_bounds__({threads}) {entry}({params}) {{
  const long kf_tid = threadIdx.x + {block[0]} * (threadIdx.y + {block[1]} * threadIdx.z);
  const long kf_block = ((long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
{guard}{bnd}  {launch.entry}({call});
}}
"""
    return Adapter(source, entry, launch.grid, launch.block, launch.shared_bytes,
                   launch.carveout, op)


MAX_STATIC_SHARED = 48 * 1024  # more needs a function attribute the interposer does not set


PLANAR_LIMIT = 5  # no forged entry exists for a planar cell: presets stand in for a search


def candidates(match: Recognized, limit: int | None = None) -> list[Operator]:
    """Operators to try for the recognized stencil, best guess first: the forged parameters of
    the matrix cell of the same family, radius, grid and precision (when the dispatch table has
    one), then each applicable single-launch design at its presets (its defaults where it
    declares none), naive last. ``limit``: at most that many (3 for a 3D stencil,
    :data:`PLANAR_LIMIT` for a planar one, whose designs bring several presets: each costs a
    compile and a few checked and timed launches)."""
    cell = match.cell
    limit = limit or (3 if match.dims == 3 else PLANAR_LIMIT)
    tried: list[tuple[str, dict[str, object]]] = []
    if match.dims == 3:
        entry = mx.load_table().get(f"{match.kind}_{match.radius}/{cell.shape.name}/"
                                    f"{cell.precision.value}")
        if entry is not None:
            tried.append((entry["design"], dict(entry["params"])))
    designs = [d for d in mx.applicable(cell) if d != "temporal"]
    tried += [(d, params) for d in designs for params in mx.presets(d, cell)]
    out: list[Operator] = []
    for design, params in tried:
        op = mx.build(design, cell, params)
        if op is None or len(op.launches) != 1 or op.launches[0].shared_bytes > MAX_STATIC_SHARED \
                or any(o.key == op.key for o in out):
            continue
        out.append(op)
    naive = [o for o in out if o.design == "naive"]
    return (out[:limit - 1] + naive[:1]) if naive and naive[0] not in out[:limit - 1] \
        else out[:limit]
