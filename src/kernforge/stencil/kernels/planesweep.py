"""The plane-sweep design for box stencils: shared-memory planes, register-blocked outputs.

A block owns a tile of ``tx*vx`` x ``ty*ry`` columns and sweeps a chunk of ``lz`` output planes.
Each input plane (tile plus an ``R`` halo) is staged once in shared memory (double-buffered; the
next plane's loads are issued into registers before the current plane is consumed, so their
latency hides behind the arithmetic). A thread owns ``ry`` rows x ``vx`` lanes of outputs and
keeps ``2R+1`` accumulators per output: when input plane ``k`` arrives, each staged value is read
from shared memory once and added, weighted, into every output plane ``k-R .. k+R`` it touches.
After plane ``k``, output plane ``k-R`` is complete and stored. The arithmetic is the minimum
(one FMA per point and offset); shared-memory reads per output and plane are
``(ry+2R)(vx+2R)/(ry*vx)``.

``h2=1`` (fp16 only, ``ry`` even): the planes are staged as ``__half``, two vertically adjacent
outputs are computed together in ``__half2`` arithmetic (``HFMA2``: two FMAs per instruction,
pairs built once per staged value), and each input plane's partial sum per output and output
plane ((2R+1)^2 terms) is added into the fp32 accumulators, so half precision only ever holds one
plane's partial sum. Shared memory halves; the FMA instructions per output halve.

``cw=1`` (fp64): the weights in a ``__constant__`` array instead of literals (a DFMA cannot take
a 64-bit immediate: two uniform moves per FMA in the sm_90 SASS of the literal form).

``st`` (1-3): the planes staged by ``cp.async`` copies into a ring of ``st + 2``
stages instead (:mod:`.planesweep_async`), ``ca=1`` those copies cached in L1 too.

``l2p`` (128 or 256): the plane loads (``ld.global.nc``, or the ``cp.async`` copies)
carry an L2 prefetch size: on a miss the L2 fetches that many aligned bytes from DRAM.

``sc``: the outputs written by streaming stores (``st.global.cs``, ``__stcs``:
evict-first), so they do not displace input planes that neighbouring blocks still read from L2.

``minb``: ``__launch_bounds__`` minimum resident blocks per SM (:func:`.common.bounds`).
(``l1``, the largest L1 the staged planes leave, is applied by :func:`..matrix.build`.)
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
    header,
    l2_prefetch,
    launch_order,
    load,
    prefetching_load,
    store,
    tile_index,
    weight_names,
)
from .design import BIT, L2P, MINB, Design, Space, knobs, precision_options


def _weight_table(cell: Cell) -> dict[tuple[int, int, int], str]:
    return dict(zip(cell.stencil.offsets, weight_names(cell), strict=True))


def accumulate(cell: Cell, vx: int, ry: int, buf: str) -> list[str]:
    """Straight-line FMAs of one staged plane into the accumulators a[m][j][l]."""
    r = cell.radius
    w = _weight_table(cell)
    lines = []
    for j in range(ry + 2 * r):  # staged rows this thread touches
        for i in range(vx + 2 * r):  # staged columns
            lines.append(f"{{ const ACC v = {buf}[(ty * {ry} + {j}) * SW + tx * {vx} + {i}];")
            for jr in range(ry):
                dy = j - jr - r
                if abs(dy) > r:
                    continue
                for lane in range(vx):
                    dx = i - lane - r
                    if abs(dx) > r:
                        continue
                    for m in range(2 * r + 1):
                        name = w.get((r - m, dy, dx))
                        if name:
                            lines.append(f"  a[{m}][{jr}][{lane}] += {name} * v;")
            lines.append("}")
    return lines


def accumulate_h2(cell: Cell, vx: int, ry: int, buf: str) -> list[str]:
    """One staged plane in ``__half2`` arithmetic over vertical output pairs (see ``h2``)."""
    r = cell.radius
    w = _weight_table(cell)
    lines = []
    for j in range(ry + 2 * r):  # the staged values this thread touches, read once
        for i in range(vx + 2 * r):
            lines.append(f"const __half s{j}_{i} = {buf}[(ty * {ry} + {j}) * SW + tx * {vx} + {i}];")
    for j in range(ry + 2 * r - 1):  # vertical pairs (rows j, j+1)
        for i in range(vx + 2 * r):
            lines.append(f"const __half2 p{j}_{i} = __halves2half2(s{j}_{i}, s{j + 1}_{i});")
    for m in range(2 * r + 1):
        for q in range(ry // 2):
            for lane in range(vx):
                terms = [(name, 2 * q + dy + r, lane + dx + r)
                         for dy in range(-r, r + 1) for dx in range(-r, r + 1)
                         if (name := w.get((r - m, dy, dx)))]
                if not terms:
                    continue
                lines += half2_chain([(f"H{n}", f"p{j}_{i}") for n, j, i in terms],
                                     f"a[{m}][{2 * q}][{lane}]", f"a[{m}][{2 * q + 1}][{lane}]")
    return lines


def _source(cell: Cell, tx: int, ty: int, vx: int, ry: int, lz: int, h2: int = 0,
            cw: int = 0, minb: int = 1, l2p: int = 0, sc: int = 0, bi: TileIndex = XYZ) -> str:
    p = cell.precision
    t = p.ctype
    r = cell.radius
    bx, by = tx * vx, ty * ry
    sw, sh = bx + 2 * r, by + 2 * r
    per = cdiv(sw * sh, tx * ty)
    weights, halves = weight_decls(cell, h2, cw)
    # the staged planes: ACC values (converted on load), or raw __half with half2 weights (h2)
    hint = l2_prefetch(l2p)  # "" for 0; DoesNotFit for a size the L2 does not prefetch
    at = "kf_ld(src + (k * NY + gy) * NX + gx)" if hint else "src[(k * NY + gy) * NX + gx]"
    ld = prefetching_load(t, l2p) if hint else ""
    stage, value, zero = "ACC", load(p, at), "(ACC)0"
    acc_body = "\n      ".join(accumulate(cell, vx, ry, "cur"))
    if h2:
        stage, value, zero = "__half", at, "__float2half(0.0f)"
        acc_body = "\n      ".join(accumulate_h2(cell, vx, ry, "cur"))
    init, shift = accumulators(cell, vx, ry, sc)
    return f"""{header(cell)}{extents(cell)}typedef {p.acc_ctype} ACC;
{weights}constexpr int SW = {sw}, SH = {sh}, PER = {per}, NT = {tx * ty};
{ld}extern "C" __global__ void __launch_bounds__({bounds(tx * ty, minb)})
planesweep(const {t}* __restrict__ src, {t}* __restrict__ dst) {{
  __shared__ {stage} tile[2][SH * SW];{halves}
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * {tx} + tx;
  const long ox = (long){bi.x} * {bx} - R, oy = (long){bi.y} * {by} - R;
  const long gx0 = ox + R + tx * {vx}, gy0 = oy + R + ty * {ry};
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
{init}
  {stage} pre[PER];
  auto fetch = [&](long k) {{
    #pragma unroll
    for (int e = 0; e < PER; ++e) {{
      const int idx = tid + e * NT;
      const long gy = oy + idx / SW, gx = ox + idx % SW;
      pre[e] = (idx < SH * SW && gx >= 0 && gx < NX && gy >= 0 && gy < NY)
               ? {value} : {zero};
    }}
  }};
  fetch(zb - R);
  for (long k = zb - R; k < ze + R; ++k) {{
    {stage}* cur = tile[k & 1];
    #pragma unroll
    for (int e = 0; e < PER; ++e) {{
      const int idx = tid + e * NT;
      if (idx < SH * SW) cur[idx] = pre[e];
    }}
    __syncthreads();
    if (k + 1 < ze + R) fetch(k + 1);
    {{
      {acc_body}
    }}
{shift}
  }}
}}
"""


def stores(cell: Cell, vx: int, ry: int, sc: int = 0) -> str:
    """The stores of output plane ``zo`` (``a[0]``): every interior point of the thread's
    ``ry`` rows x ``vx`` lanes; ``sc``: streaming (evict-first) stores, ``__stcs``."""
    out = []
    for jr in range(ry):
        for lane in range(vx):
            at = f"(zo * NY + gy0 + {jr}) * NX + gx0 + {lane}"
            value = store(cell.precision, f"a[0][{jr}][{lane}]")
            put = f"__stcs(dst + {at}, ({cell.precision.ctype})({value}))" if sc \
                else f"dst[{at}] = {value}"
            out.append(
                f"if (gy0 + {jr} >= R && gy0 + {jr} < NY - R && gx0 + {lane} >= R && "
                f"gx0 + {lane} < NX - R) {put};")
    return "\n          ".join(out)


def accumulators(cell: Cell, vx: int, ry: int, sc: int = 0) -> tuple[str, str]:
    """The accumulators ``a[m][row][lane]`` (output plane ``k - R + m``) zeroed, and the end
    of a plane's iteration: output plane ``k - R`` stored, the accumulators moved down."""
    r = cell.radius
    init = f"""  ACC a[{2 * r + 1}][{ry}][{vx}];
  #pragma unroll
  for (int m = 0; m < {2 * r + 1}; ++m)
    #pragma unroll
    for (int j = 0; j < {ry}; ++j)
      #pragma unroll
      for (int l = 0; l < {vx}; ++l) a[m][j][l] = 0;"""
    shift = f"""    const long zo = k - R;
    if (zo >= zb) {{
          {stores(cell, vx, ry, sc)}
    }}
    #pragma unroll
    for (int m = 0; m < {2 * r}; ++m)
      #pragma unroll
      for (int j = 0; j < {ry}; ++j)
        #pragma unroll
        for (int l = 0; l < {vx}; ++l) a[m][j][l] = a[m + 1][j][l];
    #pragma unroll
    for (int j = 0; j < {ry}; ++j)
      #pragma unroll
      for (int l = 0; l < {vx}; ++l) a[{2 * r}][j][l] = 0;"""
    return init, shift


