"""Lifting by probing on a real GPU: the test kernels of every class (tests/apps/lift_kernels.py)
in one small CUDA program (ours), recorded by the interposer, each unit probed through operator
matching's replay target; the program found must be the one their source lifts to, and the
lifted program's oracle must reproduce the kernel on fresh inputs (checked by probing itself).

On a GPU machine: ``pytest -m gpu tests/apps/test_lift_gpu.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.lift_regions import Lifted
from kernforge.apps.lift_source import lift_source
from kernforge.apps.operator_gpu import ReplayTarget
from kernforge.backends.cuda_image import nvcc
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay

from .lift_kernels import CASES, SOURCE, Case, scalars
from .test_lift_probe import _same

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvcc() is None, reason="needs nvcc")]

CTYPE = {"float64": "double", "float32": "float", "float16": "__half"}


def launch(case: Case) -> str:
    """Host code that allocates, fills and launches one test kernel once."""
    n = int(np.prod(case.shape))
    lines, args = ["{"], []
    for i, p in enumerate(case.params):
        if p[0] != "buf":
            args.append(f"{p[1]}" if p[0] == "int" else
                        f"{float(p[1])!r}f" if p[0] == "f32" else f"{float(p[1])!r}")
            continue
        t, count = CTYPE[str(p[1])], case.small.get(i, n)
        fixed = case.fixed.get(i)
        value = f"(float)v{i}[k]" if fixed else f"(float)((k * 7919 + {i}) % 1000) / 1000.0f"
        lines += [f"  {t}* b{i}; cudaMalloc(&b{i}, sizeof({t}) * {count});",
                  f"  {t}* h{i} = ({t}*)malloc(sizeof({t}) * {count});"]
        if fixed:
            lines.append(f"  const float v{i}[] = {{{', '.join(f'{v}f' for v in fixed)}}};")
        conv = "__float2half" if t == "__half" else f"({t})"
        lines += [f"  for (long k = 0; k < {count}; k++) h{i}[k] = {conv}({value});",
                  f"  cudaMemcpy(b{i}, h{i}, sizeof({t}) * {count}, cudaMemcpyHostToDevice);"]
        args.append(f"b{i}")
    g, b = case.grid, case.block
    call = (f"  {case.entry}<<<dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]})>>>"
            f"({', '.join(args)});")
    lines += [call, "  cudaDeviceSynchronize();", "}"]
    return "\n".join(lines)


def app_source() -> str:
    body = "\n".join(launch(c) for c in CASES.values())
    return (SOURCE + "\n#include <cstdio>\n#include <cstdlib>\nint main() {\n" + body
            + '\n  printf("done\\n");\n  return 0;\n}\n')


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from kernforge.pipeline.run_app import record_command

    d = tmp_path_factory.mktemp("liftapp")
    (d / "app.cu").write_text(app_source())
    subprocess.run([str(nvcc()), "-O2", "-arch=sm_90", "-o", str(d / "app"), str(d / "app.cu")],
                   check=True)
    status, found, problems, _ = record_command([str(d / "app")], d / "rec", max_instances=1)
    assert status == 0 and not problems, problems
    return {u.name.rsplit("-", 1)[0]: u for u in found}


@pytest.mark.parametrize("entry", sorted(CASES))
def test_probing_the_recorded_kernel_finds_its_source_program(entry: str,
                                                               units: dict[str, Path]) -> None:
    case = CASES[entry]
    t = ReplayTarget(NativeReplay(read_native(units[entry])))
    probed = lift_probe(t)
    assert isinstance(probed, Probed), probed
    lifted = lift_source(SOURCE, entry)
    assert isinstance(lifted, Lifted), lifted
    tables = {n: list(case.fixed[p]) for n, p in lifted.tables.items()}
    _same(probed, lifted, scalars(case), tables)
