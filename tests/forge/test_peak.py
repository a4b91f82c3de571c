"""Roofline classification of cells, and the FMA peak on a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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
    # fp16 at the half2 rate (twice fp32's on the H200): box_1 moves below the ridge
    ("box_1/1024x1024x1024/fp16", 2 * H200_FP32, "memory"),
    ("box_2/512x512x512/fp16", 2 * H200_FP32, "compute"),
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
    fp16 = peak_flops(device, Precision.FP16)  # the half2 rate: two FMAs per instruction
    assert fp16.ctype == "half2" and 1.5 * fp32 < fp16.flops_per_s < 2.5 * fp32


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
def test_peak_kernels_compile_to_the_fma_they_time(tmp_path: Path) -> None:
    """The half2 kernel's loop is HFMA2s (fma.rn.f16x2), the others' FFMA/DFMA, for sm_90; the
    half2 entry keeps the plain name the runner looks up (a C++-mangled name made the H200 run
    fail with CUDA_ERROR_NOT_FOUND in session 9)."""
    from kernforge.forge.peak import _SOURCE, CHAINS

    src = tmp_path / "peak.cu"
    src.write_text("#include <cuda_fp16.h>\n" + _SOURCE
                   + "template __global__ void kf_fma_peak<float>(float*, float, float, int);\n"
                   + "template __global__ void kf_fma_peak<double>(double*, double, double, int);\n")
    out = tmp_path / "peak.ptx"
    subprocess.run(["nvcc", "-arch=sm_90", "--std=c++17", "--fmad=true", "-ptx", "-o", str(out),
                    str(src)], check=True, capture_output=True, timeout=120)
    ptx = out.read_text()
    bodies = {chunk.split("(", 1)[0].strip(): chunk for chunk in ptx.split(".entry ")[1:]}
    assert "kf_hfma2_peak" in bodies, sorted(bodies)
    half2 = bodies["kf_hfma2_peak"]
    assert half2.count("fma.rn.f16x2") >= CHAINS
    assert any(b.count("fma.rn.f32") >= CHAINS for b in bodies.values())
    assert any(b.count("fma.rn.f64") >= CHAINS for b in bodies.values())
