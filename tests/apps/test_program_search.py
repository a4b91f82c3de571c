"""The forge's search over a lifted program's operators on the host emulator, for kernels of
lift_kernels.py lifted from their source: each candidate judged against the float64 oracle
on fresh inputs and against the launch of the original kernel (the emulated original as the
recorded launch); a recorded launch the program does not compute refuses every candidate."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from kernforge.core import Status
from kernforge.forge.program_check import SCALAR, Recorded
from kernforge.forge.program_tune import tune_program
from kernforge.stencil import emulate as em
from kernforge.stencil.program import StencilProgram
from kernforge.stencil.program.binding import Binding
from kernforge.tune import Budget

from .lift_kernels import CASES, Case, scalars
from .program_ops_helpers import contents, lifted, run_original

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


@pytest.mark.parametrize("entry", ["jacobi_res", "coef3d", "table1d"])
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
