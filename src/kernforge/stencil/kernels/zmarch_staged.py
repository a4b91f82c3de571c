"""The z-marching kernel with more loads in flight (``pf``), a staged plane (``smem``) or the
x halo by warp shuffles (``xs``).

Same thread layout and register queue as :mod:`.zmarch` (whose kernel is kept, byte for byte,
for ``pf=1, smem=0``). What changes:

- ``pf``: the column's planes ``z+R+1 .. z+R+pf`` are in flight while plane ``z`` is computed
  (a ring of ``pf`` vector registers; the loop body is emitted ``pf`` times so every ring slot
  is a fixed register: a move out of a register with a load in flight would wait for it). The
  first run on the H200 had one vector load in flight per thread, 8-16 bytes: at 1.5-2k
  threads per SM that is about half of what the copy bandwidth times the DRAM latency needs
  (Little's law), which fits fp16's lower share of the copy bandwidth. ``varcoeff``'s
  coefficient plane is prefetched through a ring of its own (it was loaded on use).
- ``smem=1``: 2.5D blocking: each plane's tile (the block's columns, whose values are already
  in the queues, plus an x and y halo of one vector / ``R`` rows loaded by the edge threads,
  prefetched like the column) is staged in shared memory in the accumulation type (double-
  buffered, one barrier per plane), and x/y neighbours come from it instead of from L1: no
  scalar 2-byte halo loads and no fp16 conversions of neighbours. Threads on boundary rows load
  their columns too (they are the halo of the interior rows) and every thread stays in the loop
  (barriers).
- ``xs=1`` (``smem=0``): the x neighbours left of lane 0 and right of lane ``vx-1`` come from
  the neighbouring threads' queue registers (``__shfl_up_sync``/``__shfl_down_sync`` of the
  centre plane) instead of two scalar loads per thread and plane; only a thread at the end of
  its row or warp loads its side. Motivation (Nsight Compute on the H200, 2026-12-01): the star
  kernels are bound by L2 throughput (92-96%) with about 41-43% of L1 requests missing, not by
  DRAM. Every thread stays in the loop (whole warps shuffle); loads stay inside the array.
"""

from __future__ import annotations

from collections.abc import Callable

from ..spec import Cell
from .common import GLOBAL_VEC, XYZ, TileIndex, lane_stores, load, store, weight_names

MAX_SHARED = 227 * 1024


def _weights(cell: Cell) -> dict[tuple[int, int, int], str]:
    return dict(zip(cell.stencil.offsets, weight_names(cell), strict=True))


def shared_bytes(cell: Cell, tx: int, ty: int, vx: int) -> int:
    item = 8 if cell.precision.acc_ctype == "double" else 4
    return 2 * (ty + 2 * cell.radius) * (tx * vx + 2 * vx) * item


def _compute(cell: Cell, vx: int, smem: bool, u: int, xs: bool = False,
             pn: bool = False, ld: str = GLOBAL_VEC) -> list[str]:
    """``res[l]`` for every lane; neighbours from shared memory (``smem``) or global memory;
    with ``xs`` the x halo ``xl*``/``xr*`` was already exchanged (:func:`_shuffles`); with
    ``pn`` the neighbours were loaded one plane ahead (:func:`_next_neighbours`)."""
    p = cell.precision
    r = cell.radius
    out = []
    if pn:  # this plane's neighbours (loaded during the previous plane); the next plane's now
        for d in range(1, r + 1):
            out.append(f"const Vec ym{d} = nym{d}, yp{d} = nyp{d};")
            if not xs:
                out.append(f"const ACC xl{d} = {load(p, f'nxl{d}')}, "
                           f"xr{d} = {load(p, f'nxr{d}')};")
        out += _next_neighbours(cell, vx, "if (zz + 1 < ze) ", "base + NY * NX", xs, ld)
    for d in range(1, r + 1):
        for sgn, tag in ((-1, "m"), (1, "p")):
            if pn:
                continue
            if smem:
                out.append(f"const SVec y{tag}{d} = *reinterpret_cast<const SVec*>"
                           f"(S + cur + so + ({sgn * d}) * SW);")
            else:
                out.append(f"const Vec y{tag}{d} = {ld}"
                           f"src + base + ({sgn * d}L) * NX);")
    for d in range(1, r + 1):
        if xs or pn:
            continue
        if smem:
            out.append(f"const ACC xl{d} = S[cur + so - {d}], xr{d} = S[cur + so + {vx - 1 + d}];")
        else:
            out.append(f"const ACC xl{d} = {load(p, f'src[base - {d}]')};")
            out.append(f"const ACC xr{d} = {load(p, f'src[base + {vx - 1 + d}]')};")
    out += lane_sums(cell, vx, (lambda v: v) if smem else (lambda v: load(p, v)), f"g{u}")
    return out


