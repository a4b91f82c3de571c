"""The temporal design (:mod:`.temporal`, ``pipe=0``) with a time loop's face rules folded in.

A step of such a loop is the stencil (its grid ring keeps the input: rule ``copy``) and then the
ordered face rules of stencil/faces.py (the step's boundary kernels). Every rule writes a whole
face, so the value a point ends a step with is a gather: walking the rules backwards from the
point, each rule that writes it either sets a constant (the walk ends) or moves the point ``d``
inward; where no earlier rule writes the point any more, the value is the stencil's (or the
kept input's) at that point. The walk through the rules along y and x depends only on which
faces a column lies on, so each thread does it once, before the z-march, and keeps the result:
a tile index into the plane or a constant. A z face (plane 0 or n-1) ends as the plane it
copies ends (the in-plane rules act on both alike), or, where its last z rule sets a constant,
as that constant after the in-plane rules that follow it.

The kernel marches up z as :mod:`.temporal` does. In a tile that holds a face written by an
in-plane rule, each iteration has a second barrier: the stages publish their planes' stencil
values in shared memory (the second of the two centre buffers, the centres then single-
buffered), and after that barrier each thread takes its gathered value, which is what it
pushes into the stage's register queue (and so into shared memory for the next stage), or
stores. Other tiles run as the first design does (one barrier, centres double-buffered). A z face copied from ``d``
planes inward takes the value the stage's queue holds (``d`` up to 3 on the top face), or, on
the bottom face, is patched when plane ``d`` is done (``d`` up to 2). Copies move values only.

Halo validity: a gathered face point depends on the point ``d`` inward at the same step, one
more jump than a stencil point. Tiles cover the whole grid (faces included) and the last tile
along each axis is moved back to end at the grid's far face (it recomputes, with the same bits,
points the tile before it writes), so the face's source lies inside the owned tile, which must
be more than ``d`` points wide; along z, the chunks likewise. Every grid point is written.
"""

from __future__ import annotations

from .. import faces as fc
from ..spec import Cell, Precision
from .common import DoesNotFit, TileIndex, header, literal, load, store, weight_names

LO_Z_COPY, HI_Z_COPY = 2, 3  # the farthest z copy each face reads (bottom: patched; top: queue)


def _flat(faces: fc.Groups) -> list[fc.Face]:
    return [f for g in faces for f in g]


def check(cell: Cell, faces: fc.Groups, tx: int, ty: int, lz: int, steps: int) -> None:
    """:class:`DoesNotFit` where the rules cannot fold into this tiling."""
    if cell.precision is Precision.FP16:
        raise DoesNotFit("face rules fold into fp32 and fp64 grids")
    s = cell.shape
    why = fc.check(faces, (s.nz, s.ny, s.nx), cell.stencil.radii)
    if why:
        raise DoesNotFit(why)
    own = {0: lz, 1: ty - 2 * steps, 2: tx - 2 * steps}
    for f in _flat(faces):
        if f.source >= own[f.axis]:
            raise DoesNotFit(f"rule {f.describe()}: a tile must own more than {f.source} "
                             f"points along {fc.AXES[f.axis]} (it owns {own[f.axis]})")
        far = LO_Z_COPY if f.side == 0 else HI_Z_COPY
        if f.axis == 0 and f.source > far:
            raise DoesNotFit(f"rule {f.describe()}: the z-march holds the {far} planes "
                             "inward of that face, not more")


def _const(cell: Cell, value: float) -> str:
    """A rule's constant as the storage type rounds it (the companion stores it so)."""
    return f"(ACC)({cell.precision.ctype})({literal(value, cell.precision)})"


def walk(cell: Cell, rules: list[fc.Face], q: str, px: str = "gx", py: str = "gy",
         itype: str = "IDX") -> list[str]:
    """C statements walking the in-plane ``rules`` backwards from (``q``x, ``q``y) = (``px``,
    ``py``) (of type ``itype``): each rule writing the point moves it inward or sets ``q``c (and
    the constant ``q``v). Both temporal kernels with faces use it."""
    out = [f"  {itype} {q}x = {px}, {q}y = {py}; bool {q}c = false; ACC {q}v = 0;"]
    for f in reversed(rules):
        a = "x" if f.axis == 2 else "y"
        at = "0" if f.side == 0 else f"N{a.upper()} - 1"
        hit = f"!{q}c && {q}{a} == {at}"
        if f.source:
            out.append(f"  if ({hit}) {q}{a} += {f.inward * f.source};")
        else:
            out.append(f"  if ({hit}) {{ {q}c = true; {q}v = {_const(cell, f.value)}; }}")
    return out


def _last_z(flat: list[fc.Face], side: int) -> int | None:
    """The position of the last z rule on face ``side`` (0: plane 0, 1: plane n-1), or None."""
    at = [i for i, f in enumerate(flat) if f.axis == 0 and f.side == side]
    return at[-1] if at else None


