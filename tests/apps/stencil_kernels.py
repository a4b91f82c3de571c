"""Numpy stand-ins for recorded application kernels (what operator matching probes): a target
of :mod:`kernforge.apps.probe` that runs a Python function over byte buffers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from kernforge.apps.probe import ProbeBuffer

Kernel = Callable[[dict[int, np.ndarray]], None]  # typed views by parameter, mutated in place


@dataclass
class NumpyTarget:
    """``kernel`` over buffers of ``dtypes`` (parameter -> numpy dtype, element count)."""

    kernel: Kernel
    layout: dict[int, tuple[str, int]]
    ints: tuple[int, ...] = ()
    dtype: str | None = None
    prologue: dict[int, np.ndarray] = field(default_factory=dict)
    runs: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng(1)
        for p, (dt, n) in self.layout.items():
            self.prologue.setdefault(p, rng.uniform(0, 1, n).astype(dt).view(np.uint8).copy())
        after = self._launch({})
        self.buffers = tuple(
            ProbeBuffer(p, self.prologue[p].size, not np.array_equal(after[p], self.prologue[p]),
                        region=p) for p in sorted(self.layout))

    def _launch(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        raw = {p: np.array(contents.get(p, self.prologue[p]), dtype=np.uint8, copy=True)
               for p in self.layout}
        with np.errstate(all="ignore"):
            self.kernel({p: raw[p].view(self.layout[p][0]) for p in raw})
        return raw

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.runs += 1
        return self._launch(contents)


def shifted(g: np.ndarray, dz: int, dy: int, dx: int, mode: str) -> np.ndarray:
    """``g[z+dz, y+dy, x+dx]`` with zeros (``zero``) or wrapping (``wrap``) outside."""
    if mode == "wrap":
        return np.roll(g, (-dz, -dy, -dx), axis=(0, 1, 2))
    p = np.pad(g, 4)
    nz, ny, nx = g.shape
    return p[4 + dz:4 + dz + nz, 4 + dy:4 + dy + ny, 4 + dx:4 + dx + nx]


def heat_zeropad(n: int, r: float = 0.1) -> Kernel:
    """heat-cuda's ``solve``: every point, neighbours outside the grid read as 0 (fp64).
    Parameters: 0 n, 1 u (in), 2 u_tmp (out)."""
    def k(b: dict[int, np.ndarray]) -> None:
        u = b[1][:n * n].reshape(1, n, n)
        s = sum(shifted(u, 0, dy, dx, "zero") for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[2][:n * n] = ((1 - 4 * r) * u + r * s).reshape(-1)
    return k


def heat_periodic(lx: int, ly: int, delta: float = 0.0096, norm: float = 0.96) -> Kernel:
    """heat2d's ``dev_lapl_iter``: periodic boundaries (fp32). Parameters: 0 out, 1 in."""
    def k(b: dict[int, np.ndarray]) -> None:
        u = b[1][:lx * ly].reshape(1, ly, lx)
        s = sum(shifted(u, 0, dy, dx, "wrap") for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[0][:lx * ly] = (np.float32(norm) * u + np.float32(delta) * s).reshape(-1)
    return k


def laplace_copy(nx: int, ny: int, nz: int) -> Kernel:
    """laplace3d: the 6 neighbours' mean inside, the input copied on the boundary (fp32).
    Parameters: 0..2 NX NY NZ, 3 pitch, 4 u1 (in), 5 u2 (out)."""
    def k(b: dict[int, np.ndarray]) -> None:
        u = b[4][:nx * ny * nz].reshape(nz, ny, nx)
        s = sum(shifted(u, *o, "zero") for o in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0),
                                                  (0, 0, 1), (0, 0, -1)))
        out = u.copy()
        out[1:-1, 1:-1, 1:-1] = (s * np.float32(1 / 6))[1:-1, 1:-1, 1:-1]
        b[5][:nx * ny * nz] = out.reshape(-1)
    return k


def jacobi_with_error(n: int) -> Kernel:
    """jacobi: the interior updated and the squared change summed into ``error`` (fp32).
    Parameters: 0 f (out), 1 f_old (in), 2 error."""
    def k(b: dict[int, np.ndarray]) -> None:
        u = b[1][:n * n].reshape(1, n, n)
        s = 0.25 * sum(shifted(u, 0, dy, dx, "zero") for dy, dx in ((0, 1), (0, -1), (1, 0),
                                                                     (-1, 0)))
        f = b[0][:n * n].reshape(1, n, n)
        f[:, 1:-1, 1:-1] = s[:, 1:-1, 1:-1]
        b[2][0] = np.float32(((f - u)[:, 1:-1, 1:-1] ** 2).sum())
    return k


def generic(n: int, body: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """A 2D fp32 kernel on n x n: ``out[...] = body(in grid)``. Parameters: 0 n, 1 in, 2 out."""
    def k(b: dict[int, np.ndarray]) -> None:
        u = b[1][:n * n].reshape(1, n, n).astype(np.float64)
        b[2][:n * n] = body(u).astype(b[2].dtype).reshape(-1)
    return k


def target(kernel: Kernel, layout: dict[int, tuple[str, int]], ints: tuple[int, ...] = (),
           dtype: str | None = None) -> NumpyTarget:
    return NumpyTarget(kernel, layout, ints, dtype)