def _next_neighbours(cell: Cell, vx: int, guard: str, at: str, xs: bool,
                     ld: str = GLOBAL_VEC) -> list[str]:
    """``pn``: load the y-neighbour rows (and, without ``xs``, the x-halo scalars) of the
    column's element at ``at`` into the ``n*`` registers (declared in the prologue)."""
    out = []
    for d in range(1, cell.radius + 1):
        loads = [f"nym{d} = {ld}src + {at} - {d}L * NX);",
                 f"nyp{d} = {ld}src + {at} + {d}L * NX);"]
        if not xs:
            loads += [f"nxl{d} = src[{at} - {d}];", f"nxr{d} = src[{at} + {vx - 1 + d}];"]
        out.append(guard + "{ " + " ".join(loads) + " }")
    return out


def lane_sums(cell: Cell, vx: int, y_value: Callable[[str], str], coef: str,
              row: int | None = None, ry: int = 1) -> list[str]:
    """``res[l] = ...`` for every lane: z neighbours from the register queue ``q``, x neighbours
    from the lanes or the halo scalars ``xl*``/``xr*``, y neighbours from the row vectors
    ``ym*``/``yp*`` (read through ``y_value``); varcoeff multiplies the neighbour sum by the
    lane of the coefficient vector ``coef``. With ``row`` (one of a thread's ``ry`` rows,
    :mod:`.zmarch_rows`): ``res[row][l]`` from ``q[..][row][..]``, the row's halo scalars
    ``xl*_row``/``xr*_row``, and the y neighbours inside the thread's rows from their queues."""
    p = cell.precision
    r = cell.radius
    w = _weights(cell)
    i = 0 if row is None else row
    at = "" if row is None else f"[{row}]"
    tag = "" if row is None else f"_{row}"
    out = []
    for lane in range(vx):
        terms = []
        for (dz, dy, dx), name in w.items():
            if (dz, dy, dx) == (0, 0, 0):
                continue
            if dz:
                val = f"q[{r + dz}]{at}[{lane}]"
            elif dy:
                k = i + dy
                val = (f"q[{r}][{k}][{lane}]" if row is not None and 0 <= k < ry else
                       y_value(f"ym{-k}.v[{lane}]") if k < 0 else
                       y_value(f"yp{k - ry + 1}.v[{lane}]"))
            else:
                k = lane + dx
                val = (f"q[{r}]{at}[{k}]" if 0 <= k < vx else f"xl{-k}{tag}" if k < 0
                       else f"xr{k - vx + 1}{tag}")
            terms.append(f"{name} * {val}")
        nsum = " + ".join(terms)
        center = f"{w[(0, 0, 0)]} * q[{r}]{at}[{lane}]"
        if cell.stencil.kind == "varcoeff":
            out.append(f"res{at}[{lane}] = {center} + {load(p, f'{coef}.v[{lane}]')} * ({nsum});")
        else:
            out.append(f"res{at}[{lane}] = {center} + {nsum};")
    return out


def _shuffles(cell: Cell, vx: int) -> list[str]:
    """``xs``: the x halo from the neighbouring lanes' registers (the queue's centre plane) by
    warp shuffles, every thread of the warp taking part; a thread at the left/right end of its
    row or warp loads its side from global memory instead (inside the array only)."""
    p = cell.precision
    out = []
    for d in range(1, cell.radius + 1):
        out.append(f"ACC xl{d} = __shfl_up_sync(0xffffffffu, q[R][{vx - d}], 1);")
        out.append(f"ACC xr{d} = __shfl_down_sync(0xffffffffu, q[R][{d - 1}], 1);")
        out.append(f"if (xle && act && x0 - {d} >= 0) xl{d} = {load(p, f'src[base - {d}]')};")
        out.append(f"if (xre && act && x0 + {vx - 1 + d} < NX) "
                   f"xr{d} = {load(p, f'src[base + {vx - 1 + d}]')};")
    return out


