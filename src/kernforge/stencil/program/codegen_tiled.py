"""The tiled design for a lifted program (docs/stencil-programs.md).

A block computes a tile of ``tx`` by ``ty * py`` points of a plane (each thread ``py`` rows)
and, in 3D, marches ``lz`` planes along z. Every field some expression reads away from the
point is staged in shared memory: the tile plus its halo, per plane it reads, kept as a ring of
``2 rz + 1`` planes that advances one plane per step (one new plane loaded per step). The halo
is loaded with the program's rule per face (zero, wrap, clamp), so every face rule works. A
field read away from the point's column only in the point's own plane (a star along z: taps
``(dz, 0, 0)`` and ``(0, dy, dx)``) keeps one plane in shared memory and a register queue of
``2 rz + 1`` values along z per point, as the matrix's z-march does: each step a thread loads
one new value, writes its queue's centre into the tile and the block loads only the halo.

Fields read only at the point (coefficient fields, in-out fields, time levels) are read from
global memory by the thread that owns the point. That is what makes in-place programs safe
here: the model lets a written field be read only at the point being written, so no block
reads a neighbour another block may already have written; the binding refuses written grids
that overlap a read one.

Knobs: ``tx``, ``ty`` (the block), ``py`` (rows per thread), ``lz`` (planes per block, 3D);
for a program with reductions, ``atomic`` (how the blocks combine their partials,
:mod:`.codegen_reduce`): rows per thread and planes per block also divide the block's
reduction and its combination across blocks among more points.

The knob space the forge searches (:func:`space`: each knob's values for a program, the
presets' among them; :func:`refusal`: why a combination generates nothing, decided without
generating it: more than 1024 threads, tiles and halos past the static shared memory, a grid
past the launch limits, atomics the program's reductions cannot use; :func:`presets`: the
starting points).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from . import expr as ex
from .binding import Binding
from .codegen import IDS, Context, Kernel, Refused, ceil_div, reach, reads, spread
from .codegen_reduce import RED_SLOTS, atomic_refusal
from .model import StencilProgram

DESIGN = "tiled"
KNOBS = ("tx", "ty", "py", "lz", "atomic")
BATCH = 16  # cells of a tile a thread loads into registers before storing them
MAX_SHARED = 48 * 1024  # static shared memory: more needs an attribute the interposer never sets
ITEM = {"fp16": 2, "fp32": 4, "fp64": 8}
PRESETS = {2: ({"tx": 32, "ty": 8, "py": 2, "lz": 1}, {"tx": 64, "ty": 4, "py": 4, "lz": 1},
               {"tx": 32, "ty": 16, "py": 1, "lz": 1}),
           3: ({"tx": 32, "ty": 8, "py": 1, "lz": 16}, {"tx": 32, "ty": 4, "py": 2, "lz": 32},
               {"tx": 64, "ty": 4, "py": 1, "lz": 8})}
# tried first for a program with reductions that atomics combine (py rows per thread)
REDUCING = {2: ({"tx": 32, "ty": 8, "py": 4, "lz": 1}, {"tx": 64, "ty": 4, "py": 8, "lz": 1})}
# the values the search tries per knob (the presets' are added); lz only in 3D
VALUES = {"tx": (8, 16, 32, 64, 128), "ty": (1, 2, 4, 8, 16, 32), "py": (1, 2, 4, 8),
          "lz": (1, 2, 4, 8, 16, 32, 64)}
Staging = dict[str, tuple[int, int, int, int, int, int]]


def _stage(p: StencilProgram, tx: int, ty: int, py: int
           ) -> tuple[Staging, dict[str, bool], int]:
    """Per staged field its shared tile (planes, rows, columns, rz, ry, rx) and whether it
    keeps a register queue along z; the bytes of static shared memory the block takes."""
    TX, TY = tx, ty * py
    taps = reads(p)
    shape: Staging = {}
    column: dict[str, bool] = {}
    shared = 8 * RED_SLOTS + 8 if p.reductions else 0
    for f in spread(p):
        rz, ry, rx = reach(p, f)
        # a field read off the point's column only in its own plane: a register queue along z
        column[f] = rz > 0 and all(t.offset[1:] == (0, 0) for t in taps
                                   if t.field == f and t.offset[0])
        planes, h, w = 1 if column[f] else 2 * rz + 1, TY + 2 * ry, TX + 2 * rx
        shape[f] = (planes, h, w, rz, ry, rx)
        shared += planes * h * w * ITEM[p.precision]
    return shape, column, shared


def generate(p: StencilProgram, b: Binding, *, tx: int = 32, ty: int = 8, py: int = 1,
             lz: int = 8, atomic: int = 0) -> Kernel:
    """The tiled operator for ``p`` bound by ``b``; :class:`Refused` with the reason."""
    why = refusal(p, b.shape, {"tx": tx, "ty": ty, "py": py, "lz": lz, "atomic": atomic})
    if why is not None:
        raise why
    lz = lz if p.dims == 3 else 1
    ctx = Context(p, b, atomic=bool(atomic), tile=(tx, ty * py, lz))
    nx, ny, nz = b.shape
    threads = tx * ty
    TX, TY = tx, ty * py
    shape, column, shared = _stage(p, tx, ty, py)
    grid = (ceil_div(nx, TX), ceil_div(ny, TY), ceil_div(nz, lz))
    blocks = grid[0] * grid[1] * grid[2]

    def at(f: str, zz: str, y: str, x: str) -> str:
        return f"kf_st({ctx.safe_at(f'f_{f}', [zz, y, x])})"

    def load(f: str, zz: str) -> str:
        """Plane ``zz`` of the tile and its halo (only the halo for a queued field, whose
        tile the threads write from their queues): thread (tx, ty) of the block loads the
        cells (ty + u * ty_, tx + v * tx_) of the plane, whose addresses differ by constants;
        ``BATCH`` cells at a time, every load issued before the first store to shared memory
        (the loads in flight together rather than one memory latency per cell)."""
        planes, h, w, _rz, ry, rx = shape[f]
        slot = f"((({zz}) % {planes}) + {planes}) % {planes}" if planes > 1 else "0"
        cells = [(u, v) for u in range(ceil_div(h, ty)) for v in range(ceil_div(w, tx))]
        out = []
        size = ceil_div(len(cells), ceil_div(len(cells), BATCH))  # batches of equal size
        for start in range(0, len(cells), size):
            loads, stores = [], []
            for n, (u, v) in enumerate(cells[start:start + size]):
                r, c = f"(kf_ty + {u * ty})", f"(kf_tx + {v * tx})"
                cond = ([f"{r} < {h}"] if (u + 1) * ty > h else []) + \
                    ([f"{c} < {w}"] if (v + 1) * tx > w else [])
                if column[f]:
                    cond.append(f"!({r} >= {ry} && {r} < {ry + TY} && {c} >= {rx} && "
                                f"{c} < {rx + TX})")
                guard = f"if ({' && '.join(cond)}) " if cond else ""
                value = at(f, zz, f"kf_y0 - {ry} + {r}", f"kf_x0 - {rx} + {c}")
                loads.append(f"      {guard}kf_l{n} = {value};\n")
                stores.append(f"      {guard}kf_sh_{f}[{slot}][{r}][{c}] = kf_l{n};\n")
            names = ", ".join(f"kf_l{n}" for n in range(len(loads)))
            out.append(f"    {{\n      {ctx.t} {names};\n{''.join(loads)}{''.join(stores)}"
                       "    }\n")
        return "".join(out)

    def own(r: int) -> tuple[str, str]:
        return "kf_x0 + threadIdx.x", f"kf_y0 + threadIdx.y + {r * ty}"

    def queue(f: str, r: int, k: int) -> str:
        return f"kf_q_{f}_{r}_{k}"

    def reader(r: int) -> Callable[[ex.Tap], str]:
        def read(t: ex.Tap) -> str:
            if t.field not in shape:
                return f"kf_ld(f_{t.field}[i])"
            planes, _, _, rz, ry, rx = shape[t.field]
            dz, dy, dx = t.offset
            if column[t.field] and not dy and not dx:
                return f"kf_ld({queue(t.field, r, dz + rz)})"
            slot = f"(((z + ({dz})) % {planes} + {planes}) % {planes})" if planes > 1 else "0"
            return (f"kf_ld(kf_sh_{t.field}[{slot}][threadIdx.y + {r * ty + ry + dy}]"
                    f"[threadIdx.x + {rx + dx}])")
        return read

    decl = "".join(f"  __shared__ {ctx.t} kf_sh_{f}[{s[0]}][{s[1]}][{s[2]}];\n"
                   for f, s in shape.items())
    first, step, shift = [], [], []
    for f, (_, _, _, rz, ry, rx) in shape.items():
        if not column[f]:
            first += [load(f, f"kf_z0 + ({d})") for d in range(-rz, rz)]
            step.append(load(f, f"z + {rz}"))
            continue
        for r in range(py):
            x, y = own(r)
            decl += "".join(f"  {ctx.t} {queue(f, r, d + rz)} = "
                            f"{at(f, f'kf_z0 + ({d})', y, x)};\n" for d in range(-rz, rz))
            decl += f"  {ctx.t} {queue(f, r, 2 * rz)};\n"
            step.append(f"    {queue(f, r, 2 * rz)} = {at(f, f'z + {rz}', y, x)};\n"
                        f"    kf_sh_{f}[0][threadIdx.y + {r * ty + ry}][threadIdx.x + {rx}] = "
                        f"{queue(f, r, rz)};\n")
            shift += [f"    {queue(f, r, k)} = {queue(f, r, k + 1)};\n" for k in range(2 * rz)]
        step.append(load(f, "z"))
    rows = "".join(
        f"    {{\n      const kf_i x = kf_x0 + threadIdx.x, y = kf_y0 + threadIdx.y + {r * ty};\n"
        "      const bool kf_ok = x < KF_NX && y < KF_NY && z < KF_NZ;\n"
        f"      const kf_i i = (z * KF_NY + y) * KF_NX + x;\n{ctx.point(reader(r), '      ')}"
        "    }\n" for r in range(py))
    source = f"""{ctx.prelude()}{ctx.globals(blocks)}
