"""Acceptance and figures of an operator generated for a lifted program (the GPU half,
:mod:`.program_gpu`, calls these inside its child process).

- :func:`tolerance`: per written grid, what a kernel computing the program in its precision
  may differ by in any order of operations (``8 ops eps M``, with ``M`` the sum of the
  absolute values of the formula's terms at the largest inputs); per reduction, a relative
  ``(4 sqrt(N) + 128) eps`` (N points summed, in any order, by atomics or by a tree).
- :func:`validate`: the adapter on the recorded inputs against the recorded outputs, then
  against the original kernel on fresh random inputs; every buffer: written grids and
  scalars under the tolerance, the rest unchanged bit for bit.
- :func:`moved_bytes` and :func:`copy_bandwidth`: the bytes the program must move (each
  field it reads once, each field it writes once) and the device's copy bandwidth, measured
  in the same process with the same protocol (L2 flushed, best of 5, at least 64 MiB).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..backends.cuda_image import compile_image
from ..core import Tolerance
from ..harness.checkers import RecordedChecker
from ..harness.verify import passes
from ..stencil.program import StencilProgram
from ..stencil.program import expr as ex
from ..stencil.program.binding import Binding
from ..stencil.program.oracle import EPS

FRESH_SEEDS = (21, 22)
COPY = """extern "C" __global__ void kf_copy(double* dst, const double* src, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[i];
}
"""
DTYPE = {"fp16": "float16", "fp32": "float32", "fp64": "float64"}


def field_views(b: Binding, dt: np.dtype, state: Mapping[int, np.ndarray]
                ) -> dict[str, np.ndarray]:
    """Each field's grid in ``state`` (parameter -> its buffer's bytes), typed views."""
    n = b.points
    out = {}
    for name, pl in b.fields.items():
        raw = state[pl.param]
        a = raw[:raw.size // dt.itemsize * dt.itemsize].view(dt)
        out[name] = a[pl.offset:pl.offset + n]
    return out


def tolerance(p: StencilProgram, b: Binding, fields: Mapping[str, np.ndarray],
              params: Mapping[int, float]) -> tuple[dict[str, Tolerance], Tolerance]:
    """Per written field its tolerance, and the reductions' (module docstring)."""
    eps = EPS[p.precision]
    big = {n: max(abs(float(np.nanmax(a))), abs(float(np.nanmin(a)))) if a.size else 0.0
           for n, a in fields.items()}
    consts = dict(b.constants)
    grids = {}
    for o in p.outputs:
        tables = {n: [1.0] * 64 for n in b.tables}  # tables: coefficients of magnitude <= 1
        poly = ex.polynomial(o.expr, params, {**consts, **tables})
        mag = sum(abs(c) * math.prod(max(big.get(f, 0.0), 1e-30) for f, _ in m)
                  for m, c in poly.items())
        ops = 1 + sum(1 for n in ex.walk(o.expr) if isinstance(n, ex.Bin | ex.Neg))
        grids[o.field] = Tolerance("rel", rtol=8 * eps, atol=8 * ops * eps * mag + 1e-30)
    red = Tolerance("rel", rtol=(4 * math.sqrt(b.points) + 128) * eps, atol=1e-30)
    return grids, red


def scalar_values(rec: Any, b: Binding) -> dict[int, float]:
    """The recorded values of the scalar parameters the program reads."""
    out = {}
    for i, ctype in b.scalars.items():
        prm = rec.params[i]
        raw = rec.param_bytes[prm.offset:prm.offset + prm.size]
        out[i] = struct.unpack("<f" if ctype == "float" else "<d", raw)[0]
    return out


