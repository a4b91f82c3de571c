"""Lifted-program operators on a real GPU: the test kernels of lift_kernels.py (those that read
no ``__constant__`` memory: a module with globals is refused before lifting) in one small CUDA
program, recorded by the interposer; each unit goes through ``lift_unit``: lifted by probing,
every generated design's adapter compiled, checked against the recorded outputs and against the
original kernel on fresh inputs, screened and timed. The grids are tiny, so the gate may
refuse to deploy; what must hold is that operators of both designs pass the checks.

With a search budget, the forge's search over the designs' knobs follows the presets under
the same checks; the operator it keeps is checked and, where it is not the best preset, at
least as fast as that preset in the interleaved protocol.

On a GPU machine: ``pytest -m gpu tests/apps/test_program_gpu.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernforge.apps.operator_match import NoMatch, _child, lift_unit
from kernforge.backends.cuda_image import nvcc

from .lift_kernels import CASES, SOURCE
from .test_lift_gpu import launch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvcc() is None, reason="needs nvcc")]

CONSTANT = ("wave", "conv_rows")  # read __constant__ memory
ONE_D = ("inplace", "advect", "table1d", "gray", "copy2")


def app_source() -> str:
    chunks = [c for c in SOURCE.split("\n\n")
              if not any(f"void {k}(" in c for k in CONSTANT)]
    code = "\n".join(line for line in "\n\n".join(chunks).splitlines()
                     if not line.startswith("__constant__"))
    body = "\n".join(launch(c) for k, c in CASES.items() if k not in CONSTANT)
    return (code + "\n#include <cstdio>\n#include <cstdlib>\nint main() {\n" + body
            + '\n  printf("done\\n");\n  return 0;\n}\n')


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from kernforge.pipeline.run_app import record_command

    d = tmp_path_factory.mktemp("liftops")
    (d / "app.cu").write_text(app_source())
    subprocess.run([str(nvcc()), "-O2", "-arch=sm_90", "-o", str(d / "app"), str(d / "app.cu")],
                   check=True)
    status, found, problems, _ = record_command([str(d / "app")], d / "rec", max_instances=1)
    assert status == 0 and not problems, problems
    return {u.name.rsplit("-", 1)[0]: u for u in found}


@pytest.mark.parametrize("entry", sorted(set(CASES) - set(CONSTANT)))
def test_generated_operators_pass_the_checks_on_the_gpu(entry: str, units: dict[str, Path],
                                                        tmp_path: Path) -> None:
    m = lift_unit(units[entry], out_dir=tmp_path, repeat=3, passes=3)
    tried = list(m.tried)
    passed = {row["operator"].split("(")[0] for row in tried if "median_s" in row}
    assert passed >= ({"plain"} if entry in ONE_D else {"plain", "tiled"}), (m, tried)
    if entry == "jacobi_res":  # its residual combined by one atomic per block passes too
        assert any("atomic=1" in row["operator"] and "median_s" in row for row in tried), tried
    if isinstance(m, NoMatch):
        assert "not deployed" in m.reason, m
    else:
        assert m.figures and 0 < m.figures["copy_fraction"] < 2, m
    assert np.isfinite([row["median_s"] for row in tried if "median_s" in row]).all()


# HeCBench-like kernels: stencil3d (a coefficient field), hotspot, jacobi with its residual
@pytest.mark.parametrize("entry", ["coef3d", "hot2d", "jacobi_res"])
def test_the_knob_search_keeps_a_checked_operator_no_slower_than_the_best_preset(
        entry: str, units: dict[str, Path], tmp_path: Path) -> None:
    res = _child(units[entry].resolve(), tmp_path.resolve(), 5, 5, 900.0,
                 "kernforge.apps.program_gpu", search_trials=8, search_seconds=400.0)
    assert "nomatch" not in res, res.get("nomatch")
    s = res["search"]
    assert s and "refused" not in s, s
    rows = [row for row in res["tried"] if row.get("search")]
    assert s["evaluations"] > 8 and any("median_s" in row for row in rows), (s, rows)
    assert res["operator"] == s["chosen"]
    assert "recorded outputs match" in res["checks"] and len(res["checks"]) == 3, res["checks"]
    if s["chosen"] != s["best_preset"]:
        assert s["vs_preset"] >= 1.0, s  # the interleaved protocol: preset over search's best
    # the study resumes: a second run evaluates nothing the first finished
    again = _child(units[entry].resolve(), tmp_path.resolve(), 5, 5, 900.0,
                   "kernforge.apps.program_gpu", search_trials=8, search_seconds=400.0)
    assert again["search"]["evaluations"] == s["evaluations"], again["search"]
