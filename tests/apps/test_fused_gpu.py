"""Fusion for real (GPU): a small CUDA program (ours) with three time loops, each one kernel
launched per step with its input and output swapped (a zero-padded 2D fp64 heat step, a 3D
Laplace step that copies its boundary, a 2D fp32 Jacobi step that writes its interior only,
``keep``), recorded by the interposer and fused: every candidate is checked against the
original launched T times swapped, on the recorded state and on fresh inputs.

On a GPU machine: ``pytest -m gpu tests/apps/test_fused_gpu.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernforge.apps.operator_match import FusedMatch, fuse_unit
from kernforge.backends.cuda_image import nvcc
from kernforge.deploy import native as nd
from kernforge.pipeline.run_app import record_command

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvcc() is None, reason="needs nvcc")]

APP = r"""
#include <cstdio>
#include <utility>
__global__ void heat(unsigned n, double r, const double* u, double* v) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * n) return;
  unsigned x = i % n, y = i / n;
  v[i] = (1 - 4 * r) * u[i] + r * ((x > 0 ? u[i - 1] : 0.0) + (x < n - 1 ? u[i + 1] : 0.0)
                                   + (y > 0 ? u[i - n] : 0.0) + (y < n - 1 ? u[i + n] : 0.0));
}
__global__ void lap(int nx, int ny, int nz, const float* a, float* b) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
  if (x >= nx) return;
  long i = ((long)z * ny + y) * nx + x;
  if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1) { b[i] = a[i]; return; }
  b[i] = (a[i - 1] + a[i + 1] + a[i - nx] + a[i + nx] + a[i - (long)nx * ny] + a[i + (long)nx * ny]) / 6.0f;
}
__global__ void jac2(int nx, int ny, const float* a, float* b) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < 1 || y < 1 || x >= nx - 1 || y >= ny - 1) return;
  long i = (long)y * nx + x;
  b[i] = 0.3f * a[i] + 0.2f * a[i - 1] + 0.15f * a[i + 1] + 0.2f * a[i - nx] + 0.15f * a[i + nx];
}
template <class T> T* grid(long n, int seed) {
  T* h = new T[n]; T* d;
  for (long i = 0; i < n; i++) h[i] = (T)(((i + seed) * 7919l % 1000) / 1000.0);
  cudaMalloc(&d, sizeof(T) * n); cudaMemcpy(d, h, sizeof(T) * n, cudaMemcpyHostToDevice);
  delete[] h; return d;
}
int main() {
  unsigned n = 1024; int m = 128, jx = 1000, jy = 700, steps = 21;
  double *u = grid<double>(n * n, 0), *v = grid<double>(n * n, 1);
  float *a = grid<float>((long)m * m * m, 2), *b = grid<float>((long)m * m * m, 3);
  float *p = grid<float>((long)jx * jy, 4), *q = grid<float>((long)jx * jy, 5);
  for (int s = 0; s < steps; s++) { heat<<<(n * n + 255) / 256, 256>>>(n, 0.1, u, v); std::swap(u, v); }
  for (int s = 0; s < steps; s++) { lap<<<dim3((m + 127) / 128, m, m), 128>>>(m, m, m, a, b); std::swap(a, b); }
  for (int s = 0; s < steps; s++) { jac2<<<dim3((jx + 31) / 32, (jy + 7) / 8), dim3(32, 8)>>>(jx, jy, p, q); std::swap(p, q); }
  cudaDeviceSynchronize();
  printf("done\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuseapp")
    (d / "app.cu").write_text(APP)
    subprocess.run([str(nvcc()), "-O2", "-arch=sm_90", "-o", str(d / "app"), str(d / "app.cu")],
                   check=True)
    return d / "app"


def test_time_loops_are_fused_and_verified(app: Path, tmp_path: Path) -> None:
    status, units, problems, _ = record_command([str(app)], tmp_path / "rec", max_instances=1)
    assert status == 0 and not problems
    got = {u.name: fuse_unit(u, out_dir=tmp_path / "f", band=-1.0, repeat=5, passes=3)
           for u in units}
    for name, rule in (("heat-0", "zeropad"), ("lap-0", "copy"), ("jac2-0", "keep")):
        m = got[name]
        assert isinstance(m, FusedMatch), (name, m)
        assert rule in m.note and m.steps in (3, 5, 7) and m.gcells_s
        # every candidate that was built passed both checks and was screened
        bad = [t for t in m.tried if "differs" in str(t.get("refused", ""))
               or "wrote into IN" in str(t.get("refused", ""))]
        assert not bad, bad
        assert any(t.get("screen_speedup") for t in m.tried)
        (e,) = nd.read_spec(m.spec_path).entries
        assert e["fuse"]["steps"] == m.steps and e["fuse"]["in_offset"] != e["fuse"]["out_offset"]
    lap = got["lap-0"]
    assert isinstance(lap, FusedMatch)
    assert any(t["operator"].startswith("temporal[") for t in lap.tried)


def test_a_recorded_sequence_is_the_fusion_reference(app: Path, tmp_path: Path) -> None:
    """The same loops recorded as sequences of 7 steps: each unit holds both time levels
    after 7 steps, replays verified, and the fused candidates are checked against the
    recorded steps (not against re-launches)."""
    from kernforge.record.native_format import read_native
    from kernforge.replay.native import NativeVariant
    from kernforge.replay.native_child import run_isolated

    status, units, problems, _ = record_command([str(app)], tmp_path / "rec", max_instances=1,
                                                sequence=7)
    assert status == 0 and not problems
    for u in units:
        rec = read_native(u)
        assert rec.sequence == {"requested": 7, "steps": 7, "ended": "complete"}, rec.sequence
        assert len(rec.written) == 2
        out = run_isolated(u, [NativeVariant()], repeat=3, warmup=1)
        assert out["measurements"][0].status.value == "OK", out["measurements"]
        m = fuse_unit(u, out_dir=tmp_path / "f", band=-1.0, repeat=5, passes=3)
        assert isinstance(m, FusedMatch), (u.name, m)
        assert "recorded steps of the sequence" in m.note, m.note
