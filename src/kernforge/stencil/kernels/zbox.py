"""The z-marching design for box stencils: rows through L1, accumulators per output plane.

Each thread owns ``VX`` consecutive x points of one (x, y) column and marches a chunk of ``LZ``
output planes in z, like :mod:`.zmarch`; a box stencil needs the whole ``(2R+1) x (2R+1)``
neighbourhood of every input plane, so instead of a queue of input values the thread keeps
``2R+1`` accumulators per lane (as :mod:`.planesweep` does): when input plane ``k`` arrives,
each of its values is added, weighted, into every output plane ``k-R .. k+R`` it touches; output
plane ``k-R`` is then complete and stored. The plane's ``2R+1`` rows come through L1 as aligned
vector loads plus ``R`` scalars each side (neighbouring rows are other warps' rows: L1 hits), so
there is no shared-memory staging, no barrier and no index arithmetic per staged element.

Motivation (H200): the plane sweep spends as many instructions outside the FMAs as
in them (staging with a non-power-of-two tile width, shared-memory reads, barriers) and ran box_1
at 305-350 us for 512^3 in fp16 and fp32 alike (the FMAs alone need ~108 us), i.e. issue-bound;
here a plane costs ``(2R+1)(1+2R)`` loads per ``VX`` outputs besides the FMAs.

Parameters: ``tx, ty`` (block), ``vx`` (lanes per thread), ``lz`` (output planes per block; 0 =
the whole interior), ``pn`` (1: the rows of plane ``k+1`` are loaded while plane ``k`` is
summed, a register double buffer; 0: loaded on use), ``h2`` (fp16, even ``vx``: each plane's
``(2R+1)^2`` terms per output plane and lane pair as one ``__half2`` chain, added into the fp32
accumulators, as the plane sweep's ``h2`` does for vertical pairs), ``pw`` (1: the ``2R``
warm-up planes, which store nothing, in a loop of their own, so the steady loop stores without
a test; SASS for sm_90: box_1 fp32 vx=4 178 -> 155 instructions per plane, more registers),
``minb`` (``__launch_bounds__`` minimum resident blocks per SM: a register cap, see
:func:`.common.bounds`), ``l2p`` (an L2 prefetch size on the rows' vector loads,
:func:`.common.vec_loads`). (``l1``, the largest L1, is applied by
:func:`..matrix.build`.)
"""

from __future__ import annotations

from ..operator import Launch, Operator
from ..spec import Cell, Precision
from .common import (
    XYZ,
    DoesNotFit,
    TileIndex,
    bounds,
    cdiv,
    check_minb,
    constant_weight_defs,
    extents,
    half2_chain,
    half2_weights,
    header,
    lane_stores,
    launch_order,
    load,
    store,
    tile_index,
    vec_loads,
    weight_defs,
    weight_names,
)
from .design import BIT, L2P, MINB, Design, Space, knobs, precision_options


def _rows(cell: Cell, vx: int, prefix: str, plane: str, ld: str) -> list[str]:
    """Loads of the ``2R+1`` rows of ``plane`` around the thread's column (raw storage type;
    ``ld``: the opening of a global ``Vec`` load, :func:`.common.vec_loads`)."""
    r = cell.radius
    out = []
    for j in range(2 * r + 1):
        at = f"(({plane}) * NY + y + ({j - r})) * NX + x0"
        out.append(f"{prefix}v{j} = {ld}src + {at});")
        for d in range(1, r + 1):  # the first/last thread of a row has no halo to load
            # (only its boundary lanes would use it): the loads stay inside the array
            out.append(f"if (x0 > 0) {prefix}l{j}_{d} = src[{at} - {d}]; "
                       f"if (x0 + {vx} < NX) {prefix}r{j}_{d} = src[{at} + {vx - 1 + d}];")
    return out


def _declare(cell: Cell, prefix: str, init: str = "") -> list[str]:
    """The row registers ``{prefix}v*``, ``{prefix}l*``, ``{prefix}r*``: zeroed, or copies of
    the ``{init}``-prefixed ones."""
    r = cell.radius
    t = cell.precision.ctype

    def val(name: str) -> str:
        return f"{init}{name}" if init else "{}"

    out = []
    for j in range(2 * r + 1):
        halo = ", ".join(f"{prefix}l{j}_{d} = {val(f'l{j}_{d}')}, "
                         f"{prefix}r{j}_{d} = {val(f'r{j}_{d}')}" for d in range(1, r + 1))
        out.append(f"const Vec {prefix}v{j} = {val(f'v{j}')}; const {t} {halo};" if init
                   else f"Vec {prefix}v{j} = {{}}; {t} {halo};")
    return out


