"""GPU: the busy check of a native comparison (the GPU's utilisation read before the unit's
first run and after the last pass, by NVML or nvidia-smi) must not take the comparison's own
kernels for another process's load: on an idle GPU, a native unit compared with itself is
never "busy", and never significant.

Run on an idle GPU machine: ``pytest -m gpu -s tests/replay/test_native_busy_gpu.py`` (it
prints each run's idle checks and verdict).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

APP = """
import cupy as cp
k = cp.ElementwiseKernel("float32 x, float32 a", "float32 y",
                         "float v = x; for (int r = 0; r < 64; r++) v = a * v + 1.0f; y = v",
                         "kf_busy")
x = cp.arange(1 << 24, dtype=cp.float32) / 7
for _ in range(4):
    x = k(x, cp.float32(0.5))
print("checksum=%.9e" % float(x.astype(cp.float64).sum()))
"""


def test_a_native_self_comparison_on_an_idle_gpu_is_not_busy(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.record.native_format import read_native
    from kernforge.replay.native_validate import validate_native

    app = tmp_path / "app.py"
    app.write_text(APP)
    r = subprocess.run([sys.executable, "-m", "kernforge", "record", "-o", str(tmp_path / "rec"),
                        "--kernels", "kf_busy", "--max-instances", "1", "--", sys.executable,
                        str(app)], capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (unit,) = sorted((tmp_path / "rec").glob("kf_busy*"))
    src = read_native(unit).source
    assert src is not None, "CuPy compiles with NVRTC: the interposer captures the source"
    same = tmp_path / "same.cu"
    same.write_text(src.code)
    for i in range(3):
        v = validate_native(unit, source=same)
        assert v.idle is not None and v.ab is not None
        print(f"\nrun {i}: {v.verdict} {v.reason}: idle {v.idle.to_json()}, "
              f"{v.ab.passes} passes; {v.speed.reason if v.speed else ''}")
        assert v.idle.idle is not False, v.message  # its own kernels are not another's load
        assert v.speed is not None and not v.speed.faster and not v.speed.slower
