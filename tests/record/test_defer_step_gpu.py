"""GPU: deferral of a time loop whose step is several launches, with the real driver and the
CUDA runtime.

A heat time loop compiled with nvcc (the runtime linked statically) launches per step the
stencil ``interior`` (inner points only), then its companions ``edge`` (each face of OUT from
its inner neighbour, twice) and ``mix`` (IN's middle point blended into OUT's), the buffers
swapped between steps, with copies after odd numbers of steps, a copy between a stencil and its
companions, events, a memset and device synchronizations in between. A fused entry listing the
companions runs T whole steps as one launch of a one-block kernel (``interior_cT`` below, built
to a cubin). Every observation the program prints must equal the unfused run's, bit for bit
(both built with ``-fmad=false``), and the interposer must have fused.

Run on the GPU machine: ``pytest -m gpu tests/record/test_defer_step_gpu.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kernforge.record import interposer

pytestmark = pytest.mark.gpu

N = 4096  # floats: the fused kernel keeps one level in 16 KiB of shared memory
STEPS = 203
V0, V1, W = 0.125, -0.25, 0.375
LOOP = r"""
#include <cstdio>
#include <cstdlib>
#include <cstdint>
extern "C" __global__ void interior(const float *in, float *out, int n, float c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1 || i >= n - 1) return;
  out[i] = in[i] + c * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
