"""The device checksum of examples/heat3d_cupy.py: its CUDA operation, compiled here as C (the
same integer arithmetic), equals a numpy reference; on the GPU the example's ``checksum``
equals that reference of the field's bytes, in the line format the demo parses."""

from __future__ import annotations

import ast
import runpy
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernforge.pipeline.demo_deploy import CHECKSUM

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heat3d_cupy.py"
GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def reference(words: np.ndarray) -> str:
    """sum over i of splitmix64's finalizer of (i * golden ^ word_i), modulo 2^64."""
    i = np.arange(words.size, dtype=np.uint64)
    z = (i * np.uint64(GOLDEN)) ^ words.astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
    z = z ^ (z >> np.uint64(31))
    return f"{int(z.sum(dtype=np.uint64)):016x}"


def _operation() -> tuple[str, str, str]:
    """(in_params, out_params, operation) of the example's ElementwiseKernel, from its source
    (the example imports cupy, so it is read, not imported)."""
    for node in ast.walk(ast.parse(EXAMPLE.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ElementwiseKernel":
            ins, outs, op = (ast.literal_eval(a) for a in node.args[:3])
            return ins, outs, op
    raise AssertionError("no ElementwiseKernel in the example")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_mixing_operation_equals_the_reference(tmp_path: Path) -> None:
    ins, outs, op = _operation()
    assert (ins, outs) == ("uint32 w", "uint64 h")
    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**32, size=1000, dtype=np.uint64).astype(np.uint32)
    words[:4] = [0, 0xFFFFFFFF, 0x3F800000, 0x80000000]
    (tmp_path / "words.bin").write_bytes(words.tobytes())
    program = f"""
#include <stdio.h>
int main(void) {{
    static unsigned int all[{words.size}];
    FILE *f = fopen("words.bin", "rb");
    if (!f || fread(all, 4, {words.size}, f) != {words.size}) return 2;
    unsigned long long sum = 0;
    for (long long i = 0; i < {words.size}; i++) {{
        const unsigned int w = all[i];
        unsigned long long h;
        {{ {op} }}
        sum += h;
    }}
    printf("%016llx\\n", sum);
    return 0;
}}
"""
    (tmp_path / "mix.c").write_text(program)
    subprocess.run(["cc", "-O2", "-o", str(tmp_path / "mix"), str(tmp_path / "mix.c")],
                   check=True)
    out = subprocess.run([str(tmp_path / "mix")], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == reference(words)
    flipped = words.copy()
    flipped[500] ^= 1
    swapped = words.copy()
    swapped[[1, 2]] = swapped[[2, 1]]
    assert len({reference(words), reference(flipped), reference(swapped)}) == 3


def test_the_demo_parses_the_printed_line() -> None:
    line = "heat3d_cupy n=64 steps=4 dtype=float32 change=1e-05 mean=0.1 checksum=" \
           + reference(np.arange(10, dtype=np.uint32))
    assert CHECKSUM.findall(line) == [reference(np.arange(10, dtype=np.uint32))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_device_checksum_equals_the_reference(dtype: str) -> None:
    cp = pytest.importorskip("cupy")
    app = runpy.run_path(str(EXAMPLE), run_name="heat3d_cupy")
    u, _ = app["run"](24, 3, dtype)
    host = cp.asnumpy(u)
    assert app["checksum"](u) == reference(host.reshape(-1).view(np.uint32))
    v = u.copy()
    v[3, 4, 5] = np.nextafter(host[3, 4, 5], np.inf, dtype=host.dtype)  # one ulp
    assert app["checksum"](v) != app["checksum"](u)
    assert app["checksum"](u.copy()) == app["checksum"](u)