def _sub(cell: Cell, u: int, vx: int, pf: int, smem: bool, stores: str,
         xs: bool = False, pn: bool = False, ld: str = GLOBAL_VEC) -> str:
    """The loop body for plane ``zz = z + u`` (ring slot ``u``)."""
    p = cell.precision
    r = cell.radius
    qn = 2 * r + 1
    var = cell.stencil.kind == "varcoeff"
    lines = [f"    {{  // plane z + {u}", f"      const long zz = z + {u};"]
    lines += [f"      q[{qn - 1}][{lane}] = {load(p, f'f{u}.v[{lane}]')};" for lane in range(vx)]
    if smem:
        cvt = ", ".join(load(p, f"{{h}}.v[{lane}]") for lane in range(vx))
        centre = ", ".join(f"q[{r}][{lane}]" for lane in range(vx))
        lines += ["      const int cur = (int)(zz & 1) * SPL;",
                  f"      *reinterpret_cast<SVec*>(S + cur + so) = SVec{{{{{centre}}}}};",
                  (f"      if (hyr) *reinterpret_cast<SVec*>(S + cur + hyo) = "
                   f"SVec{{{{{cvt.replace('{h}', f'hy{u}')}}}}};"),
                  (f"      if (hxr) *reinterpret_cast<SVec*>(S + cur + hxo) = "
                   f"SVec{{{{{cvt.replace('{h}', f'hx{u}')}}}}};")]
    guard = f"zz + {pf} < ze"
    lines.append(f"      if ({guard}{' && col' if smem or xs else ''}) f{u} = {ld}"
                 f"src + ((zz + {pf + r}) * NY + y) * NX + x0);")
    if smem:
        lines += [(f"      if ({guard} && hyok) hy{u} = {ld}"
                   f"src + ((zz + {pf}) * NY + hyg) * NX + x0);"),
                  (f"      if ({guard} && hxok) hx{u} = {ld}"
                   f"src + ((zz + {pf}) * NY + y) * NX + hxg);"),
                  "      __syncthreads();"]
    lines.append("      const long base = (zz * NY + y) * NX + x0;")
    if xs:
        lines += [f"      {s}" for s in _shuffles(cell, vx)]
    lines.append(f"      if ({'act' if smem or xs else 'true'}) {{")
    lines.append(f"        ACC res[{vx}];")
    lines += [f"        {s}" for s in _compute(cell, vx, smem, u, xs, pn, ld)]
    lines.append(stores.replace("{u}", str(u)))
    lines.append("      }")
    if var:  # the coefficient of plane zz was used above; fetch plane zz + pf into its slot
        lines.append(f"      if ({guard} && act) g{u} = {ld}"
                     f"coef + base + {pf} * NY * NX);")
    lines += [f"      #pragma unroll\n      for (int j = 0; j < {qn - 1}; ++j) "
              f"q[j][{lane}] = q[j + 1][{lane}];" for lane in range(vx)]
    lines.append("    }")
    return "\n".join(lines)


