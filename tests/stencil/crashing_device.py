"""A bench device for the supervised-bench test (imported in its worker processes): the
numpy stand-in of ``test_bench``, with our operator crashing (a segmentation fault) in one
cell and the naive baseline hanging in another."""

from __future__ import annotations

import ctypes
import time
from typing import Any

from kernforge.stencil.operator import Operator

from .test_bench import HostDevice, OracleRunner

SEGV_CELL, HANG_CELL = "star_1/16x12x10/fp32", "box_1/16x12x10/fp32"


class _Faulty(OracleRunner):
    fault = ""

    def run(self) -> None:
        if self.fault == "segv":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if self.fault == "hang":
            time.sleep(3600)
        super().run()


class CrashingDevice(HostDevice):
    def operator_runner(self, op: Operator, dcell: Any, name: str = "") -> Any:
        runner = super().operator_runner(op, dcell, name)
        faulty = _Faulty(name, dcell, runner.seconds, interior=runner.interior)
        cell = dcell.cell.id
        faulty.fault = ("segv" if (cell, name) == (SEGV_CELL, "ours")
                        else "hang" if (cell, name) == (HANG_CELL, "naive") else "")
        return faulty
