"""The pipelined variant of the temporal design (``pipe=1``): the same 2.5D blocking, leaner.

The first temporal design (:mod:`.temporal`, ``pipe=0``) ran about 300 instructions per thread
and plane on the H200 (64-bit range predicates per stage, branches, smem addresses recomputed),
at one 1024-thread block per SM with one load in flight per thread: slower than four chained
z-marching sweeps. This variant keeps its structure (stage ``s`` computes step ``s`` of plane
``k - 2s`` at iteration ``k`` from a three-deep register queue of step ``s-1`` and a shared-memory
copy of its centre plane, one barrier per iteration, stages run last to first) and changes how
the iterations run:

- *uniform stages*: every stage computes and pushes at every iteration, whatever its plane.
  A plane outside a stage's range is garbage that only the redundant halo (x, y) or a boundary
  plane (which keeps its value: ``v = b``) ever reads, so no valid output depends on it; the
  queues then stay aligned by construction (after iteration ``k`` queue ``s >= 1`` holds planes
  ``k-2s-2 .. k-2s`` of step ``s``), and the range predicates and the top-of-grid queue fix of
  the first design are not needed. Loads outside the chunk's input range read zero; stores are
  guarded by the chunk's output range.
- *static unrolling*: the loop body is emitted ``U = lcm(2, 3, pf)`` times, so the buffer
  parity, the queues' rotation and the prefetch ring are register names, not moves (a move out
  of a register with a load in flight would wait for it). The trip count is rounded up to ``U``
  (the extra iterations load and store nothing).
- ``pf``: input planes in flight per thread (a ring of ``pf`` registers per row).
- ``cx`` x ``cy``: points per thread (register blocking): x and y neighbours inside the thread
  come from registers, loads and shared-memory stores are ``cx`` wide, and the ``tx*cx`` x
  ``ty*cy`` tile wastes less on the redundant halo. The tile's first column is aligned to ``cx``
  (vector loads), which may cost its output tile up to ``cx-1`` columns.
- ``minb``: ``__launch_bounds__(threads, minb)`` (2 blocks of 1024 threads: 32 registers).
- 32-bit plane arithmetic, shared-memory offsets computed once, dynamic shared memory (the tile
  of ``T`` planes, double-buffered, may exceed 48 KiB).
- ``fi=1``: a second copy of the unrolled body without the boundary selects
  (``v = (zin && inner) ? sum : b``), run for every group of ``U`` iterations whose stage planes
  all lie inside the grid (``1 <= kk - 2s <= NZ-2``) in a block whose whole tile lies inside it
  in x and y: there no point is a boundary point, so every point takes its sum. The selects
  compile to a branch around each point's sum (BSSY/BSYNC, a move for the kept value, the
  predicate logic): on the host (ptxas for sm_90, star_1_t4 fp32 512^3's operator) the kernel
  drops from 984 to 776 SASS instructions without them. Blocks on the grid's edges and the first
  and last iterations of the edge chunks keep the selecting body.
- ``h2=1`` (fp16, even ``cx``): the queues, the staged planes and every step in
  ``__half2`` arithmetic over lane pairs, as the z-marching ``h2``: one ``HFMA2`` chain per
  output pair, no fp16/fp32 conversions, half the queue registers and half the shared memory
  of the fp32-accumulating kernel; every step's result is rounded to fp16 (the chained
  z-marching sweeps round each step's output to fp16 too). x neighbours that straddle a pair
  are repacked; the boundary select keeps each half on its own.
"""

from __future__ import annotations

from math import lcm

from .. import faces as fc
from ..spec import Cell
from . import temporal_pipe_faces as tpf
from .common import (
    XYZ,
    DoesNotFit,
    TileIndex,
    cdiv,
    extents,
    half2_weights,
    header,
    literal,
    load,
    store,
    weight_names,
)

MAX_SHARED = 227 * 1024


