"""Fused reductions of generated operators (codegen.py: warp shuffles, the warps' partials in
shared memory, the last block reading the blocks' partials 8 at a time) on a real GPU, at block
sizes that are no multiple of 32 (a partial last warp: its shuffles' mask and width) and with
more partials than 8 per thread of the last block, against the float64 oracle; launched twice,
so the module's block counter must have been reset. The same cases run on the host emulator
here (``test_..._on_the_emulator``), so the harness itself is checked without a GPU.

On a GPU machine: ``pytest -m gpu tests/apps/test_program_reduce_gpu.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kernforge.backends.cuda_image import compile_image, nvcc
from kernforge.stencil import emulate as em
from kernforge.stencil.program import Reduction, apply, program, tap
from kernforge.stencil.program import codegen_plain as plain
from kernforge.stencil.program import codegen_tiled as tiled
from kernforge.stencil.program.binding import Binding, Placement
from kernforge.stencil.program.codegen import Kernel, standalone

from .program_ops_helpers import run_standalone

SHAPE = (40, 64)  # ny, nx
# (design, precision, knobs): 12, 48, 35 and 33 threads (partial last warps), 256 (whole)
CASES = [("plain", "fp32", {"bx": 4, "by": 3}), ("plain", "fp32", {"bx": 16, "by": 3}),
         ("plain", "fp64", {"bx": 7, "by": 5}), ("plain", "fp64", {"bx": 33, "by": 1}),
         ("plain", "fp32", {"bx": 32, "by": 8}), ("tiled", "fp32", {"tx": 12, "ty": 3}),
         ("tiled", "fp64", {"tx": 32, "ty": 8})]
IDS = [f"{d}-{p}-" + "x".join(str(v) for v in k.values()) for d, p, k in CASES]
DTYPE = {"fp32": np.float32, "fp64": np.float64}


def _case(design: str, precision: str, knobs: dict[str, int]
          ) -> tuple[Kernel, dict[str, np.ndarray], dict[str, float]]:
    """The operator, its arrays, and what the reductions must hold after one launch."""
    u = lambda dy, dx: tap("u", 0, dy, dx)
    prog = program(2, precision, {"v": 0.25 * (u(0, 1) + u(0, -1) + u(1, 0) + u(-1, 0))},
                   reductions=[Reduction("q", "sumsq", tap("v") - tap("u"), accumulate=True),
                               Reduction("m", "maxabs", tap("v") - tap("u")),
                               Reduction("s", "sum", tap("v"), over="all")])
    b = Binding((SHAPE[1], SHAPE[0], 1), {"u": Placement(0), "v": Placement(1)},
                {"q": 2, "m": 3, "s": 4})
    dt = DTYPE[precision]
    rng = np.random.default_rng(8)
    arrays = {"u": rng.uniform(-1, 1, SHAPE).astype(dt), "v": rng.uniform(2, 3, SHAPE).astype(dt),
              "q": np.array([0.5], dt), "m": np.array([9.0], dt), "s": np.array([7.0], dt)}
    want = apply(prog, {n: arrays[n] for n in ("u", "v")}, reductions={"q": 0.5})
    k = plain.generate(prog, b, **knobs) if design == "plain" else \
        tiled.generate(prog, b, **knobs)
    return k, {n: a.reshape(-1).copy() for n, a in arrays.items()}, dict(want.reductions)


def _check(run: Callable[[Kernel, dict[str, np.ndarray]], None], design: str,
           precision: str, knobs: dict[str, int]) -> None:
    k, got, want = _case(design, precision, knobs)
    threads = k.block[0] * k.block[1] * k.block[2]
    blocks = k.grid[0] * k.grid[1] * k.grid[2]
    assert "__shfl_down_sync" in k.source and (threads % 32 != 0 or threads == 256)
    run(k, got)
    rel = 1e-5 if precision == "fp32" else 1e-12
    for name in ("q", "m", "s"):
        assert float(got[name][0]) == pytest.approx(want[name], rel=rel), (name, blocks)
    q = float(got["q"][0])
    run(k, got)  # the counter of finished blocks was reset: the second launch finishes too
    assert float(got["q"][0]) == pytest.approx(q + (q - 0.5), rel=rel)


@pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")
@pytest.mark.parametrize(("design", "precision", "knobs"), CASES, ids=IDS)
def test_block_reductions_on_the_emulator(design: str, precision: str,
                                          knobs: dict[str, int]) -> None:
    _check(run_standalone, design, precision, knobs)


@pytest.fixture(scope="module")
def device() -> Any:
    from kernforge.backends.driver import Driver
    from kernforge.core import BackendUnavailableError

    try:
        return Driver()
    except BackendUnavailableError as exc:
        pytest.skip(exc.message)


@pytest.mark.gpu
@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize(("design", "precision", "knobs"), CASES, ids=IDS)
def test_block_reductions_on_the_gpu(device: Any, design: str, precision: str,
                                     knobs: dict[str, int]) -> None:
    arch = f"sm_{device.attribute('cc_major')}{device.attribute('cc_minor')}"
    loaded: dict[str, Any] = {}  # one module per kernel: both launches share its counter

    def run(k: Kernel, arrays: dict[str, np.ndarray]) -> None:
        if k.source not in loaded:
            image = compile_image(standalone(k), arch)
            loaded[k.source] = device.function(device.load(image), "kf_standalone")
        fn = loaded[k.source]
        ptrs = {}
        for a in k.args:  # every argument of this program is a pointer
            assert a.ctype.endswith("*"), a
            ptrs[a.name] = device.alloc(arrays[a.name].nbytes)
            device.htod(ptrs[a.name], arrays[a.name])
        params = b"".join(struct.pack("<Q", ptrs[a.name]) for a in k.args)
        device.launch(fn, k.grid, k.block, k.shared_bytes, params)
        device.synchronize()
        for a in k.args:
            arrays[a.name][:] = np.frombuffer(device.dtoh(ptrs[a.name], arrays[a.name].nbytes),
                                              dtype=arrays[a.name].dtype)

    _check(run, design, precision, knobs)
