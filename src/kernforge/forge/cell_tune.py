"""Tune one matrix cell through :func:`kernforge.tune.tune`: its objective and its run.

:class:`CellObjective` is tune's ``evaluate(config) -> Measurement`` for a
:class:`~.cell_rounds.CellSpace`: the configuration's operator is built, compiled, run on
fresh random inputs and checked against the float64 oracle (a wrong one is
``WRONG_RESULT``), then timed. Where it runs is a *backend*:

- ``cpu-emulator``: the host emulator (:mod:`kernforge.stencil.emulate`, through the forge's
  emulated session): real kernels and the real oracle, the emulator's wall-clock time, which
  says nothing about GPU speed (CI exercises the path);
- ``cuda``: the GPU through the cuda backend (the forge's GPU session: NVRTC as dispatch
  builds the operator, CUDA events, the harness protocol; the screening median of 5 runs).

:func:`tune_cell` runs a sampler on a cell under tune's :class:`~kernforge.tune.Budget` and
study (resume included); ``sampler="rounds"`` gets the forge's rounds
(:class:`~.cell_rounds.ForgeRounds`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core import ConfigError, Measurement, Status
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from ..tune import Budget, TrialRecord, TuneResult, tune
from .cell_rounds import CellSpace, ForgeRounds
from .compile import Built
from .sessions import emulated_compiler, emulated_sessions, gpu_sessions

BACKENDS = ("cpu-emulator", "cuda")
Compiler = Callable[[Sequence[Operator]], list[Built]]


def nvrtc_in_session(ops: Sequence[Operator]) -> list[Built]:
    """Operators the GPU session builds itself when it loads them (NVRTC, as dispatch)."""
    return [Built(op, None, "", 0.0, deployed=True) for op in ops]


class CellObjective:
    """tune's evaluator for one cell (module docstring); ``session`` is an open forge
    session of the cell (``check`` on fresh inputs, ``screen``), ``compiler`` its builds."""

    def __init__(self, cell_space: CellSpace, session: Any, compiler: Compiler) -> None:
        self.cs, self.session, self.compiler = cell_space, session, compiler

    def __call__(self, config: dict[str, Any]) -> Measurement:
        op = self.cs.operator(config)
        if op is None:
            return Measurement(Status.INVALID_CONFIG, f"{config['design']} refuses it")
        built = self.compiler([op])[0]
        if not built.ok:
            return Measurement(Status.COMPILE_FAILED, f"{op.key}: {built.log[-500:]}")
        ok, error, detail = self.session.check(built)
        if not ok:
            return Measurement(Status.WRONG_RESULT,
                               f"{op.key}: oracle error {error:.3g} ({detail[:300]})")
        return Measurement(Status.OK, f"{op.key} error {error:.3g}",
                           (float(self.session.screen(built)),))


@contextlib.contextmanager
def cell_objective(cell_space: CellSpace, backend: str, *,
                   device: Any = None) -> Iterator[CellObjective]:
    """The cell's objective on ``backend`` (:data:`BACKENDS`), its session open while in use;
    ``device``: a :class:`~.measure.GpuDevice` to share between cells (``cuda``)."""
    cell = cell_space.cell
    if backend == "cpu-emulator":
        with emulated_sessions(cell) as session:
            yield CellObjective(cell_space, session, emulated_compiler)
    elif backend == "cuda":
        if device is None:
            from .measure import GpuDevice

            device = GpuDevice()
        with gpu_sessions(device, cell) as session:
            yield CellObjective(cell_space, session, nvrtc_in_session)
    else:
        raise ConfigError(f"unknown backend {backend!r} for a cell's objective",
                          hint=f"one of {', '.join(BACKENDS)}")


def tune_cell(cell: Cell | CellSpace, *, sampler: str = "rounds", budget: Budget,
              backend: str = "cpu-emulator", storage: Path | str | None = None,
              study_name: str | None = None, seed: int | None = None, device: Any = None,
              evaluate: Callable[[dict[str, Any]], Measurement] | None = None,
              on_trial: Callable[[TrialRecord], None] | None = None) -> TuneResult:
    """Tune ``cell`` with ``sampler`` under ``budget`` on ``backend`` (or with ``evaluate``
    in place of the backend's objective); the study in ``storage`` resumes."""
    cs = cell if isinstance(cell, CellSpace) else CellSpace(cell)
    options = {"plan": ForgeRounds(cs)} if sampler == "rounds" else None
    name = study_name or cs.cell.id
    if evaluate is not None:
        return tune(cs.space, evaluate, sampler=sampler, budget=budget, storage=storage,
                    study_name=name, seed=seed, on_trial=on_trial, sampler_options=options)
    with cell_objective(cs, backend, device=device) as objective:
        return tune(cs.space, objective, sampler=sampler, budget=budget, storage=storage,
                    study_name=name, seed=seed, on_trial=on_trial, sampler_options=options)
