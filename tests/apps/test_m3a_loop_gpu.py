"""A native program's time loop whose step is several launches, through ``kernforge app run``
(GPU): the demo's step written in CUDA C (``heat_stencil``, then ``apply_boundary`` once per
axis), built by its manifest with nvcc. M2 records one launch per kernel; M3a records the loop
as a sequence in one more run, fuses whole steps with the three boundary launches folded, and
M4 runs the program with the fused spec through the interposer, which fuses launches.

On a GPU machine: ``pytest -m gpu tests/apps/test_m3a_loop_gpu.py -s``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kernforge.apps.manifest import load_manifest
from kernforge.apps.store import AppStore
from kernforge.apps.workflow import AppRun
from kernforge.backends.cuda_image import nvcc

from .demo_step import cuda_source

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvcc() is None, reason="needs nvcc")]

# the demo's own kernels (examples/heat3d_cupy.py), driven from C as the demo drives them
APP = "#include <cstdio>\n#include <cstdlib>\n#include <utility>\n" + cuda_source("float32") + r"""
int main(int argc, char** argv) {
  const int n = atoi(argv[1]), steps = atoi(argv[2]);
  const long long cells = (long long)n * n * n;
  float* h = new float[cells];
  for (long long i = 0; i < cells; i++) h[i] = (float)((i * 7919ll % 1000) / 1000.0);
  float *u, *un;
  cudaMalloc(&u, sizeof(float) * cells); cudaMalloc(&un, sizeof(float) * cells);
  cudaMemcpy(u, h, sizeof(float) * cells, cudaMemcpyHostToDevice);
  cudaMemcpy(un, h, sizeof(float) * cells, cudaMemcpyHostToDevice);
  const dim3 block(32, 4, 2), grid((n + 31) / 32, (n + 3) / 4, (n + 1) / 2);
  const dim3 fb(16, 16), fg((n + 15) / 16, (n + 15) / 16);
  for (int s = 0; s < steps; s++) {
    heat_stencil<<<grid, block>>>(u, un, 0.1f, n);
    for (int axis = 0; axis < 3; axis++) apply_boundary<<<fg, fb>>>(un, n, axis, 1.0f);
    std::swap(u, un);
  }
  cudaMemcpy(h, u, sizeof(float) * cells, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (long long i = 0; i < cells; i++) sum += h[i];
  printf("checksum %.9e\n", sum / cells);
  delete[] h;
  return 0;
}
"""


def test_a_loop_with_boundary_kernels_is_fused_by_the_workflow(tmp_path: Path) -> None:
    src = tmp_path / "heat3d-native"
    src.mkdir()
    (src / "heat3d.cu").write_text(APP)
    manifest = tmp_path / "app.toml"
    manifest.write_text(textwrap.dedent(f"""
        name = "heat3d-native"
        source = "{src}"
        build = "{nvcc()} -O2 -arch=sm_90 -o heat3d heat3d.cu"
        timeout_s = 300

        [[datasets]]
        name = "n256"
        run = "./heat3d 256 200"

        [check]
        kind = "regex"
        pattern = 'checksum ([0-9.eE+-]+)'
        rel = 1e-4

        [measure]
        rounds = 3
        e2e_rounds = 7
        min_share = 0.01  # 200 steps of 256^3: about 3 % of the run (H200, 2026-12-07)

        [integrate]
        strategies = ["operator"]
        match_repeat = 5
        """))
    out = tmp_path / "run"
    state = AppRun(load_manifest(manifest), out, progress=print).run()
    store = AppStore.open(out)
    ms = {m.name: m for m in store.milestones()}
    store.close()
    assert "M3a" in ms, {n: m.reason for n, m in ms.items()}
    m3a = ms["M3a"]
    row = next(r for r in m3a.figures["kernels"] if r["kernel"] == "heat_stencil")
    print(json.dumps({k: row.get(k) for k in ("path", "speedup", "refused", "sequence")},
                     indent=1))
    seq = row["sequence"]
    assert isinstance(seq, dict) and seq["ended"] == "complete", seq
    assert seq["other_kernels"] == ["apply_boundary"], seq
    assert row["matched"], row["reason"]
    assert row["path"].startswith("fused ") and row["path"].endswith(
        "whole steps with 3 companion(s): 3 folded"), row["path"]
    assert row["refused"]["fused"].startswith("not tried: the kernel's time loop")
    print(state.state, ms["M4"].reason)
    (d,) = ms["M4"].figures["datasets"]
    assert d["fused_groups"] > 0, d  # the interposer ran the loop fused in the program
    assert state.state in ("INTEGRATED", "INCONCLUSIVE"), (state.state, ms["M4"].reason)
