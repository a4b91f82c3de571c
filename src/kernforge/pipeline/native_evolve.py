"""``kernforge evolve`` on native units: the source of a kernel the program compiled with NVRTC
(captured by the interposer), or of an nvcc-built kernel bound with ``--source``, evolved.

Each candidate source is built as the unit's source is (NVRTC with the recorded options, or
nvcc with the bound ``-I``/``-D``), checked to be the recorded kernel (mangled entry, parameter
layout) and verified and timed on every recorded unit of the kernel at the recorded addresses,
in a child process (a crash costs that candidate only). The controller, proposers and store are
those of :mod:`.evolve`; there is no inner tuning (``kernforge tune --source`` tunes the
winner's options afterwards). The best program is compared with the recorded kernel
interleaved and written as ``OUT/<kernel>/<unit>/result.json``, the result every unit's tuning
writes (:mod:`kernforge.replay.native_result`), which ``kernforge export`` turns into a native
deployment spec when the gate accepts the win.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import ConfigError, Status
from ..core.native import NativeBuild, NativeRecording, NativeSource
from ..deploy.gate import NOISE_BAND
from ..evolve.controller import Progress, RunResult, run
from ..evolve.types import EvalResult, Proposer, RecordingResult
from ..replay.native import NativeVariant
from ..replay.native_child import run_isolated, unless_faster
from ..replay.native_result import write_unit_result
from ..replay.native_tune import RESULT, NativeTuning, keep
from ..replay.tuning import RESULT_NAME, finished_result, keep_earlier
from .evolve import Counters, counting_evaluator, proposers_for
from .evolve_config import RunConfig
from .evolve_eval import Evaluate


def native_evaluator(units: Sequence[NativeRecording], src: NativeSource, *, repeat: int = 5,
                     tolerance: str | None = None) -> Evaluate:
    """``evaluate(code)``: ``code`` built in place of ``src`` and verified on every unit (the
    first failure is the result); the fitness is the primary unit's verified median."""
    def evaluate(code: str) -> EvalResult:
        variant = NativeVariant(build=NativeBuild(source=src, code=code))
        results: list[RecordingResult] = []
        for rec in units:
            m = run_isolated(rec.path, [variant], repeat=repeat, warmup=1,
                             tolerance=tolerance)["measurements"][0]
            results.append(RecordingResult(rec.path.name, m.status,
                                           m.median if m.ok else None, None, m.message[:2000]))
            if not m.ok:
                return EvalResult(status=m.status, message=m.message[:4000],
                                  recordings=tuple(results))
        return EvalResult(status=Status.OK, fitness=results[0].median_s,
                          recordings=tuple(results))

    return evaluate


def contract(rec: NativeRecording, src: NativeSource) -> str:
    layout = ", ".join(f"{p.size} bytes at {p.offset}" for p in rec.params)
    return (f"Kernel `{rec.entry}` ({rec.name}), compiled with {src.origin} "
            f"({' '.join(src.options)}), launched with grid {rec.grid}, block {rec.block}, "
            f"{rec.shared_mem} bytes of dynamic shared memory. Keep its name, template "
            f"arguments and parameters exactly (parameters: {layout}). Every output must match "
            "the recorded kernel bitwise; inputs must not be modified.")


def proposers(cfg: RunConfig, rec: NativeRecording, src: NativeSource, counters: Counters,
              seed: int = 0) -> list[Proposer]:
    return proposers_for(cfg, "cuda", str(rec.identity.get("device", "")), src.code, counters,
                         seed)


@dataclass
class NativeEvolveOutcome:
    kernel: str
    run_dir: Path
    result: RunResult
    tuning: NativeTuning | None  # the best program against the recorded kernel

    @property
    def result_path(self) -> Path:
        """Where the comparison with the recorded kernel is written (kernforge export)."""
        unit = self.tuning.unit.name if self.tuning is not None else "<unit>"
        return self.run_dir / unit / RESULT_NAME

    @property
    def won(self) -> bool:
        """The evolved source beat the recorded kernel and the gate kept it."""
        return self.tuning is not None and self.tuning.win


