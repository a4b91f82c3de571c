"""``kernforge demo``: the main job end to end on an example application.

On a machine with an NVIDIA GPU (the cuda backend available) the CuPy example
``examples/heat3d_cupy.py`` is used, otherwise the CPU example ``examples/heat3d_cpu.py``.
The demo records the application, replays and verifies every recorded kernel, tunes the
hottest one (TPE over compile options and launch parameters, every trial verified; the winner
re-measured interleaved against the recorded configuration), evolves its source (offline
rewrites, or an LLM when ``KERNFORGE_LLM_BASE_URL`` is set; every candidate verified on every
recording and tuned; the winner validated), measures what a replaced launch costs the host on
the app's backend and keeps the winners worth it (kernforge.deploy.worth), runs the application
with each of them alone and keeps those it is faster with (interleaved rounds, outputs
compared), exports them as a
deployment spec, runs the application again with it and measures the end-to-end speedup
(interleaved rounds, outputs compared; when no winner is worth deploying, nothing is deployed
and the application is not run again), and shows that a variant which changes the arithmetic
is caught. On the CUDA example it then tries temporal fusion of the time loop
(:mod:`.demo_fuse`: several steps per launch, deployed through the driver interposer when
verified and significantly faster end to end than the plain program and the one-launch
deployment).
Everything lands in a run directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..core import BackendUnavailableError, ConfigError, Measurement, Recording
from ..core.jsonio import write_json_atomic
from ..deploy import OverheadTable
from ..deploy.gate import idle_of, refusal
from ..evolve.controller import Progress
from ..record import find_recordings, load_recording
from ..replay import replay
from ..replay.isolate import Isolation
from ..replay.tuning import TuningOutcome, tune_recording
from ..tune import Budget
from .demo_checks import check_problem, fresh_run_dir
from .demo_deploy import (
    ROUNDS,
    Confirmed,
    EndToEnd,
    NotDeployed,
    Winner,
    confirm_each,
    deploy_overhead,
    end_to_end,
    export_spec,
    worth,
)
from .demo_fuse import Fusion, fusion_stage, sequence_command
from .evolve import Counters, EvolveOutcome, evolve_kernel
from .evolve_config import RunConfig, config_from_dict, load_config
from .run_app import record_application

LLM_URL_ENV, LLM_MODEL_ENV = "KERNFORGE_LLM_BASE_URL", "KERNFORGE_LLM_MODEL"

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@dataclass(frozen=True)
class DemoApp:
    backend: str
    script: str
    default_n: int
    e2e_steps: int | None  # time steps of the end-to-end runs (None: the recorded run's)
    inner_trials: int  # tuning trials per evolved candidate
    wrong_kernel: str  # the kernel a variant that changes the arithmetic is made of
    wrong_label: str
    wrong: dict[str, Any]
    fuse_kernel: str | None = None  # the time loop's stencil the fusion stage fuses


APPS = {
    # on the GPU a 20-step run is ~5 ms, of which the deployment's one-time setup would be a
    # visible share, and the per-round ratios of 200-step runs (~27 ms) spread 0.93-1.14 on the
    # H200 where those of 500-step runs (~64 ms) spread 0.85-0.90: the end-to-end runs are
    # production-length instead
    # 10 trials per candidate: a zmarch candidate's z points per thread and block matter
    # (H200: 47-70 us for one rewrite of heat_stencil); a GPU trial takes well under a second
    "cuda": DemoApp("cuda", "heat3d_cupy.py", 256, 500, 10, "heat_stencil",
                    "fmad=false (no fused multiply-add)", {"options": {"fmad": False}},
                    fuse_kernel="heat_stencil"),
    "cpu": DemoApp("cpu", "heat3d_cpu.py", 128, None, 4, "heat_step",
                   "CENTER_WEIGHT=5.0 (a wrong stencil weight)",
                   {"defines": {"CENTER_WEIGHT": "5.0"}}),
}


@dataclass
class DemoResult:
    run_dir: Path
    app: DemoApp
    app_status: int
    baseline: list[tuple[Recording, Measurement]] = field(default_factory=list)
    tuned: TuningOutcome | None = None
    wrong: Measurement | None = None
    wrong_unit: str = ""
    evolved: list[EvolveOutcome] = field(default_factory=list)
    winners: list[Winner] = field(default_factory=list)
    overhead: OverheadTable | None = None  # host time of a replaced launch, measured here
    overhead_error: str = ""  # why it could not be measured (then every winner is deployed)
    not_deployed: list[NotDeployed] = field(default_factory=list)
    e2e: EndToEnd | None = None
    e2e_steps: int | None = None  # time steps of the application in the end-to-end runs
    confirmed: list[Confirmed] = field(default_factory=list)  # each winner alone in the app
    confirming: int = 0  # winners that went into the confirmation runs
    fusion: Fusion | None = None  # the fusion stage (CUDA example; None: not tried)

    @property
    def overhead_s(self) -> float | None:
        return None if self.overhead is None else self.overhead.per_launch_s

    @property
    def end_to_end_status(self) -> str:
        if self.e2e is not None:
            return "measured"
        return "nothing deployed" if self.winners else "no verified speedup above 1"


def pick_app(backend: str | None) -> DemoApp:
    """The CUDA example when a GPU is usable (or asked for), else the CPU one."""
    if backend is not None:
        if backend not in APPS:
            raise ConfigError(f"no demo for backend {backend!r}",
                              hint=f"choose one of: {', '.join(APPS)}")
        return APPS[backend]
    try:
        get_backend("cuda")
        return APPS["cuda"]
    except BackendUnavailableError:
        return APPS["cpu"]


def demo_evolve_config(iterations: int, inner_trials: int, repeat: int,
                       llm_url: str | None = None, llm_model: str | None = None,
                       config: Path | None = None) -> RunConfig:
    """The demo's evolution: offline rewrites, plus an LLM endpoint when one is given."""
    if config is not None:
        return load_config(config)
    proposers: list[dict[str, Any]] = [{"kind": "offline", "weight": 1}]
    if llm_url:
        proposers.append({"kind": "llm", "weight": 3, "base_url": llm_url,
                          "models": [{"name": llm_model or "default", "timeout_s": 120}]})
    return config_from_dict({
        "evolve": {"seed": 1, "max_iterations": iterations, "eval_slots": 1, "llm_slots": 2,
                   "mapelites": {"islands": 2, "migration_interval": 6}},
        "proposers": proposers,
        "tuner": {"trials": inner_trials, "repeat": repeat}}, "demo")


