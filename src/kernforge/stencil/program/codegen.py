"""Code generation for lifted stencil programs: what every design shares (docs/stencil-programs.md).

A design (:mod:`.codegen_plain`, :mod:`.codegen_tiled`) generates a :class:`Kernel`: CUDA source
defining ``__device__ void kf_body(...)`` that every thread of every block of its launch calls
(it holds barriers), with one argument per :class:`Arg` (a field's grid, a reduction's scalar, a
scalar parameter, a coefficient table). The adapter (``kernforge.apps.program_adapter``) calls it
from a ``__global__`` function with the recorded kernel's parameter layout; :func:`standalone`
wraps it in one that takes the arguments in order (tests, the host emulator).

Shared here: the C form of expressions (constants baked as literals, ``__constant__`` values
baked from the binding, scalar parameters read from the arguments, tables read from their
buffer), the point update (every tap read first, every output computed, then the face rules'
precedence decides per output what is stored: the formula, the old value, a copy or zero), and
the fused reductions' per-point values; how the blocks combine them (the knob ``atomic``: the
last block in a fixed order, or one atomic per block) is :mod:`.codegen_reduce`. fp16 grids
are computed in fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core import ConfigError
from . import codegen_reduce as red
from . import expr as ex
from .binding import Binding, check
from .model import FACES, StencilProgram

CTYPE = {"fp16": "__half", "fp32": "float", "fp64": "double"}
ACC = {"fp16": "float", "fp32": "float", "fp64": "double"}
RULE_CODE = {"keep": 1, "copy": 2, "zero": 3}
HINT = "see docs/stencil-programs.md (Operators for lifted programs)"


class Refused(ConfigError):
    """A design cannot generate the program (the message says why)."""


@dataclass(frozen=True)
class Arg:
    """One argument of ``kf_body``: ``kind`` field, reduction, scalar or table; ``name`` the
    field's, reduction's or table's name, or the scalar parameter's index."""

    kind: str
    name: str
    ctype: str


@dataclass(frozen=True)
class Kernel:
    design: str
    knobs: Mapping[str, int]
    source: str
    args: tuple[Arg, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic: 0, every buffer is static
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        return f"{self.design}(" + ",".join(f"{k}={v}" for k, v in self.knobs.items()) + ")"


def reads(p: StencilProgram) -> list[ex.Tap]:
    """The taps of fields no output writes, in the order the expressions read them."""
    written = set(p.names("out", "inout"))
    taps: dict[ex.Tap, None] = {}
    for e in [o.expr for o in p.outputs] + [r.expr for r in p.reductions]:
        taps.update(dict.fromkeys(t for t in ex.taps(e) if t.field not in written))
    return list(taps)


def spread(p: StencilProgram) -> list[str]:
    """The fields some expression reads away from the point (a design stages those)."""
    return sorted({t.field for t in reads(p) if t.offset != (0, 0, 0)})


def reach(p: StencilProgram, name: str) -> tuple[int, int, int]:
    """How far the reads of field ``name`` reach along z, y, x (either side)."""
    r = [0, 0, 0]
    for t in reads(p):
        if t.field == name:
            r = [max(a, abs(d)) for a, d in zip(r, t.offset, strict=True)]
    return (r[0], r[1], r[2])


def literal(v: float, precision: str) -> str:
    if not np.isfinite(v):
        raise Refused(f"a constant {v!r} in the program", hint=HINT)
    return repr(float(v)) if ACC[precision] == "double" else f"{float(np.float32(v))!r}f"


class Context:
    """A program and its binding, with the names the generated code uses."""

    def __init__(self, p: StencilProgram, b: Binding, atomic: bool = False,
                 tile: tuple[int, int, int] = (1, 1, 1)) -> None:
        """``tile``: the points (x, y, z) a block covers, how far past the grid a
        design's coordinates may run."""
        check(p, b)
        if atomic and (why := red.atomic_refusal(p)):
            raise Refused(why, hint="atomic=0: the last block combines the partials")
        self.p, self.b, self.atomic = p, b, atomic
        self.racc = red.acc_type(p, atomic)  # what the reductions accumulate in
        self.t, self.acc = CTYPE[p.precision], ACC[p.precision]
        self.written = p.names("out", "inout")
        self.read_only = [f.name for f in p.fields if f.role in ("in", "coef")]
        self.taps = reads(p)  # the reads of fields no output writes
        # fields some expression reads away from the point (a design stages those)
        self.spread = spread(p)
        # the index type: 32 bits while every linear index a design computes (the grid, its
        # halos and the tiles past its end) stays below 2^31; saves 64-bit address arithmetic
        pad = 2 * max([1, *(abs(d) for t in self.taps for d in t.offset)]) + 2
        span = [n + pad + e for n, e in zip(b.shape, tile, strict=True)]
        self.ix = "int" if span[0] * span[1] * span[2] < 2 ** 31 else "long"

    def reach(self, name: str) -> tuple[int, int, int]:
        """How far the reads of field ``name`` reach along z, y, x (either side)."""
        return reach(self.p, name)

    def args(self) -> tuple[Arg, ...]:
        out = [Arg("field", f.name, (f"{self.t}*" if f.name in self.written
                                     else f"const {self.t}*")) for f in self.p.fields]
        out += [Arg("reduction", r.name, f"{self.t}*") for r in self.p.reductions]
        out += [Arg("scalar", str(i), self.b.scalars[i]) for i in self.p.params()]
        out += [Arg("table", n, f"const {self.t}*") for n in sorted(self.b.tables)
                if n in self.p.constants()]
        return tuple(out)

    def signature(self) -> str:
        return ", ".join(f"{a.ctype} __restrict__ {cname(a)}" if a.ctype.endswith("*")
                         else f"{a.ctype} {cname(a)}" for a in self.args())

    def prelude(self) -> str:
        nx, ny, nz = self.b.shape
        inc = "#include <cuda_fp16.h>\n" if self.p.precision == "fp16" else ""
        conv = ("__device__ __forceinline__ float kf_ld(__half v) { return __half2float(v); }\n"
                "__device__ __forceinline__ __half kf_st(float v) { return __float2half(v); }\n"
                if self.p.precision == "fp16" else
                f"__device__ __forceinline__ {self.acc} kf_ld({self.t} v) {{ return v; }}\n"
                f"__device__ __forceinline__ {self.t} kf_st({self.acc} v) {{ return v; }}\n")
        return (f"{inc}// kernforge lifted-program operator: {self.p.dims}D {self.p.precision} "
                f"program {self.p.key}\n{conv}"
                f"typedef {self.ix} kf_i;\n#define KF_NX ((kf_i){nx})\n"
                f"#define KF_NY ((kf_i){ny})\n#define KF_NZ ((kf_i){nz})\n")

    # --- expressions -----------------------------------------------------------------------
    def expr(self, e: ex.Expr, leaf: Callable[[ex.Tap], str]) -> str:
        if isinstance(e, ex.Bin):
            return f"({self.expr(e.a, leaf)} {e.op} {self.expr(e.b, leaf)})"
        if isinstance(e, ex.Neg):
            return f"(-{self.expr(e.a, leaf)})"
        if isinstance(e, ex.Const):
            return literal(e.value, self.p.precision)
        if isinstance(e, ex.Param):
            return f"(({self.acc})kf_s{e.index})"
        if isinstance(e, ex.ConstMem):
            if e.name in self.b.tables:
                return f"kf_ld(kf_t_{e.name}[{e.index}])"
            v: Any = self.b.constants[e.name]
            return literal(float(v if isinstance(v, int | float) else v[e.index]),
                           self.p.precision)
        if isinstance(e, ex.Tap):
            return leaf(e)
        raise Refused(f"not an expression node: {e!r}", hint=HINT)

    def safe_read(self, t: ex.Tap, x: str = "x", y: str = "y", z: str = "z") -> str:
        """``t`` read from global memory at the point (x, y, z) plus its offset, with the
        program's rule per side for a coordinate outside the grid (zero, wrap, clamp)."""
        return self.safe_at(f"f_{t.field}", [f"{z} + ({t.offset[0]})", f"{y} + ({t.offset[1]})",
                                            f"{x} + ({t.offset[2]})"], t.offset)

    def safe_at(self, ptr: str, coords: list[str], offset: tuple[int, ...] | None = None) -> str:
        """``ptr`` at the coordinates (z, y, x) given as C expressions; ``offset``: the sides a
        read can leave the grid through (None: both sides of every axis)."""
        pads = self.p.pads()
        conds, idx = [], []
        for a, (c, n) in enumerate(zip(coords, ("KF_NZ", "KF_NY", "KF_NX"), strict=True)):
            d = None if offset is None else offset[a]
            lo, hi = d is None or d < 0, d is None or d > 0
            v = f"({c})"
            if (lo and pads[a][0] == "wrap") or (hi and pads[a][1] == "wrap"):
                v = f"(({v} % {n} + {n}) % {n})"
            else:
                if lo and pads[a][0] == "clamp":
                    v = f"max({v}, (kf_i)0)"
                elif lo:
                    conds.append(f"({c}) >= 0")
                if hi and pads[a][1] == "clamp":
                    v = f"min({v}, {n} - 1)"
                elif hi:
                    conds.append(f"({c}) < {n}")
            idx.append(v)
        lin = f"(({idx[0]}) * KF_NY + ({idx[1]})) * KF_NX + ({idx[2]})"
        read = f"kf_ld({ptr}[{lin}])"
        return f"(({' && '.join(conds)}) ? {read} : ({self.acc})0)" if conds else read

    # --- the point update ------------------------------------------------------------------
    def point(self, read: Callable[[ex.Tap], str], indent: str = "    ") -> str:
        """Statements updating the point (x, y, z), linear index ``i`` (all ``kf_i``), when
        ``kf_ok``; reads of fields no output writes by ``read``."""
        p, acc, t = self.p, self.acc, self.t
        lines = []
        names = {tp: f"kf_v{k}" for k, tp in enumerate(self.taps)}
        for tp, n in names.items():
            lines.append(f"const {acc} {n} = {read(tp)};")

        def leaf(tp: ex.Tap) -> str:
            return names.get(tp, f"kf_ld(f_{tp.field}[i])")

        for k, o in enumerate(p.outputs):
            lines.append(f"const {acc} kf_o{k} = {self.expr(o.expr, leaf)};")
            conds = []
            for face, fr in zip(FACES, p.faces, strict=True):
                w = p.widths(o)[face]
                if w:
                    v, n = {"z": ("z", "KF_NZ"), "y": ("y", "KF_NY"), "x": ("x", "KF_NX")}[face[0]]
                    c = f"{v} < {w}" if face[1] == "-" else f"{v} >= {n} - {w}"
                    conds.append(f"if ({c}) kf_r{k} = {RULE_CODE[fr.rule]};")
            lines.append(f"int kf_r{k} = 0;" + (" " + " else ".join(conds) if conds else ""))
            if o.copy_from is not None and any(fr.rule == "copy" for fr in p.faces):
                lines.append(f"const {t} kf_c{k} = kf_r{k} == 2 ? f_{o.copy_from}[i] : "
                             f"f_{o.field}[i];")
            if p.reductions and any(fr.rule == "keep" for fr in p.faces):
                # only a kept point reads the output's old value (no extra sweep of the grid)
                lines.append(f"const {acc} kf_old{k} = kf_r{k} == 1 ? kf_ld(f_{o.field}[i]) : "
                             f"({acc})0;")
        for k, o in enumerate(p.outputs):
            copy = (f" else if (kf_r{k} == 2) f_{o.field}[i] = kf_c{k};"
                    if o.copy_from is not None and any(fr.rule == "copy" for fr in p.faces)
                    else "")
            lines.append(f"if (kf_r{k} == 0) f_{o.field}[i] = kf_st(kf_o{k});{copy} "
                         f"else if (kf_r{k} == 3) f_{o.field}[i] = kf_st(({acc})0);")
        if p.reductions:
            lines += self._reduce_point(leaf)
        body = "\n".join(indent + "  " + s for s in lines)
        return f"{indent}if (kf_ok) {{\n{body}\n{indent}}}\n"

    def _reduce_point(self, leaf: Callable[[ex.Tap], str]) -> list[str]:
        p, acc = self.p, self.acc
        lines = []
        index = {o.field: k for k, o in enumerate(p.outputs)}
        for k, o in enumerate(p.outputs):
            old = f"kf_old{k}" if any(fr.rule == "keep" for fr in p.faces) else f"({acc})0"
            copy = f"kf_ld(kf_c{k})" if o.copy_from is not None and \
                any(fr.rule == "copy" for fr in p.faces) else f"({acc})0"
            lines.append(f"const {acc} kf_n{k} = kf_r{k} == 0 ? kf_ld(kf_st(kf_o{k})) : "
                         f"kf_r{k} == 1 ? {old} : kf_r{k} == 2 ? {copy} : ({acc})0;")

        def new(tp: ex.Tap) -> str:
            return f"kf_n{index[tp.field]}" if tp.field in index else leaf(tp)

        computed = " && ".join(f"kf_r{k} == 0" for k in range(len(p.outputs)))
        for j, r in enumerate(p.reductions):
            mask = computed if r.over == "computed" else "true"
            lines.append(f"if ({mask}) {{ const {self.racc} kf_e = ({self.racc})"
                         f"{self.expr(r.expr, new)}; kf_a{j} = "
                         + {"sum": f"kf_a{j} + kf_e", "sumsq": f"kf_a{j} + kf_e * kf_e",
                            "maxabs": f"fmax(kf_a{j}, fabs(kf_e))"}[r.op] + "; }")
        return lines

    # --- reductions across the launch (codegen_reduce) -------------------------------------
    def globals(self, blocks: int) -> str:
        return red.globals_(self.p, blocks, self.atomic)

    def accumulators(self) -> str:
        return red.accumulators(self.p, self.atomic)

    def finish(self, threads: int, blocks: int) -> str:
        """The end of ``kf_body``: the block's partials, then the blocks' (per block an
        atomic, or the last block's combination: :mod:`.codegen_reduce`)."""
        return red.finish(self.p, threads, blocks, self.atomic, "kf_st", self.acc)


def cname(a: Arg) -> str:
    return {"field": f"f_{a.name}", "reduction": f"r_{a.name}", "scalar": f"kf_s{a.name}",
            "table": f"kf_t_{a.name}"}[a.kind]


IDS = ("  const int kf_tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * "
       "threadIdx.z);\n"
       "  const long kf_blk = ((long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + "
       "blockIdx.x;\n  (void)kf_tid; (void)kf_blk;\n")


def standalone(k: Kernel, entry: str = "kf_standalone") -> str:
    """``k``'s source with a ``__global__`` entry taking ``k.args`` in order."""
    sig = ", ".join(f"{a.ctype} {cname(a)}" for a in k.args)
    call = ", ".join(cname(a) for a in k.args)
    threads = k.block[0] * k.block[1] * k.block[2]
    return (f"{k.source}\nextern \"C\" __global__ void __launch_bounds__({threads}) "
            f"{entry}({sig}) {{\n  kf_body({call});\n}}\n")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
