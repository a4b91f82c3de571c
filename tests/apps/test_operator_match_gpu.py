"""Operator matching for real (GPU): a small CUDA program (ours) with a zero-padded 2D heat
step and a 3D Laplace step that copies its boundary, recorded by the interposer, matched,
and deployed into the unchanged binary; a kernel with a reduction beside its stencil refused.

On a GPU machine: ``pytest -m gpu tests/apps/test_operator_match_gpu.py``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernforge.apps.operator_match import NoMatch, OperatorMatch, match_unit
from kernforge.backends.cuda_image import nvcc
from kernforge.cli.main import main
from kernforge.pipeline.run_app import record_command

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvcc() is None, reason="needs nvcc")]

APP = r"""
#include <cstdio>
#include <cstdlib>
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
__global__ void jac(int n, const float* a, float* b, float* err) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= 0 || i >= n - 1) return;
  b[i] = 0.5f * (a[i - 1] + a[i + 1]);
  atomicAdd(err, (b[i] - a[i]) * (b[i] - a[i]));
}
int main(int argc, char** argv) {
  unsigned n = 1024; int m = 128, steps = argc > 1 ? atoi(argv[1]) : 20;
  double *u, *v; float *a, *b, *e;
  cudaMalloc(&u, 8ul * n * n); cudaMalloc(&v, 8ul * n * n);
  cudaMalloc(&a, 4ul * m * m * m); cudaMalloc(&b, 4ul * m * m * m); cudaMalloc(&e, 4);
  double* hu = (double*)malloc(8ul * n * n); float* ha = (float*)malloc(4ul * m * m * m);
  for (unsigned i = 0; i < n * n; i++) hu[i] = (i * 7919u % 1000) / 1000.0;
  for (long i = 0; i < (long)m * m * m; i++) ha[i] = (i * 104729l % 1000) / 1000.0f;
  cudaMemcpy(u, hu, 8ul * n * n, cudaMemcpyHostToDevice);
  cudaMemcpy(a, ha, 4ul * m * m * m, cudaMemcpyHostToDevice);
  for (int s = 0; s < steps; s++) {
    heat<<<(n * n + 255) / 256, 256>>>(n, 0.1, u, v); std::swap(u, v);
    lap<<<dim3((m + 127) / 128, m, m), 128>>>(m, m, m, a, b); std::swap(a, b);
    jac<<<(m + 127) / 128, 128>>>(m, a, b, e);
  }
  cudaMemcpy(hu, u, 8ul * n * n, cudaMemcpyDeviceToHost);
  cudaMemcpy(ha, a, 4ul * m * m * m, cudaMemcpyDeviceToHost);
  double s1 = 0, s2 = 0;
  for (unsigned i = 0; i < n * n; i++) s1 += hu[i];
  for (long i = 0; i < (long)m * m * m; i++) s2 += ha[i];
  printf("heat %.9e lap %.6e\n", s1, s2);
  return 0;
}
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("opapp")
    (d / "app.cu").write_text(APP)
    subprocess.run([str(nvcc()), "-O2", "-arch=sm_90", "-o", str(d / "app"), str(d / "app.cu")],
                   check=True)
    return d / "app"


def _sums(text: str) -> tuple[float, float]:
    m = re.search(r"heat (\S+) lap (\S+)", text)
    assert m, text
    return float(m.group(1)), float(m.group(2))


def test_recorded_stencils_are_matched_and_deployed(app: Path, tmp_path: Path,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    status, units, problems, _ = record_command([str(app)], tmp_path / "rec", max_instances=1)
    assert status == 0 and not problems
    got = {u.name: match_unit(u, out_dir=tmp_path / "m", band=-1.0) for u in units}
    heat, lap, jac = got["heat-0"], got["lap-0"], got["jac-0"]
    assert isinstance(heat, OperatorMatch), heat
    assert "2D star radius 1" in heat.note and "zeropad" in heat.note
    # the planar candidates: y-marching presets first, each checked and screened (none refused)
    assert heat.tried[0]["operator"].startswith("ymarch[") and heat.tried[-1]["operator"] \
        .startswith("naive["), heat.tried
    assert all(t.get("screen_speedup") for t in heat.tried), heat.tried
    assert isinstance(lap, OperatorMatch), lap
    assert "3D star radius 1" in lap.note and "copy" in lap.note
    assert isinstance(jac, NoMatch) and "wrote 2 buffers" in jac.reason
    plain = subprocess.run([str(app)], capture_output=True, text=True, check=True).stdout
    for m in (heat, lap):
        capfd.readouterr()
        assert main(["run", "--deploy", str(m.spec_path), "--", str(app)]) == 0
        out = capfd.readouterr()
        assert "20 launch(es) ran a tuned configuration" in out.err
        assert _sums(out.out) == pytest.approx(_sums(plain), rel=1e-5)