def compare(p: StencilProgram, b: Binding, dt: np.dtype, got: Mapping[int, np.ndarray],
            want: Mapping[int, np.ndarray], params: Mapping[int, float], what: str) -> str | None:
    """Why ``got`` (parameter -> bytes) is not ``want`` under the program's tolerance."""
    grids, red = tolerance(p, b, field_views(b, dt, want), params)
    written = {b.fields[n].param: n for n in p.names("out", "inout")}
    scalars = set(b.reductions.values())
    expected: dict[str, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    policies: dict[str, Tolerance] = {}
    for param, ref in want.items():
        out, name = got[param], f"param{param}"
        if param in written or param in scalars:
            k = ref.size // dt.itemsize * dt.itemsize
            expected[name], outputs[name] = ref[:k].view(dt), out[:k].view(dt)
            policies[name] = red if param in scalars else grids[written[param]]
            if k < ref.size:  # the bytes after the last whole element: bitwise
                expected[f"{name} tail"], outputs[f"{name} tail"] = ref[k:], out[k:]
        else:
            expected[name], outputs[name] = ref, out
    if all(passes(outputs[n], ref, policies.get(n, Tolerance())) for n, ref in expected.items()):
        return None  # the full check below only says why not
    res = RecordedChecker(expected, policies).check(outputs)
    return None if res.ok else f"{what}: {res.failed_checks[0].describe()}"


def fresh(t: Any, b: Binding, dt: np.dtype, seed: int) -> dict[int, np.ndarray]:
    """Random contents for every buffer the binding names (a reduction's scalar 0.75)."""
    rng = np.random.default_rng(seed)
    out = {}
    reds = set(b.reductions.values())
    for buf in t.buffers:
        if buf.param not in b.params() or buf.param in b.tables.values():
            continue
        x = np.zeros(buf.nbytes, dtype=np.uint8)
        n = buf.nbytes // dt.itemsize
        vals = np.full(1, 0.75) if buf.param in reds else rng.uniform(-1, 1, n)
        x[:vals.size * dt.itemsize] = vals.astype(dt).view(np.uint8)
        out[buf.param] = x
    return out


def validate(t: Any, p: StencilProgram, b: Binding, run: Callable[[], None],
             params: Mapping[int, float], cache: dict[int, Any] | None = None
             ) -> tuple[str | None, list[str]]:
    """(why the adapter is wrong or None, what was checked): the recorded outputs, then the
    original kernel on fresh random inputs (``t``: operator matching's ReplayTarget).
    ``cache``: the fresh inputs and the original's outputs on them, kept across candidates."""
    cache = {} if cache is None else cache
    dt = np.dtype(DTYPE[p.precision])
    done: list[str] = []
    rp = t.rp
    rp.restore()
    want = {buf.param: np.asarray(rp.rec.expected(t.where[buf.param][0]), dtype=np.uint8)
            [t.where[buf.param][1]:t.where[buf.param][1] + buf.nbytes] for buf in t.buffers}
    run()
    why = compare(p, b, dt, t.read(), want, params, "recorded outputs differ")
    if why:
        return why, done
    done.append("recorded outputs match")
    for seed in FRESH_SEEDS:
        if seed not in cache:
            contents = fresh(t, b, dt, seed)
            cache[seed] = (contents, t.run(contents))
        contents, ref = cache[seed]
        t.place(contents)
        run()
        why = compare(p, b, dt, t.read(), ref, params,
                      f"fresh input (seed {seed}) differs from the original")
        if why:
            return why, done
        done.append(f"fresh input seed {seed}: matches the original")
    return None, done


def moved_bytes(p: StencilProgram, b: Binding) -> int:
    """Each field the program reads once, each field it writes once."""
    item = np.dtype(DTYPE[p.precision]).itemsize
    read = len(p.names("in", "coef", "inout"))
    return (read + len(p.names("out", "inout"))) * b.points * item


def copy_bandwidth(drv: Any, arch: str, nbytes: int) -> float:
    """Bytes per second a copy kernel moves (read plus write), best of 5, L2 flushed."""
    n = max(64 << 20, min(1 << 30, nbytes)) // 8
    fn = drv.function(drv.load(compile_image(COPY, arch)), "kf_copy")
    src, dst = drv.alloc(8 * n), drv.alloc(8 * n)
    params = struct.pack("<QQq", dst, src, n)
    sms = drv.attribute("sm_count")
    best = math.inf
    for _ in range(6):
        drv.flush_l2()
        best = min(best, drv.time_launch(fn, (4 * sms, 1, 1), (512, 1, 1), 0, params))
    return 2 * 8 * n / best
