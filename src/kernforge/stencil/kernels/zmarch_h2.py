"""The z-marching kernel in ``__half2`` arithmetic (``h2=1``, fp16 storage, even ``vx``).

Same thread layout, register queue and prefetch ring (``pf``) as :mod:`.zmarch_staged`, but the
queue holds the column's lanes as ``__half2`` pairs and every output pair is one chain of
``HFMA2`` (two FMAs per instruction) over the stencil's weights rounded to fp16. No value is
converted to fp32: the centre plane, the rows above and below and the results stay packed;
x neighbours that straddle a pair are repacked (one ``PRMT`` each).

Motivation (Nsight Compute on the H200, 2026-12-01, star_1 fp16 512^3, fp32 accumulation):
103 M warp instructions for the sweep against 6 M for a copy of the same bytes, the SM at 62%
of its issue rate, 75% theoretical occupancy (registers), and most stall samples on the fp16 to
fp32 conversions of the x halo. Here the arithmetic per output pair is one instruction per
stencil point and the queue takes half the registers.

Precision: every partial sum is rounded to fp16 (11-bit significand); with positive weights
summing to 1 the error of an ``n``-point sum is at most about ``n`` half-ulps of the result,
inside the fp16 gate (1e-2) for the star stencils here (7 and 13 points).
"""

from __future__ import annotations

from ..spec import Cell
from .common import GLOBAL_VEC, XYZ, TileIndex, half2_weights, lane_stores, weight_names


def lane(vx: int, i: int, plane: str) -> str:
    """The half at lane ``i`` (``-R <= i < vx + R``) of the centre plane: a queue pair's half,
    or an x-halo scalar."""
    if i < 0:
        return f"xl{-i}"
    if i >= vx:
        return f"xr{i - vx + 1}"
    return f"__{'low' if i % 2 == 0 else 'high'}2half({plane}[{i // 2}])"


def _pair(vx: int, k: int, dx: int, plane: str) -> str:
    """Lanes ``2k+dx, 2k+1+dx`` of the centre plane as a pair (no repack when aligned)."""
    i = 2 * k + dx
    if dx % 2 == 0 and 0 <= i < vx:
        return f"{plane}[{i // 2}]"
    return f"__halves2half2({lane(vx, i, plane)}, {lane(vx, i + 1, plane)})"