def pick_winners(result: DemoResult) -> list[Winner]:
    """Per kernel, the faster result of tuning and evolution that counts as a win: verified,
    and its speed verdict "faster" (:func:`kernforge.deploy.gate.refusal`, or the
    validation's own verdict when it has one); the others go to ``result.not_deployed`` with
    the verdict's reason ("not faster: ...", "inconclusive: ...")."""
    best: dict[str, Winner] = {}
    cands: list[tuple[Winner, str | None]] = []
    t = result.tuned
    if t is not None and t.ab is not None and t.validation is not None:
        idle = t.validation.idle
        speed = getattr(t.validation, "speed", None)
        # "inconclusive": every correctness gate passed, only the speed was undecided
        verified = t.validation.accepted or t.validation.verdict == "inconclusive"
        why = refusal(verified=verified, idle=idle.idle if idle else None,
                      utilisation=idle.utilisation if idle else None, speedup=t.speedup,
                      ci=(t.ab.ci_low, t.ab.ci_high))
        if why is None and speed is not None and not speed.faster:
            why = speed.reason  # the noise check the figures alone do not show
        cands.append((Winner("tune", t.recording, t.best_variant, t.ab), why))
    for ev in result.evolved:
        f = ev.final
        ab = f.ab or (f.measured if f.status == "INCONCLUSIVE" else None)
        if ab is not None and f.variant is not None:
            cands.append((Winner("evolve", ev.target.primary, f.variant, ab), _evolve_why(f)))
    if t is not None and t.validation is not None and t.validation.verdict == "rejected" \
            and cands:  # the gate that rejected it
        w, why = cands[0]
        cands[0] = (w, f"{why}: {t.validation.reason} {t.validation.message}".strip())
    for w, why in cands:
        k = w.recording.source.entry
        if why is not None:
            result.not_deployed.append(NotDeployed(w, f"{k} ({w.source}): {why}"))
        elif k not in best or w.ab.speedup > best[k].ab.speedup:
            best[k] = w
    return list(best.values())


