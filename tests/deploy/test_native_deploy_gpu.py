"""GPU: a CuPy ElementwiseKernel recorded through the driver interposer, deployed back into the
unchanged program with another block shape. Every launch must match the problem key although
CuPy leaves the index slots of the kernel's ``CIndexer`` unset (different bytes in every run):
every launch replaced, the program's result unchanged.

Run on the GPU machine: ``pytest -m gpu tests/deploy/test_native_deploy_gpu.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

LAUNCHES = 12
APP = f"""
import cupy as cp
k = cp.ElementwiseKernel("float32 x, float32 a", "float32 y", "y = a * x + 1.0f", "kf_axpb")
x = cp.arange(1 << 20, dtype=cp.float32) / 7
for _ in range({LAUNCHES}):
    x = k(x, cp.float32(0.5))
print("checksum=%.9e" % float(x.astype(cp.float64).sum()))
"""


def kf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def test_a_cupy_elementwise_kernel_is_replaced_in_every_launch(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.deploy import native as nd
    from kernforge.deploy.scratch import scratch_ranges
    from kernforge.record.native_format import read_native

    app = tmp_path / "app.py"
    app.write_text(APP)
    plain = subprocess.run([sys.executable, str(app)], capture_output=True, text=True,
                           check=False, timeout=300)
    assert plain.returncode == 0, plain.stderr
    r = kf("record", "-o", str(tmp_path / "rec"), "--kernels", "kf_axpb", "--max-instances",
           "1", "--", "python", str(app), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    units = sorted((tmp_path / "rec").glob("kf_axpb*"))
    assert len(units) == 1, r.stdout + r.stderr
    rec = read_native(units[0])
    assert rec.source is not None and scratch_ranges(rec), "no CIndexer found in the source"
    assert rec.block[0] != 256
    e = nd.entry(rec, {"block": [256, 1, 1]}, "k.bin", rec.image_bytes(), {"test": True})
    spec = nd.write_spec(tmp_path / "spec.json", [e], {"k.bin": rec.image_bytes()})
    d = kf("run", "--deploy", str(spec), "--", sys.executable, str(app), cwd=tmp_path)
    assert d.returncode == 0, d.stdout + d.stderr
    m = re.search(r"(\d+) launch\(es\) ran a tuned configuration; (\d+) launch", d.stderr)
    assert m is not None, d.stderr
    assert (int(m.group(1)), int(m.group(2))) == (LAUNCHES, 0), d.stderr
    assert re.findall(r"checksum=\S+", d.stdout) == re.findall(r"checksum=\S+", plain.stdout)
