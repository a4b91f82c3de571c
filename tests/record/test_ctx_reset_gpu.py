"""GPU: a program that calls cudaDeviceReset between rounds of a heat loop and goes on in the
new primary context (the driver may give it the old one's handle). The interposer forgets what
it kept of the ended context (record/native/kf_ctx.c): the one-launch replacement and the fused
function are loaded again in each new context, no launch of theirs fails, and every round's
result equals the plain program's, bit for bit (both built with ``-fmad=false``).

Run on the GPU machine: ``pytest -m gpu tests/record/test_ctx_reset_gpu.py``. The program says
on stderr how many of its new contexts had the first one's handle (the case this guards).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_defer_gpu import FUSED, line, one_line

from kernforge.record import interposer

pytestmark = pytest.mark.gpu

ROUNDS = 3  # of 12 steps each, cudaDeviceReset between two rounds
RESET = r"""
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
extern "C" __global__ void heat(const float *in, float *out, int n, float c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = (i == 0 || i == n - 1) ? in[i] : in[i] + c * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
#define CHECK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(4); } } while (0)
int main(int argc, char **argv) {
  int n = 4096, rounds = argc > 1 ? atoi(argv[1]) : 3, same = 0;
  size_t bytes = n * sizeof(float);
  float *h = (float *)malloc(bytes), *a, *b;
  for (int i = 0; i < n; i++) h[i] = (i * 37 % 101) / 101.0f;
  void *first = NULL, *now = NULL, *cuda = dlopen("libcuda.so.1", RTLD_NOW);
  int (*current)(void **) = cuda ? (int (*)(void **))dlsym(cuda, "cuCtxGetCurrent") : NULL;
  for (int r = 0; r < rounds; r++) {
    if (r) CHECK(cudaDeviceReset()); /* the context ends: its memory and modules with it */
    CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
    if (current && !current(r ? &now : &first) && r && now == first) same++;
    for (int s = 0; s < 12; s++) {
      heat<<<(n + 255) / 256, 256>>>(a, b, n, 0.25f);
      float *t = a; a = b; b = t;
    }
    CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
    uint64_t f = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < bytes; i++) f = (f ^ ((const uint8_t *)h)[i]) * 0x100000001b3ULL;
    printf("round %d %016llx\n", r, (unsigned long long)f);
    CHECK(cudaFree(a)); CHECK(cudaFree(b));
  }
  fprintf(stderr, "new contexts at the first one's handle: %d of %d\n", same, rounds - 1);
  return 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("reset-gpu")
    (out / "reset.cu").write_text(RESET)
    (out / "fused.cu").write_text(FUSED)
    for args in (["-o", "reset", "reset.cu", "-ldl"],
                 ["-cubin", "-o", "fused.cubin", "fused.cu"]):
        done = subprocess.run([nvcc, "-fmad=false", "-arch=sm_90", *args], cwd=out,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    return out


# the deployment -> replaced launches of the one-launch entry, fused groups
CASES = {"one-launch line": ("one", 12 * ROUNDS, 0),
         "fused line": ("fused", 0, 2 * ROUNDS),
         "fused line with unfused:next": ("both", 2 * ROUNDS, 2 * ROUNDS)}


@pytest.mark.parametrize(("kind", "replaced", "groups"), list(CASES.values()), ids=list(CASES))
def test_after_cuda_device_reset_the_replacements_run_in_the_new_context(
        built: Path, kind: str, replaced: int, groups: int) -> None:
    alone = subprocess.run([str(built / "reset"), str(ROUNDS)], capture_output=True, text=True,
                           timeout=300, check=False)
    if alone.returncode:
        pytest.skip(f"the program does not run here: {alone.stdout.strip()[-200:]}")
    spec, log = built / f"deploy-{kind}.tsv", built / f"log-{kind}.json"
    spec.write_text({"one": one_line(built), "fused": line(built, 5),
                     "both": line(built, 5).replace("\n", "\tunfused:next\n")
                     + one_line(built)}[kind])
    log.unlink(missing_ok=True)
    env = interposer.preload_env(interposer.build(), {"KERNFORGE_DEPLOY": str(spec),
                                                      "KERNFORGE_DEPLOY_LOG": str(log)},
                                 {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    done = subprocess.run([str(built / "reset"), str(ROUNDS)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    print(done.stderr)  # how many new contexts had the first one's handle
    assert done.returncode == 0 and done.stdout == alone.stdout, done.stdout + done.stderr
    assert "kernforge:" not in done.stderr, done.stderr
    counts = json.loads(log.read_text())
    assert counts["fused_groups"] == groups, counts
    assert counts["entries"][-1]["replaced"] == replaced, counts
    for e in counts["entries"]:
        assert e["load_failures"] == 0 and e["launch_failures"] == 0, counts
