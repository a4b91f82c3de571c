"""GPU: a native unit (a CuPy ElementwiseKernel recorded through the driver interposer) takes
the one path of every unit: replayed and validated by the driver backend, tuned by its study
(exhaustive over its candidates, every trial in one session child), its result in
OUT/<unit>/result.json.

Run on the GPU machine: ``pytest -m gpu -s tests/replay/test_native_study_gpu.py`` (it prints
the tuning's wall time and evaluations).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

APP = """
import cupy as cp
k = cp.ElementwiseKernel("float32 x, float32 a", "float32 y", "y = a * x + 1.0f", "kf_axpb")
x = cp.arange(1 << 22, dtype=cp.float32) / 7
for _ in range(8):
    x = k(x, cp.float32(0.5))
print("checksum=%.9e" % float(x.astype(cp.float64).sum()))
"""


def kf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900, check=False)


def test_a_native_unit_takes_the_one_path_on_the_gpu(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    app = tmp_path / "app.py"
    app.write_text(APP)
    r = kf("record", "-o", str(tmp_path / "rec"), "--kernels", "kf_axpb", "--max-instances",
           "1", "--", sys.executable, str(app), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (unit,) = sorted((tmp_path / "rec").glob("kf_axpb*"))
    r = kf("replay", str(unit), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads((tmp_path / "r.json").read_text())
    assert row["status"] == "OK" and "relocated" in row and "cache" in row
    r = kf("integrity", "validate", str(unit), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("accepted"), r.stdout + r.stderr
    t0 = time.perf_counter()
    r = kf("tune", str(tmp_path / "rec"), "--out", str(tmp_path / "t"), "--repeat", "5",
           cwd=tmp_path)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"1/1 {unit.name} done: " in r.stdout  # the progress line every unit has
    assert (tmp_path / "t" / unit.name / "history.png").is_file()
    doc = json.loads((tmp_path / "t" / unit.name / "result.json").read_text())
    assert doc["backend"] == "driver" and doc["sampler"] == "exhaustive"
    assert doc["stop_reason"] == "exhausted" and doc["status"] == "OK"
    evals = doc["native"]["evaluations"]
    assert evals[0]["label"] == "recorded" and evals[0]["status"] == "OK"
    assert len(evals) in (doc["evaluations"], doc["evaluations"] + 1)  # + the joined best
    print(f"\nnative study on the GPU: {doc['evaluations']} evaluations in {wall:.1f} s "
          f"(record excluded); kept: {doc['native']['win']} ({doc['native']['refused']})")
