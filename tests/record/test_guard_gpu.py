"""GPU: what a fused kernel baked in, checked by the interposer with the real driver and the
CUDA runtime (record/native/kf_guard.c).

A heat time loop compiled with nvcc (the runtime linked statically: it reaches the driver
through cuGetProcAddress) reads its coefficient from ``__constant__ float coef``, which it sets
with ``cudaMemcpyToSymbol``; the fused entry runs 5 steps as one launch of ``cheat_x5``, which
bakes ``coef = 0.25`` in, and guards ``coef``. Every observation must equal the unfused run's,
bit for bit: the steps fuse while ``coef`` holds 0.25, and run unfused (one message) once the
program sets another value, before the loop or mid-run (``cudaMemcpyToSymbol`` and its async
form). A loop whose launches carry a launch attribute the entry was not recorded with
(``cudaLaunchKernelEx`` with a priority) is not held.

Run on the GPU machine: ``pytest -m gpu tests/record/test_guard_gpu.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kernforge.deploy.native import image_id
from kernforge.record import interposer

pytestmark = pytest.mark.gpu

N = 4096  # floats: the fused kernel keeps one level in 16 KiB of shared memory
STEPS = 203
LOOP = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
__constant__ float coef;
extern "C" __global__ void cheat(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = (i == 0 || i == n - 1) ? in[i] : in[i] + coef * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
static uint64_t fnv(const void *p, size_t len, uint64_t h = 0xcbf29ce484222325ULL) {
  for (size_t i = 0; i < len; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h;
}
#define CHECK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(4); } } while (0)
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "none";  // none, pre, mid, async, attr
  int n = 4096, steps = 203;
  size_t bytes = n * sizeof(float);
  float *h = (float *)malloc(bytes), *a, *b, c = 0.25f, other = 0.3f;
  for (int i = 0; i < n; i++) h[i] = (i * 37 % 101) / 101.0f;
  CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyToSymbol(coef, &c, sizeof c));
  if (!strcmp(mode, "pre")) CHECK(cudaMemcpyToSymbol(coef, &other, sizeof other));
  for (int s = 1; s <= steps; s++) {
    if (!strcmp(mode, "attr")) {
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributePriority;
      at[0].val.priority = 0;
      cfg.gridDim = dim3((n + 255) / 256), cfg.blockDim = dim3(256), cfg.attrs = at, cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, cheat, (const float *)a, b, n));
    } else {
      cheat<<<(n + 255) / 256, 256>>>(a, b, n);
    }
    float *t = a; a = b; b = t;
    if (s == 101 && !strcmp(mode, "mid")) CHECK(cudaMemcpyToSymbol(coef, &other, sizeof other));
    if (s == 101 && !strcmp(mode, "async"))
      CHECK(cudaMemcpyToSymbolAsync(coef, &other, sizeof other, 0, cudaMemcpyHostToDevice, 0));
    if (s % 37 == 0) {
      CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
      printf("step %d copy %016llx\n", s, (unsigned long long)fnv(h, bytes));
    }
  }
  CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
  printf("final %016llx\n", (unsigned long long)fnv(h, bytes));
  return 0;
}
"""
FUSED = r"""
// 5 steps of cheat with coef = 0.25 baked in, one block: reads only IN.
extern "C" __global__ void cheat_x5(const float *in, float *out, int n) {
  extern __shared__ float s[];
  const float *x = in;
  for (int k = 0; k < 5; k++) {
    float *y = (k % 2 == 0) ? out : s;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      y[i] = (i == 0 || i == n - 1) ? x[i] : x[i] + 0.25f * (x[i - 1] - 2.0f * x[i] + x[i + 1]);
    __syncthreads();
    x = y;
  }
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("guard-gpu")
    (out / "loop.cu").write_text(LOOP)
    (out / "fused.cu").write_text(FUSED)
    for args in (["-o", "loop", "loop.cu"], ["-cubin", "-o", "fused.cubin", "fused.cu"]):
        done = subprocess.run([nvcc, "-fmad=false", "-arch=sm_90", *args], cwd=out,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    probe = subprocess.run([str(out / "loop")], capture_output=True, text=True, timeout=300,
                           check=False)
    if probe.returncode:
        pytest.skip(f"the loop does not run here: {probe.stdout.strip()[-200:]}")
    return out


def line(out: Path) -> str:
    key = "xx" * 16 + N.to_bytes(4, "little").hex()
    baked = struct.pack("<f", 0.25)
    return "\t".join(["cheat", f"{N // 256},1,1", "256,1,1", "0", key, str(out / "fused.cubin"),
                      "cheat_x5", "-", "1,1,1", "1024,1,1", str(4 * N), "-1", "-",
                      "fuse:5:0:8", f"guard:-:4:{image_id(baked)}:coef"]) + "\n"


def deferred(out: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    spec, log = out / "deploy.tsv", out / f"log-{mode}.json"
    spec.write_text(line(out))
    log.unlink(missing_ok=True)
    full = interposer.preload_env(interposer.build(), {"KERNFORGE_DEPLOY": str(spec),
                                                       "KERNFORGE_DEPLOY_LOG": str(log)},
                                  {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    done = subprocess.run([str(out / "loop"), mode], env=full, capture_output=True, text=True,
                          timeout=300, check=False)
    return done, json.loads(log.read_text()) if log.is_file() else {}


@pytest.mark.parametrize(("mode", "fuses", "told"), [
    ("none", True, False), ("pre", False, True), ("mid", True, True), ("async", True, True),
    ("attr", False, False)])
def test_a_guarded_fused_loop_leaves_every_observation_as_the_unfused_run(
        built: Path, mode: str, fuses: bool, told: bool) -> None:
    alone = subprocess.run([str(built / "loop"), mode], capture_output=True, text=True,
                           timeout=300, check=True)
    done, log = deferred(built, mode)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == alone.stdout, done.stderr
    messages = [m for m in done.stderr.splitlines() if m.startswith("kernforge:")]
    assert len(messages) == int(told) and all("coef" in m for m in messages), done.stderr
    groups, unfused = int(log["fused_groups"]), int(log["flushed_unfused"])  # type: ignore
    assert (groups > 0) == fuses and groups * 5 + unfused <= STEPS, log
    if mode == "none":  # read at each chain's first fused launch: the copies every 37 steps
        assert log["entries"][0]["guard_checks"] == 6, log  # type: ignore  # end 6 chains
