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
fused reductions: per thread, then per block (warp shuffles, the warps' partials in shared
memory), then the last block to finish combines the blocks' partials in a fixed order and
writes the scalar (added to its old value when the program accumulates). fp16 grids are computed in fp32, reductions in fp64.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core import ConfigError
from . import expr as ex
from .binding import Binding, check
from .model import FACES, StencilProgram

CTYPE = {"fp16": "__half", "fp32": "float", "fp64": "double"}
ACC = {"fp16": "float", "fp32": "float", "fp64": "double"}
RULE_CODE = {"keep": 1, "copy": 2, "zero": 3}
RED_SLOTS = 32  # doubles of shared memory a block's reduction uses (one per warp)
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


def literal(v: float, precision: str) -> str:
    if not np.isfinite(v):
        raise Refused(f"a constant {v!r} in the program", hint=HINT)
    return repr(float(v)) if ACC[precision] == "double" else f"{float(np.float32(v))!r}f"


class Context:
    """A program and its binding, with the names the generated code uses."""

    def __init__(self, p: StencilProgram, b: Binding) -> None:
        check(p, b)
        self.p, self.b = p, b
        self.t, self.acc = CTYPE[p.precision], ACC[p.precision]
        self.written = p.names("out", "inout")
        self.read_only = [f.name for f in p.fields if f.role in ("in", "coef")]
        taps: dict[ex.Tap, None] = {}
        for e in [o.expr for o in p.outputs] + [r.expr for r in p.reductions]:
            taps.update(dict.fromkeys(t for t in ex.taps(e) if t.field not in self.written))
        self.taps = list(taps)  # the reads of fields no output writes
        # fields some expression reads away from the point (a design stages those)
        self.spread = sorted({t.field for t in self.taps if t.offset != (0, 0, 0)})

    def reach(self, name: str) -> tuple[int, int, int]:
        """How far the reads of field ``name`` reach along z, y, x (either side)."""
        r = [0, 0, 0]
        for t in self.taps:
            if t.field == name:
                r = [max(a, abs(d)) for a, d in zip(r, t.offset, strict=True)]
        return (r[0], r[1], r[2])

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
                f"#define KF_NX {nx}L\n#define KF_NY {ny}L\n#define KF_NZ {nz}L\n")

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
                    v = f"max({v}, 0L)"
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
        """Statements updating the point (x, y, z), linear index ``i`` (all ``long``), when
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
            lines.append(f"if ({mask}) {{ const double kf_e = (double)"
                         f"{self.expr(r.expr, new)}; kf_a{j} = "
                         + {"sum": f"kf_a{j} + kf_e", "sumsq": f"kf_a{j} + kf_e * kf_e",
                            "maxabs": f"fmax(kf_a{j}, fabs(kf_e))"}[r.op] + "; }")
        return lines

    # --- reductions across the launch ------------------------------------------------------
    def globals(self, blocks: int) -> str:
        if not self.p.reductions:
            return ""
        parts = "".join(f"__device__ double kf_part{j}[{blocks}];\n"
                        for j in range(len(self.p.reductions)))
        return parts + "__device__ unsigned int kf_done = 0;\n"

    def accumulators(self) -> str:
        return "".join(f"  double kf_a{j} = 0.0;\n" for j in range(len(self.p.reductions)))

    def finish(self, threads: int, blocks: int) -> str:
        """The end of ``kf_body``: the block's partials (warp shuffles, then the warps'
        partials in shared memory: two barriers), and the last block's result (it reads the
        blocks' partials 8 at a time, past L1)."""
        if not self.p.reductions:
            return ""
        out = [f"  __shared__ double kf_red[{RED_SLOTS}];\n  __shared__ int kf_last;\n"]
        for j, r in enumerate(self.p.reductions):
            out.append(f"  {{\n{_block_reduce(f'kf_a{j}', r.op, threads)}"
                       f"    if (kf_tid == 0) kf_part{j}[kf_blk] = kf_v;\n  }}\n")
        out.append("  if (kf_tid == 0) {\n    __threadfence();\n"
                   f"    kf_last = atomicAdd(&kf_done, 1u) == {blocks}u - 1u;\n  }}\n"
                   "  __syncthreads();\n  if (!kf_last) return;\n  __threadfence();\n")
        for j, r in enumerate(self.p.reductions):
            comb = "fmax(kf_s, kf_p[u])" if r.op == "maxabs" else "kf_s + kf_p[u]"
            before = f"(double)kf_ld(r_{r.name}[0])"
            value = (f"fmax({before}, kf_v)" if r.op == "maxabs" else
                     f"{before} + kf_v") if r.accumulate else "kf_v"
            out.append(f"  {{\n    double kf_s = 0.0;\n    for (long b = kf_tid; b < {blocks}; "
                       f"b += {8 * threads}) {{\n      double kf_p[8];\n"
                       "#pragma unroll\n      for (int u = 0; u < 8; u++) kf_p[u] = "
                       f"b + u * {threads}L < {blocks} ? __ldcg(&kf_part{j}[b + u * {threads}L])"
                       " : 0.0;\n#pragma unroll\n"
                       f"      for (int u = 0; u < 8; u++) kf_s = {comb};\n    }}\n"
                       f"{_block_reduce('kf_s', r.op, threads)}"
                       f"    if (kf_tid == 0) r_{r.name}[0] = kf_st(({self.acc})({value}));\n"
                       "  }\n")
        out.append("  if (kf_tid == 0) kf_done = 0;\n")
        return "".join(out)