def sums(cell: Cell, vx: int, u: int) -> list[str]:
    """``res[k]`` for every output pair: one HMUL2 and an HFMA2 chain."""
    r = cell.radius
    names = {o: int(n[1:]) for o, n in zip(cell.stencil.offsets, weight_names(cell),
                                            strict=True)}
    var = cell.stencil.kind == "varcoeff"
    out = []
    for k in range(vx // 2):
        terms = []
        for (dz, dy, dx), i in names.items():
            if (dz, dy, dx) == (0, 0, 0):
                continue
            if dz:
                val = f"q[{r + dz}][{k}]"
            elif dy:
                val = f"reinterpret_cast<const __half2*>(y{'m' if dy < 0 else 'p'}{abs(dy)}.v)[{k}]"
            else:
                val = _pair(vx, k, dx, f"q[{r}]")
            terms.append((i, val))
        if var:  # w0 * c + coef * (the neighbours' weighted sum)
            (i0, v0), rest = terms[0], terms[1:]
            out.append(f"{{ __half2 n = __hmul2(H{i0}, {v0});")
            out += [f"  n = __hfma2(H{i}, {v}, n);" for i, v in rest]
            out.append(f"  res[{k}] = __hfma2(reinterpret_cast<const __half2*>(g{u}.v)[{k}], n, "
                       f"__hmul2(H0, q[{r}][{k}])); }}")
        else:
            out.append(f"res[{k}] = __hmul2(H0, q[{r}][{k}]);")
            out += [f"res[{k}] = __hfma2(H{i}, {v}, res[{k}]);" for i, v in terms]
    return out


def _sub(cell: Cell, u: int, vx: int, pf: int, ld: str) -> str:
    r = cell.radius
    qn, npair = 2 * r + 1, vx // 2
    var = cell.stencil.kind == "varcoeff"
    lines = [f"    {{  // plane z + {u}", f"      const long zz = z + {u};",
             (f"      #pragma unroll\n      for (int k = 0; k < {npair}; ++k) "
             f"q[{qn - 1}][k] = reinterpret_cast<const __half2*>(f{u}.v)[k];"),
             (f"      if (zz + {pf} < ze) f{u} = {ld}"
             f"src + ((zz + {pf + r}) * NY + y) * NX + x0);"),
             "      const long base = (zz * NY + y) * NX + x0;"]
    for d in range(1, r + 1):
        lines.append(f"      const Vec ym{d} = {ld}src + base - {d}L * NX),"
                     f" yp{d} = {ld}src + base + {d}L * NX);")
        lines.append(f"      const __half xl{d} = src[base - {d}], xr{d} = src[base + {vx - 1 + d}];")
    lines.append(f"      __half2 res[{npair}];")
    lines += [f"      {s}" for s in sums(cell, vx, u)]
    _, lanes = lane_stores(vx, lambda i: lane(vx, i, "res"))
    lines.append(f"      if (x0 >= R && x0 + {vx} <= NX - R) {{\n        Vec o;\n"
                 f"        #pragma unroll\n        for (int k = 0; k < {npair}; ++k) "
                 f"reinterpret_cast<__half2*>(o.v)[k] = res[k];\n"
                 f"        *reinterpret_cast<Vec*>(dst + base) = o; }}\n"
                 f"      else {{ {lanes} }}")
    if var:
        lines.append(f"      if (zz + {pf} < ze) g{u} = {ld}"
                     f"coef + base + {pf} * NY * NX);")
    lines.append(f"      #pragma unroll\n      for (int j = 0; j < {qn - 1}; ++j)\n"
                 f"        for (int k = 0; k < {npair}; ++k) q[j][k] = q[j + 1][k];")
    lines.append("    }")
    return "\n".join(lines)


def kernel(cell: Cell, tx: int, ty: int, vx: int, lz: int, pf: int, lb: str, pre_kernel: str = "",
           ld: str = GLOBAL_VEC, bi: TileIndex = XYZ) -> str:
    """The ``zmarch`` entry in half2 arithmetic; source after the common header and ``Vec``
    (``pre_kernel``, ``ld``: the global ``Vec`` loads' helper and opening,
    :func:`.common.vec_loads`)."""
    r = cell.radius
    qn, npair = 2 * r + 1, vx // 2
    var = cell.stencil.kind == "varcoeff"
    coef = "const __half* __restrict__ coef, " if var else ""
    act = "y >= R && y < NY - R && x0 < NX - R && x0 + VX > R"
    pre = [f"  if (!({act})) return;", f"  __half2 q[{qn}][{npair}];",
           f"  #pragma unroll\n  for (int j = 0; j < {qn - 1}; ++j) {{",
           f"    const Vec c = {ld}src + ((zb - R + j) * NY + y) * NX + x0);",
           (f"    #pragma unroll\n    for (int k = 0; k < {npair}; ++k) "
           "q[j][k] = reinterpret_cast<const __half2*>(c.v)[k];"),
           "  }"]
    for u in range(pf):
        pre.append(f"  Vec f{u} = {{}}; if (zb + {u} < ze) f{u} = {ld}"
                   f"src + ((zb + {u + r}) * NY + y) * NX + x0);")
        if var:
            pre.append(f"  Vec g{u} = {{}}; if (zb + {u} < ze) g{u} = {ld}"
                       f"coef + ((zb + {u}) * NY + y) * NX + x0);")
    subs = []
    for u in range(pf):
        if u:
            subs.append(f"    if (z + {u} >= ze) break;")
        subs.append(_sub(cell, u, vx, pf, ld))
    nl = "\n"
    return f"""constexpr int VX = {vx}, PF = {pf};
{pre_kernel}extern "C" __global__ void __launch_bounds__({lb})
zmarch(const __half* __restrict__ src, {coef}__half* __restrict__ dst) {{
{half2_weights(cell)}  const long x0 = ((long){bi.x} * {tx} + threadIdx.x) * VX;
  const long y = (long){bi.y} * {ty} + threadIdx.y;
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
{nl.join(pre)}
  for (long z = zb; z < ze; z += PF) {{
{nl.join(subs)}
  }}
}}
"""
