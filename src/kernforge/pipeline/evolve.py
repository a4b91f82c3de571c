"""``kernforge evolve``: evolve the source of recorded kernels, then prove the winner.

For each selected kernel (all its recordings): the controller (:mod:`kernforge.evolve`) runs
proposers against the evaluator of :mod:`.evolve_eval`, everything recorded in
``<out>/<kernel>/evolve.db`` (resumable after ``kill -9``). The best program's best
configuration is then validated on the primary recording (every integrity gate when
:mod:`kernforge.replay.validate` is present, else the interleaved comparison against the
recorded variant), exported as a tuning-style ``result.json`` (``kernforge export`` picks it
up) and reported (:mod:`.evolve_report`).
"""

from __future__ import annotations

import fnmatch
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import ConfigError, Recording, Status
from ..evolve.controller import Progress, RunResult, run
from ..evolve.prompts import PromptStatic
from ..evolve.proposers import make_proposer
from ..evolve.store import Store
from ..evolve.types import EvalResult, Proposal, ProposalRequest, Proposer
from ..replay.isolate import Isolation
from ..replay.tuning import finished_result, keep_earlier
from .evolve_config import RunConfig
from .evolve_eval import Evaluate, EvolveTarget, make_evolve_evaluator
from .evolve_final import Final, finalize
from .evolve_report import Report, write_report

PROGRESS_EVERY = 1


@dataclass
class Counters:
    """Live counts for the progress display (updated from worker threads)."""

    proposals: int = 0
    proposal_errors: int = 0
    evaluations: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class CountingProposer(Proposer):
    def __init__(self, inner: Proposer, counters: Counters) -> None:
        self.inner, self.counters = inner, counters

    def attach_load(self, load: Any) -> None:
        self.inner.attach_load(load)

    def propose(self, request: ProposalRequest) -> Proposal:
        p = self.inner.propose(request)
        with self.counters.lock:
            self.counters.proposals += 1
            self.counters.proposal_errors += p.error is not None
        return p


@dataclass
class EvolveOutcome:
    kernel: str
    run_dir: Path
    target: EvolveTarget
    result: RunResult
    final: Final
    report: Report

    @property
    def won(self) -> bool:
        """The run found a best program (its verdict: :attr:`final`)."""
        return self.final.best is not None


def group_by_kernel(recordings: Sequence[Recording], pattern: str | None = None
                    ) -> dict[str, list[Recording]]:
    """Kernel entry -> its recordings (sorted by name); ``pattern``: fnmatch on the entry."""
    groups: dict[str, list[Recording]] = {}
    for r in sorted(recordings, key=lambda r: r.name):
        if pattern is None or fnmatch.fnmatch(r.source.entry, pattern):
            groups.setdefault(r.source.entry, []).append(r)
    if not recordings:
        raise ConfigError("there are no recorded units to evolve",
                          hint="record the application first (kernforge record -o DIR -- "
                               "COMMAND) and give DIR or one of its units")
    if not groups:
        names = sorted({r.source.entry for r in recordings})
        raise ConfigError(f"no recorded kernel matches {pattern!r}",
                          hint=f"recorded kernels: {', '.join(names) or 'none'}")
    return groups


def default_contract(rec: Recording) -> str:
    params = ", ".join(f"{a.dtype}{'[]' if a.is_array else ''} {a.name}" for a in rec.args)
    return (f"Entry point `{rec.source.entry}({params})` on the {rec.backend} backend, "
            f"launched as recorded ({rec.launch.to_json()}). Every output buffer must match "
            "the original kernel bitwise unless a tolerance is declared; inputs must not be "
            "modified. Tunable #defines may be used; the inner tuner varies compiler options "
            "and launch parameters.")


def build_proposers(cfg: RunConfig, target: EvolveTarget, counters: Counters,
                    seed: int = 0) -> list[Proposer]:
    rec = target.primary
    language = "cuda" if rec.backend == "cuda" else "c"
    return proposers_for(cfg, language, str(rec.identity.get("device", "")),
                         target.original_code, counters, seed)