extern "C" __global__ void edge(float *u, int n, int side, float v) {
  if (side == 0) u[0] = 0.5f * u[1] + v;
  else u[n - 1] = 0.5f * u[n - 2] + v;
}
extern "C" __global__ void mix(const float *in, float *out, int n, float w) {
  int m = n / 2;
  out[m] = out[m] + w * (in[m] - out[m]);
}
static uint64_t fnv(const void *p, size_t len, uint64_t h = 0xcbf29ce484222325ULL) {
  for (size_t i = 0; i < len; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h;
}
#define CHECK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(4); } } while (0)
static void observe(const char *what, int s, float *h, const float *a, const float *b, size_t bytes) {
  CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
  uint64_t x = fnv(h, bytes);
  CHECK(cudaMemcpy(h, b, bytes, cudaMemcpyDeviceToHost));
  printf("step %d %s %016llx\n", s, what, (unsigned long long)fnv(h, bytes, x));
}
int main(int argc, char **argv) {
  int n = 4096, steps = argc > 1 ? atoi(argv[1]) : 203;
  size_t bytes = n * sizeof(float);
  float *h = (float *)malloc(bytes), *a, *b, *scratch;
  for (int i = 0; i < n; i++) h[i] = (i * 37 % 101) / 101.0f;
  CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes)); CHECK(cudaMalloc(&scratch, bytes));
  CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice));
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  float c = 0.25f;
  for (int s = 1; s <= steps; s++) {
    interior<<<(n + 255) / 256, 256>>>(a, b, n, c);
    if (s % 43 == 0) observe("mid-step", s, h, a, b, bytes); // after the stencil only
    edge<<<1, 1>>>(b, n, 0, 0.125f);
    edge<<<1, 1>>>(b, n, 1, -0.25f);
    mix<<<1, 1>>>(a, b, n, 0.375f);
    float *t = a; a = b; b = t;
    if (s % 37 == 0) observe("copy", s, h, a, b, bytes); // an odd number of steps
    if (s % 50 == 0) { CHECK(cudaEventRecord(ev)); CHECK(cudaEventSynchronize(ev)); }
    if (s % 61 == 0) CHECK(cudaMemset(scratch, s, bytes));
    if (s % 71 == 0) CHECK(cudaDeviceSynchronize());
  }
  observe("final", steps, h, a, b, bytes);
  return 0;
}
"""
FUSED = r"""
// T whole steps in one launch of one block: reads only IN; OUT and shared memory hold the levels.
template <int T> __device__ void steps(const float *in, float *out, int n, float c) {
  extern __shared__ float s[];
  const float *x = in;
  const int m = n / 2;
  for (int k = 0; k < T; k++) {
    float *y = (k % 2 == 0) ? out : s; // T odd: the last step writes OUT
    for (int i = 1 + threadIdx.x; i < n - 1; i += blockDim.x)
      y[i] = x[i] + c * (x[i - 1] - 2.0f * x[i] + x[i + 1]);
    __syncthreads();
    if (threadIdx.x == 0) {
      y[0] = 0.5f * y[1] + 0.125f;
      y[n - 1] = 0.5f * y[n - 2] + -0.25f;
      y[m] = y[m] + 0.375f * (x[m] - y[m]);
    }
    __syncthreads();
    x = y;
  }
}
extern "C" __global__ void interior_c5(const float *in, float *out, int n, float c) { steps<5>(in, out, n, c); }
extern "C" __global__ void interior_c7(const float *in, float *out, int n, float c) { steps<7>(in, out, n, c); }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("defer-step-gpu")
    (out / "loop.cu").write_text(LOOP)
    (out / "fused.cu").write_text(FUSED)
    for args in (["-o", "loop", "loop.cu"], ["-cubin", "-o", "fused.cubin", "fused.cu"]):
        done = subprocess.run([nvcc, "-fmad=false", "-arch=sm_90", *args], cwd=out,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    probe = subprocess.run([str(out / "loop"), "1"], capture_output=True, text=True,
                           timeout=300, check=False)
    if probe.returncode:
        pytest.skip(f"the loop does not run here: {probe.stdout.strip()[-200:]}")
    return out


def companions(v0: float = V0) -> list[str]:
    """edge(u, n, side, v) twice (OUT at 0), mix(in, out, n, w) (IN at 0, OUT at 8): four
    fields each (kf_deploy.c)."""
    def edge(side: int, v: float) -> list[str]:
        return ["edge", (bytes(8) + struct.pack("<iif", N, side, v)).hex(), "-", "0"]
    return [*edge(0, v0), *edge(1, V1), "mix", (bytes(16) + struct.pack("<if", N, W)).hex(),
            "0", "8"]


def line(out: Path, steps: int, v0: float = V0) -> str:
    key = "xx" * 16 + N.to_bytes(4, "little").hex() + struct.pack("<f", 0.25).hex()
    return "\t".join(["interior", f"{N // 256},1,1", "256,1,1", "0", key,
                      str(out / "fused.cubin"), f"interior_c{steps}", "-", "1,1,1", "1024,1,1",
                      str(4 * N), "-1", "-", f"fuse:{steps}:0:8:3", *companions(v0)]) + "\n"


def deferred(out: Path, steps: int, env: dict[str, str] | None = None, v0: float = V0
             ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    spec, log = out / f"deploy-{steps}.tsv", out / f"log-{steps}.json"
    spec.write_text(line(out, steps, v0))
    log.unlink(missing_ok=True)
    full = interposer.preload_env(interposer.build(), {"KERNFORGE_DEPLOY": str(spec),
                                                       "KERNFORGE_DEPLOY_LOG": str(log),
                                                       **(env or {})},
                                  {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    done = subprocess.run([str(out / "loop")], env=full, capture_output=True, text=True,
                          timeout=300, check=False)
    return done, json.loads(log.read_text()) if log.is_file() else {}


def alone(built: Path) -> str:
    done = subprocess.run([str(built / "loop")], capture_output=True, text=True, timeout=300,
                          check=True)
    assert "final" in done.stdout and "mid-step" in done.stdout
    return done.stdout


@pytest.mark.parametrize("steps", [5, 7])
def test_fused_steps_with_companions_leave_every_observation_as_the_unfused_run(
        built: Path, steps: int) -> None:
    expected = alone(built)
    done, log = deferred(built, steps)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == expected, done.stderr
    assert "kernforge:" not in done.stderr, done.stderr
    groups, unfused = int(log["fused_groups"]), int(log["flushed_unfused"])  # type: ignore
    # each launch once: fused, or held and run as the original, or (the companions after a
    # mid-step copy, which flushed their stencil) never held
    assert groups > 0 and groups * steps * 4 + unfused == STEPS * 4 - 3 * (STEPS // 43), log


def test_an_entry_whose_companions_differ_fuses_nothing(built: Path) -> None:
    expected = alone(built)
    done, log = deferred(built, 5, v0=0.5)
    assert done.returncode == 0 and done.stdout == expected, done.stderr
    assert log["fused_groups"] == 0, log


def test_kernforge_fuse_0_runs_the_originals_on_the_gpu(built: Path) -> None:
    expected = alone(built)
    done, log = deferred(built, 5, {"KERNFORGE_FUSE": "0"})
    assert done.returncode == 0 and done.stdout == expected, done.stderr
    assert log["fused_groups"] == 0 and log["fusion"] is False, log