def _evolve_why(f: Any) -> str | None:
    """Why an evolution's winner is no win (None: it is): its speed verdict's reason."""
    if f.speed is not None and f.status in ("OK", "INCONCLUSIVE"):
        return None if f.faster else str(f.speed.reason)
    idle_flag, util = idle_of(f.validation)
    ab = f.ab or f.measured
    return refusal(verified=f.status == "OK", idle=idle_flag, utilisation=util,
                   speedup=ab.speedup, ci=(ab.ci_low, ab.ci_high))


def run_demo(out: Path | None = None, *args: Any, isolate: bool = True, **kw: Any
             ) -> DemoResult:
    """The main job (see :func:`_run_demo` for the arguments) in a fresh run directory
    (:func:`fresh_run_dir`). ``isolate``: candidate code (tuning trials, the wrong variant,
    every evolved candidate) runs in supervised worker processes, so a crashing or hanging
    candidate costs only itself; False runs it here."""
    check_problem(kw.get("n"), kw.get("steps", 20))
    out = fresh_run_dir(out)
    if not isolate:
        return _run_demo(out, *args, iso=None, **kw)
    with Isolation() as iso:
        return _run_demo(out, *args, iso=iso, **kw)


def _run_demo(out: Path | None = None, *, backend: str | None = None, n: int | None = None,
             steps: int = 20, trials: int = 12, repeat: int = 7, iterations: int = 12,
             inner_trials: int | None = None, rounds: int = ROUNDS,
             e2e_steps: int | None = None, confirm_rounds: int = ROUNDS,
             fuse_steps: tuple[int, ...] | None = None, diag_every: int | None = None,
             llm_url: str | None = None,
             llm_model: str | None = None, evolve_config: Path | None = None,
             progress: Callable[[str], None] = lambda s: None,
             iso: Isolation | None = None) -> DemoResult:
    app = pick_app(backend)
    script = EXAMPLES / app.script
    if not script.is_file():
        raise ConfigError(f"example application {script} not found",
                          hint="run the demo from a clone of kernforge")
    run_dir = out or fresh_run_dir(None)
    rec_dir = run_dir / "recordings"
    size = n or app.default_n
    progress(f"recording {app.script} (n={size}, {steps} steps) into {rec_dir}")
    extra = [] if diag_every is None else ["--diag-every", str(diag_every)]
    command = ["python", str(script), "--n", str(size), "--steps", str(steps), *extra]
    status, _ = record_application(command, rec_dir, max_instances=2, skip=1)
    result = DemoResult(run_dir, app, status)
    for path in find_recordings(rec_dir):
        rec = load_recording(path)
        progress(f"replaying {rec.name}")
        result.baseline.append((rec, replay(rec, repeat=repeat)))
    if not result.baseline:
        raise ConfigError(f"{app.script} recorded no kernel launches",
                          hint="check that the application runs: python " + str(script))
    hot = max(result.baseline, key=lambda rm: rm[1].median if rm[1].ok else 0.0)[0]
    progress(f"tuning {hot.name} ({trials} trials, every one verified)")
    result.tuned = tune_recording(hot, run_dir / "tune", preset="quick",
                                  budget=Budget(trials=trials), repeat=repeat,
                                  on_trial=_trial_reporter(hot.name, trials, progress),
                                  isolate=iso)
    target = next((rec for rec, _ in result.baseline if rec.source.entry == app.wrong_kernel),
                  hot)
    progress(f"variant {app.wrong_label} of {target.name}")
    result.wrong = replay(target, repeat=1, warmup=0, isolate=iso, **app.wrong)
    result.wrong_unit = target.name
    cfg = demo_evolve_config(iterations,
                             app.inner_trials if inner_trials is None else inner_trials, repeat,
                             llm_url or os.environ.get(LLM_URL_ENV),
                             llm_model or os.environ.get(LLM_MODEL_ENV), evolve_config)
    result.evolved = _evolve_all(result, cfg, iterations, progress, iso)
    result.winners = pick_winners(result)
    deployed = _worth_deploying(result, progress)
    long = e2e_steps or app.e2e_steps or steps
    run = ["python", str(script), "--n", str(size), "--steps", str(long), *extra]
    if deployed and confirm_rounds > 0:
        result.confirming = len(deployed)
        result.confirmed, dropped = confirm_each(run, deployed, run_dir, rounds=confirm_rounds,
                                                 progress=progress)
        result.not_deployed += dropped
        deployed = [c.winner for c in result.confirmed if c.kept]
    if deployed:
        spec = export_spec(deployed, run_dir / "deploy.json")
        progress(f"running {app.script} ({long} steps) plain and with {spec}")
        result.e2e = end_to_end(run, deployed, spec, rounds=rounds, progress=progress)
        result.e2e_steps = long
    if app.fuse_kernel is not None and fuse_steps != ():
        result.fusion = fusion_stage(lambda seq: sequence_command(script, size, seq, extra),
                                     run, run_dir / "fusion",
                                     kernel=app.fuse_kernel, steps=fuse_steps,
                                     one_launch=result.e2e.spec if result.e2e else None,
                                     rounds=rounds, progress=progress)
    _write_summary(run_dir / "summary.json", result)
    return result


