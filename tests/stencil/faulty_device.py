"""A host stand-in for the stencil device with faulty runners, for the supervised ``stencil
check`` and ``stencil probe`` tests (imported in their worker processes; kept light, so that a
fresh worker is ready within a test's short limits).

A runner computes the oracle's result (a correct operator) unless :data:`FAULTS` names it:
``(cell id or "*", runner name or a substring of an operator key, fault, run)``; on that run
(1 = the first) it reads address 0 (SIGSEGV), aborts (SIGABRT), sleeps for an hour, or fails
as a GPU kernel with an illegal address does: a KernelRuntimeError, after which the device is
unusable (every later run fails, ``healthy()`` is False) until the process ends. ``compile``:
the operator does not build (a CompileError)."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from kernforge.core import CompileError, KernelRuntimeError
from kernforge.forge.measure import CopyBandwidth, DeviceCell
from kernforge.stencil.operator import Operator
from kernforge.stencil.oracle import reference
from kernforge.stencil.spec import Cell

FAULTS = (
    # stencil check: whole runner names
    ("star_1/16x12x10/fp32", "ours", "segv", 1),
    ("box_1/16x12x10/fp32", "naive", "abort", 1),
    ("star_2/18x12x10/fp64", "ours", "hang", 1),
    ("star_1/16x12x10/fp64", "ours", "sticky", 1),
    # stencil probe: parts of operator keys
    ("*", "ty=2,", "segv", 1),   # in its check
    ("*", "ty=4,", "abort", 1),  # in its check
    ("*", "vx=2]", "hang", 2),   # in the timed runs' warm-up
    ("*", "tx=8,", "segv", 3),   # in the timed runs' warm-up
    ("*", "lz=2,", "compile", 0),  # a typed compile error
    ("*", "tx=16,", "sticky", 1),  # in its check
)


def _fault(cell: str, name: str) -> tuple[str, int]:
    for where, what, fault, run in FAULTS:
        if where in ("*", cell) and (what == name if where != "*" else what in name):
            return fault, run
    return "", 0


class FaultyRunner:
    def __init__(self, name: str, dcell: DeviceCell, fault: tuple[str, int],
                 device: FaultyDevice) -> None:
        self.name, self.dcell, self.fault, self.device = name, dcell, fault, device
        self.runs = 0

    def run(self) -> None:
        self.runs += 1
        if self.device.broken or (self.runs == self.fault[1] and self.fault[0] == "sticky"):
            self.device.broken = True
            raise KernelRuntimeError(f"{self.name}: an illegal memory access (a stand-in)",
                                     hint="the context is unusable")
        if self.runs == self.fault[1]:
            if self.fault[0] == "segv":
                ctypes.string_at(0)
            elif self.fault[0] == "abort":
                os.abort()
            elif self.fault[0] == "hang":
                time.sleep(3600)
        f = self.dcell.fields
        res = reference(self.dcell.cell, f["in"], f.get("coef")).astype(f["out"].dtype)
        r = self.dcell.cell.radius
        f["out"][r:-r, r:-r, r:-r] = res[r:-r, r:-r, r:-r]

    def output(self) -> Any:
        return self.dcell.fields["out"]


class FaultyDevice:
    """The Device protocol over numpy; every run takes a fake microsecond."""

    broken = False

    def healthy(self) -> bool:
        return not self.broken

    def identity(self) -> dict[str, Any]:
        return {"device": "faulty numpy stand-in"}

    def allocate(self, cell: Cell, seed: int) -> DeviceCell:
        import numpy as np

        return DeviceCell.allocate(cell, seed, xp=np)

    def operator_runner(self, op: Operator, dcell: DeviceCell, name: str = "") -> Any:
        fault = _fault(dcell.cell.id, name)
        if fault[0] == "compile":
            raise CompileError(f"{name}: error: expected ';' (a stand-in)", hint="fix it")
        return FaultyRunner(name, dcell, fault, self)

    def synchronize(self) -> None:
        pass

    def once(self, runner: Any) -> float:
        runner.run()
        return 1e-6

    def measure(self, runner: Any, *, warmup: int = 3, repeat: int = 10) -> list[float]:
        return [self.once(runner) for _ in range(repeat)]

    def copy_bandwidth(self, nbytes: int, *, repeat: int = 10) -> CopyBandwidth:
        return CopyBandwidth(1e12, nbytes, 2 * nbytes / 1e12, "memcpy", {"memcpy": 1e12})

    def release(self) -> None:
        pass