def _accumulate(cell: Cell, vx: int, prefix: str) -> list[str]:
    """The FMAs of one input plane into ``a[m][lane]`` (output plane ``k - R + m``)."""
    p = cell.precision
    r = cell.radius
    w = dict(zip(cell.stencil.offsets, weight_names(cell), strict=True))
    out = []
    for j in range(2 * r + 1):  # row y + j - R: its values as ACC, each converted once
        vals = {}
        for i in range(-r, vx + r):
            if i < 0:
                src = f"{prefix}l{j}_{-i}"
            elif i >= vx:
                src = f"{prefix}r{j}_{i - vx + 1}"
            else:
                src = f"{prefix}v{j}.v[{i}]"
            vals[i] = f"c{j}_{i + r}"
            out.append(f"const ACC {vals[i]} = {load(p, src)};")
        for m in range(2 * r + 1):
            for lane in range(vx):
                for dx in range(-r, r + 1):
                    name = w[(r - m, j - r, dx)]
                    out.append(f"a[{m}][{lane}] += {name} * {vals[lane + dx]};")
    return out


def _accumulate_h2(cell: Cell, vx: int) -> list[str]:
    """``h2``: per output plane and lane pair, the plane's ``(2R+1)^2`` terms as one ``HFMA2``
    chain (fp16), added into the fp32 accumulators; x-shifted pairs are built once per row."""
    r = cell.radius
    w = dict(zip(cell.stencil.offsets, range(cell.stencil.points), strict=True))
    out = []

    def half(j: int, i: int) -> str:
        return f"l{j}_{-i}" if i < 0 else f"r{j}_{i - vx + 1}" if i >= vx else f"v{j}.v[{i}]"

    pairs: dict[tuple[int, int, int], str] = {}
    for j in range(2 * r + 1):
        for k in range(vx // 2):
            for dx in range(-r, r + 1):
                i = 2 * k + dx
                if dx % 2 == 0 and 0 <= i < vx:
                    pairs[(j, k, dx)] = f"reinterpret_cast<const __half2*>(v{j}.v)[{i // 2}]"
                    continue
                key = next((n for (jj, kk, dd), n in pairs.items()
                            if jj == j and 2 * kk + dd == i), None)
                if key is None:
                    key = f"p{j}_{i + r}"
                    out.append(f"const __half2 {key} = __halves2half2({half(j, i)}, "
                               f"{half(j, i + 1)});")
                pairs[(j, k, dx)] = key
    for m in range(2 * r + 1):
        for k in range(vx // 2):
            terms = [(w[(r - m, j - r, dx)], pairs[(j, k, dx)])
                     for j in range(2 * r + 1) for dx in range(-r, r + 1)]
            out += half2_chain([(f"H{i}", pv) for i, pv in terms],
                               f"a[{m}][{2 * k}]", f"a[{m}][{2 * k + 1}]")
    return out


def _kernel(cell: Cell, tx: int, ty: int, vx: int, lz: int, pn: int, h2: int = 0,
            pw: int = 0, minb: int = 1, l2p: int = 0, bi: TileIndex = XYZ) -> str:
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    r = cell.radius
    nm = 2 * r + 1
    nl = "\n"
    whole, lanes = lane_stores(vx, lambda i: store(p, f"a[0][{i}]"))
    helper, ld = vec_loads(t, vx, l2p)
    if pn:  # rows of the next plane in flight while this one is summed
        fetch = (nl.join(f"    {s}" for s in _declare(cell, "", init="n")) + nl
                 + "    if (k + 1 < ke) {\n"
                 + nl.join(f"      {s}" for s in _rows(cell, vx, "n", "k + 1", ld)) + "\n    }")
        prologue = (nl.join(f"  {s}" for s in _declare(cell, "n")) + nl
                    + nl.join(f"  {s}" for s in _rows(cell, vx, "n", "zb - R", ld)))
    else:
        fetch = (nl.join(f"    {s}" for s in _declare(cell, "")) + nl
                 + nl.join(f"    {s}" for s in _rows(cell, vx, "", "k", ld)))
        prologue = ""
    body = nl.join(f"    {s}" for s in (_accumulate_h2(cell, vx) if h2
                                          else _accumulate(cell, vx, "")))
    shift = f"""    #pragma unroll
    for (int m = 0; m < {nm - 1}; ++m)
      #pragma unroll
      for (int l = 0; l < {vx}; ++l) a[m][l] = a[m + 1][l];
    #pragma unroll
    for (int l = 0; l < {vx}; ++l) a[{nm - 1}][l] = 0;"""
    put = (f"      const long base = (zo * NY + y) * NX + x0;\n"
           f"      if (x0 >= R && x0 + {vx} <= NX - R) {{ Vec o; {whole} "
           f"*reinterpret_cast<Vec*>(dst + base) = o; }}\n"
           f"      else {{ {lanes} }}")
    if pw:  # the 2R warm-up planes in a loop of their own: the steady loop stores always
        loops = (f"  long k = zb - R;\n  #pragma unroll\n  for (; k < zb + R; ++k) {{\n"
                 f"{fetch}\n{body}\n{shift}\n  }}\n"
                 f"  for (; k < ke; ++k) {{\n{fetch}\n{body}\n    {{\n"
                 f"      const long zo = k - R;\n{put}\n    }}\n{shift}\n  }}")
    else:
        loops = (f"  for (long k = zb - R; k < ke; ++k) {{\n{fetch}\n{body}\n"
                 f"    const long zo = k - R;\n    if (zo >= zb) {{\n{put}\n    }}\n"
                 f"{shift}\n  }}")
    return f"""typedef {acc} ACC;
{helper}extern "C" __global__ void __launch_bounds__({bounds(tx * ty, minb)})
zbox(const {t}* __restrict__ src, {t}* __restrict__ dst) {{
{half2_weights(cell) if h2 else ""}  const long x0 = ((long){bi.x} * {tx} + threadIdx.x) * {vx};
  const long y = (long){bi.y} * {ty} + threadIdx.y;
  if (y < R || y >= NY - R || x0 >= NX - R || x0 + {vx} <= R) return;
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
  const long ke = ze + R;  // input planes zb - R .. ze + R - 1
  ACC a[{nm}][{vx}] = {{}};
{prologue}
{loops}
}}
"""


def generate(cell: Cell, tx: int = 32, ty: int = 8, vx: int = 4, lz: int = 0,
             pn: int = 1, h2: int = 0, pw: int = 0, minb: int = 1, l2p: int = 0,
             zo: int = 0) -> Operator:
    if cell.stencil.kind != "box" or cell.stencil.temporal:
        raise DoesNotFit(f"zbox handles single-step box stencils, not {cell.stencil.name}")
    if vx not in (1, 2, 4, 8) or cell.shape.nx % vx:
        raise DoesNotFit(f"vx={vx} must be 1, 2, 4 or 8 and divide NX={cell.shape.nx}")
    if vx < cell.radius:
        raise DoesNotFit(f"vx={vx} must be >= the radius {cell.radius} (x halo loads)")
    if vx * cell.precision.itemsize > 16:
        raise DoesNotFit("vector loads of at most 16 bytes")
    if pn not in (0, 1) or h2 not in (0, 1) or pw not in (0, 1):
        raise DoesNotFit("pn, h2 and pw: 0 or 1")
    if h2 and (cell.precision is not Precision.FP16 or vx % 2):
        raise DoesNotFit("h2 needs fp16 storage and an even vx (lane pairs)")
    check_minb(tx * ty, minb)
    bi = tile_index(zo)  # the launch order: where the tile coordinates are
    nz_int = cell.shape.nz - 2 * cell.radius
    lz = nz_int if lz <= 0 else min(lz, nz_int)
    align = cell.precision.itemsize * vx
    vec = f"struct __align__({align}) Vec {{ {cell.precision.ctype} v[{vx}]; }};\n"
    weights = (constant_weight_defs(cell) if cell.precision is Precision.FP64
               else weight_defs(cell))
    source = (header(cell) + extents(cell) + weights + vec
              + _kernel(cell, tx, ty, vx, lz, pn, h2, pw, minb, l2p, bi))
    grid = (cdiv(cell.shape.nx, tx * vx), cdiv(cell.shape.ny, ty), cdiv(nz_int, lz))
    launch = Launch("zbox", grid, (tx, ty, 1), ("in", "out"))
    params = {"tx": tx, "ty": ty, "vx": vx, "lz": lz, "pn": pn}
    if h2:
        params["h2"] = 1
    if pw:
        params["pw"] = 1
    if minb > 1:
        params["minb"] = minb
    if l2p:
        params["l2p"] = l2p
    return launch_order(Operator(cell.id, "zbox", params, source, (launch,)), zo)


# 16-byte loads at most (ptxas for sm_90, box_1 512^3: fp32 vx=4 46 registers and 44.5
# instructions per output, vx=2 32 and 57, the plane sweep ~60; fp16 vx=4 42, vx=8 75)
LANES = {Precision.FP16: (4, 8), Precision.FP32: (4, 2), Precision.FP64: (2,)}


def space(cell: Cell) -> Space:
    """Each parameter's values, the default first (fp64 weights always in constant memory:
    no ``cw``)."""
    zb: Space = {
        "vx": LANES[cell.precision], "lz": (32, 64, 16, 8, 128), "ty": (8, 4, 16),
        "tx": (32, 64, 16), "pn": (1, 0), "pw": BIT,
        "minb": MINB, "l1": BIT, "zo": BIT, "l2p": L2P}
    return {**zb, **precision_options(cell, cw=False)}


KNOBS = knobs(
    "vx", "lz", "ty", "tx", "minb", "l1", "zo", "l2p",
    pn="next plane in flight: its rows loaded while this plane is summed (a register double "
       "buffer)",
    pw="warm-up peeled: the warm-up planes in a loop of their own (the steady loop stores "
       "without a test; fewer instructions per plane, more registers)",
    h2="fp16 pairs: __half2 arithmetic (HFMA2) per lane pair, each plane's terms added into "
       "fp32 accumulators")

DESIGN = Design("zbox", {"box": 1}, space, generate, KNOBS)
