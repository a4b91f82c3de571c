"""Every global read of the z-marching kernels (zmarch, zbox) stays inside its array.

The emulator's guard zones turn an out-of-bounds read into NaN in the results, so a stray read
whose value is thrown away (a halo the boundary lanes would have used, a prefetch past the
chunk) goes unseen there; on a GPU it may fault at a page edge. Here the kernel's read-only
arrays are wrapped in a checked pointer (the source is rewritten before the emulator builds
it) that counts every element or vector read outside the array or misaligned.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from kernforge.stencil import matrix as mx
from kernforge.stencil import oracle
from kernforge.stencil.emulate import compile_operator, emulate
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

_CHECK = r'''
extern "C" __attribute__((visibility("default"))) long kf_oob_n = 0;
static inline bool kf_chk(long i, long n, bool vec) {
  if (i < 0 || i + n > NX * NY * NZ || (vec && i % n)) {
    __atomic_fetch_add(&kf_oob_n, 1, __ATOMIC_RELAXED);
    return false;
  }
  return true;
}
template <class T> struct KfP {
  const T* b; long i;
  KfP operator+(long d) const { return {b, i + d}; }
  KfP operator-(long d) const { return {b, i - d}; }
  const T& operator[](long d) const { return kf_chk(i + d, 1, false) ? b[i + d] : b[0]; }
};
template <class T> static inline const Vec* kf_vcast(KfP<T> p) {
  constexpr long n = sizeof(Vec) / sizeof(T);
  return reinterpret_cast<const Vec*>(kf_chk(p.i, n, true) ? p.b + p.i : p.b);
}
'''


def _checked(source: str, entry: str) -> str:
    """The source with ``src`` (and ``coef``) read through :data:`_CHECK`'s pointer."""
    m = re.search(entry + r"\(const (\w+)\* __restrict__ src, (const \w+\* __restrict__ coef, )?",
                  source)
    assert m, "unexpected kernel signature"
    t = m.group(1)
    sig = (f"{entry}(const {t}* __restrict__ src_raw, "
           + (f"const {t}* __restrict__ coef_raw, " if m.group(2) else ""))
    decl = (f"\n  const KfP<{t}> src{{src_raw, 0}};"
            + (f" const KfP<{t}> coef{{coef_raw, 0}};" if m.group(2) else ""))
    body = source.replace("reinterpret_cast<const Vec*>(src", "kf_vcast(src")
    body = body.replace("reinterpret_cast<const Vec*>(coef", "kf_vcast(coef")
    i = body.index('extern "C"')
    body = body[:i] + _CHECK + body[i:]
    body = body.replace(m.group(0), sig, 1)
    j = body.index("{", body.index(sig)) + 1
    return body[:j] + decl + body[j:]


def _stray_reads(cell: Cell, design: str, params: dict, edit=None) -> int:
    op = mx.build(design, cell, params)
    assert op is not None, (cell.id, design, params)
    source = _checked(op.source if edit is None else edit(op.source), op.launches[0].entry)
    checked = type(op)(op.cell_id, op.design, op.params, source, op.launches)
    fields = oracle.random_fields(cell, seed=11)
    arrays = {"in": fields["in"], "out": fields["in"].copy()}
    if "coef" in fields:
        arrays["coef"] = fields["coef"]
    if op.needs_tmp:
        arrays["tmp"] = fields["in"].copy()
    count = ctypes.c_long.in_dll(compile_operator(checked).lib, "kf_oob_n")
    count.value = 0
    emulate(checked, arrays)
    ref = oracle.reference(cell, fields["in"], fields.get("coef"))
    err = np.abs(arrays["out"].astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err <= cell.precision.tolerance, (cell.id, params, err)
    return int(count.value)


# thin grids (one or two interior planes/rows), tails in every dimension, chunks of 1 plane
CASES = [
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 1}, "fp32", (24, 7, 6)),
    ("star_2", "zmarch", {"tx": 4, "ty": 2, "vx": 2, "lz": 3, "pf": 3}, "fp64", (16, 6, 5)),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 2, "pn": 1}, "fp32", (24, 7, 6)),
    ("star_1", "zmarch", {"tx": 8, "ty": 2, "vx": 8, "lz": 0, "pn": 1, "xs": 1}, "fp16",
     (32, 3, 3)),
    ("varcoeff_star_1", "zmarch", {"tx": 4, "ty": 4, "vx": 2, "lz": 1, "pf": 4, "pn": 1},
     "fp32", (16, 5, 7)),
    ("star_2", "zmarch", {"tx": 4, "ty": 2, "vx": 8, "lz": 2, "pf": 2, "h2": 1}, "fp16",
     (32, 5, 6)),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 1, "vx": 2, "lz": 16, "h2": 1}, "fp16",
     (24, 26, 12)),
    ("star_2", "zmarch", {"tx": 4, "ty": 2, "vx": 4, "lz": 2, "ry": 4}, "fp32", (16, 11, 6)),
    ("star_1", "zmarch", {"tx": 8, "ty": 1, "vx": 2, "lz": 0, "ry": 2, "sc": 1}, "fp64",
     (16, 5, 3)),
    ("varcoeff_star_1", "zmarch", {"tx": 4, "ty": 4, "vx": 8, "lz": 1, "ry": 4, "sc": 1},
     "fp16", (32, 9, 7)),
    ("star_1_t4", "zmarch", {"tx": 4, "ty": 2, "vx": 2, "lz": 2, "ry": 2, "sc": 1}, "fp16",
     (16, 9, 7)),
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 1}, "fp32", (24, 7, 6)),
    ("box_1", "zbox", {"tx": 4, "ty": 2, "vx": 8, "lz": 0, "pn": 0}, "fp16", (32, 3, 3)),
    ("box_2", "zbox", {"tx": 4, "ty": 2, "vx": 2, "lz": 2}, "fp64", (16, 6, 5)),
    ("box_2", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 3, "h2": 1}, "fp16", (24, 9, 8)),
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 1, "pw": 1}, "fp32", (24, 7, 6)),
    ("box_2", "zbox", {"tx": 4, "ty": 2, "vx": 2, "lz": 0, "pn": 0, "pw": 1}, "fp64", (16, 6, 5)),
]


@pytest.mark.parametrize(("stencil", "design", "params", "prec", "shape"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{'-'.join(f'{k}{v}' for k, v in c[2].items())}"
                              for c in CASES])
def test_reads_stay_inside_the_arrays(stencil, design, params, prec, shape) -> None:
    cell = Cell(STENCILS[stencil], Shape(*shape), Precision(prec))
    assert _stray_reads(cell, design, params) == 0


def test_a_stray_read_is_counted() -> None:
    """The check is not vacuous: a zbox whose halo guard is dropped reads before the array
    (the first thread of row 0 of plane 0), with results still correct."""
    cell = Cell(STENCILS["box_1"], Shape(24, 7, 6), Precision.FP32)
    params = {"tx": 8, "ty": 4, "vx": 4, "lz": 1}
    assert _stray_reads(cell, "zbox", params,
                        edit=lambda s: s.replace("if (x0 > 0) ", "")) > 0
