"""``kernforge stencil check`` on the GPU: the oracle gate alone, without timing.

Each cell's operator (and the naive kernel) gets fresh random inputs (its own seed), runs once
and is checked by the float64 oracle; compile and launch failures are reported per cell. With
``isolate`` (:class:`.check_isolated.IsolatedCheck`, the command's default) each cell is
checked in a supervised worker process by the same :func:`check_cell`, with the same seeds: a
runner that kills its worker or hangs costs that runner only (RUNTIME_FAILED or TIMEOUT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core import KernforgeError
from ..stencil.spec import Cell
from .bench import BenchConfig, Progress, _ours, _resolved, _seed, baseline_runner, checked_run
from .measure import Device, DeviceCell, Runner


def check_config(points: int = 4096, seed: int | None = None,
                 include_naive: bool = True) -> BenchConfig:
    """The bench settings a check uses (one run, no warm-up; a random seed when none)."""
    return _resolved(BenchConfig(points=points, seed=seed, repeat=1, warmup=0,
                                 baselines=("naive",) if include_naive else ()))


def check_cells(cells: Sequence[Cell], *, device: Device | None = None, points: int = 4096,
                seed: int | None = None, include_naive: bool = True,
                progress: Progress | None = None, table: str | None = None,
                isolate: Any = None) -> list[dict[str, Any]]:
    """The oracle gate alone on the device: each cell's operator (and naive), fresh inputs;
    ``isolate``: each cell checked in a worker instead (:class:`.check_isolated.IsolatedCheck`)."""
    if device is None and isolate is None:
        from .measure import GpuDevice
        device = GpuDevice()
    config = check_config(points, seed, include_naive)
    out: list[dict[str, Any]] = []
    for i, cell in enumerate(cells):
        if progress:
            progress(cell.id, i, len(cells))
        if isolate is not None:
            out.extend(isolate.cell(cell, i, config, table))
        else:
            assert device is not None
            out.extend(check_cell(device, cell, i, config, table))
    if progress:
        progress("done", len(cells), len(cells))
    return out


def check_cell(device: Device, cell: Cell, index: int, config: BenchConfig,
               table: str | None = None, skip: dict[str, dict[str, Any]] | None = None,
               on_stage: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """One cell's checks (ours, then naive when ``config.baselines`` has it). ``skip``: runners
    not run, with their entry (one that killed its worker); ``on_stage``: told the runner about
    to be built or run."""
    skip, stage = skip or {}, on_stage or (lambda _name: None)
    dcell = device.allocate(cell, _seed(config, index, 0))
    stage("ours")
    ours, info = (None, skip["ours"]) if "ours" in skip else \
        _ours(device, cell, dcell, table)
    named: list[tuple[str, Runner | None, dict[str, Any]]] = [("ours", ours, info)]
    if "naive" in config.baselines:
        stage("naive")
        if "naive" in skip:
            named.append(("naive", None, skip["naive"]))
        else:
            try:
                named.append(("naive", baseline_runner("naive", cell, dcell, device), {}))
            except KernforgeError as exc:
                named.append(("naive", None, {"status": "error", "reason": exc.message}))
    out = []
    for j, (name, runner, extra) in enumerate(named):
        entry = {"cell": cell.id, "name": name, **extra}
        if runner is not None:
            stage(name)
            entry.update(_check_one(device, dcell, runner, _seed(config, index, j),
                                    config.points))
        out.append(entry)
    del named, ours, dcell
    device.release()
    return out


def _check_one(device: Device, dcell: DeviceCell, runner: Runner, seed: int,
               points: int) -> dict[str, Any]:
    try:
        res = checked_run(device, dcell, runner, seed, points)
    except KernforgeError as exc:
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc.message}"}
    return {"status": "ok" if res.ok else "failed-oracle", "check": res.to_json()}
