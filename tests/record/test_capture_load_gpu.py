"""GPU: a replacement whose module first loads inside the program's stream capture (the CUDA
runtime's default, global capture mode) keeps the capture: the interposer loads in relaxed
mode (kf_deploy.c kf_entry_function). A loop captures its first 3 heat steps on a stream into
a graph, launches it, then runs 10 more steps eagerly; the one-launch line of heat (alone, or
after a fused line that names it with ``unfused:next``) replaces the captured launches.

Run on the GPU machine: ``pytest -m gpu tests/record/test_capture_load_gpu.py``.
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

CAPTURED = r"""
#include <cstdio>
#include <cstdlib>
#include <cstdint>
extern "C" __global__ void heat(const float *in, float *out, int n, float c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = (i == 0 || i == n - 1) ? in[i] : in[i] + c * (in[i - 1] - 2.0f * in[i] + in[i + 1]);
}
#define CHECK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(4); } } while (0)
int main() {
  int n = 4096;
  size_t bytes = n * sizeof(float);
  float *h = (float *)malloc(bytes), *a, *b;
  for (int i = 0; i < n; i++) h[i] = (i * 37 % 101) / 101.0f;
  CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t x;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < 3; k++) {
    heat<<<(n + 255) / 256, 256, 0, s>>>(a, b, n, 0.25f);
    float *t = a; a = b; b = t;
  }
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphLaunch(x, s));
  for (int k = 0; k < 10; k++) {
    heat<<<(n + 255) / 256, 256, 0, s>>>(a, b, n, 0.25f);
    float *t = a; a = b; b = t;
  }
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost));
  uint64_t f = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < bytes; i++) f = (f ^ ((const uint8_t *)h)[i]) * 0x100000001b3ULL;
  printf("final %016llx\n", (unsigned long long)f);
  return 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("capture-gpu")
    (out / "captured.cu").write_text(CAPTURED)
    (out / "fused.cu").write_text(FUSED)
    for args in (["-o", "captured", "captured.cu"], ["-cubin", "-o", "fused.cubin", "fused.cu"]):
        done = subprocess.run([nvcc, "-fmad=false", "-arch=sm_90", *args], cwd=out,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("tagged", [False, True], ids=["one-launch line", "after a fused line"])
def test_a_first_load_inside_the_capture_keeps_the_program_s_graph(built: Path,
                                                                   tagged: bool) -> None:
    alone = subprocess.run([str(built / "captured")], capture_output=True, text=True,
                           timeout=300, check=False)
    if alone.returncode:
        pytest.skip(f"the program does not run here: {alone.stdout.strip()[-200:]}")
    spec, log = built / f"deploy-{tagged}.tsv", built / f"log-{tagged}.json"
    one = one_line(built)
    spec.write_text(line(built, 5).replace("\n", "\tunfused:next\n") + one if tagged else one)
    log.unlink(missing_ok=True)
    env = interposer.preload_env(interposer.build(), {"KERNFORGE_DEPLOY": str(spec),
                                                      "KERNFORGE_DEPLOY_LOG": str(log)},
                                 {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    done = subprocess.run([str(built / "captured")], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and done.stdout == alone.stdout, done.stdout + done.stderr
    assert "kernforge:" not in done.stderr, done.stderr
    counts = json.loads(log.read_text())
    assert counts["entries"][-1]["replaced"] >= 3, counts  # the captured launches at least
    assert counts["entries"][-1]["load_failures"] == 0, counts