def proposers_for(cfg: RunConfig, language: str, device: str, reference: str,
                  counters: Counters, seed: int = 0) -> list[Proposer]:
    """The configured proposers, counted, with the prompt's static part for ``reference``."""
    static = PromptStatic(task=cfg.prompt.task or PromptStatic.task, language=language,
                          hardware=cfg.prompt.hardware or device, reference=reference)
    out: list[Proposer] = []
    for spec in cfg.proposers:
        s = dict(spec.settings)
        if spec.kind == "llm":
            p = make_proposer("llm", config=spec.llm_config(), static=static,
                              retries=int(s.get("retries", 1)), seed=seed,
                              runtime_aware=bool(s.get("runtime_aware", False)))
        elif spec.kind == "command":
            p = make_proposer("command", command=s["command"],
                              timeout_s=float(s.get("timeout_s", 600.0)), static=static)
        else:
            p = make_proposer(spec.kind, language=language, **s)
        out.append(CountingProposer(p, counters))
    return out


def counting_evaluator(evaluate: Evaluate, counters: Counters) -> Evaluate:
    def run_one(code: str) -> EvalResult:
        r = evaluate(code)
        with counters.lock:
            counters.evaluations += 1
        return r

    return run_one


def evolve_kernel(recordings: Sequence[Recording], cfg: RunConfig, run_dir: Path, *,
                  resume: bool = False, evaluate: Evaluate | None = None,
                  on_progress: Callable[[Progress, Counters], None] | None = None,
                  validate_winner: bool = True,
                  isolate: Isolation | bool = True, remeasure: bool = False) -> EvolveOutcome:
    """Evolve one kernel into ``run_dir`` (its store, result.json and report). ``isolate``:
    True runs every candidate in supervised worker processes (one per evaluation slot; a
    crash or a hang costs that candidate only), an :class:`Isolation` uses that pool, False
    runs candidates in this process (for debugging). A finished run (its result.json
    written) is not measured again: an error unless ``remeasure``, which re-measures its
    winner and keeps the earlier result as ``result.earlier-<n>.json``."""
    done = finished_result(run_dir / recordings[0].name) if recordings else None
    if done is not None and not remeasure:
        raise ConfigError(f"{run_dir}: the evolution of {recordings[0].source.entry} "
                          f"finished; its {done.name} stands and is not measured again",
                          hint="pass --resume --remeasure to measure its winner again (the earlier "
                               "result is kept beside the new one)")
    if isolate is True and evaluate is not None and not validate_winner:
        isolate = False  # nothing of the candidates runs here: no workers to start
    if isolate is True:
        slots = cfg.evolve_config(default_contract(recordings[0])).eval_slots \
            if recordings else 1
        with Isolation(workers=slots) as pool:
            return evolve_kernel(recordings, cfg, run_dir, resume=resume, evaluate=evaluate,
                                 on_progress=on_progress, validate_winner=validate_winner,
                                 isolate=pool, remeasure=remeasure)
    target = EvolveTarget.of(recordings, preset=cfg.tuner.preset)
    if isinstance(isolate, Isolation):
        target = replace(target, isolate=isolate)
    run_dir.mkdir(parents=True, exist_ok=True)
    db = run_dir / "evolve.db"
    if db.exists() and not (resume or remeasure):
        raise ConfigError(f"{run_dir} already holds an evolution run",
                          hint="pass --resume to continue it, or choose another --out")
    counters = Counters()
    econf = cfg.evolve_config(default_contract(target.primary))
    proposers = build_proposers(cfg, target, counters, econf.seed)
    inner = evaluate or make_evolve_evaluator(target, inner_trials=cfg.tuner.trials,
                                              repeat=cfg.tuner.repeat, seed=cfg.tuner.seed)
    _write_json(run_dir / "config.json", {"source": cfg.source, "kernel": target.primary.source.entry,
                                          "recordings": [r.name for r in target.recordings]})
    result = run(econf, proposers, counting_evaluator(inner, counters), db,
                 initial_code=target.original_code, resume=True,
                 on_progress=(lambda p: on_progress(p, counters)) if on_progress else None)
    if done is not None:
        keep_earlier(done)
    with Store(db) as store:
        final = finalize(target, result, store, run_dir, validate_winner=validate_winner,
                         repeat=cfg.tuner.repeat)
        report = write_report(store, run_dir, target.primary.source.entry, final)
    return EvolveOutcome(target.primary.source.entry, run_dir, target, result, final, report)


def replay_time(recs: Sequence[Recording]) -> float:
    """The replayed median of the first recording (0.0 when it does not replay)."""
    from ..replay import replay

    m = replay(recs[0], repeat=3, warmup=1)
    return m.median if m.status is Status.OK and m.samples else 0.0


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
