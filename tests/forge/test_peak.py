"""Roofline classification of cells, and the FMA peak on a GPU."""

from __future__ import annotations

import pytest

from kernforge.forge.peak import roofline
from kernforge.stencil.spec import Cell

H200_FP32, H200_FP64, COPY = 60e12, 30e12, 4.2e12  # round figures for the classification


@pytest.mark.parametrize(("cell", "peak", "bound"), [
    ("star_1/512x512x512/fp32", H200_FP32, "memory"),
    ("varcoeff_star_1/512x512x512/fp64", H200_FP64, "memory"),
    ("box_1/512x512x512/fp64", H200_FP64, "memory"),
    ("box_2/512x512x512/fp32", H200_FP32, "compute"),
    ("box_2/512x512x512/fp16", H200_FP32, "compute"),
])
def test_roofline_bound(cell: str, peak: float, bound: str) -> None:
    r = roofline(Cell.parse(cell), peak, COPY)
    assert r["bound"] == bound
    assert r["ridge"] == pytest.approx(peak / COPY)


@pytest.mark.gpu
def test_fma_peak_is_plausible() -> None:
    from kernforge.forge.measure import GpuDevice
    from kernforge.forge.peak import peak_flops
    from kernforge.stencil.spec import Precision

    device = GpuDevice()
    fp32 = peak_flops(device, Precision.FP32).flops_per_s
    fp64 = peak_flops(device, Precision.FP64).flops_per_s
    assert 5e12 < fp32 < 500e12 and 1e12 < fp64 < fp32
