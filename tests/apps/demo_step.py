"""The demo application's time step (examples/heat3d_cupy.py: ``heat_stencil`` then
``apply_boundary`` for axis 0, 1, 2) on the host emulator, its CUDA source as the example has
it, and probe targets of its launches (what fused_gpu probes on the GPU)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernforge.apps import fused as fz
from kernforge.apps.adapter import Slot
from kernforge.apps.probe import ProbeBuffer, Recognized
from kernforge.stencil import emulate as em

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heat3d_cupy.py"
CTYPES = {"float32": "float", "float64": "double"}
SLACK = 40  # elements of each buffer past the grid (a kernel must leave them)
DEMO_SLOTS = [Slot(0, 8, True), Slot(8, 8, True), Slot(16, 4), Slot(20, 4)]  # u, un, alpha, n


def _strings() -> dict[str, str]:
    tree = ast.parse(EXAMPLE.read_text())
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)}


def cuda_source(dtype: str) -> str:
    """The example's kernels as CUDA C for ``dtype``: STENCIL (``heat_stencil``) and MODULE
    (``apply_boundary`` and the reduction's templates)."""
    s = _strings()
    return f"typedef {CTYPES[dtype]} real_t;\n" + s["STENCIL"] + s["MODULE"]


def module(dtype: str, extra: str = "") -> em.Module:
    """The example's STENCIL and MODULE (its ``apply_boundary``), plus ``extra`` kernels."""
    src = cuda_source(dtype) + extra
    names = ["heat_stencil", "apply_boundary"] + [
        ln.split("void")[1].split("(")[0].strip() for ln in extra.splitlines()
        if ln.startswith('extern "C" __global__ void')]
    return em.compile_source(src, names)


@dataclass
class DemoStep:
    n: int
    dtype: str = "float32"
    alpha: float = 0.1
    hot: float = 1.0

    def __post_init__(self) -> None:
        self.mod = module(self.dtype)
        self.dt = np.dtype(self.dtype)

    @property
    def points(self) -> int:
        return self.n ** 3

    def stencil(self, u: np.ndarray, un: np.ndarray) -> None:
        n = self.n
        grid = tuple((n + b - 1) // b for b in (8, 4, 2))
        self.mod.launch("heat_stencil", [u, un, np.array(self.alpha, self.dt),
                                         np.array(n, np.int32)], grid, (8, 4, 2))

    def boundary(self, u: np.ndarray, axis: int) -> None:
        n = self.n
        face = ((n + 7) // 8, (n + 7) // 8, 1)
        self.mod.launch("apply_boundary", [u, np.array(n, np.int32), np.array(axis, np.int32),
                                           np.array(self.hot, self.dt)], face, (8, 8, 1))

    def run(self, x: np.ndarray, y: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """``steps`` whole steps from IN ``x`` and OUT ``y`` (copies), swapped after each:
        (the buffer the last step wrote, the other)."""
        a, b = x.copy(), y.copy()
        for _ in range(steps):
            self.stencil(a, b)
            for axis in range(3):
                self.boundary(b, axis)
            a, b = b, a
        return a, b


class EmuTarget:
    """One kernel of an emulated module as a probe target: pointer parameters ``pointers``
    (parameter -> element count), the other arguments fixed in ``scalars``."""

    def __init__(self, mod: em.Module, entry: str, grid: tuple[int, ...],
                 block: tuple[int, ...], dtype: str, pointers: Mapping[int, int],
                 scalars: Mapping[int, np.ndarray], ints: tuple[int, ...] = ()) -> None:
        self.mod, self.entry, self.grid, self.block = mod, entry, grid, block
        self.dt, self.pointers, self.scalars = np.dtype(dtype), dict(pointers), dict(scalars)
        self.ints, self.dtype = ints, dtype
        rng = np.random.default_rng(3)
        self.prologue = {p: rng.uniform(0, 1, k).astype(self.dt) for p, k in pointers.items()}
        after = self.run({})
        self.buffers = tuple(ProbeBuffer(p, k * self.dt.itemsize, not np.array_equal(
            after[p], self.prologue[p].view(np.uint8)), region=p)
            for p, k in sorted(self.pointers.items()))

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        bufs = {p: np.array(contents[p], dtype=np.uint8).view(self.dt) if p in contents
                else self.prologue[p].copy() for p in self.pointers}
        args = [bufs[i] if i in bufs else self.scalars[i]
                for i in range(len(self.pointers) + len(self.scalars))]
        self.mod.launch(self.entry, args, self.grid, self.block)
        return {p: b.view(np.uint8).copy() for p, b in bufs.items()}


def stencil_target(step: DemoStep) -> EmuTarget:
    n, k = step.n, step.points + SLACK
    grid = tuple((n + b - 1) // b for b in (8, 4, 2))
    return EmuTarget(step.mod, "heat_stencil", grid, (8, 4, 2), step.dtype, {0: k, 1: k},
                     {2: np.array(step.alpha, step.dt), 3: np.array(n, np.int32)}, (n,))


def boundary_target(step: DemoStep, axis: int, mod: em.Module | None = None,
                    entry: str = "apply_boundary") -> EmuTarget:
    n = step.n
    face = ((n + 7) // 8, (n + 7) // 8, 1)
    return EmuTarget(mod or step.mod, entry, face, (8, 8, 1), step.dtype,
                     {0: step.points + SLACK},
                     {1: np.array(n, np.int32), 2: np.array(axis, np.int32),
                      3: np.array(step.hot, step.dt)}, (n,))


def run_fused(r: Recognized, op: object, steps: int, x: np.ndarray, y: np.ndarray,
              shuffle: int | None = None) -> np.ndarray:
    """One launch of the demo step's fused adapter on the emulator (blocks in a shuffled order
    with ``shuffle``); OUT after it. IN must come back unchanged."""
    ad = fz.fused_adapter(op, r, DEMO_SLOTS, 24, steps)  # type: ignore[arg-type]
    mod = em.compile_source(ad.source, [ad.entry])
    xi, yo = x.copy(), y.copy()
    order = None if shuffle is None else \
        np.random.default_rng(shuffle).permutation(int(np.prod(ad.grid)))
    mod.launch(ad.entry, [xi, yo, np.array(0.1, x.dtype), np.array(r.shape[0], np.int32)],
               ad.grid, ad.block, ad.shared_bytes, order=order)
    assert np.array_equal(xi, x), "the fused kernel wrote into IN"
    return yo
