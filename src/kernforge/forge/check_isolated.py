"""The supervised stencil check: each cell's oracle checks run in a worker process of the
command's supervisor (``kernforge.replay.isolate.Isolation``), by the same
:func:`.check.check_cell` an in-process check calls, with the same seeds.

The worker writes the runner it is about to build or run (ours, naive) to a stage file. When a
runner kills the worker (a signal; on the GPU a sticky fault after which the worker ends
itself) or hangs past the limit, the cell is checked again in a fresh worker with that runner
skipped and reported as an error with its failure (RUNTIME_FAILED or TIMEOUT), cause and a
hint: the crash costs that runner only. On the GPU a runner can also leave the worker's CUDA
context unusable without killing it (an illegal address, a trap): the worker then names that
runner, answers with a KernelRuntimeError marked ``recycle`` and ends itself, and the cell is
checked again in the same way. A loss outside a runner (allocating the cell's fields) fails
every runner of the cell.

Limits: the first cell (a worker start, imports, a device context, the first compiles)
``first_timeout_s`` or ``compile_timeout_s``, whichever is longer; after that
``first_timeout_s`` or ten times the slowest cell so far, whichever is longer
(``--eval-timeout S`` makes ``first_timeout_s`` 12 S; ``--compile-timeout S`` sets
``compile_timeout_s``, 300 s by default).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ..core import KernelRuntimeError, Status
from ..core.errors import WorkerLost
from ..stencil.spec import Cell
from .bench_isolated import DEVICE, _device
from .isolated import HINT, Supervisor


class StageFile:
    """A temporary file the worker writes its current stage to (read after a loss)."""

    def __init__(self) -> None:
        with tempfile.NamedTemporaryFile("w", prefix="kernforge-stage-", delete=False) as fh:
            self.path = Path(fh.name)

    def clear(self) -> None:
        self.path.write_text("")

    def read(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def stage_writer(stage_file: str | None) -> Any:
    """``stage(name)`` for a worker: the name written to ``stage_file`` (nothing without one)."""
    def stage(name: str) -> None:
        if stage_file:
            with open(stage_file, "w") as fh:
                fh.write(name)
    return stage


def lost_entry(lost: WorkerLost | KernelRuntimeError) -> dict[str, Any]:
    """A runner that killed its worker, hung or left its device unusable, as its entry:
    status, failure, cause, reason."""
    if isinstance(lost, WorkerLost):
        status, cause = lost.status, lost.cause
    else:
        status, cause = Status.RUNTIME_FAILED, "device context unusable"
    return {"status": "error", "failure": status.name, "cause": cause,
            "reason": f"{status.name}: {lost.message}; hint: {HINT}"}


def healthy(dev: Any) -> bool:
    """Whether a device still works after a failure: its own ``healthy()`` when it has one,
    else for a CUDA device (``cp``) a small computation; a host device always does."""
    if callable(getattr(dev, "healthy", None)):
        return bool(dev.healthy())
    cp = getattr(dev, "cp", None)
    if cp is None:
        return True
    try:
        a = cp.zeros(1, dtype="f4")
        a += 1
        dev.synchronize()
        return True
    except Exception:  # noqa: BLE001 - a sticky fault answers every later call with it
        return False


def sticky(message: str) -> KernelRuntimeError:
    """The error a worker answers with when its device is unusable; it ends after it."""
    err = KernelRuntimeError(f"{message}; the device context was unusable after it",
                             hint=HINT)
    setattr(err, "recycle", True)  # noqa: B010 - read by the worker loop: answer, then end
    return err


def check_cell(target: str, cell: Cell, index: int, config: Any, table: str | None,
               skip: dict[str, dict[str, Any]], stage_file: str) -> list[dict[str, Any]]:
    """The worker's side: one cell's checks on the device ``target`` names. After a failure
    that left the device unusable, the failed runner is named in the stage file and a
    :func:`sticky` error raised (the stage file names the runner in progress when the
    failure was raised rather than reported)."""
    from .check import check_cell as run

    dev, stage = _device(target), stage_writer(stage_file)
    try:
        rows = run(dev, cell, index, config, table, skip, stage)
    except Exception as exc:
        if healthy(dev):
            raise
        raise sticky(f"{type(exc).__name__}: {getattr(exc, 'message', exc)}") from None
    if healthy(dev):
        return rows
    failed = next((r for r in rows if r.get("status") == "error"), None)
    if failed is None:
        raise sticky("the cell's checks passed")
    stage(failed["name"])
    raise sticky(str(failed.get("reason")))


class IsolatedCheck:
    """``check_cells(..., isolate=IsolatedCheck(supervisor))``: cells checked in its workers;
    ``device``: ``module:factory`` of the worker's device (default the GPU's)."""

    def __init__(self, supervisor: Supervisor, device: str | None = None,
                 log: Any = None) -> None:
        self.sup, self.device = supervisor, device or DEVICE
        self.log = log or (lambda _msg: None)
        self.slowest: float | None = None

    def _limit(self) -> float:
        lim = self.sup.limits
        if self.slowest is None:  # the first cell also compiles: the compile limit at least
            return max(float(lim.first_timeout_s), float(lim.compile_timeout_s))
        return max(float(lim.first_timeout_s), 10.0 * self.slowest)

    def cell(self, cell: Cell, index: int, config: Any,
             table: str | None = None) -> list[dict[str, Any]]:
        skip: dict[str, dict[str, Any]] = {}
        stage = StageFile()
        try:
            while True:
                stage.clear()
                t0 = time.monotonic()
                try:
                    rows = self.sup.call(f"{__name__}:check_cell", self.device, cell, index,
                                         config, table, skip, str(stage.path),
                                         timeout_s=self._limit())
                except (WorkerLost, KernelRuntimeError) as lost:
                    name, entry = stage.read(), lost_entry(lost)
                    self.log(f"{cell.id}: {name or 'the cell'}: {entry['reason']}")
                    if not name or name in skip:
                        return [{"cell": cell.id, "name": n, **entry}
                                for n in ("ours", *(b for b in config.baselines
                                                    if b == "naive"))]
                    skip[name] = entry  # checked again without it, in a fresh worker
                    continue
                self.slowest = max(self.slowest or 0.0, time.monotonic() - t0)
                return list(rows)
        finally:
            stage.remove()
