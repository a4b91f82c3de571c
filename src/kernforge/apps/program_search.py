"""The forge's search over a lifted program's knobs inside the GPU half of lifted operators
(:mod:`.program_gpu`), after its presets.

The space and the rounds are the forge's (:class:`kernforge.forge.program_space.ProgramSpace`,
:func:`kernforge.forge.program_tune.tune_program`: every design's presets, then one knob at a
time from the incumbent, pairs, TPE), under one :class:`~kernforge.tune.Budget` and a study
per (program, grid, precision) in the unit's output directory, which a later run resumes.
Each candidate passes the gates the presets pass: its adapter compiled, the recorded outputs
and the original kernel on fresh inputs (:func:`.program_checks.validate`), then screened
(the median of ``repeat`` timed launches). A preset the GPU half already measured is answered
from its measurement. The search's best replaces the best preset only when it is at least as
fast in the interleaved protocol (``vs_preset`` >= 1: median of per-pass ratios, preset over
search's best).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..core import ConfigError, KernforgeError, Measurement, Status
from ..forge.program_space import ProgramSpace
from ..forge.program_tune import tune_program
from ..harness.compare import interleave
from ..stencil.program.codegen import Kernel
from ..tune import Budget
from .operator_gpu import built
from .program_adapter import program_adapter
from .program_checks import validate

Best = tuple[float, Any, bytes, list[str]]  # median, LiftedRun, image, checks done


Compiler = Callable[[list[Kernel], Callable[[Kernel], Any], str], list[tuple[Kernel, Any, Any]]]


class SearchObjective:
    """tune's evaluator on the GPU (module docstring); ``t``: the replay target,
    ``make_run(adapter, image)``: the adapter loaded in the replay's context (``run``,
    ``time``); ``runs``: each operator that passed (by key) as :data:`Best`, the presets'
    included; ``known``: measurements already made; ``compiler``: the adapters' images
    (:func:`.operator_gpu.built`)."""

    def __init__(self, ps: ProgramSpace, t: Any, make_run: Callable[[Any, bytes], Any],
                 arch: str, params: Mapping[int, float], cache: dict[int, Any], repeat: int,
                 layout: Any, size: int, known: Mapping[str, Measurement],
                 runs: dict[str, Best], compiler: Compiler = built) -> None:
        self.ps, self.t, self.make_run, self.arch = ps, t, make_run, arch
        self.params, self.cache, self.repeat = params, cache, repeat
        self.layout, self.size, self.known, self.runs = layout, size, known, runs
        self.compiler = compiler

    def __call__(self, config: dict[str, Any]) -> Measurement:
        if (why := self.ps.refusal(config)) is not None:
            return Measurement(Status.INVALID_CONFIG, why)
        try:
            k = self.ps.kernel(config)
        except ConfigError as exc:
            return Measurement(Status.INVALID_CONFIG, exc.message)
        if k.key in self.known and (k.key in self.runs or not self.known[k.key].ok):
            return self.known[k.key]
        p, b = self.ps.p, self.ps.b
        (_, ad, image), = self.compiler([k], lambda k: program_adapter(
            k, p, b, self.layout, self.size), self.arch)
        try:
            if isinstance(ad, KernforgeError):
                raise ad
            if isinstance(image, KernforgeError):
                raise image
            run = self.make_run(ad, image)
            bad, done = validate(self.t, p, b, run.run, self.params, self.cache)
        except KernforgeError as exc:
            return Measurement(exc.status or Status.RUNTIME_FAILED, f"{k.key}: {exc.message}")
        if bad:
            return Measurement(Status.WRONG_RESULT, f"{k.key}: {bad}")
        for _ in range(2):
            run.time()
        times = tuple(run.time() for _ in range(self.repeat))
        self.runs[k.key] = (statistics.median(times), run, image, done)
        return Measurement(Status.OK, k.key, times)


def search(obj: SearchObjective, preset: Best, *, trials: int, seconds: float | None,
           storage: Path, passes: int) -> tuple[Best, dict[str, Any], list[dict[str, Any]]]:
    """The best operator after a search of ``trials`` candidates past the presets (the best
    preset ``preset`` unless the search's best is at least as fast interleaved), the search's
    figures, and one row per candidate it evaluated."""
    ps = obj.ps
    budget = Budget(trials=len(ps.preset_configs()) + trials, seconds=seconds)
    res = tune_program(ps, budget=budget, evaluate=obj, storage=storage)
    rows = [{"operator": ps.kernel(t.config).key, "search": True,
             **({"median_s": t.median} if t.status is Status.OK else
                {"refused": f"{t.status.value}: {t.measurement.message[:300]}"})}
            for t in res.trials if t.evaluated and ps.refusal(t.config) is None]
    figures: dict[str, Any] = {"evaluations": res.evaluations, "stop": res.stop_reason,
                               "study": res.study_name, "storage": str(storage),
                               "best_preset": preset[1].ad.kernel.key}
    if res.best_trial is None:
        return preset, {**figures, "chosen": figures["best_preset"]}, rows
    key = ps.kernel(res.best_trial.config).key
    if key not in obj.runs:  # found by an earlier run of the study: built again here
        obj(dict(res.best_trial.config))
    figures["best"] = key
    if key not in obj.runs or key == figures["best_preset"]:
        return preset, {**figures, "chosen": figures["best_preset"]}, rows
    found = obj.runs[key]
    ab = interleave(preset[1].time, found[1].time, passes=passes, per_pass=3)
    figures.update(vs_preset=ab.speedup, vs_preset_ci=[ab.ci_low, ab.ci_high])
    chosen = found if ab.speedup >= 1.0 else preset
    return chosen, {**figures, "chosen": chosen[1].ad.kernel.key}, rows
