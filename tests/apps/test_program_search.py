"""The forge's search over a lifted program's operators on the host emulator, for kernels of
lift_kernels.py lifted from their source: each candidate judged against the float64 oracle
on fresh inputs and against the launch of the original kernel (the emulated original as the
recorded launch); a recorded launch the program does not compute refuses every candidate.
The GPU half's search (apps/program_search.py) on the emulated replay stand-in of
test_program_checks.py: the adapters run on the emulator, the same acceptance checks, the
presets answered from their measurement, the chosen operator no slower than the preset."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.apps.program_search import SearchObjective, search
from kernforge.core import Status
from kernforge.forge.program_check import SCALAR, Recorded
from kernforge.forge.program_space import ProgramSpace
from kernforge.forge.program_tune import tune_program
from kernforge.stencil import emulate as em
from kernforge.stencil.program import StencilProgram
from kernforge.stencil.program.binding import Binding
from kernforge.tune import Budget

from .lift_kernels import CASES, Case, scalars
from .program_ops_helpers import args, contents, lifted, run_original, slots
from .test_program_checks import _Target

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")


def named(case: Case, p: StencilProgram, b: Binding, bufs: Mapping[int, np.ndarray]
          ) -> dict[str, np.ndarray]:
    """A launch's buffers (by parameter) as the generated kernel's arguments (by name)."""
    n = b.points
    out = {name: bufs[pl.param][pl.offset:pl.offset + n].copy() for name, pl in b.fields.items()}
    out.update({name: bufs[i][:1].copy() for name, i in b.reductions.items()})
    out.update({name: bufs[i].copy() for name, i in b.tables.items()})
    out.update({str(i): np.array(scalars(case)[i], dtype=SCALAR[b.scalars[i]])
                for i in p.params()})
    return out


@pytest.mark.parametrize("entry", ["jacobi_res", *(pytest.param(e, marks=pytest.mark.slow)
                                                   for e in ("coef3d", "table1d"))])
def test_a_lifted_kernel_is_searched_against_the_oracle_and_its_launch(entry: str,
                                                                       tmp_path: Path) -> None:
    case = CASES[entry]
    r, b = lifted(entry)
    p = r.program
    bufs = contents(case, 5)
    before, after = named(case, p, b, bufs), named(case, p, b, run_original(case, bufs))
    tables = {name: before[name] for name in b.tables}
    res = tune_program(p, b, budget=Budget(trials=3), params=scalars(case), tables=tables,
                       recorded=Recorded(before, after), repeat=1, storage=tmp_path)
    evaluated = [t for t in res.trials if t.evaluated]
    assert len(evaluated) == 3 and all(t.status is Status.OK for t in evaluated), \
        [t.measurement.message for t in evaluated]
    assert res.best_trial is not None and res.best_trial.status is Status.OK
    # the original's outputs changed at one computed point: no candidate reproduces them
    out = p.outputs[0].field
    wrong = {**after, out: after[out].copy()}
    k = int(np.argmax(np.abs(after[out] - before[out])))  # a point the launch wrote
    wrong[out][k] += 1.0
    res = tune_program(p, b, budget=Budget(trials=2), params=scalars(case), tables=tables,
                       recorded=Recorded(before, wrong), repeat=1)
    evaluated = [t for t in res.trials if t.evaluated]
    assert evaluated and all(t.status is Status.WRONG_RESULT and "the recorded outputs"
                             in t.measurement.message for t in evaluated)
    assert res.best_trial is None


class _EmulatedRun:
    """An adapter launched on the emulated replay's state, as the GPU half's LiftedRun."""

    def __init__(self, t: _Target, ad: Any) -> None:
        self.t, self.ad = t, ad
        self.mod = em.compile_source(ad.source, [ad.entry])

    def run(self) -> None:
        typed = self.t.typed()
        self.mod.launch(self.ad.entry, args(self.t.case, typed), self.ad.grid, self.ad.block,
                        self.ad.shared_bytes)

    def time(self) -> float:
        t0 = time.perf_counter()
        self.run()
        return time.perf_counter() - t0


def _no_image(ks: list[Any], make: Any, arch: str) -> list[tuple[Any, Any, bytes]]:
    return [(k, make(k), b"") for k in ks]  # the emulator compiles the adapter's source


@pytest.mark.slow  # 12 s; the search itself: tests/forge/test_program_search.py
def test_the_gpu_half_searches_after_its_presets(tmp_path: Path) -> None:
    t = _Target("jacobi_res")
    r, b = lifted("jacobi_res")
    ps = ProgramSpace(r.program, b)
    loaded: list[str] = []

    def make_run(ad: Any, image: bytes) -> _EmulatedRun:
        loaded.append(ad.kernel.key)
        return _EmulatedRun(t, ad)

    sl, total = slots(t.case)
    runs: dict[str, Any] = {}
    obj = SearchObjective(ps, t, make_run, "sm_90", {}, {}, 1, sl, total, {}, runs,
                          compiler=_no_image)
    first = ps.preset_configs()[0]
    m = obj(first)  # the GPU half's preset loop, in short
    assert m.status is Status.OK, m.message
    key = ps.kernel(first).key
    obj.known = {key: m}
    chosen, figures, rows = search(obj, runs[key], trials=2, seconds=None, storage=tmp_path,
                                   passes=2)
    assert loaded.count(key) == 1  # the preset was answered from its measurement
    assert figures["best_preset"] == key and figures["evaluations"] >= 3
    assert rows and all("median_s" in row for row in rows), rows  # every one passed the gates
    assert figures["chosen"] == chosen[1].ad.kernel.key
    if figures["chosen"] != key:
        assert figures["vs_preset"] >= 1.0
