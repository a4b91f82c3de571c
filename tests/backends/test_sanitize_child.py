"""The sanitizer child (what compute-sanitizer watches) launches a variant once from a request
file; without compute-sanitizer the CUDA gate says that nothing was checked. Real host
compiler, real subprocess; the GPU side runs in the gpu-marked red team."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from kernforge.backends.sanitize_cuda import TOOLS, run_tools, write_request
from kernforge.core import KernelSource, LaunchConfig, Variant

CODE = r"""
void fill(double *y, long n) {
    for (long i = 0; i < n; i++) y[i] = (double)i;
}
"""
CRASH = CODE.replace("y[i] = (double)i;", "y[i + (1L << 40)] = (double)i;")


def _variant(code: str) -> Variant:
    return Variant(KernelSource(code, "fill", "c"), launch=LaunchConfig(threads=1))


def _child(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    request = tmp_path / "request.pkl"
    write_request(request, "cpu", _variant(code), [np.zeros(8), 8])
    return subprocess.run([sys.executable, "-m", "kernforge.backends.sanitize_child",
                           str(request)], check=False, capture_output=True, text=True,
                          timeout=120)


def test_the_child_launches_once_and_exits_zero(tmp_path: Path) -> None:
    assert _child(tmp_path, CODE).returncode == 0


def test_a_crash_in_the_child_is_its_exit_status(tmp_path: Path) -> None:
    assert _child(tmp_path, CRASH).returncode < 0  # killed by the signal


def test_without_compute_sanitizer_nothing_is_claimed(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNFORGE_COMPUTE_SANITIZER", str(tmp_path / "absent"))
    runs = run_tools("cpu", _variant(CODE), [np.zeros(8), 8])
    assert [r.tool for r in runs] == list(TOOLS)
    assert not any(r.available or r.finding for r in runs)
    assert "compute-sanitizer not found" in runs[0].report
