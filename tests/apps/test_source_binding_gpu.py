"""Binding an nvcc-built program's units to its source, then lifting them from it, on a real
GPU: a small CUDA program of ours whose kernels (a shared-memory window with halo loads, a
grid-stride update, both C++-mangled) live in a local header; its units are recorded by the
interposer, bound as M2 binds them ([integrate] sources) and lifted by M3a's child from the
bound source, not by probing.

On a GPU machine: ``pytest -m gpu tests/apps/test_source_binding_gpu.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernforge.apps.manifest import Integrate
from kernforge.apps.operator_match import NoMatch, lift_unit
from kernforge.apps.source_binding import bind_units
from kernforge.backends.cuda_image import nvcc
from kernforge.record.native_format import read_native

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvcc() is None, reason="needs nvcc")]

HEADER = """#define R 1
__global__ void window(const float *__restrict__ in, float *__restrict__ out, int n) {
  __shared__ float w[B + 2 * R];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  int l = threadIdx.x + R;
  w[l] = in[g];
  if (threadIdx.x < R) {
    w[l - R] = (g < R) ? 0 : in[g - R];
    w[l + B] = in[g + B];
  }
  __syncthreads();
  if (g >= R && g < n - R) out[g] = 0.25f * w[l - 1] + 0.5f * w[l] + 0.25f * w[l + 1];
}
__global__ void advance(float *__restrict__ x, const float *__restrict__ v, unsigned int n,
                        float dt) {
  int index = blockIdx.x * blockDim.x + threadIdx.x;
  int stride = blockDim.x * gridDim.x;
  for (int i = index; i < n; i += stride) x[i] += v[i] * dt;
}
"""
MAIN = """#include <cstdio>
#include "kern.cuh"
int main() {
  const int n = 1 << 20;
  float *a, *b;
  cudaMalloc(&a, sizeof(float) * (n + B));
  cudaMalloc(&b, sizeof(float) * (n + B));
  float *h = (float *)malloc(sizeof(float) * (n + B));
  for (int k = 0; k < n + B; k++) h[k] = (float)(((long)k * 7919) % 1000) / 1000.0f;
  cudaMemcpy(a, h, sizeof(float) * (n + B), cudaMemcpyHostToDevice);
  cudaMemcpy(b, h, sizeof(float) * (n + B), cudaMemcpyHostToDevice);
  window<<<n / B, B>>>(a, b, n);
  advance<<<256, 256>>>(a, b, n, 0.1f);
  cudaDeviceSynchronize();
  printf("done\\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    from kernforge.pipeline.run_app import record_command

    d = tmp_path_factory.mktemp("srcapp")
    (d / "inc").mkdir()
    (d / "inc" / "kern.cuh").write_text(HEADER)
    (d / "main.cu").write_text(MAIN)
    subprocess.run([str(nvcc()), "-O2", "-arch=sm_90", "-DB=256", f"-I{d / 'inc'}", "-o",
                    str(d / "app"), str(d / "main.cu")], check=True)
    status, found, problems, _ = record_command([str(d / "app")], d / "rec", max_instances=1)
    assert status == 0 and not problems, problems
    return d, list(found)


def test_bound_units_lift_from_their_source(program: tuple[Path, list[Path]],
                                            tmp_path: Path) -> None:
    d, units = program
    got = bind_units(units, Integrate(sources=(d / "main.cu",), includes=(d / "inc",),
                                      defines=("B=256",)))
    assert sorted(got.values()) == [f"bound to {d / 'main.cu'}"] * 2, got
    for unit in units:
        rec = read_native(unit)
        assert rec.source is not None and rec.source.origin == "nvcc"
        m = lift_unit(unit, out_dir=tmp_path / unit.name, repeat=3, passes=3)
        # a verified operator (OperatorMatch: its note) or none faster (NoMatch: recognized)
        said = m.recognized if isinstance(m, NoMatch) else m.note
        assert said and said.startswith("lifted from source: 1D fp32"), (rec.name, m)
