"""Shared pieces of generated CUDA source: types, literals, loads/stores, the weighted sum."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...core import ConfigError
from ..operator import Operator
from ..spec import Cell, Precision


class DoesNotFit(ConfigError, ValueError):
    """These parameters do not build an operator for this cell (a design's refusal, not a bug:
    too much shared memory, a vector width that does not divide the row, ...). Still a
    ValueError, for callers that caught the generators' ValueError before."""

    def __init__(self, message: str, hint: str = "another value of the parameter; "
                 "stencil.matrix.space lists each design's values") -> None:
        super().__init__(message, hint=hint)


def header(cell: Cell) -> str:
    lines = [f"// kernforge stencil operator for {cell.id} (generated; do not edit)"]
    if cell.precision is Precision.FP16:
        lines.append("#include <cuda_fp16.h>")
    return "\n".join(lines) + "\n"


MAX_THREADS_PER_SM = 2048  # sm_80 and sm_90


def check_minb(threads: int, minb: int) -> None:
    """``minb`` blocks of ``threads`` must fit one SM (else :class:`DoesNotFit`)."""
    if not 1 <= minb <= 32 or threads * minb > MAX_THREADS_PER_SM:
        raise DoesNotFit(f"minb={minb}: 1-32 resident blocks of {threads} threads, at most "
                         f"{MAX_THREADS_PER_SM} threads per SM")


def bounds(threads: int, minb: int) -> str:
    """``__launch_bounds__`` arguments: the block size, and with ``minb > 1`` the minimum
    resident blocks per SM, which caps ptxas at ``65536 / (threads * minb)`` registers per
    thread (spilling beyond that): occupancy bought with registers."""
    return f"{threads}, {minb}" if minb > 1 else f"{threads}"


def largest_l1(op: Operator) -> Operator:
    """``op`` with every launch asking for the largest L1 (shared-memory carveout 0%; the
    driver still gives a kernel the shared memory it declares), ``l1=1`` among its parameters,
    and a first source line naming the carveout, so the two variants never share a cached module
    (the carveout is an attribute of the loaded function). A launch attribute, the same for
    every design: :func:`kernforge.stencil.matrix.build` applies it."""
    return dataclasses.replace(
        op, params={**op.params, "l1": 1},
        source="// launch attribute: preferred shared-memory carveout 0% (largest L1)\n"
               + op.source,
        launches=tuple(dataclasses.replace(launch, carveout=0) for launch in op.launches))


@dataclass(frozen=True)
class TileIndex:
    """Where a kernel finds its tile coordinates: the ``blockIdx`` component holding the tile's
    x, its y and its z-chunk. Templates write ``{bi.x}``, ``{bi.y}``, ``{bi.z}``, never
    ``blockIdx`` itself, so the launch order is chosen when the source is emitted
    (:func:`tile_index`), not by a pass over it afterwards."""

    x: str = "blockIdx.x"
    y: str = "blockIdx.y"
    z: str = "blockIdx.z"


XYZ = TileIndex()  # the hardware issues blocks x first: a plane of tiles, then the next chunk
ZXY = TileIndex("blockIdx.y", "blockIdx.z", "blockIdx.x")  # zo=1: grid (z, x, y)


def tile_index(zo: int) -> TileIndex:
    """The tile coordinates of launch order ``zo`` (0: grid (x, y, z); 1: the z-chunks first,
    grid (z, x, y)); :class:`DoesNotFit` for other values."""
    if zo not in (0, 1):
        raise DoesNotFit(f"zo={zo!r}: the launch order is 0 (x first) or 1 (z-chunks first)")
    return ZXY if zo else XYZ


def launch_order(op: Operator, zo: int) -> Operator:
    """``op`` (its source emitted with :func:`tile_index` of ``zo``) in launch order ``zo``:
    with ``zo=1`` the z-chunks first, the grid (z, x, y), ``zo=1`` among its parameters and a
    first source line naming the order. Blocks that share halo planes (the same column,
    neighbouring chunks) are then issued together and meet in the L2, instead of a whole plane
    of tiles apart. The kernels use ``blockIdx`` only as tile coordinates, so the result is the
    same operator, reordered. Where every launch has one z-chunk (or one tile) the order is
    unchanged (x first: (gx, gy, 1) -> (1, gx, gy) issues x + gx y as before): the same kernel
    under another key; two table entries are such. ``zo=0``: ``op`` as it is."""
    if not zo:
        return op
    launches = []
    for launch in op.launches:
        gx, gy, gz = launch.grid
        if max(gx, gy) > 65535:
            raise DoesNotFit(f"zo=1 needs at most 65535 x and y tiles, not {gx} and {gy}")
        launches.append(dataclasses.replace(launch, grid=(gz, gx, gy)))
    return dataclasses.replace(
        op, params={**op.params, "zo": 1},
        source="// launch order: z-chunks first (grid z, x, y)\n" + op.source,
        launches=tuple(launches))


