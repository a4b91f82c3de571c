"""The forge's search over one lifted program's operators, through :func:`kernforge.tune.tune`.

For one (program, grid, precision) (:class:`~.program_space.ProgramSpace`),
:class:`ProgramObjective` is tune's ``evaluate(config) -> Measurement``: a combination its
design refuses is ``INVALID_CONFIG`` (the space's constraint already keeps the tuner from
asking for one, so this is only a refusal the binding decides); the configuration's operator
is generated, built by the *backend* (``COMPILE_FAILED`` with the compiler's log), launched on
fresh random inputs and judged against the program's float64 oracle, then, where the caller
has a recorded launch, on its inputs against its outputs (:mod:`.program_check`:
``WRONG_RESULT`` with the first failing check), and timed. A backend:

- :class:`HostEmulator` (``cpu-emulator``): the generated kernel wrapped in a ``__global__``
  entry (:func:`~kernforge.stencil.program.codegen.standalone`) and run on the host emulator
  (:mod:`kernforge.stencil.emulate`), the emulator's wall-clock time: real kernels and the
  real oracle, a time that says nothing about GPU speed (CI exercises the path);
- on the GPU, lifted operators are searched where applications measure them, inside the
  replay's child process (:mod:`kernforge.apps.program_gpu`: the operator in its adapter, the
  same gates as the presets), with its own evaluator passed as ``evaluate``.

:func:`tune_program` runs the rounds of :class:`~.program_space.ProgramRounds` (every
design's presets first) or any other sampler under tune's :class:`~kernforge.tune.Budget`
and study: with ``storage``, a study per (program, grid, precision) that a later call resumes,
a kill -9 included (the trial that was running is quarantined as the forge's cells' are).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..core import CompileError, Measurement, Status
from ..stencil import emulate as em
from ..stencil.program import StencilProgram
from ..stencil.program.binding import Binding
from ..stencil.program.codegen import Kernel, Refused, standalone
from ..tune import Budget, TrialRecord, TuneResult, tune
from .program_check import Recorded, fresh, judge, oracle_want, verdict, worst
from .program_space import ProgramRounds, ProgramSpace

FRESH_SEEDS = (21, 22)
ENTRY = "kf_standalone"


class Backend(Protocol):
    """Where candidates are built and run: ``build`` raises
    :class:`~kernforge.core.CompileError` for a kernel that does not compile; ``run`` launches
    the built kernel on ``arrays`` (by argument name) in place; ``time`` returns the seconds
    of one launch."""

    name: str

    def build(self, k: Kernel) -> Any: ...

    def run(self, built: Any, k: Kernel, arrays: Mapping[str, np.ndarray]) -> None: ...

    def time(self, built: Any, k: Kernel, arrays: Mapping[str, np.ndarray]) -> float: ...


class HostEmulator:
    """The host emulator as a backend (module docstring)."""

    name = "cpu-emulator"

    def build(self, k: Kernel) -> Any:
        return em.compile_source(self.source(k), [ENTRY])

    def source(self, k: Kernel) -> str:
        """The C++ the emulator compiles for ``k`` (a faulty test backend overrides it)."""
        return standalone(k, ENTRY)

    def run(self, built: Any, k: Kernel, arrays: Mapping[str, np.ndarray]) -> None:
        built.launch(ENTRY, [arrays[a.name] for a in k.args], k.grid, k.block, k.shared_bytes)

    def time(self, built: Any, k: Kernel, arrays: Mapping[str, np.ndarray]) -> float:
        t0 = time.perf_counter()
        self.run(built, k, arrays)
        return time.perf_counter() - t0


class ProgramObjective:
    """tune's evaluator for one lifted program on one backend (module docstring).
    ``params``: the scalar parameters' values by index; ``tables``: each coefficient table's
    values; ``recorded``: a recorded launch the candidates must reproduce; ``repeat``: timed
    launches per candidate (their median is the trial's)."""

    def __init__(self, ps: ProgramSpace, backend: Backend, *,
                 params: Mapping[int, float] | None = None,
                 tables: Mapping[str, Sequence[float]] | None = None,
                 recorded: Recorded | None = None, seeds: Sequence[int] = FRESH_SEEDS,
                 repeat: int = 5) -> None:
        self.ps, self.backend, self.recorded = ps, backend, recorded
        self.params, self.tables = dict(params or {}), dict(tables or {})
        self.seeds, self.repeat = tuple(seeds), repeat
        self._cases: dict[int, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}

    def case(self, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Fresh arguments of seed ``seed`` and the oracle's outputs on them (kept)."""
        if seed not in self._cases:
            p, b = self.ps.p, self.ps.b
            before = fresh(p, b, self.params, self.tables, seed)
            self._cases[seed] = (before, oracle_want(p, b, self.params, before))
        return self._cases[seed]

    def _check(self, built: Any, k: Kernel, before: Mapping[str, np.ndarray],
               want: Mapping[str, np.ndarray], what: str, seed: int | None
               ) -> tuple[str | None, float, dict[str, np.ndarray]]:
        args = {n: np.array(a, copy=True) for n, a in before.items()}
        self.backend.run(built, k, args)
        res = judge(self.ps.p, self.ps.b, self.params, before, args, want, seed=seed)
        return verdict(res, what), worst(res), args

    def __call__(self, config: dict[str, Any]) -> Measurement:
        if (why := self.ps.refusal(config)) is not None:
            return Measurement(Status.INVALID_CONFIG, why)
        try:
            k = self.ps.kernel(config)
        except Refused as exc:
            return Measurement(Status.INVALID_CONFIG, f"{config['design']}: {exc.message}")
        try:
            built = self.backend.build(k)
        except CompileError as exc:
            log = exc.log or ""
            tail = "" if log.strip() and log.strip() in exc.message else f" {log[-400:]}"
            return Measurement(Status.COMPILE_FAILED, f"{k.key}: {exc.message}{tail}")
        errors: list[float] = []
        args: dict[str, np.ndarray] = {}
        for seed in self.seeds:
            before, want = self.case(seed)
            bad, err, args = self._check(built, k, before, want,
                                         f"fresh input (seed {seed}) against the oracle", seed)
            if bad:
                return Measurement(Status.WRONG_RESULT, f"{k.key}: {bad}")
            errors.append(err)
        if self.recorded is not None:
            bad, err, _ = self._check(built, k, self.recorded.before, self.recorded.after,
                                      "the recorded outputs", None)
            if bad:
                return Measurement(Status.WRONG_RESULT, f"{k.key}: {bad}")
            errors.append(err)
        times = tuple(self.backend.time(built, k, args) for _ in range(self.repeat))
        return Measurement(Status.OK, f"{k.key} error {max(errors, default=0.0):.3g} "
                                      f"median {statistics.median(times):.3g} s", times)


def tune_program(p: StencilProgram | ProgramSpace, b: Binding | None = None, *,
                 budget: Budget, backend: Backend | None = None,
                 evaluate: Callable[[dict[str, Any]], Measurement] | None = None,
                 sampler: str = "rounds", storage: Path | str | None = None,
                 study_name: str | None = None, seed: int | None = 0,
                 params: Mapping[int, float] | None = None,
                 tables: Mapping[str, Sequence[float]] | None = None,
                 recorded: Recorded | None = None, repeat: int = 5,
                 on_trial: Callable[[TrialRecord], None] | None = None) -> TuneResult:
    """Search the operators of ``p`` bound by ``b`` (or a :class:`ProgramSpace`) with
    ``sampler`` under ``budget``: on ``backend`` (default the host emulator) with
    :class:`ProgramObjective`, or with ``evaluate`` in its place; the study (in ``storage``,
    named per program, grid and precision unless ``study_name``) resumes."""
    if isinstance(p, ProgramSpace):
        ps = p
    else:
        if b is None:
            raise TypeError("tune_program(program, binding, ...): the binding is missing")
        ps = ProgramSpace(p, b)
    objective = evaluate or ProgramObjective(ps, backend or HostEmulator(), params=params,
                                             tables=tables, recorded=recorded,
                                             repeat=repeat)
    options = {"plan": ProgramRounds(ps, seed)} if sampler == "rounds" else None
    return tune(ps.space, objective, sampler=sampler, budget=budget, storage=storage,
                study_name=study_name or ps.study_name, seed=seed, on_trial=on_trial,
                sampler_options=options)