def geometry(cell: Cell, steps: int, tx: int, ty: int, cx: int, cy: int, faced: bool = False
             ) -> tuple[int, int, int, int, int]:
    """(tile width, tile height, left margin ``m``, output width, output height); ``faced``:
    the output starts at column 0 (face rules: every point is output), not 1."""
    w, h = tx * cx, ty * cy
    m = ((0 if faced else 1) - steps) % cx  # extra left columns: the tile starts on a multiple of cx
    bw = (w - 2 * steps - m) // cx * cx
    return w, h, m, bw, h - 2 * steps


def shared_bytes(cell: Cell, steps: int, tx: int, ty: int, cx: int, cy: int, h2: int = 0
                 ) -> int:
    item = 2 if h2 else 8 if cell.precision.acc_ctype == "double" else 4
    return 2 * steps * tx * cx * ty * cy * item


QUEUE_MARGIN = 20  # registers beside the queues (ptxas, sm_90: 12 queue registers fit in 32)


def check(cell: Cell, steps: int, tx: int, ty: int, cx: int, cy: int, pf: int,
          minb: int = 1, h2: int = 0) -> None:
    """Raise :class:`.common.DoesNotFit` when these parameters cannot build the cell, or would
    spill: the queues (``3*T*cx*cy`` values) plus :data:`QUEUE_MARGIN`, twice that in fp64,
    must fit the register cap of ``minb`` blocks (measured with ptxas on the 512^3 cells: every
    combination this refuses spilled, every one it keeps did not, ``pf=4`` in fp64 aside).

    With ``h2`` (a pair per queue register) the rule is no spill guarantee: ptxas (CUDA 13.0,
    sm_90) spills in 90 of the 320 layouts it keeps for star_1_t4 fp16 512^3 (4-726 bytes;
    66 of the 96 at a 32-register cap), and no margin separates them (ptxas also spills 4-64
    bytes in 13 layouts with 64-128 registers allowed). They stay in the space on purpose: the
    fastest ``h2`` operator the forge screened for fp16 1024^3 on the H200 is one
    of them (1024 threads, ``minb=2``, ``cx=4``, ``pf=2``, ``fs=2``, ``fi=1``); the forge's
    timing judges them."""
    _, _, _, bw, bh = geometry(cell, steps, tx, ty, cx, cy)
    if bw <= 0 or bh <= 0:
        raise DoesNotFit(f"a {tx * cx}x{ty * cy} tile leaves no output for {steps} fused steps")
    if cell.shape.nx % cx:
        raise DoesNotFit(f"cx={cx} must divide NX={cell.shape.nx} (aligned vector loads)")
    if cx * cy > 4 or pf not in (1, 2, 3, 4):
        raise DoesNotFit("at most 4 points per thread and 1..4 planes in flight")
    if h2 and (cell.precision.ctype != "__half" or cx % 2):
        raise DoesNotFit("h2 (half2 arithmetic) needs fp16 storage and an even cx")
    if shared_bytes(cell, steps, tx, ty, cx, cy, h2) > MAX_SHARED:
        raise DoesNotFit("the staged planes exceed the shared memory of a block")
    words = 2 if cell.precision.acc_ctype == "double" else 1
    cap = min(255, 65536 // (tx * ty * minb) // 8 * 8)
    queued = 3 * steps * cx * cy // (2 if h2 else 1)  # registers (h2: a pair in each)
    if (queued + QUEUE_MARGIN) * words > cap:
        raise DoesNotFit(f"{queued} queue registers per thread would spill at {cap} registers")


def _pts(cx: int, cy: int) -> list[tuple[int, int]]:
    return [(i, lane) for i in range(cy) for lane in range(cx)]


def _h2_points(cell: Cell, s: int, steps: int, j: int, slots: tuple[int, int, int], cy: int,
               units: int, fast: bool) -> list[str]:
    """Stage ``s`` of iteration ``k + j`` in lane pairs (``h2``): each output pair ``g`` of row
    ``i`` (lanes ``2g, 2g+1``) is one HFMA2 chain over step ``s - 1``'s queue ``q``."""
    cs, bs, as_ = slots
    q = s - 1
    h = {o: f"H{int(n[1:])}" for o, n in zip(cell.stencil.offsets, weight_names(cell),
                                             strict=True)}

    def reg(i: int, g: int, slot: int = bs) -> str:
        return f"q{q}_{slot}_{i}{g}"

    lines = []
    for i, g in _pts(units, cy):
        c = reg(i, g)
        lo = f"xl{i}" if g == 0 else f"__high2half({reg(i, g - 1)})"
        hi = f"xr{i}" if g == units - 1 else f"__low2half({reg(i, g + 1)})"
        terms = [(h[(-1, 0, 0)], reg(i, g, as_)), (h[(1, 0, 0)], reg(i, g, cs)),
                 (h[(0, -1, 0)], f"ym.v[{g}]" if i == 0 else reg(i - 1, g)),
                 (h[(0, 1, 0)], f"yp.v[{g}]" if i == cy - 1 else reg(i + 1, g)),
                 (h[(0, 0, -1)], f"__halves2half2({lo}, __low2half({c}))"),
                 (h[(0, 0, 1)], f"__halves2half2(__high2half({c}), {hi})")]
        expr = f"__hmul2({h[(0, 0, 0)]}, {c})"
        for wt, v in terms:
            expr = f"__hfma2({wt}, {v}, {expr})"
        if s < steps:
            dst = f"q{s}_{j % 3}_{i}{g}"
        else:
            dst = f"v{i}{g}"
            lines.append(f"        __half2 {dst};")
        if fast:
            lines.append(f"        {dst} = {expr};")
        else:  # each half keeps its own boundary value
            lines.append(f"        {{ const __half2 S = {expr};\n          {dst} = zin ? "
                         f"__halves2half2(inner{i}{2 * g} ? __low2half(S) : __low2half({c}), "
                         f"inner{i}{2 * g + 1} ? __high2half(S) : __high2half({c})) : {c}; }}")
    return lines


def _sub(cell: Cell, j: int, steps: int, cx: int, cy: int, pf: int, fast: bool = False,
         h2: int = 0, faces: fc.Groups = (), gb: int = 0) -> str:
    """One iteration (``kk = k + j``) of the unrolled loop; ``fast``: without the boundary
    selects (``fi=1``: only where no point of the iteration is a boundary point); ``h2``:
    in lane pairs (a queue register holds lanes ``2g, 2g+1``); ``faces``: the stages'
    raw values go to temporaries ``r``, then :func:`.temporal_pipe_faces.finish`."""
    p = cell.precision
    w = dict(zip(cell.stencil.offsets, weight_names(cell), strict=True))
    buf = j % 2
    units = cx // 2 if h2 else cx  # queue registers per row
    lines = [f"    {{  // iteration k + {j}", f"      const int kk = k + {j};"]
    # the input plane kk-1 (loaded pf iterations ago) enters queue 0; plane kk-1+pf is fetched
    for i, lane in _pts(units, cy):
        lines.append(f"      q0_{j % 3}_{i}{lane} = "
                     + (f"reinterpret_cast<const __half2*>(f{j % pf}_{i}.v)[{lane}];" if h2
                        else f"{load(p, f'f{j % pf}_{i}.v[{lane}]')};"))
    for i in range(cy):
        lines.append(f"      f{j % pf}_{i} = V{{}}; if (kk + {pf - 1} < hi0 && ing{i}) "
                     f"f{j % pf}_{i} = *reinterpret_cast<const V*>(src + (o{i} + (IDX)(kk + {pf - 1})"
                     f" * PLANE));")
    # the centre planes of steps 0..T-1 go to shared memory
    for s in range(steps):
        b = (j - 1) % 3 if s == 0 else (j - 2) % 3
        for i in range(cy):
            vals = ", ".join(f"q{s}_{b}_{i}{lane}" for lane in range(units))
            lines.append(f"      *reinterpret_cast<SV*>(sm + {(buf * steps + s)} * PL + orow{i})"
                         f" = SV{{{{{vals}}}}};")
    lines.append("      __syncthreads();")
    if faces:
        lines.append("      ACC " + ", ".join(f"r{s}_{i}{lane}" for s in range(1, steps + 1)
                                          for i, lane in _pts(cx, cy)) + ";")
    for s in range(steps, 0, -1):
        q = s - 1
        off = 0 if q == 0 else 1
        cs, bs, as_ = (j - off) % 3, (j - 1 - off) % 3, (j - 2 - off) % 3
        base = f"sm + {(buf * steps + q)} * PL"
        lines.append(f"      {{  // stage {s}: step {s} of plane kk - {2 * s}")
        lines.append(f"        const int p = kk - {2 * s};")
        if not fast:
            lines.append("        const bool zin = (unsigned)(p - 1) < (unsigned)(NZ - 2);")
        lines.append(f"        const SV ym = *reinterpret_cast<const SV*>({base} + oym);")
        lines.append(f"        const SV yp = *reinterpret_cast<const SV*>({base} + oyp);")
        for i in range(cy):
            lines.append(f"        const {'__half' if h2 else 'ACC'} xl{i} = ({base})[oxl{i}], "
                         f"xr{i} = ({base})[oxr{i}];")
        if h2:
            lines += _h2_points(cell, s, steps, j, (cs, bs, as_), cy, units, fast)
        else:  # in the accumulation type (fp16 storage: fp32)
            for i, lane in _pts(cx, cy):
                def reg(ii: int, ll: int, slot: int = bs, q: int = q) -> str:
                    return f"q{q}_{slot}_{ii}{ll}"
                ymv = f"ym.v[{lane}]" if i == 0 else reg(i - 1, lane)
                ypv = f"yp.v[{lane}]" if i == cy - 1 else reg(i + 1, lane)
                xmv = f"xl{i}" if lane == 0 else reg(i, lane - 1)
                xpv = f"xr{i}" if lane == cx - 1 else reg(i, lane + 1)
                expr = (f"{w[(0, 0, 0)]} * {reg(i, lane)} + {w[(-1, 0, 0)]} * {reg(i, lane, as_)}"
                        f" + {w[(1, 0, 0)]} * {reg(i, lane, cs)} + {w[(0, -1, 0)]} * {ymv}"
                        f" + {w[(0, 1, 0)]} * {ypv} + {w[(0, 0, -1)]} * {xmv}"
                        f" + {w[(0, 0, 1)]} * {xpv}")
                dst = (f"r{s}_{i}{lane}" if faces else f"q{s}_{j % 3}_{i}{lane}" if s < steps
                       else f"const ACC v{i}{lane}")
                lines.append(f"        {dst} = {expr};" if fast else
                             f"        {dst} = (zin && inner{i}{lane}) ? ({expr}) : {reg(i, lane)};")
        if s == steps and not faces:
            lines.append("        if ((unsigned)(p - z0) < (unsigned)(z1 - z0)) {")
            lines += _store_at(cell, cx, cy, h2, "v", "p")
            lines.append("        }")
        lines.append("      }")
    if faces:
        lines += tpf.finish(faces, j, steps, _pts(cx, cy), 2 if gb else buf, units, cy, fast,
                            lambda at: _store_at(cell, cx, cy, h2, f"r{steps}_", at))
    lines.append("    }")
    return "\n".join(lines) + "\n"


def _store_at(cell: Cell, cx: int, cy: int, h2: int, v: str, plane: str) -> list[str]:
    """The stores of the points' values ``{v}{i}{lane}`` at ``plane`` (owned points only)."""
    p = cell.precision
    lines = []
    for i in range(cy):
        def val(lane: int, i: int = i) -> str:
            return (f"__{'high' if lane % 2 else 'low'}2half({v}{i}{lane // 2})" if h2
                    else store(p, f"{v}{i}{lane}"))
        whole = ", ".join(val(lane) for lane in range(cx))
        lines.append(f"          {p.ctype}* const d{i} = dst + (o{i} + (IDX){plane} * PLANE);")
        lanes = " ".join(f"if (own{i}{lane}) d{i}[{lane}] = {val(lane)};"
                         for lane in range(cx))
        lines.append(f"          if (own{i}) *reinterpret_cast<V*>(d{i}) = V{{{{{whole}}}}};"
                     + (f"\n          else {{ {lanes} }}" if cx > 1 else ""))
    return lines


def source(cell: Cell, steps: int, tx: int, ty: int, cx: int, cy: int, lz: int, pf: int,
           minb: int, fi: int = 0, h2: int = 0, bi: TileIndex = XYZ, faces: fc.Groups = (),
           gb: int = 0) -> str:
    """``faces``: a time loop's face rules after every step (:mod:`.temporal_pipe_faces`):
    tiles and chunks over the whole grid, the last moved back to end at its far face."""
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    w, h, m, bw, bh = geometry(cell, steps, tx, ty, cx, cy, bool(faces))
    u = lcm(2, 3, pf)
    idx = "int" if cell.shape.points < 2**31 else "long"
    weights = "".join(f"constexpr ACC {n} = {literal(wt, p)};\n"
                      for n, wt in zip(weight_names(cell), cell.stencil.weights, strict=True))
    bounds = f"{tx * ty}, {minb}" if minb > 1 else f"{tx * ty}"
    pts = _pts(cx, cy)
    qpts = _pts(cx // 2, cy) if h2 else pts  # queue registers (h2: lane pairs)
    decl = []
    for i in range(cy):
        rows = f"gy{i} >= 0 && gy{i} < NY" if faces else f"gy{i} >= 1 && gy{i} < NY - 1"
        decl += [f"  const int gy{i} = oy + ty * {cy} + {i}, orow{i} = (ty * {cy} + {i}) * {w} + c0;",
                 (f"  const int oxl{i} = orow{i} - (c0 > 0 ? 1 : 0), "
                  f"oxr{i} = orow{i} + (c0 + {cx} < {w} ? {cx} : {cx - 1});"),
                 f"  const bool ing{i} = gy{i} >= 0 && gy{i} < NY && gx0 >= 0 && gx0 < NX;",
                 f"  const IDX o{i} = (IDX)gy{i} * NX + gx0;  // row offset (plane 0)",
                 (f"  const bool rown{i} = ty * {cy} + {i} >= {steps} && "
                  f"ty * {cy} + {i} < {steps + bh} && {rows};")]
    for i, lane in pts:
        decl.append(f"  const bool inner{i}{lane} = gx0 + {lane} >= 1 && gx0 + {lane} < NX - 1 && "
                    f"gy{i} >= 1 && gy{i} < NY - 1;")
        cols = (f"gx0 + {lane} >= 0 && gx0 + {lane} < NX" if faces  # face rules: every point
                else f"inner{i}{lane}")
        decl.append(f"  const bool own{i}{lane} = rown{i} && c0 + {lane} >= {steps + m} && "
                    f"c0 + {lane} < {steps + m + bw} && {cols};")
    for i in range(cy):
        decl.append(f"  const bool own{i} = " + " && ".join(f"own{i}{lane}" for lane in range(cx))
                    + ";")
    zero, qt = ("__float2half2_rn(0.f)", "__half2") if h2 else ("0", "ACC")
    queues = [f"  {qt} {', '.join(f'q{s}_{k}_{i}{g} = {zero}' for k in range(3) for i, g in qpts)};"
              for s in range(steps)]
    ring = [f"  V {', '.join(f'f{k}_{i}' for i in range(cy))};" for k in range(pf)]
    ring += [f"  f{k}_{i} = V{{}}; if (lo0 + {k} < hi0 && ing{i}) f{k}_{i} = "
             f"*reinterpret_cast<const V*>(src + (o{i} + (IDX)(lo0 + {k}) * PLANE));"
             for k in range(pf) for i in range(cy)]
    body = "".join(_sub(cell, j, steps, cx, cy, pf, h2=h2, faces=faces, gb=gb) for j in range(u))
    if fi:  # the group's stage planes kk - 2s span k - 2T .. k + U - 3
        fast = "".join(_sub(cell, j, steps, cx, cy, pf, fast=True, h2=h2, faces=faces, gb=gb)
                       for j in range(u))
        body = (f"    if (fast_xy && k - 2 * T >= 1 && k + {u - 3} <= NZ - 2) {{\n{fast}"
                f"    }} else {{\n{body}    }}\n")
    tile_x = "tile_x0" if faces else f"{1 - steps - m} + (int){bi.x} * {bw}"
    fast_xy = (f"  const bool fast_xy = {tile_x} >= 1 && {tile_x} + {w - 1} <= NX - 2 && oy >= 1 && "
               f"oy + {h - 1} <= NY - 2;  // the whole tile inside the grid\n" if fi else "")
    if faces:  # the last tile (chunk) moved back to end at the far face
        origin = (f"  const int tile_x0 = ((int){bi.x} * {bw} < NX - {bw} ? (int){bi.x} * {bw} : "
                  f"(int)NX - {bw}) - {steps + m};\n"
                  f"  const int gx0 = tile_x0 + c0;\n"
                  f"  const int oy = ((int){bi.y} * {bh} < NY - {bh} ? (int){bi.y} * {bh} : "
                  f"(int)NY - {bh}) - {steps};\n")
        chunk = (f"  const int z0 = (int){bi.z} * {lz} < NZ - {lz} ? (int){bi.z} * {lz} : "
                 f"(int)NZ - {lz};\n  const int z1 = z0 + {lz};")
        rules = tpf.setup(cell, faces, pts, cy, w, h)
    else:
        origin = (f"  const int gx0 = {1 - steps - m} + (int){bi.x} * {bw} + c0;\n"
                  f"  const int oy = {1 - steps} + (int){bi.y} * {bh};\n")
        chunk = (f"  const int z0 = 1 + (int){bi.z} * {lz};\n"
                 f"  const int z1 = z0 + {lz} < NZ - 1 ? z0 + {lz} : NZ - 1;")
        rules = ""
    nl = "\n"
    sv = (f"struct __align__({2 * cx}) SV {{ __half2 v[{cx // 2}]; }};  // staged pairs" if h2
          else f"struct __align__({(8 if acc == 'double' else 4) * cx}) SV {{ ACC v[{cx}]; }};")
    return f"""{header(cell)}{extents(cell)}typedef {acc} ACC;
{weights}constexpr int T = {steps};
typedef {idx} IDX;  // element offsets ({idx}: the grid has {'fewer' if idx == 'int' else 'more'} than 2^31 points)
constexpr IDX PLANE = NX * NY;
constexpr int PL = {w * h};  // one staged plane ({w}x{h})
struct __align__({p.itemsize * cx}) V {{ {t} v[{cx}]; }};
{sv}
extern "C" __global__ void __launch_bounds__({bounds})
temporal(const {t}* __restrict__ src, {t}* __restrict__ dst) {{
  extern __shared__ __align__(16) {'__half' if h2 else 'ACC'} sm[];  // [2][T][{h}][{w}]
{half2_weights(cell) if h2 else ""}  const int tx = threadIdx.x, ty = threadIdx.y, c0 = tx * {cx};
{origin}{fast_xy}  const int oym = (ty > 0 ? ty * {cy} - 1 : 0) * {w} + c0;
  const int oyp = (ty < {ty - 1} ? ty * {cy} + {cy} : {h - 1}) * {w} + c0;
{nl.join(decl)}
{rules}{chunk}
  const int lo0 = z0 - T > 0 ? z0 - T : 0;
  const int hi0 = z1 + T < NZ ? z1 + T : NZ;
{nl.join(queues)}
{nl.join(ring)}
  for (int k = lo0 + 1; k < z1 + 2 * T; k += {u}) {{
{body}  }}
}}
"""


def grid(cell: Cell, steps: int, tx: int, ty: int, cx: int, cy: int, lz: int,
         faced: bool = False) -> tuple[int, int, int]:
    """The tiles over the interior, or (``faced``: face rules) over the whole grid."""
    _, _, _, bw, bh = geometry(cell, steps, tx, ty, cx, cy, faced)
    r = 0 if faced else 2
    s = cell.shape
    return (cdiv(s.nx - r, bw), cdiv(s.ny - r, bh), cdiv(s.nz - r, lz))