def literal(value: float, precision: Precision) -> str:
    """``value`` as a literal of the accumulation type (exact for fp64, rounded for fp32)."""
    if precision is Precision.FP64:
        return repr(float(value))
    return f"{float(np.float32(value))!r}f"


def load(precision: Precision, expr: str) -> str:
    """Read an element (a pointer expression's target) as the accumulation type."""
    if precision is Precision.FP16:
        return f"__half2float({expr})"
    return expr


def store(precision: Precision, value: str) -> str:
    """Convert an accumulation-type value to the storage type."""
    if precision is Precision.FP16:
        return f"__float2half_rn({value})"
    return value


def lane_stores(vx: int, value: Callable[[int], str], at: str = "base") -> tuple[str, str]:
    """The two halves of a z-marching thread's store of ``vx`` lanes at ``dst + at``:
    ``whole`` fills ``Vec o`` (for an all-interior vector) and ``lanes`` stores each interior
    lane alone; ``value(i)`` is lane ``i``'s stored expression."""
    whole = " ".join(f"o.v[{i}] = {value(i)};" for i in range(vx))
    lanes = " ".join(f"if (x0 + {i} >= R && x0 + {i} < NX - R) dst[{at} + {i}] = {value(i)};"
                     for i in range(vx))
    return whole, lanes


def weight_names(cell: Cell) -> list[str]:
    """Names of the per-offset weights, aligned with ``cell.stencil.offsets``."""
    return [f"W{i}" for i in range(cell.stencil.points)]


def weight_defs(cell: Cell) -> str:
    """``constexpr`` definitions of the weights in the accumulation type."""
    acc = cell.precision.acc_ctype
    return "".join(f"constexpr {acc} {name} = {literal(w, cell.precision)};\n"
                   for name, w in zip(weight_names(cell), cell.stencil.weights, strict=True))


def constant_weight_defs(cell: Cell) -> str:
    """The weights as a ``__constant__`` array with ``W0, W1, ...`` naming its elements: fp64
    FMAs cannot take a 64-bit immediate, so literal weights cost two uniform moves per DFMA
    (sm_90 SASS); a constant-bank operand costs none."""
    acc = cell.precision.acc_ctype
    lits = ", ".join(literal(w, cell.precision) for w in cell.stencil.weights)
    names = "".join(f"#define {n} KW[{i}]\n" for i, n in enumerate(weight_names(cell)))
    return f"__constant__ {acc} KW[{cell.stencil.points}] = {{{lits}}};\n{names}"


def half2_weights(cell: Cell) -> str:
    """Kernel-local ``__half2`` copies ``H0, H1, ...`` of the weights (fp16 arithmetic)."""
    return "".join(f"  const __half2 H{i} = __float2half2_rn({literal(w, cell.precision)});\n"
                   for i, w in enumerate(cell.stencil.weights))


def half2_chain(terms: list[tuple[str, str]], low: str, high: str) -> list[str]:
    """One ``__half2`` partial sum ``sum(weight * pair)`` over ``terms`` (weight, pair names),
    its two halves added into the fp32 accumulators ``low`` and ``high``."""
    (w0, v0), rest = terms[0], terms[1:]
    return [f"{{ __half2 t = __hmul2({w0}, {v0});",
            *(f"  t = __hfma2({w}, {v}, t);" for w, v in rest),
            f"  {low} += __low2float(t); {high} += __high2float(t); }}"]


def extents(cell: Cell) -> str:
    s = cell.shape
    return (f"constexpr long NX = {s.nx}, NY = {s.ny}, NZ = {s.nz};\n"
            f"constexpr int R = {cell.radius};\n")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def ping_pong(steps: int) -> list[tuple[str, str]]:
    """(source, destination) roles of ``steps`` single-step sweeps ending in ``out``.

    One step reads ``in`` and writes ``out``; more alternate between ``out`` and ``tmp`` so the
    last one lands in ``out`` (``tmp``'s boundary is preset like ``out``'s).
    """
    roles = []
    cur = "in"
    for s in range(steps):
        nxt = "out" if (steps - s) % 2 == 1 else "tmp"
        roles.append((cur, nxt))
        cur = nxt
    return roles