def _setup(cell: Cell, faces: fc.Groups, tx: int, ty: int) -> str:
    """Per thread, before the march: a plane's gather (``gs``: the thread's own value; else
    ``qc``: the constant ``qv``, or ``gi``: the tile index whose value it takes) and each z
    face's constant (``zv0``, ``zv1``) where its last z rule sets one."""
    flat = _flat(faces)
    code = "\n".join(walk(cell, [f for f in flat if f.axis], "q")) + "\n"
    code += ("  const IDX qlx = tx + (qx - gx), qly = ty + (qy - gy);  // clamped: such a source"
             " serves no valid point\n"
             f"  const int gi = (int)(qly < 0 ? 0 : qly > {ty - 1} ? {ty - 1} : qly) * {tx}"
             f" + (int)(qlx < 0 ? 0 : qlx > {tx - 1} ? {tx - 1} : qlx);\n"
             "  const bool gs = !qc && qx == gx && qy == gy;\n")
    for side in (0, 1):
        j = _last_z(flat, side)
        if j is None or flat[j].source:
            continue
        code += "\n".join(walk(cell, [f for f in flat[j + 1:] if f.axis], f"w{side}")) + "\n"
        code += f"  const ACC zv{side} = w{side}c ? w{side}v : {_const(cell, flat[j].value)};\n"
    return code


def _faced(faces: fc.Groups, tx: int, ty: int) -> str:
    """A C condition: the block's tile holds a face that an in-plane rule writes (then its
    threads gather from each other, after a second barrier per iteration)."""
    conds = []
    for axis, a, w in ((2, "x", tx), (1, "y", ty)):
        if any(f.axis == axis for f in _flat(faces)):
            lo, hi, n = f"(g{a} - t{a})", f"(g{a} - t{a} + {w - 1})", f"N{a.upper()}"
            conds.append(f"({lo} <= 0 && {hi} >= 0) || ({lo} <= {n} - 1 && {hi} >= {n} - 1)")
    return " || ".join(f"({c})" for c in conds) or "false"


def _stage(cell: Cell, s: int, steps: int) -> str:
    """Phase 1 of stage ``s``: the stencil value ``v{s}`` of plane ``k - 2s``, published."""
    w = dict(zip(cell.stencil.offsets, weight_names(cell), strict=True))
    prev, sm = s - 1, f"sm[par][{s - 1}]"
    expr = (f"{w[(0, 0, 0)]} * b{prev} + {w[(-1, 0, 0)]} * a{prev} + {w[(1, 0, 0)]} * c{prev}"
            f" + {w[(0, -1, 0)]} * {sm}[ym][tx] + {w[(0, 1, 0)]} * {sm}[yp][tx]"
            f" + {w[(0, 0, -1)]} * {sm}[ty][xm] + {w[(0, 0, 1)]} * {sm}[ty][xp]")
    return f"""    {{  // stage {s}: step {s} of plane k - {2 * s}
      const IDX p = k - {2 * s};
      if (p >= lo{s} && p < hi{s}) {{
        v{s} = (inner && p >= 1 && p < NZ - 1) ? ({expr}) : b{prev};
        if (faced) sm[1][{prev}][ty][tx] = v{s};  // published for the gathers
      }}
    }}
"""


def _finish(cell: Cell, faces: fc.Groups, s: int, steps: int) -> str:
    """Phase 2 of stage ``s``: the gathered value ``w`` of plane ``p``, pushed or stored."""
    flat = _flat(faces)
    lo, hi = _last_z(flat, 0), _last_z(flat, 1)
    dlo = flat[lo].source if lo is not None else 0
    dhi = flat[hi].source if hi is not None else 0
    take = f"ACC w = gs ? v{s} : (qc ? qv : (&sm[1][{s - 1}][0][0])[gi]);"
    if lo is not None and not dlo:
        take += " if (p == 0) w = zv0;"
    if hi is not None:
        if dhi:
            take += f" if (p == NZ - 1) w = {'cba'[dhi - 1]}{s};" if s < steps else ""
        else:
            take += " if (p == NZ - 1) w = zv1;"
    at = f"dst[(p * NY + gy) * NX + gx] = {store(cell.precision, 'w')};"
    if s < steps:
        done = f"a{s} = b{s}; b{s} = c{s}; c{s} = w;"
        if dlo:  # plane 0 ends as plane dlo does: patch the queue when that one is done
            done += f" if (p == {dlo} && lo{s} == 0) {'ba'[dlo - 1]}{s} = w;"
        tail = f" else if (p == hi{s}) {{ a{s} = b{s}; b{s} = c{s}; }}"
    else:
        keep = ["p >= z0 && p < z1"]
        if dlo:
            keep.append("p != 0")
        if dhi:
            keep.append("p != NZ - 1")
        done = f"if (owner) {{ if ({' && '.join(keep)}) {at}"
        if dlo:
            done += f" if (p == {dlo} && z0 == 0) " + at.replace("(p * NY", "(0 * NY")
        if dhi:
            done += (f" if (p == NZ - 1 - {dhi} && z1 == NZ) "
                     + at.replace("(p * NY", "((NZ - 1) * NY"))
        done += " }"
        tail = ""
    return f"""    {{  // stage {s}, gathered
      const IDX p = k - {2 * s};
      if (p >= lo{s} && p < hi{s}) {{
        {take}
        {done}
      }}{tail}
    }}
"""


