"""GPU: deferral (temporal fusion) in the interposer with the real driver and the CUDA runtime.

A heat time loop compiled with nvcc (the runtime linked statically: it reaches the driver
through cuGetProcAddress, hundreds of functions of it) launches one step per launch, the two
buffers swapped between launches, with copies after odd numbers of steps, events, a memset and
device synchronizations in between. A fused entry runs T steps of it as one launch of a
one-block kernel (``heat_xT`` below, built to a cubin). Every observation the program prints
must equal the unfused run's, bit for bit (both built with ``-fmad=false``), and the
interposer must have fused.

Run on the GPU machine: ``pytest -m gpu tests/record/test_defer_gpu.py``.
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
LOOP = r"""
// A heat time loop through the CUDA runtime: steps ping-pong between two buffers, with copies,
// synchronizations, events and a memset in between; prints a hash of every observation.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
extern "C" __global__ void heat(const float *in, float *out, int n, float c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = (i == 0 || i == n - 1) ? in[i] : in[i] + c * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
static uint64_t fnv(const void *p, size_t len, uint64_t h = 0xcbf29ce484222325ULL) {
  for (size_t i = 0; i < len; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h;
}
#define CHECK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(4); } } while (0)
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
    heat<<<(n + 255) / 256, 256>>>(a, b, n, c);
    float *t = a; a = b; b = t;
    if (s % 37 == 0) { // an odd number of steps, then a copy of both buffers
      CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
      uint64_t x = fnv(h, bytes);
      CHECK(cudaMemcpy(h, b, bytes, cudaMemcpyDeviceToHost));
      printf("step %d copy %016llx\n", s, (unsigned long long)fnv(h, bytes, x));
    }
    if (s % 50 == 0) { CHECK(cudaEventRecord(ev)); CHECK(cudaEventSynchronize(ev)); }
    if (s % 61 == 0) CHECK(cudaMemset(scratch, s, bytes));
    if (s % 71 == 0) CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
  printf("final %016llx\n", (unsigned long long)fnv(h, bytes));
  return 0;
}
"""
FUSED = r"""
// T heat steps in one launch of one block: reads only IN; OUT and shared memory hold the levels.
template <int T> __device__ void steps(const float *in, float *out, int n, float c) {
  extern __shared__ float s[];
  const float *x = in;
  for (int k = 0; k < T; k++) {
    float *y = (k % 2 == 0) ? out : s; // T odd: the last step writes OUT
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      y[i] = (i == 0 || i == n - 1) ? x[i] : x[i] + c * (x[i - 1] - 2.0f * x[i] + x[i + 1]);
    __syncthreads();
    x = y;
  }
}
extern "C" __global__ void heat_x5(const float *in, float *out, int n, float c) { steps<5>(in, out, n, c); }
extern "C" __global__ void heat_x7(const float *in, float *out, int n, float c) { steps<7>(in, out, n, c); }
// a one-launch replacement of heat (the same arithmetic, a grid-stride loop): what the held
// launches that run unfused run under "unfused:next"
extern "C" __global__ void heat_one(const float *in, float *out, int n, float c) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = (i == 0 || i == n - 1) ? in[i] : in[i] + c * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("defer-gpu")
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


def line(out: Path, steps: int) -> str:
    key = "xx" * 16 + N.to_bytes(4, "little").hex() + struct.pack("<f", 0.25).hex()
    return "\t".join(["heat", f"{N // 256},1,1", "256,1,1", "0", key, str(out / "fused.cubin"),
                      f"heat_x{steps}", "-", "1,1,1", "1024,1,1", str(4 * N), "-1", "-",
                      f"fuse:{steps}:0:8"]) + "\n"


def one_line(out: Path) -> str:
    """heat's one-launch replacement, heat_one on 8 blocks of 128 threads."""
    key = "xx" * 16 + N.to_bytes(4, "little").hex() + struct.pack("<f", 0.25).hex()
    return "\t".join(["heat", f"{N // 256},1,1", "256,1,1", "0", key, str(out / "fused.cubin"),
                      "heat_one", "-", "8,1,1", "128,1,1", "0", "-1", "-"]) + "\n"


def deferred(out: Path, steps: int, env: dict[str, str] | None = None, one: bool = False
             ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    spec, log = out / f"deploy-{steps}.tsv", out / f"log-{steps}.json"
    spec.write_text(line(out, steps).replace("\n", "\tunfused:next\n") + one_line(out)
                    if one else line(out, steps))
    log.unlink(missing_ok=True)
    full = interposer.preload_env(interposer.build(), {"KERNFORGE_DEPLOY": str(spec),
                                                       "KERNFORGE_DEPLOY_LOG": str(log),
                                                       **(env or {})},
                                  {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    done = subprocess.run([str(out / "loop")], env=full, capture_output=True, text=True,
                          timeout=300, check=False)
    return done, json.loads(log.read_text()) if log.is_file() else {}


@pytest.mark.parametrize("steps", [5, 7])
def test_a_fused_time_loop_leaves_every_observation_as_the_unfused_run(
        built: Path, steps: int) -> None:
    alone = subprocess.run([str(built / "loop")], capture_output=True, text=True, timeout=300,
                           check=True)
    assert "final" in alone.stdout
    done, log = deferred(built, steps)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == alone.stdout, done.stderr
    assert "kernforge:" not in done.stderr, done.stderr
    groups, unfused = int(log["fused_groups"]), int(log["flushed_unfused"])  # type: ignore
    assert groups > 0 and groups * steps + unfused == 203, log  # each launch once


def test_kernforge_fuse_0_runs_the_originals_on_the_gpu(built: Path) -> None:
    alone = subprocess.run([str(built / "loop")], capture_output=True, text=True, timeout=300,
                           check=True)
    done, log = deferred(built, 5, {"KERNFORGE_FUSE": "0"})
    assert done.returncode == 0 and done.stdout == alone.stdout, done.stderr
    assert log["fused_groups"] == 0 and log["fusion"] is False, log


@pytest.mark.parametrize("steps", [5, 7])
def test_held_launches_run_unfused_run_the_one_launch_replacement(built: Path,
                                                                  steps: int) -> None:
    """The launches held at each copy, sync or memset (and the step held after each fused
    launch) run heat_one, not heat: each launch once, every observation as the plain run's."""
    alone = subprocess.run([str(built / "loop")], capture_output=True, text=True, timeout=300,
                           check=True)
    done, log = deferred(built, steps, one=True)
    assert done.returncode == 0 and done.stdout == alone.stdout, done.stdout + done.stderr
    assert "kernforge:" not in done.stderr, done.stderr
    groups, unfused = int(log["fused_groups"]), int(log["flushed_unfused"])  # type: ignore
    assert groups > 0 and groups * steps + unfused == 203, log
    assert log["flushed_one_launch"] == unfused > 0, log
    assert log["entries"][1]["replaced"] == unfused, log  # type: ignore
