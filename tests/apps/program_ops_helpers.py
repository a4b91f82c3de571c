"""Running generated operators for lifted programs on the host emulator: the test kernels of
lift_kernels.py launched as recorded (their own parameter layout), the adapter launched with
the same arguments, the standalone operator with one array per argument."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernforge.apps.adapter import Slot
from kernforge.apps.lift_regions import Lifted
from kernforge.apps.lift_source import lift_source
from kernforge.apps.program_adapter import program_adapter
from kernforge.apps.program_binding import bind_lifted
from kernforge.stencil import emulate as em
from kernforge.stencil.program import StencilProgram
from kernforge.stencil.program.binding import Binding
from kernforge.stencil.program.codegen import Kernel, standalone

from .lift_kernels import CASES, CONSTANTS, SOURCE, Case

SIZE = {"buf": 8, "int": 4, "f32": 4, "f64": 8}
SCALAR = {"int": np.int32, "f32": np.float32, "f64": np.float64}


def slots(case: Case) -> tuple[list[Slot], int]:
    """The case's parameter layout (natural alignment) and its size in bytes."""
    out, off = [], 0
    for p in case.params:
        size = SIZE[str(p[0])]
        off = -(-off // size) * size
        out.append(Slot(off, size, p[0] == "buf"))
        off += size
    return out, off


def lifted(entry: str) -> tuple[Lifted, Binding]:
    case = CASES[entry]
    r = lift_source(SOURCE, entry)
    assert isinstance(r, Lifted), r
    ints = {i: int(p[1]) for i, p in enumerate(case.params) if p[0] == "int"}  # type: ignore[call-overload]
    sizes = {i: SIZE[str(p[0])] for i, p in enumerate(case.params)}
    return r, bind_lifted(r, ints, sizes, constants=CONSTANTS)


def contents(case: Case, seed: int) -> dict[int, np.ndarray]:
    """Random contents of every buffer (the case's fixed ones as given), typed."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(case.shape))
    out = {}
    for i, p in enumerate(case.params):
        if p[0] == "buf":
            count = case.small.get(i, n)
            v = case.fixed.get(i) or rng.uniform(-1, 1, count)
            out[i] = np.asarray(v).astype(str(p[1]))
    return out


def args(case: Case, bufs: Mapping[int, np.ndarray]) -> list[np.ndarray]:
    return [bufs[i] if p[0] == "buf" else np.array(p[1], dtype=SCALAR[str(p[0])])
            for i, p in enumerate(case.params)]


def run_original(case: Case, bufs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
    out = {i: a.copy() for i, a in bufs.items()}
    mod = em.compile_source(SOURCE, [case.entry])
    mod.launch(case.entry, args(case, out), case.grid, case.block)
    return out


def run_adapter(case: Case, k: Kernel, p: StencilProgram, b: Binding,
                bufs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
    sl, total = slots(case)
    ad = program_adapter(k, p, b, sl, total)
    out = {i: a.copy() for i, a in bufs.items()}
    mod = em.compile_source(ad.source, [ad.entry])
    mod.launch(ad.entry, args(case, out), ad.grid, ad.block, ad.shared_bytes)
    return out


def run_standalone(k: Kernel, arrays: Mapping[str, np.ndarray]) -> None:
    """``k`` launched on ``arrays`` (by argument name: a field's or reduction's name, a
    scalar parameter's index, a table's name), in place."""
    mod = em.compile_source(standalone(k), ["kf_standalone"])
    mod.launch("kf_standalone", [arrays[a.name] for a in k.args], k.grid, k.block,
               k.shared_bytes)
