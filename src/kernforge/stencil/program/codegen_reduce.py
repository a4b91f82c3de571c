"""Fused reductions of the operators for lifted programs: how a launch combines its points'
values into each reduction's scalar (docs/stencil-programs.md, Operators for lifted programs).

Every thread accumulates its points; each block combines its threads' values (warp shuffles
down each warp, the warps' values through shared memory, shuffles down the first warp: two
barriers). Then one of two ways across the blocks, the designs' knob ``atomic``:

- ``atomic=0``, the last block: each block stores its partial (a float64) in the module's
  array, raises a counter (a fence, then an atomic that returns the count), and the block
  that finishes last reads every partial in a fixed order and writes the scalar. The result
  does not depend on the blocks' order; the cost is a fence and a round trip to the counter
  per block and a tail where one block reads all the partials while the rest of the device
  idles.
- ``atomic=1``: thread 0 of each block adds its partial to the scalar with one atomic (sum,
  sumsq: ``atomicAdd``, which returns nothing the block waits for; maxabs: a compare-and-swap
  loop on the bits), as kernels written by hand do. No fence, no counter, no tail; the sum
  depends on the blocks' order by rounding (within the reductions' tolerance, which allows any
  order). Only for a reduction that accumulates into the scalar (``+=``, ``max=``): one that
  writes it would need the scalar cleared before any block adds, which no block can know;
  and not for fp16 scalars (a half-precision atomic sum loses the total). Threads and blocks
  accumulate in the program's arithmetic (fp32 for fp32) instead of float64: the blocks'
  partials carry the rounding of a tree of a block's points, small against the atomics'.
"""

from __future__ import annotations

from .model import StencilProgram

RED_SLOTS = 32  # values of shared memory a block's reduction uses (one per warp)


def atomic_refusal(p: StencilProgram) -> str | None:
    """Why ``p``'s reductions cannot be combined by per-block atomics (None: they can)."""
    if not p.reductions:
        return "the program has no reduction: the knob atomic changes nothing"
    if p.precision == "fp16":
        return "fp16 scalars: a half-precision atomic sum per block loses the total"
    written = [r.name for r in p.reductions if not r.accumulate]
    if written:
        return (f"the reductions {written} write their scalar (not +=): a block cannot know "
                "that the scalar was cleared before it adds")
    return None


def acc_type(p: StencilProgram, atomic: bool) -> str:
    """The C type threads and blocks accumulate a reduction in."""
    return ("double" if p.precision == "fp64" else "float") if atomic else "double"


def globals_(p: StencilProgram, blocks: int, atomic: bool) -> str:
    """The module's partials and counter (the last-block way only)."""
    if not p.reductions or atomic:
        return ""
    parts = "".join(f"__device__ double kf_part{j}[{blocks}];\n"
                    for j in range(len(p.reductions)))
    return parts + "__device__ unsigned int kf_done = 0;\n"


def accumulators(p: StencilProgram, atomic: bool) -> str:
    t = acc_type(p, atomic)
    zero = "0.0" if t == "double" else "0.0f"
    return "".join(f"  {t} kf_a{j} = {zero};\n" for j in range(len(p.reductions)))


def finish(p: StencilProgram, threads: int, blocks: int, atomic: bool, st: str, acc: str
           ) -> str:
    """The end of ``kf_body``; ``st``/``acc``: the scalar's storing conversion and the
    program's arithmetic type."""
    if not p.reductions:
        return ""
    t = acc_type(p, atomic)
    out = [f"  __shared__ {t} kf_red[{RED_SLOTS}];\n"]
    if atomic:
        for j, r in enumerate(p.reductions):
            out.append(f"  {{\n{block_reduce(f'kf_a{j}', r.op, threads, t)}"
                       f"    if (kf_tid == 0) {{\n{_atomic(f'r_{r.name}', r.op, t)}    }}\n  }}\n")
        return "".join(out)
    out.append("  __shared__ int kf_last;\n")
    for j, r in enumerate(p.reductions):
        out.append(f"  {{\n{block_reduce(f'kf_a{j}', r.op, threads, t)}"
                   f"    if (kf_tid == 0) kf_part{j}[kf_blk] = kf_v;\n  }}\n")
    out.append("  if (kf_tid == 0) {\n    __threadfence();\n"
               f"    kf_last = atomicAdd(&kf_done, 1u) == {blocks}u - 1u;\n  }}\n"
               "  __syncthreads();\n  if (!kf_last) return;\n  __threadfence();\n")
    for j, r in enumerate(p.reductions):
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
                   f"{block_reduce('kf_s', r.op, threads, 'double')}"
                   f"    if (kf_tid == 0) r_{r.name}[0] = {st}(({acc})({value}));\n"
                   "  }\n")
    out.append("  if (kf_tid == 0) kf_done = 0;\n")
    return "".join(out)


