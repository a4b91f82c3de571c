"""Faulty stencil candidates for the supervised-forge tests: a compiler that builds some of a
round's operators with a fault injected at the top of their first kernel (thread 0 of block
0): a segmentation fault, an abort, a spin that never ends, or a slow spin then a segfault; on
the GPU also a read far out of bounds, a trap, and a correct operator made slow."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernforge.forge.compile import Built
from kernforge.forge.sessions import emulated_compiler
from kernforge.stencil.operator import Operator
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

CELL = Cell(STENCILS["star_1"], Shape(32, 12, 10), Precision.FP32)
# the design round's candidates for CELL from naive: zmarch, ztile, planesweep

# ``{p}``: the kernel's first pointer parameter (its input field)
FAULTS = {
    "segv": "*(volatile int*)0 = 1;",
    "abort": "__builtin_abort();",
    # thread 0 compares two volatile global loads of the same word as integers: neither the
    # compiler nor a NaN input can end it (a loop on a volatile *local* ran to completion on
    # the H200: NVVM keeps the local in a register; tests/pipeline/test_evolve_isolation_gpu.py)
    "hang": "volatile const unsigned *kf_w = (volatile const unsigned *){p}; "
            "while (kf_w[0] == kf_w[0]) {}",
    "slow-segv": "for (volatile long kf_i = 0; kf_i < 3000000000L; kf_i = kf_i + 1) {} "
                 "*(volatile int*)0 = 1;",
    # on the GPU: a read 2^36 elements past the input (256 GiB for fp32: beyond any
    # allocation, unmapped; faulted on the H200 in the evolve test), a trap
    "oob": "volatile char kf_x = *(volatile const char*)({p} + (1LL << 36)); (void)kf_x;",
    "trap": "__trap();",
    # on the GPU: a correct operator made ~1 ms slower (thread 0 waits 2M clock cycles), so
    # that any honest candidate clearly beats it and the gate's acceptance is certain
    "slow": "long long kf_t0 = clock64(); while (clock64() - kf_t0 < 2000000LL) {}",
}
_FIRST = ("if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && blockIdx.x == 0 "
          "&& blockIdx.y == 0 && blockIdx.z == 0) { %s }")


def inject(op: Operator, fault: str) -> Operator:
    """``op`` with ``FAULTS[fault]`` at the top of its first kernel's body."""
    m = re.search(r"__global__[^{]*\{", op.source)
    assert m is not None, op.key
    params = re.findall(r"\(([^()]*)\)", m.group(0))[-1]  # after __launch_bounds__(...)
    ptr = re.search(r"\*\s*(?:__restrict__\s*)?(\w+)\s*(?:,|$)", params)
    assert ptr is not None, (op.key, params)
    code = f"\n/* injected fault: {fault} */ " + _FIRST % FAULTS[fault].replace("{p}", ptr.group(1))
    return replace(op, source=op.source[:m.end()] + code + "\n" + op.source[m.end():])


def faulty_compiler(faults: dict[str, str], base: Callable[..., list[Built]] = emulated_compiler
                    ) -> Callable[[Sequence[Operator]], list[Built]]:
    """``base`` (the host emulator's build), with ``faults`` ({design: fault}, or
    {"CELL|design": fault} for one cell) injected into every operator of those designs."""

    def fault(op: Operator) -> str | None:
        return faults.get(f"{op.cell_id}|{op.design}", faults.get(op.design))

    def build(ops: Sequence[Operator]) -> list[Built]:
        return base([inject(op, f) if (f := fault(op)) else op for op in ops])

    return build


def run(out: Path, faults: dict[str, str], *, resume: bool = False, timeout_s: float = 3.0,
        in_process: bool = False) -> dict[str, Any]:
    """One design round over CELL on the host emulator into ``out``, supervised."""
    from kernforge.forge.run import forge_run
    from kernforge.replay.isolate import Isolation, Limits

    kw: dict[str, Any] = {"start_table": None, "rounds": 1, "emulate": True, "resume": resume,
                          "compiler": faulty_compiler(faults), "say": lambda m: None}
    if in_process:
        return forge_run([CELL], out, **kw)
    with Isolation(limits=Limits(min_timeout_s=timeout_s, timeout_factor=10,
                                 first_timeout_s=60)) as iso:
        return forge_run([CELL], out, isolate=iso, **kw)


if __name__ == "__main__":  # python tests/forge/faulty.py OUT DESIGN=FAULT ...
    run(Path(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