__device__ __forceinline__ void kf_body({ctx.signature()}) {{
{IDS}{ctx.accumulators()}  const int kf_tx = threadIdx.x, kf_ty = threadIdx.y;
  const kf_i kf_x0 = (kf_i)blockIdx.x * {TX}, kf_y0 = (kf_i)blockIdx.y * {TY};
  const kf_i kf_z0 = {'(kf_i)blockIdx.z * ' + str(lz) if p.dims > 2 else '0'};
{decl}  {{
{''.join(first)}  }}
  for (int kf_kz = 0; kf_kz < {lz}; ++kf_kz) {{
    const kf_i z = kf_z0 + kf_kz;
{''.join(step)}    __syncthreads();
{rows}    __syncthreads();
{''.join(shift)}  }}
{ctx.finish(threads, blocks)}}}
"""
    knobs = {"tx": tx, "ty": ty, "py": py, "lz": lz}
    if p.reductions:
        knobs["atomic"] = int(bool(atomic))
    return Kernel(DESIGN, knobs, source, ctx.args(), grid, (tx, ty, 1),
                  notes=(f"shared {shared} bytes",))


def presets(p: StencilProgram) -> list[dict[str, int]]:
    """The presets; with reductions that per-block atomics can combine, tiles of more rows
    per thread with atomics first (fewer blocks: fewer atomics, a block's reduction shared by
    more points), then the presets with atomics, then with the last block."""
    base = [dict(k) for k in PRESETS.get(p.dims, ())]
    if not base or not p.reductions or atomic_refusal(p):
        return base
    return ([{**k, "atomic": 1} for k in REDUCING.get(p.dims, ())]
            + [{**k, "atomic": 1} for k in base] + [{**k, "atomic": 0} for k in base])


def applicable(p: StencilProgram) -> str | None:
    """Why the design generates nothing for ``p`` whatever its knobs (None: it may)."""
    if p.dims == 1:
        return "the tiled design stages planes: a 1D program takes the plain design"
    if not spread(p):
        return "no field is read away from the point: nothing to stage in shared memory"
    return None


def space(p: StencilProgram) -> dict[str, tuple[int, ...]]:
    """Each knob's values for ``p`` (its presets' among them): the tile, rows per thread,
    planes per block in 3D; ``atomic`` where its reductions can be combined by atomics."""
    used = presets(p)
    out = {k: tuple(sorted({*v, *(u[k] for u in used)})) for k, v in VALUES.items()
           if k != "lz" or p.dims == 3}
    if p.reductions and not atomic_refusal(p):
        out["atomic"] = (0, 1)
    return out


def refusal(p: StencilProgram, shape: tuple[int, int, int],
            knobs: Mapping[str, int]) -> Refused | None:
    """Why ``knobs`` generate no operator for ``p`` on a grid of ``shape`` (decided without
    generating it), None when they do; a knob left out takes :func:`generate`'s default."""
    if why := applicable(p):
        return Refused(why, hint="generate the plain design")
    tx, ty, py = knobs.get("tx", 32), knobs.get("ty", 8), knobs.get("py", 1)
    lz = knobs.get("lz", 8) if p.dims == 3 else 1
    if tx * ty > 1024 or min(tx, ty, py, lz) < 1:
        return Refused(f"tile knobs tx={tx} ty={ty} py={py} lz={lz}: 1 to 1024 threads",
                       hint=f"knobs {KNOBS}")
    shared = _stage(p, tx, ty, py)[2]
    if shared > MAX_SHARED:
        return Refused(f"the tiles take {shared} bytes of shared memory (at most "
                       f"{MAX_SHARED})", hint="smaller tx, ty or py")
    nx, ny, nz = shape
    grid = (ceil_div(nx, tx), ceil_div(ny, ty * py), ceil_div(nz, lz))
    if grid[1] > 65535 or grid[2] > 65535:
        return Refused(f"grid {grid} exceeds the launch limits", hint="larger tiles")
    if knobs.get("atomic") and (why := atomic_refusal(p)):
        return Refused(why, hint="atomic=0: the last block combines the partials")
    return None