def _atomic(ptr: str, op: str, t: str) -> str:
    """Thread 0's statements folding the block's ``kf_v`` into ``ptr[0]``."""
    if op != "maxabs":
        return f"      atomicAdd({ptr}, kf_v);\n"
    bits, to, back = (("unsigned long long", "__double_as_longlong", "__longlong_as_double")
                      if t == "double" else ("unsigned int", "__float_as_uint",
                                             "__uint_as_float"))
    cast = "(long long)" if t == "double" else ""
    return (f"      {bits}* kf_q = ({bits}*){ptr};\n      {bits} kf_seen = *kf_q, kf_was;\n"
            f"      do {{\n        kf_was = kf_seen;\n"
            f"        const {t} kf_new = fmax({back}({cast}kf_was), kf_v);\n"
            f"        if ({to}(kf_new) == {cast}kf_was) break;\n"
            f"        kf_seen = atomicCAS(kf_q, kf_was, ({bits}){to}(kf_new));\n"
            "      } while (kf_seen != kf_was);\n")


def block_reduce(var: str, op: str, threads: int, t: str = "double") -> str:
    """Statements leaving in ``kf_v`` (of type ``t``) of thread 0 the block's combination of
    ``var`` (every thread's), in a fixed order: shuffles down each warp, the warps' results
    through ``kf_red``, shuffles down the first warp. Every thread reaches it; ``kf_red`` is
    free again after it. In a full warp the lanes whose source lies past the warp add a
    value of their own lanes, which no lane that reaches lane 0 reads: no guard."""
    def comb(a: str, b: str) -> str:
        return f"fmax({a}, {b})" if op == "maxabs" else f"{a} + {b}"

    warps = -(-threads // 32)
    full = threads % 32 == 0
    # a partial last warp: its lanes past the block shuffle in nothing (mask of its lanes)
    mask = "0xffffffffu" if full else \
        f"(kf_tid >> 5 == {warps - 1} ? {hex((1 << (threads % 32)) - 1)}u : 0xffffffffu)"

    def down(guard: bool, pad: str) -> str:
        return "".join(f"{pad}{{ const {t} kf_o = __shfl_down_sync(kf_m, kf_v, {d}); "
                       + (f"if ((kf_tid & 31) + {d} < kf_w) " if guard else "")
                       + f"kf_v = {comb('kf_v', 'kf_o')}; }}\n" for d in (16, 8, 4, 2, 1))

    width = "32" if full else f"(kf_tid >> 5 == {warps - 1} ? {threads % 32} : 32)"
    zero = "0.0" if t == "double" else "0.0f"
    # the first warp's second pass: every lane of it runs (lanes past the warps hold zero)
    # unless the block has fewer than 32 threads
    second = threads < 32
    return (f"    {t} kf_v = {var};\n    unsigned kf_m = {mask};\n"
            + (f"    int kf_w = {width};\n" if not full else "")
            + f"{down(not full, '    ')}    if ((kf_tid & 31) == 0) kf_red[kf_tid >> 5] = kf_v;\n"
            "    __syncthreads();\n"
            f"    if (kf_tid < 32) {{\n      kf_v = kf_tid < {warps} ? kf_red[kf_tid] : {zero};\n"
            f"      kf_m = {'0xffffffffu' if not second else mask};\n"
            + (f"      kf_w = {warps};\n" if second else "")
            + down(second, "      ") + "    }\n    __syncthreads();\n")