def finished_evolution(run_dir: Path, unit: str) -> Path | None:
    """The result of a kernel's finished evolution in ``run_dir``: its primary unit's
    result.json, or the ``native.json`` an evolution wrote before every unit had one."""
    legacy = run_dir / RESULT
    return finished_result(run_dir / unit) or (legacy if legacy.is_file() else None)


def evolve_native(units: Sequence[NativeRecording], cfg: RunConfig, run_dir: Path, *,
                  source: NativeSource | None = None, resume: bool = False,
                  tolerance: str | None = None, band: float = NOISE_BAND,
                  on_progress: Callable[[Progress, Counters], None] | None = None,
                  remeasure: bool = False) -> NativeEvolveOutcome:
    """Evolve the source of one kernel (``units``: its recorded launches, the first primary).
    A finished run (:func:`finished_evolution`) is not measured again: an error unless
    ``remeasure``, which keeps the earlier result beside the new one
    (``result.earlier-<n>.json``)."""
    rec = units[0]
    done = finished_evolution(run_dir, rec.path.name)
    if done is not None and not remeasure:
        raise ConfigError(f"{run_dir}: the evolution of {rec.name} finished; its "
                          f"{done.name} stands and is not measured again",
                          hint="pass --resume --remeasure to measure its winner again (the earlier "
                               "result is kept beside the new one)")
    src = source or rec.source
    if src is None:
        raise ConfigError(f"{rec.name}: no source to evolve",
                          hint="kernels compiled with NVRTC carry theirs; for an nvcc-built "
                               "program bind the file with --source FILE.cu")
    run_dir.mkdir(parents=True, exist_ok=True)
    db = run_dir / "evolve.db"
    if db.exists() and not (resume or remeasure):
        raise ConfigError(f"{run_dir} already holds an evolution run",
                          hint="pass --resume to continue it, or choose another --out")
    counters = Counters()
    econf = cfg.evolve_config(contract(rec, src))
    evaluate = native_evaluator(units, src, repeat=cfg.tuner.repeat, tolerance=tolerance)
    result = run(econf, proposers(cfg, rec, src, counters, econf.seed),
                 counting_evaluator(evaluate, counters), db, initial_code=src.code,
                 resume=True, isolated=True,  # its candidates run in native_child
                 on_progress=(lambda p: on_progress(p, counters)) if on_progress else None)
    tuning = None
    if result.best is not None and result.best.code != src.code:
        tuning = _final(rec, src, result.best.code, tolerance, band)
        keep_earlier(run_dir / rec.path.name / RESULT_NAME)
        keep_earlier(run_dir / RESULT)  # an earlier run's, in the format before result.json
        write_unit_result(tuning, run_dir, band)
    return NativeEvolveOutcome(rec.name, run_dir, result, tuning)


def _final(rec: NativeRecording, src: NativeSource, code: str, tolerance: str | None,
           band: float) -> NativeTuning:
    """The evolved source against the recorded kernel: verified, then interleaved."""
    variants = [NativeVariant(), NativeVariant(build=NativeBuild(source=src, code=code))]
    out = run_isolated(rec.path, variants, repeat=5, warmup=1, compare_pair=(0, 1),
                       tolerance=tolerance)
    t = NativeTuning(rec.path, rec, variants, out["measurements"], sampler="evolve")
    cmp = out.get("compare")
    if not all(m.ok for m in t.results) or not cmp:
        t.refused = "the evolved source did not verify again: " + "; ".join(
            f"{m.status.value} {m.message[:200]}" for m in t.results if not m.ok)
        return t
    t.best = 1
    keep(t, cmp, unless_faster, band)  # judged as every comparison, the GPU's busy check too
    t.notes.append("source evolved (kernforge evolve)")
    return t