def _trial_reporter(name: str, trials: int, progress: Callable[[str], None]
                    ) -> Callable[[Any], None]:
    """Progress of the tuning in evaluations (the budget counts them), cache hits apart."""
    seen = [0, 0]

    def report(t: Any) -> None:
        seen[0 if t.evaluated else 1] += t.evaluated or t.cached
        progress(f"tuning {name}: {seen[0]}/{trials} evaluations, {seen[1]} cache hits")

    return report


def _worth_deploying(result: DemoResult, progress: Callable[[str], None]) -> list[Winner]:
    """The winners worth deploying on the app's backend (:mod:`kernforge.deploy.worth`: saving
    per launch above what a replaced launch costs the host, measured now outside any recording,
    or a kernel longer than the host needs to issue it); all of them when that cannot be
    measured (the result says why)."""
    if not result.winners:
        return []
    progress(f"measuring the host time a replaced launch costs ({result.app.backend} backend)")
    result.overhead, result.overhead_error = deploy_overhead(result.app.backend)
    if result.overhead is None:
        return list(result.winners)
    # a CPU launch runs the kernel on the host: nothing overlaps its overhead
    issue = result.overhead.issue_s if result.app.backend == "cuda" else None
    deployed, dropped = worth(result.winners, result.overhead.per_launch_s, issue)
    result.not_deployed += dropped
    return deployed


def _evolve_all(result: DemoResult, cfg: RunConfig, iterations: int,
                progress: Callable[[str], None], iso: Isolation | None) -> list[EvolveOutcome]:
    """Evolve every recorded kernel (its recordings, the hottest first)."""
    groups: dict[str, list[tuple[Recording, Measurement]]] = {}
    for rec, m in result.baseline:
        groups.setdefault(rec.source.entry, []).append((rec, m))
    out = []
    for name, rms in groups.items():
        recs = [r for r, _ in sorted(rms, key=lambda rm: -(rm[1].median if rm[1].ok else 0))]
        progress(f"evolving {name} ({iterations} iterations, "
                 f"{', '.join(p.kind for p in cfg.proposers)} proposer)")
        out.append(evolve_kernel(recs, cfg, result.run_dir / "evolve" / name,
                                 on_progress=_reporter(name, iterations, progress),
                                 isolate=iso if iso is not None else False))
    return out