L2_PREFETCH = (0, 128, 256)  # l2p: bytes the L2 fetches from DRAM around a missed load


def l2_prefetch(l2p: int) -> str:
    """The PTX qualifier of ``l2p`` (``.L2::128B``, ``.L2::256B``; ``""`` for 0): on a miss the
    L2 requests that many aligned bytes from DRAM, not only the missed 32-byte sectors, so a
    row's later sectors are already on their way (more bytes in flight per load issued).
    :class:`DoesNotFit` for other values."""
    if type(l2p) is not int or l2p not in L2_PREFETCH:  # 128.0 would print as .L2::128.0B
        raise DoesNotFit(f"l2p={l2p!r}: the L2 prefetch size is one of {L2_PREFETCH}")
    return f".L2::{l2p}B" if l2p else ""


_LD_TYPES = {"float": ("f32", "f", "float"), "double": ("f64", "d", "double"),
             "__half": ("b16", "h", "unsigned short")}


def prefetching_load(t: str, l2p: int) -> str:
    """``kf_ld(p)``: a read-only global load of one ``t`` with the L2 prefetch size ``l2p``
    (``ld.global.nc.L2::<l2p>B``); on the host emulator a plain read."""
    ptx, reg, ct = _LD_TYPES[t]
    value = "__ushort_as_half(v)" if t == "__half" else "v"
    return f"""#if defined(__CUDA_ARCH__) && !defined(KERNFORGE_EMULATION)
__device__ __forceinline__ {t} kf_ld(const {t}* g) {{
  {ct} v;
  asm("ld.global.nc{l2_prefetch(l2p)}.{ptx} %0, [%1];" : "={reg}"(v) : "l"(g));
  return {value};
}}
#else
__device__ __forceinline__ {t} kf_ld(const {t}* g) {{ return *g; }}
#endif
"""


GLOBAL_VEC = "*reinterpret_cast<const Vec*>("  # the opening of a plain global Vec load


def vec_loads(t: str, vx: int, l2p: int) -> tuple[str, str]:
    """How a z-marching or zbox kernel loads a ``Vec`` from the global arrays (``src``, ``coef``;
    not the shared-memory tiles): ``(helper, opening)``. With ``l2p=0`` no helper and a plain
    load, ``*reinterpret_cast<const Vec*>(``; else ``kf_ldv(``, a helper (emitted just before
    the kernel) that loads with ``ld.global.nc`` and the L2 prefetch size ``l2p``, in 16-byte
    (or smaller) pieces; on the host emulator a plain read. The generator writes
    ``opening + address + ")"`` at every such load, so no pass over its source is needed."""
    hint = l2_prefetch(l2p)
    if not l2p:
        return "", GLOBAL_VEC
    nbytes = {"__half": 2, "float": 4, "double": 8}[t] * vx
    pieces = []
    for off in range(0, nbytes, 16):
        n = min(16, nbytes - off)
        if n == 2:
            pieces.append(f'asm("ld.global.nc{hint}.b16 %0, [%1];" : "=h"(r.h) '
                          f': "l"(b + {off}));')
            continue
        w = n // 4
        regs = ", ".join(f"%{i}" for i in range(w))
        outs = ", ".join(f'"=r"(r.u[{off // 4 + i}])' for i in range(w))
        vec = f".v{w}" if w > 1 else ""
        regs = f"{{{regs}}}" if w > 1 else regs
        pieces.append(f'asm("ld.global.nc{hint}{vec}.b32 {regs}, [%{w}];" : {outs} '
                      f': "l"(b + {off}));')
    body = "\n  ".join(pieces)
    helper = f"""#if defined(__CUDA_ARCH__) && !defined(KERNFORGE_EMULATION)
__device__ __forceinline__ Vec kf_ldv(const {t}* g) {{
  union {{ Vec v; unsigned u[{max(1, nbytes // 4)}]; unsigned short h; }} r;
  const char* const b = reinterpret_cast<const char*>(g);
  {body}
  return r.v;
}}
#else
__device__ __forceinline__ Vec kf_ldv(const {t}* g) {{ return *reinterpret_cast<const Vec*>(g); }}
#endif
"""
    return helper, "kf_ldv("
