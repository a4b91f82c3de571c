"""The supervised stencil bench: each cell benched in a worker process of the command's
supervisor (``kernforge.replay.isolate.Isolation``), by the same :func:`.bench.bench_cell`
an in-process bench calls, with the same seeds (so the same inputs and figures).

The worker writes the runner it is about to build or run (ours, a baseline, the fused
operator, ``compare``) to a stage file. When a runner kills the worker (a signal; on the GPU a
sticky fault after which the worker ends itself) or hangs past the limit, the cell is benched
again in a fresh worker with that runner skipped and recorded as RUNTIME_FAILED or TIMEOUT with
its cause: the crash costs that runner only. A loss outside a runner (the copy bandwidth, the
comparison) fails the cell's row.

Limits: a cell's first request (a worker start, imports, a device) ``validate_timeout_s``;
after that ``first_timeout_s`` or ten times the slowest cell so far, whichever is longer.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ..core.errors import WorkerLost
from ..stencil.spec import Cell
from .isolated import HINT, Supervisor

DEVICE = "kernforge.forge.session_worker:device"
_DEVICES: dict[str, Any] = {}


def _device(target: str) -> Any:
    if target not in _DEVICES:
        import importlib

        module, _, name = target.partition(":")
        _DEVICES[target] = getattr(importlib.import_module(module), name)()
    return _DEVICES[target]


def identity(target: str) -> dict[str, Any]:
    return dict(_device(target).identity())


def bench_cell(target: str, cell: Cell, index: int, config: Any,
               skip: dict[str, dict[str, Any]], stage_file: str) -> tuple[Any, list[str]]:
    """The worker's side: one cell's row and what it logged."""
    from .bench import bench_cell as run

    logs: list[str] = []

    def stage(name: str) -> None:
        with open(stage_file, "w") as fh:
            fh.write(name)

    return run(_device(target), cell, index, config, logs.append, skip, stage), logs


class IsolatedBench:
    """``bench(..., isolate=IsolatedBench(supervisor))``: cells benched in its workers."""

    def __init__(self, supervisor: Supervisor, device: str = DEVICE) -> None:
        self.sup, self.device = supervisor, device
        self.slowest: float | None = None

    def identity(self) -> dict[str, Any]:
        return dict(self.sup.call(f"{__name__}:identity", self.device,
                                  timeout_s=float(self.sup.limits.validate_timeout_s)))

    def _limit(self) -> float:
        lim = self.sup.limits
        if self.slowest is None:
            return float(lim.validate_timeout_s)
        return max(float(lim.first_timeout_s), 10.0 * self.slowest)

    def cell(self, cell: Cell, index: int, config: Any, log: Any) -> dict[str, Any]:
        skip: dict[str, dict[str, Any]] = {}
        with tempfile.NamedTemporaryFile("w", prefix="kernforge-stage-", delete=False) as fh:
            stage_file = Path(fh.name)
        try:
            while True:
                stage_file.write_text("")
                t0 = time.monotonic()
                try:
                    row, logs = self.sup.call(f"{__name__}:bench_cell", self.device, cell,
                                              index, config, skip, str(stage_file),
                                              timeout_s=self._limit())
                except WorkerLost as lost:
                    name = stage_file.read_text().strip()
                    entry = {"status": "error", "failure": lost.status.name,
                             "cause": lost.cause,
                             "reason": f"{lost.status.name}: {lost.message}; hint: {HINT}"}
                    log(f"{cell.id}: {name or 'the cell'}: {entry['reason']}")
                    if not name or name == "compare" or name in skip:
                        return _lost_row(cell, name, entry)
                    skip[name] = entry  # benched again without it, in a fresh worker
                    continue
                took = time.monotonic() - t0
                self.slowest = max(self.slowest or 0.0, took)
                for line in logs:
                    log(line)
                return dict(row)
        finally:
            stage_file.unlink(missing_ok=True)


def _lost_row(cell: Cell, stage: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A cell whose worker died outside any one runner: no figures, our operator failed."""
    return {"cell": cell.id, "stencil": cell.stencil.name, "shape": cell.shape.name,
            "precision": cell.precision.value, "steps": cell.stencil.steps,
            "temporal": cell.stencil.temporal, "updates": cell.updates,
            "compulsory_bytes": cell.compulsory_bytes,
            "copy": {"bytes_per_s": 0.0, "nbytes": 0, "seconds": 0.0, "method": "-",
                     "by_method": {}},
            "runners": [{"name": "ours", "kind": "ours", **entry}],
            "lost": {"stage": stage or "setup", **entry}}
