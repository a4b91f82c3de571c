"""The adapter around a matrix operator, run on the host emulator against the numpy kernels it
replaces (boundary rules, misaligned grids), and compiled with nvcc for sm_90 when present."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np
import pytest

from kernforge.apps.adapter import (
    Adapter,
    Slot,
    adapter,
    candidates,
    check_layout,
)
from kernforge.apps.probe import Recognized, recognize
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.core import ConfigError
from kernforge.stencil import emulate as em
from kernforge.stencil import matrix as mx

from .stencil_kernels import heat_periodic, heat_zeropad, laplace_copy, target

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")


def _emulate(ad: Adapter, slots: Sequence[Slot], values: dict[int, np.ndarray]) -> None:
    args = [values[i] for i in range(len(slots))]
    mod = em.compile_source(ad.source, [ad.entry])
    mod.launch(ad.entry, args, ad.grid, ad.block, ad.shared_bytes)


def _check(kernel: object, r: Recognized, op_design: str, slots: Sequence[Slot],
           scalars: dict[int, np.ndarray], *, shift: int = 0) -> None:
    """The adapter's output equals the numpy kernel's on a random input (``shift``: the
    grids start that many elements into their buffers, misaligning vector loads)."""
    ops = [o for o in candidates(r, limit=5) if o.design == op_design]
    assert ops, [o.key for o in candidates(r, limit=5)]
    ad = adapter(ops[0], r, slots, slots[-1].offset + slots[-1].size)
    n = r.points
    dt = np.dtype(r.dtype)
    rng = np.random.default_rng(7)
    x = np.zeros(n + shift, dtype=dt)
    x[shift:] = rng.uniform(-1, 1, n)
    y = np.zeros(n + shift, dtype=dt)
    y[shift:] = rng.uniform(2, 3, n)
    want = {r.in_param: x[shift:].copy(), r.out_param: y[shift:].copy()}
    kernel(want)  # type: ignore[operator]
    _emulate(ad, slots, {**scalars, r.in_param: x[shift:], r.out_param: y[shift:]})
    tol = 1e-12 if dt == np.float64 else 2e-6
    np.testing.assert_allclose(y[shift:], want[r.out_param], atol=tol, rtol=0)


def _recognized(t: object) -> Recognized:
    r = recognize(t)  # type: ignore[arg-type]
    assert isinstance(r, Recognized), r
    return r


def test_zero_padded_2d_fp64_on_naive() -> None:
    n = 24
    k = heat_zeropad(n, 0.1)
    r = _recognized(target(k, {1: ("float64", n * n), 2: ("float64", n * n)}, (n,), "float64"))
    slots = [Slot(0, 4), Slot(8, 8, True), Slot(16, 8, True)]
    _check(k, r, "naive", slots, {0: np.array(n, dtype=np.uint32)})


def test_periodic_2d_fp32_on_naive() -> None:
    lx, ly = 32, 16
    k = heat_periodic(lx, ly)
    r = _recognized(target(k, {0: ("float32", lx * ly), 1: ("float32", lx * ly)}, (lx, ly),
                           "float32"))
    slots = [Slot(0, 8, True), Slot(8, 8, True), Slot(16, 4), Slot(20, 4), Slot(24, 4),
             Slot(28, 4)]
    sc = {2: np.array(0.0096, np.float32), 3: np.array(0.96, np.float32),
          4: np.array(lx, np.int32), 5: np.array(ly, np.int32)}
    _check(k, r, "naive", slots, sc)


@pytest.mark.parametrize(("design", "shift"), [("zmarch", 0), ("zmarch", 1), ("naive", 0)])
def test_copy_boundary_3d_fp32(design: str, shift: int) -> None:
    nx, ny, nz = 16, 12, 10
    n = nx * ny * nz
    k = laplace_copy(nx, ny, nz)
    r = _recognized(target(k, {4: ("float32", n), 5: ("float32", n)}, (nx, ny, nz, nx),
                           "float32"))
    slots = [Slot(0, 4), Slot(4, 4), Slot(8, 4), Slot(12, 4), Slot(16, 8, True),
             Slot(24, 8, True)]
    sc = {i: np.array(v, np.int32) for i, v in enumerate((nx, ny, nz, nx))}
    _check(k, r, design, slots, sc, shift=shift)


def test_forged_parameters_come_first_for_a_matrix_shape() -> None:
    w = {o: 1 / 6 for o in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))}
    r = Recognized(1, 0, "float32", (512, 512, 512), "star", 1, 3, w, "copy")
    entry = mx.load_table().get("star_1/512x512x512/fp32")
    ops = candidates(r)
    assert entry is not None and ops[0].design == entry["design"]
    assert ops[-1].design == "naive" and len(ops) == 3


def test_layouts_the_adapter_cannot_reproduce_are_refused() -> None:
    check_layout([Slot(0, 4), Slot(8, 8, True), Slot(16, 12), Slot(28, 4)], 32)
    with pytest.raises(ConfigError, match="offset"):
        check_layout([Slot(0, 4), Slot(4, 8, True)], 12)  # a packed pointer


@pytest.mark.slow
@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_adapter_compiles_for_sm90_with_the_recorded_parameter_offsets() -> None:
    n = 64
    k = heat_zeropad(n, 0.1)
    r = _recognized(target(k, {1: ("float64", n * n), 2: ("float64", n * n)}, (n,), "float64"))
    r = dataclasses.replace(r, in_param=6, out_param=7)
    # heat-cuda's solve(unsigned n, double alpha, dx, dt, r, r2, double* u, double* u_tmp),
    # plus a 12-byte struct to exercise the placeholders
    slots = [Slot(0, 4), Slot(8, 8), Slot(16, 8), Slot(24, 8), Slot(32, 8), Slot(40, 8),
             Slot(48, 8, True), Slot(56, 8, True), Slot(64, 12)]
    ad = adapter(candidates(r)[0], r, slots, 76)
    assert compile_cubin(ad.source).startswith(b"\x7fELF")
    ptx = compile_cubin(ad.source, ptx=True).decode()
    decl = re.search(rf"\.entry {ad.entry}\((.*?)\)", ptx, re.DOTALL)
    assert decl is not None
    off, offsets = 0, []
    for m in re.finditer(r"\.param \.(?:align (\d+) \.b8 \w+\[(\d+)\]|[usbf](\d+) \w+)",
                         decl.group(1)):
        align = int(m.group(1)) if m.group(1) else int(m.group(3)) // 8
        size = int(m.group(2)) if m.group(2) else align
        off = -(-off // align) * align
        offsets.append(off)
        off += size
    assert offsets == [s.offset for s in slots]