def weight_decls(cell: Cell, h2: int, cw: int) -> tuple[str, str]:
    """The weights at file scope (literals, or a ``__constant__`` array with ``cw``) and, with
    ``h2``, their ``__half2`` copies declared in the kernel."""
    weights = constant_weight_defs(cell) if cw else "".join(
        f"constexpr ACC {n} = {lit};\n" for n, lit in literals(cell))
    halves = "".join(f"\n  const __half2 H{n} = __float2half2_rn({lit});"
                     for n, lit in literals(cell)) if h2 else ""
    return weights, halves


def literals(cell: Cell) -> list[tuple[str, str]]:
    from .common import literal
    return [(n, literal(w, cell.precision))
            for n, w in zip(weight_names(cell), cell.stencil.weights, strict=True)]


def shared_bytes(cell: Cell, tx: int, ty: int, vx: int, ry: int, h2: int = 0) -> int:
    r = cell.radius
    item = 2 if h2 else 8 if cell.precision.acc_ctype == "double" else 4
    return 2 * (tx * vx + 2 * r) * (ty * ry + 2 * r) * item


def generate(cell: Cell, tx: int = 32, ty: int = 4, vx: int = 1, ry: int = 4,
             lz: int = 0, h2: int = 0, cw: int = 0, minb: int = 1, st: int = 0,
             ca: int = 0, l2p: int = 0, sc: int = 0, zo: int = 0) -> Operator:
    if cell.stencil.temporal or cell.stencil.kind == "varcoeff":
        raise DoesNotFit(f"planesweep handles single-step constant-coefficient stencils, "
                         f"not {cell.stencil.name}")
    if h2 and (cell.precision is not Precision.FP16 or ry % 2):
        raise DoesNotFit("h2 needs fp16 storage and an even ry (vertical output pairs)")
    if cw not in (0, 1) or (cw and cell.precision is not Precision.FP64):
        raise DoesNotFit("cw (weights in constant memory) is for fp64 (no 64-bit immediates)")
    check_minb(tx * ty, minb)
    if sc not in (0, 1):
        raise DoesNotFit("sc (streaming stores) is 0 or 1")
    bi = tile_index(zo)  # the launch order: where the tile coordinates are
    nz_int = cell.shape.nz - 2 * cell.radius
    lz = nz_int if lz <= 0 else min(lz, nz_int)
    grid = (cdiv(cell.shape.nx, tx * vx), cdiv(cell.shape.ny, ty * ry), cdiv(nz_int, lz))
    if st or ca:  # planes staged by asynchronous copies (kernels/planesweep_async.py)
        from . import planesweep_async as pa

        pa.check(cell, tx, ty, vx, ry, h2, st, ca)
        shared = pa.shared_bytes(cell, tx, ty, vx, ry, st)
        source = pa.source(cell, tx, ty, vx, ry, lz, h2, cw, minb, st, ca, l2p, sc, bi)
        launch = Launch("planesweep", grid, (tx, ty, 1), ("in", "out"), shared)
    else:
        if shared_bytes(cell, tx, ty, vx, ry, h2) > 48 * 1024:
            raise DoesNotFit("the staged planes exceed 48 KiB of static shared memory")
        source = _source(cell, tx, ty, vx, ry, lz, h2, cw, minb, l2p, sc, bi)
        launch = Launch("planesweep", grid, (tx, ty, 1), ("in", "out"))
    params = {"tx": tx, "ty": ty, "vx": vx, "ry": ry, "lz": lz}
    # absent at their first value: the operators of earlier tables keep their keys
    params.update({k: 1 for k, v in (("h2", h2), ("cw", cw), ("ca", ca), ("sc", sc)) if v})
    if st:
        params["st"] = st
    if minb > 1:
        params["minb"] = minb
    if l2p:
        params["l2p"] = l2p
    return launch_order(Operator(cell.id, "planesweep", params, source, (launch,)), zo)


def space(cell: Cell) -> Space:
    """Each parameter's values, the default first (``st``: planes staged by ``cp.async``
    copies)."""
    sp: Space = {"ry": (4, 2, 8), "lz": (64, 32, 128, 16), "ty": (4, 8, 2), "vx": (1, 2),
                 "tx": (32, 64), "minb": MINB, "l1": BIT, "zo": BIT, "st": (0, 2, 1, 3),
                 "ca": BIT, "l2p": L2P, "sc": BIT}
    return {**sp, **precision_options(cell)}


KNOBS = knobs(
    "vx", "lz", "ty", "tx", "minb", "l1", "zo", "l2p", "sc", "cw", "ca",
    ry="register blocking along y: output rows per thread, fewer shared-memory reads per output",
    st="asynchronous staging: planes requested ahead by cp.async copies into a shared-memory "
       "ring (st=0: the synchronous staging)",
    h2="fp16 pairs: __half2 arithmetic (HFMA2) on vertical output pairs, per-plane partial sums "
       "added into fp32 accumulators")

# ``ry`` means output rows per thread here, rows with their own queues in z-marching
DESIGN = Design("planesweep", {"box": 0, "star": 2}, space, generate, KNOBS, unshared=("ry",))