def source(cell: Cell, tx: int, ty: int, lz: int, steps: int, minb: int, faces: fc.Groups,
           bi: TileIndex) -> str:
    p = cell.precision
    bx, by = tx - 2 * steps, ty - 2 * steps
    weights = "".join(f"constexpr ACC {n} = {literal(w, p)};\n"
                      for n, w in zip(weight_names(cell), cell.stencil.weights, strict=True))
    queues = " ".join(f"ACC a{s} = 0, b{s} = 0, c{s} = 0;" for s in range(steps))
    values = " ".join(f"ACC v{s} = 0;" for s in range(1, steps + 1))
    bounds = "\n".join(
        f"  const IDX lo{s} = z0 - {steps - s} > 0 ? z0 - {steps - s} : 0;\n"
        f"  const IDX hi{s} = z1 + {steps - s} < NZ ? z1 + {steps - s} : NZ;"
        for s in range(steps + 1))
    centres = "\n".join(f"    sm[par][{s}][ty][tx] = b{s};" for s in range(steps))
    stages = "".join(_stage(cell, s, steps) for s in range(steps, 0, -1))
    finish = "".join(_finish(cell, faces, s, steps) for s in range(steps, 0, -1))
    s = cell.shape
    idx = "int" if s.points < 2**31 else "long"  # 32-bit plane and index arithmetic if it fits
    sizes = f"constexpr {idx} NX = {s.nx}, NY = {s.ny}, NZ = {s.nz};\ntypedef {idx} IDX;\n"
    return f"""{header(cell)}{sizes}typedef {p.acc_ctype} ACC;
{weights}constexpr int T = {steps};
// then per step: {fc.describe(faces)}
extern "C" __global__ void __launch_bounds__({tx * ty}{f", {minb}" if minb > 1 else ""})
temporal(const {p.ctype}* __restrict__ src, {p.ctype}* __restrict__ dst) {{
  // each stage's centre plane, double-buffered by iteration parity; in a tile on a face
  // written by a rule within the planes: [0] the centres, [1] the stages' values (gathers)
  __shared__ ACC sm[2][T][{ty}][{tx}];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int xm = tx > 0 ? tx - 1 : 0, xp = tx < {tx - 1} ? tx + 1 : {tx - 1};
  const int ym = ty > 0 ? ty - 1 : 0, yp = ty < {ty - 1} ? ty + 1 : {ty - 1};
  const IDX bx0 = (IDX){bi.x} * {bx}, by0 = (IDX){bi.y} * {by}, bz0 = (IDX){bi.z} * {lz};
  const IDX gx = (bx0 < NX - {bx} ? bx0 : NX - {bx}) - T + tx;  // the last tile moved back
  const IDX gy = (by0 < NY - {by} ? by0 : NY - {by}) - T + ty;
  const bool faced = {_faced(faces, tx, ty)};  // the same in the whole block
  const bool in_grid = gx >= 0 && gx < NX && gy >= 0 && gy < NY;
  const bool inner = gx >= 1 && gx < NX - 1 && gy >= 1 && gy < NY - 1;
  const bool owner = in_grid && tx >= T && tx < T + {bx} && ty >= T && ty < T + {by};
  const IDX z0 = bz0 < NZ - {lz} ? bz0 : NZ - {lz};
  const IDX z1 = z0 + {lz};
{bounds}
{_setup(cell, faces, tx, ty)}  {queues}
  {values}
  ACC nxt = in_grid ? {load(p, "src[(lo0 * NY + gy) * NX + gx]")} : (ACC)0;
  for (IDX k = lo0 + 1; k < hi{steps} + {2 * steps}; ++k) {{
    const int par = faced ? 0 : k & 1;
    if (k - 1 <= hi0) {{  // push input plane k-1 (one stale push past the top), prefetch k
      a0 = b0; b0 = c0; c0 = nxt;
      if (k < hi0 && in_grid) nxt = {load(p, "src[(k * NY + gy) * NX + gx]")};
    }}
{centres}
    __syncthreads();
{stages}    if (faced) __syncthreads();
{finish}  }}
}}
"""


def grid(cell: Cell, tx: int, ty: int, lz: int, steps: int) -> tuple[int, int, int]:
    """Tiles over the whole grid, faces included."""
    s = cell.shape
    return (-(-s.nx // (tx - 2 * steps)), -(-s.ny // (ty - 2 * steps)), -(-s.nz // lz))
