"""GPU: a kernel launched with 64 KiB of dynamic shared memory (the program raised
cudaFuncAttributeMaxDynamicSharedMemorySize first, and chose a carveout) is recorded with the
attributes it set (record/native/kf_funcattr.c) and replays verified; so does the unit without
them (as recorded before they were), its limit raised to what its launch needs.

Run on the GPU machine: ``pytest -m gpu tests/record/test_funcattrs_gpu.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kernforge.core.native import FuncAttrs
from kernforge.pipeline.run_app import record_command
from kernforge.record._layout import manifest_checksum
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated

pytestmark = pytest.mark.gpu
TILE = 16384  # floats: 64 KiB of dynamic shared memory per block

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#define TILE 16384
extern "C" __global__ void reverse_tiles(const float *in, float *out) {
  extern __shared__ float buf[];
  const float *src = in + (size_t)blockIdx.x * TILE;
  for (int j = threadIdx.x; j < TILE; j += blockDim.x) buf[j] = src[j];
  __syncthreads();
  for (int j = threadIdx.x; j < TILE; j += blockDim.x)
    out[(size_t)blockIdx.x * TILE + j] = 2.0f * buf[TILE - 1 - j];
}
#define CHECK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(4); } } while (0)
int main() {
  int blocks = 64;
  size_t n = (size_t)blocks * TILE, bytes = n * sizeof(float);
  float *h = (float *)malloc(bytes), *a, *b;
  for (size_t i = 0; i < n; i++) h[i] = (float)(i % 977) / 977.0f;
  CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaFuncSetAttribute(reverse_tiles, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             TILE * sizeof(float)));
  CHECK(cudaFuncSetAttribute(reverse_tiles, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  for (int k = 0; k < 3; k++) {
    reverse_tiles<<<blocks, 256, TILE * sizeof(float)>>>(a, b);
    CHECK(cudaGetLastError());
    float *t = a; a = b; b = t;
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += h[i] * (double)(1 + i % 7);
  printf("checksum %.6f\n", sum);
  return 0;
}
"""


@pytest.fixture(scope="module")
def unit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("funcattrs-gpu")
    (out / "big.cu").write_text(PROGRAM)
    done = subprocess.run([nvcc, "-arch=sm_90", "-o", "big", "big.cu"], cwd=out,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    plain = subprocess.run([str(out / "big")], capture_output=True, text=True, check=False)
    assert plain.returncode == 0 and plain.stdout.startswith("checksum"), plain.stdout
    status, units, problems, _ = record_command([str(out / "big")], out / "rec",
                                                kernels="reverse_tiles", max_instances=1)
    assert status == 0 and not problems and len(units) == 1, problems
    return units[0]


def test_the_attributes_are_recorded(unit: Path) -> None:
    rec = read_native(unit)
    assert rec.shared_mem == TILE * 4
    assert dict(rec.func_attrs.set) == {8: TILE * 4, 9: 100}, rec.func_attrs


def test_the_unit_replays_verified(unit: Path) -> None:
    out = run_isolated(unit, [NativeVariant(), NativeVariant(carveout=50)], repeat=5, warmup=2)
    statuses = [m.status.value for m in out["measurements"]]
    print("recorded attributes:", statuses, [m.message for m in out["measurements"]])
    assert statuses == ["OK", "OK"], out["measurements"]


def test_an_older_unit_without_attributes_replays_verified(unit: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(unit, old)
    m = json.loads((old / "manifest.json").read_text())
    del m["launch"]["func_attrs"]
    m.pop("checksum")
    m["checksum"] = manifest_checksum(m)
    (old / "manifest.json").write_text(json.dumps(m))
    assert read_native(old).func_attrs == FuncAttrs()
    out = run_isolated(old, [NativeVariant()], repeat=5, warmup=2)
    print("older unit:", out["measurements"][0].status.value)
    assert out["measurements"][0].status.value == "OK", out["measurements"]