def _reporter(name: str, iterations: int, progress: Callable[[str], None]
              ) -> Callable[[Progress, Counters], None]:
    def report(p: Progress, c: Counters) -> None:
        progress(f"evolving {name}: iteration {p.applied}/{iterations}, "
                 f"{c.evaluations} evaluations")

    return report


def _write_summary(path: Path, r: DemoResult) -> None:
    t = r.tuned
    data = {
        "run_dir": str(r.run_dir), "backend": r.app.backend, "app": r.app.script,
        "app_status": r.app_status,
        "baseline": [{"unit": rec.name, **m.to_json()} for rec, m in r.baseline],
        "tuned": None if t is None else {
            "unit": t.recording.name, "result": str(t.directory / "result.json"),
            # the medians of the interleaved measurement the speedup is the ratio of; the
            # search's own (separate runs, best of many: biased) under their own names
            "baseline_median_s": t.ab.median_a if t.ab else t.baseline_s,
            "best_median_s": t.ab.median_b if t.ab else t.best_s,
            "search_baseline_median_s": t.baseline_s, "search_best_median_s": t.best_s,
            "evaluations": t.study.evaluations,
            "cache_hits": sum(1 for tr in t.study.trials if tr.cached),
            "speedup_interleaved": t.speedup,
            "speedup_ci": [t.ab.ci_low, t.ab.ci_high] if t.ab else None},
        "wrong": {"label": r.app.wrong_label, **r.wrong.to_json()} if r.wrong else None,
        "evolve": [{
            "kernel": ev.kernel, "status": ev.final.status,
            "speed": ev.final.speed.to_json() if ev.final.speed else None,
            "speedup_interleaved": ev.final.speedup, "programs": ev.report.programs,
            "best": ev.final.best.id if ev.final.best else None,
            "report": ev.report.files.get("report"),
            "result": str(ev.final.result_json)} for ev in r.evolved],
        "overhead_s": r.overhead_s,
        "overhead": None if r.overhead is None else r.overhead.to_json(),
        "overhead_error": r.overhead_error or None,
        "not_deployed": [{
            "kernel": n.winner.recording.source.entry, "from": n.winner.source,
            "speedup": n.winner.ab.speedup, "baseline_s": n.winner.ab.median_a,
            "tuned_s": n.winner.ab.median_b, "reason": n.reason} for n in r.not_deployed],
        "confirmed": [{"kernel": c.winner.recording.source.entry, "kept": c.kept,
                       "speed": c.e2e.judgement.to_json(), "speedup": c.e2e.speedup, "speedup_ci": list(c.e2e.ci),
                       "ratios": c.e2e.ratios,
                       "launches_replaced": c.e2e.substituted,
                       "outputs_identical": c.e2e.identical} for c in r.confirmed],
        "end_to_end_status": r.end_to_end_status,
        "end_to_end": None if r.e2e is None else {
            "spec": str(r.e2e.spec), "speed": r.e2e.judgement.to_json(),
            "speedup": r.e2e.speedup,
            "speedup_ci": list(r.e2e.ci), "steps": r.e2e_steps,
            "winners": [{"kernel": w.recording.source.entry, "from": w.source,
                         "speedup": w.ab.speedup} for w in r.e2e.winners],
            "plain_s": r.e2e.plain_s, "deployed_s": r.e2e.deployed_s,
            "outputs_identical": r.e2e.identical, "launches_replaced": r.e2e.substituted},
        "fusion": None if r.fusion is None else r.fusion.to_json(),
    }
    write_json_atomic(path, data)