def kernel(cell: Cell, tx: int, ty: int, vx: int, lz: int, pf: int, smem: int,
           xs: int = 0, pn: int = 0, *, lb: str, pre_kernel: str = "",
           ld: str = GLOBAL_VEC, bi: TileIndex = XYZ) -> str:
    """The ``zmarch`` entry (see the module docstring); source after the common header
    (``pre_kernel``, ``ld``: the global ``Vec`` loads' helper and opening,
    :func:`.common.vec_loads`)."""
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    r = cell.radius
    qn = 2 * r + 1
    var = cell.stencil.kind == "varcoeff"
    coef = f"const {t}* __restrict__ coef, " if var else ""
    whole, lanes = lane_stores(vx, lambda i: store(p, f"res[{i}]"))
    stores = (f"        if (x0 >= R && x0 + {vx} <= NX - R) {{ Vec o; {whole} "
              f"*reinterpret_cast<Vec*>(dst + base) = o; }}\n        else {{ {lanes} }}")
    act = "y >= R && y < NY - R && x0 < NX - R && x0 + VX > R"
    sw = tx * vx + 2 * vx
    head = [f"constexpr int VX = {vx}, PF = {pf};",
            f"struct __align__({min(16, vx * (8 if acc == 'double' else 4))}) SVec "
            f"{{ ACC v[{vx}]; }};" if smem else "",
            f"constexpr int SW = {sw}, SPL = {(ty + 2 * r) * sw};  // staged plane: "
            f"{ty + 2 * r} rows x {sw}" if smem else ""]
    pre = []
    if smem:
        pre += ["  extern __shared__ __align__(16) ACC S[];",
                f"  const bool col = y < NY && x0 < NX, act = {act};",
                f"  const int so = (threadIdx.y + R) * SW + {vx} + threadIdx.x * VX;",
                "  // edge threads load the halo: R rows below/above the tile, a vector left/right",
                f"  const bool hyr = threadIdx.y < R || threadIdx.y >= {ty} - R;",
                "  const long hyg = threadIdx.y < R ? y - R : y + R;",
                "  const int hyo = so + (threadIdx.y < R ? -R : R) * SW;",
                "  const bool hyok = hyr && hyg >= 0 && hyg < NY && x0 < NX;",
                f"  const bool hxr = threadIdx.x == 0 || threadIdx.x == {tx - 1};",
                "  const long hxg = threadIdx.x == 0 ? x0 - VX : x0 + VX;",
                "  const int hxo = so + (threadIdx.x == 0 ? -VX : VX);",
                "  const bool hxok = hxr && y < NY && hxg >= 0 && hxg < NX;"]
    elif xs:  # every thread stays (the shuffles need whole warps); loads inside the array only
        pre += [f"  const bool col = y < NY && x0 < NX, act = {act};",
                f"  const int kf_lane = (int)(threadIdx.y * {tx} + threadIdx.x) & 31;",
                "  const bool xle = threadIdx.x == 0 || kf_lane == 0;",
                f"  const bool xre = threadIdx.x == {tx - 1} || kf_lane == 31;"]
    else:
        pre.append(f"  if (!({act})) return;")
        pre.append("  const bool act = true;" if var else "")
    prime = "col" if smem or xs else "true"
    pre.append(f"  {acc} q[{qn}][{vx}] = {{}};")
    pre.append(f"  #pragma unroll\n  for (int j = 0; j < {qn - 1}; ++j) if ({prime}) {{")
    pre.append(f"    const Vec c = {ld}src + ((zb - R + j) * NY + y) "
               "* NX + x0);")
    pre += [f"    q[j][{lane}] = {load(p, f'c.v[{lane}]')};" for lane in range(vx)]
    pre.append("  }")
    for u in range(pf):
        g = f"zb + {u} < ze"
        pre.append(f"  Vec f{u} = {{}}; if ({g} && {prime}) f{u} = {ld}"
                   f"src + ((zb + {u + r}) * NY + y) * NX + x0);")
        if smem:
            pre.append(f"  Vec hy{u} = {{}}, hx{u} = {{}};")
            pre.append(f"  if ({g} && hyok) hy{u} = {ld}"
                       f"src + ((zb + {u}) * NY + hyg) * NX + x0);")
            pre.append(f"  if ({g} && hxok) hx{u} = {ld}"
                       f"src + ((zb + {u}) * NY + y) * NX + hxg);")
        if var:
            pre.append(f"  Vec g{u} = {{}}; if ({g} && act) g{u} = {ld}"
                       f"coef + ((zb + {u}) * NY + y) * NX + x0);")
    if pn:  # the neighbours of the first plane; each plane then loads the next one's
        pre.append(f"  Vec {', '.join(f'nym{d} = {{}}, nyp{d} = {{}}' for d in range(1, r + 1))};")
        if not xs:
            pre.append(f"  {t} {', '.join(f'nxl{d} = {{}}, nxr{d} = {{}}' for d in range(1, r + 1))};")
        pre += [f"  {s}" for s in _next_neighbours(
            cell, vx, f"if (zb < ze{' && act' if xs else ''}) ", "(zb * NY + y) * NX + x0", bool(xs),
            ld)]
    subs = []
    for u in range(pf):
        if u:
            subs.append(f"    if (z + {u} >= ze) break;")
        subs.append(_sub(cell, u, vx, pf, bool(smem), stores, bool(xs), bool(pn), ld))
    nl = "\n"
    return f"""typedef {acc} ACC;
{nl.join(h for h in head if h)}
{pre_kernel}extern "C" __global__ void __launch_bounds__({lb})
zmarch(const {t}* __restrict__ src, {coef}{t}* __restrict__ dst) {{
  const long x0 = ((long){bi.x} * {tx} + threadIdx.x) * VX;
  const long y = (long){bi.y} * {ty} + threadIdx.y;
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
{nl.join(x for x in pre if x)}
  for (long z = zb; z < ze; z += PF) {{
{nl.join(subs)}
  }}
}}
"""