def _block_reduce(var: str, op: str, threads: int) -> str:
    """Statements leaving in ``kf_v`` of thread 0 the block's combination of ``var`` (every
    thread's), in a fixed order: shuffles down each warp, the warps' results through
    ``kf_red``, shuffles down the first warp. Every thread reaches it; ``kf_red`` is free
    again after it."""
    def comb(a: str, b: str) -> str:
        return f"fmax({a}, {b})" if op == "maxabs" else f"{a} + {b}"

    warps = -(-threads // 32)
    full = threads % 32 == 0
    # a partial last warp: its lanes past the block shuffle in nothing (mask of its lanes)
    mask = "0xffffffffu" if full else \
        f"(kf_tid >> 5 == {warps - 1} ? {hex((1 << (threads % 32)) - 1)}u : 0xffffffffu)"
    down = "".join(f"    {{ const double kf_o = __shfl_down_sync(kf_m, kf_v, {d}); "
                   f"if ((kf_tid & 31) + {d} < kf_w) kf_v = {comb('kf_v', 'kf_o')}; }}\n"
                   for d in (16, 8, 4, 2, 1))
    width = "32" if full else f"(kf_tid >> 5 == {warps - 1} ? {threads % 32} : 32)"
    return (f"    double kf_v = {var};\n    unsigned kf_m = {mask};\n    int kf_w = {width};\n"
            f"{down}    if ((kf_tid & 31) == 0) kf_red[kf_tid >> 5] = kf_v;\n"
            "    __syncthreads();\n"
            f"    if (kf_tid < 32) {{\n      kf_v = kf_tid < {warps} ? kf_red[kf_tid] : 0.0;\n"
            f"      kf_m = {'0xffffffffu' if threads >= 32 else mask};\n      kf_w = {warps};\n"
            + down.replace("    {", "      {") + "    }\n    __syncthreads();\n")


def cname(a: Arg) -> str:
    return {"field": f"f_{a.name}", "reduction": f"r_{a.name}", "scalar": f"kf_s{a.name}",
            "table": f"kf_t_{a.name}"}[a.kind]


IDS = ("  const long kf_tid = threadIdx.x + (long)blockDim.x * (threadIdx.y + "
       "(long)blockDim.y * threadIdx.z);\n"
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
