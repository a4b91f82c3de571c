"""``kernforge stencil check`` on the GPU: the oracle gate alone, without timing.

Each cell's operator (and the naive kernel) gets fresh random inputs (its own seed), runs once
and is checked by the float64 oracle; compile and launch failures are reported per cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import KernforgeError
from ..stencil.spec import Cell
from .bench import BenchConfig, Progress, _ours, _resolved, _seed, baseline_runner, checked_run
from .measure import Device, DeviceCell, Runner


def check_cells(cells: Sequence[Cell], *, device: Device | None = None, points: int = 4096,
                seed: int | None = None, include_naive: bool = True,
                progress: Progress | None = None,
                table: str | None = None) -> list[dict[str, Any]]:
    """The oracle gate alone on the device: each cell's operator (and naive), fresh inputs."""
    if device is None:
        from .measure import GpuDevice
        device = GpuDevice()
    config = _resolved(BenchConfig(points=points, seed=seed, repeat=1, warmup=0,
                                   baselines=("naive",) if include_naive else ()))
    out = []
    for i, cell in enumerate(cells):
        if progress:
            progress(cell.id, i, len(cells))
        dcell = device.allocate(cell, _seed(config, i, 0))
        ours, info = _ours(device, cell, dcell, table)
        named: list[tuple[str, Runner | None, dict[str, Any]]] = [("ours", ours, info)]
        if include_naive:
            try:
                named.append(("naive", baseline_runner("naive", cell, dcell, device), {}))
            except KernforgeError as exc:
                named.append(("naive", None, {"status": "error", "reason": exc.message}))
        for j, (name, runner, extra) in enumerate(named):
            entry = {"cell": cell.id, "name": name, **extra}
            if runner is not None:
                entry.update(_check_one(device, dcell, runner, _seed(config, i, j), points))
            out.append(entry)
        del named, ours, dcell
        device.release()
    if progress:
        progress("done", len(cells), len(cells))
    return out


def _check_one(device: Device, dcell: DeviceCell, runner: Runner, seed: int,
               points: int) -> dict[str, Any]:
    try:
        res = checked_run(device, dcell, runner, seed, points)
    except KernforgeError as exc:
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc.message}"}
    return {"status": "ok" if res.ok else "failed-oracle", "check": res.to_json()}
