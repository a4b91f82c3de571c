"""The asynchronous evolution controller: proposals and evaluations overlap in two pools.

An iteration is: plan (island, parent, inspirations, proposer, seed; drawn from the master RNG
in iteration order) -> propose (LLM pool) -> early rejection (no-op, duplicate) -> evaluate
(evaluator pool; the injected ``evaluate(code) -> EvalResult`` compiles, verifies on every
recording and tunes) -> apply (in iteration order: program, MAP-Elites cell, best, migration,
plan of iteration ``i + window``). Only this thread writes the store; each step is one
transaction, so ``kill -9`` loses at most work in flight. On resume, a proposal not yet
evaluated is evaluated; one whose evaluation had started is quarantined (RUNTIME_FAILED: it
killed its worker or the run) and not run again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernforge.core import ConfigError, KernforgeError, Status

from .config import EvolveConfig
from .features import code_hash, default_features, normalize_code
from .load import LoadTracker
from .mapelites import Archive
from .store import Store
from .types import EvalResult, Program, Proposal, ProposalRequest, Proposer

Evaluator = Callable[[str], EvalResult]
SEED_ID = "seed"


@dataclass(frozen=True)
class Progress:
    """Reported after each applied iteration."""

    iteration: int
    outcome: str  # evaluated | noop | duplicate | no_code
    program: Program | None
    best: Program | None
    applied: int
    in_flight: int


@dataclass(frozen=True)
class RunResult:
    best: Program | None
    seed: Program
    programs: tuple[Program, ...]
    iterations: int
    stop_reason: str  # max_iterations | max_seconds | patience
    evaluations: int  # evaluations run in this session


def _rng_to_json(rng: random.Random) -> list[Any]:
    v, state, gauss = rng.getstate()
    return [v, list(state), gauss]


def _rng_from_json(data: list[Any]) -> random.Random:
    rng = random.Random()
    rng.setstate((data[0], tuple(data[1]), data[2]))
    return rng


def _call_evaluate(evaluate: Evaluator, code: str) -> EvalResult:
    try:
        r = evaluate(code)
    except KernforgeError as e:
        if e.status is None:
            raise
        return EvalResult(status=e.status, message=e.message)
    if not isinstance(r, EvalResult):
        raise TypeError(f"evaluate() returned {type(r).__name__}, expected EvalResult")
    return r


def _call_propose(proposer: Proposer, request: ProposalRequest) -> Proposal:
    t0 = time.perf_counter()
    try:
        return proposer.propose(request)
    except Exception as e:  # noqa: BLE001 - a proposer failure is data, not a crash
        return Proposal(code=None, error=f"{type(e).__name__}: {e}",
                        latency_s=time.perf_counter() - t0)


class Controller:
    """One run over one store. Use :func:`run` unless you need the pieces."""

    def __init__(self, config: EvolveConfig, proposers: Sequence[Proposer], evaluate: Evaluator,
                 store: Store, initial_code: str,
                 on_progress: Callable[[Progress], None] | None = None,
                 load: LoadTracker | None = None, isolated: bool = False) -> None:
        if not proposers:
            raise ConfigError("no proposer given", hint="pass at least one Proposer")
        w = config.proposer_weights
        if w is not None and len(w) != len(proposers):
            raise ConfigError(f"{len(w)} proposer_weights for {len(proposers)} proposers")
        self.config, self.proposers, self.evaluate = config, list(proposers), evaluate
        self.store, self.initial_code, self.on_progress = store, initial_code, on_progress
        self.isolated = isolated  # candidates run in a child: an unfinished one was not theirs
        self.archive = Archive(config.mapelites)
        self.rng = random.Random(config.seed)
        self.programs: dict[str, Program] = {}
        self.hashes: dict[str, str] = {}  # code hash -> program id (applied programs)
        self.candidate_hashes: dict[int, str] = {}  # iteration -> hash (proposed, not applied)
        self.next_plan = self.next_apply = 0
        self.best_id: str | None = None
        self.since_improvement = 0
        self.evaluations = 0
        self.results: dict[int, tuple[str, EvalResult | None]] = {}
        self.plans: dict[int, dict[str, Any]] = {}
        self._stop_planning = False
        self._pools: tuple[ThreadPoolExecutor, ...] = ()
        self._futures: dict[Future[Any], tuple[str, int, float]] = {}
        self.load = load or LoadTracker(config.eval_slots)  # read by runtime-aware proposers
        for p in self.proposers:
            p.attach_load(self.load)

    # -- start / resume ----------------------------------------------------------------------
    def start(self) -> None:
        stored = self.store.get_state("identity")
        if stored is not None and stored != self.config.identity():
            diff = sorted(k for k in stored if stored[k] != self.config.identity().get(k))
            raise ConfigError(f"resumed run differs from the stored one in {diff}",
                              hint="resume with the original settings or start a new store")
        if self.store.get_state("initialized"):
            self._load()
            return
        seed = self._evaluate_seed()
        with self.store.tx():
            self.store.set_state("identity", self.config.identity())
            self._add_program(seed, -1, ())
            for island in range(self.config.mapelites.islands):
                self._insert(island, seed, -1)
            if seed.valid:
                self.best_id = seed.id
            for _ in range(self.config.window):
                self._plan_next()
            self.store.set_state("initialized", True)
            self._save_state()

    def _evaluate_seed(self) -> Program:
        result = self.store.evaluation(-1)
        h = code_hash(self.initial_code)
        if result is None:
            self.store.evaluation_started(-1, SEED_ID)
            t0 = time.time()
            result = _call_evaluate(self.evaluate, self.initial_code)
            self.load.observe_eval(time.time() - t0)
            self.evaluations += 1
            self.store.record_evaluation(-1, SEED_ID, h, result, t0)
        return self._program(SEED_ID, self.initial_code, None, 0, 0, result)

    def _load(self) -> None:
        st = self.store.get_state
        self.rng = _rng_from_json(st("rng"))
        self.next_plan, self.next_apply = st("next_plan"), st("next_apply")
        self.best_id, self.since_improvement = st("best_id"), st("since_improvement")
        self.archive.edges = st("edges", {})
        for p in self.store.programs():
            self.programs[p.id] = p
            self.hashes[code_hash(p.code)] = p.id
        self.archive.load(self.store.cells(), self.programs.values())

    def _save_state(self) -> None:
        s = self.store.set_state
        s("rng", _rng_to_json(self.rng))
        s("next_plan", self.next_plan)
        s("next_apply", self.next_apply)
        s("best_id", self.best_id)
        s("since_improvement", self.since_improvement)
        s("edges", self.archive.edges)

    # -- planning ----------------------------------------------------------------------------
    def _should_plan(self) -> bool:
        c = self.config
        if self.next_plan >= c.max_iterations:
            return False
        return c.patience is None or self.since_improvement < c.patience

    def _plan_next(self) -> dict[str, Any] | None:
        if self._stop_planning or not self._should_plan():
            return None
        i, me = self.next_plan, self.config.mapelites
        island = i % me.islands
        parent, how = self.archive.select_parent(island, self.rng)
        parent = parent or self.programs[SEED_ID]
        insp = self.archive.inspirations(island, self.rng, parent)
        n = len(self.proposers)
        weights = self.config.proposer_weights or (1.0,) * n
        which = self.rng.choices(range(n), weights=weights, k=1)[0]
        seed = self.rng.getrandbits(62)
        ids = tuple(p.id for p in insp)
        self.store.plan_iteration(i, island, parent.id, ids, which, seed, f"p{i:06d}")
        self.store.event("parent_selected", i, parent.id, how=how)
        self.next_plan += 1
        return {"iteration": i, "island": island, "parent_id": parent.id, "inspirations": ids,
                "proposer": which, "seed": seed, "program_id": f"p{i:06d}", "state": "planned",
                "code": None}

    # -- programs and cells -------------------------------------------------------------------
    def _program(self, pid: str, code: str, parent: Program | None, island: int,
                 generation: int, r: EvalResult) -> Program:
        fit = r.fitness if r.status is Status.OK else None
        feats = default_features(code, fit, r.extra, self.config.bytes_moved)
        med = min((x.median_s for x in r.recordings if x.median_s is not None), default=None)
        return Program(id=pid, code=code, parent_id=parent.id if parent else None, island=island,
                       generation=generation, fitness=fit, status=r.status, features=feats,
                       median_s=med, error=r.error)

    def _add_program(self, p: Program, iteration: int, insp: tuple[str, ...]) -> None:
        h = code_hash(p.code)
        self.store.add_program(p, h, iteration, insp)
        self.programs[p.id] = p
        self.hashes[h] = p.id

    def _insert(self, island: int, p: Program, iteration: int) -> None:
        accepted, cell = self.archive.insert(island, p)
        if accepted and p.fitness is not None:
            self.store.put_cell(island, cell, p.id, p.fitness, iteration)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        self.start()
        t0 = time.monotonic()
        stop = ""
        with ThreadPoolExecutor(self.config.llm_slots, "kf-propose") as llm, \
                ThreadPoolExecutor(self.config.eval_slots, "kf-eval") as ev:
            self._pools = (llm, ev)
            for plan in self.store.iterations(unfinished_only=True):
                self._dispatch(plan)
            self._top_up()
            while True:
                self._apply_ready()
                if not stop and self.config.max_seconds is not None \
                        and time.monotonic() - t0 > self.config.max_seconds:
                    stop = "max_seconds"
                if not self._futures:
                    break
                done, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: self._futures[f][1]):
                    self._complete(fut)
                self._stop_planning = self._stop_planning or bool(stop)
            self._pools = ()
        return self._result(stop or self._stop_reason())

    def _top_up(self) -> None:
        """Refill the window after a time-limited session or a raised max_iterations."""
        with self.store.tx():
            while self.next_plan < self.next_apply + self.config.window:
                plan = self._plan_next()
                if plan is None:
                    break
                self._dispatch(plan)
            self._save_state()

    def _stop_reason(self) -> str:
        if self.next_plan >= self.config.max_iterations:
            return "max_iterations"
        return "patience"

    def _dispatch(self, plan: dict[str, Any]) -> None:
        i = plan["iteration"]
        self.plans[i] = plan
        if plan["state"] == "planned":
            req = self._request(plan)
            self.store.event("proposal_started", i, plan["program_id"])
            self.load.proposal_started()
            fut = self._pools[0].submit(_call_propose, self.proposers[plan["proposer"]], req)
            self._futures[fut] = ("propose", i, time.time())
            return
        done = self.store.evaluation(i) or (None if self.isolated else self.store.quarantine(
            i, plan["program_id"], code_hash(plan["code"])))
        if done is not None:
            self.candidate_hashes[i] = code_hash(plan["code"])
            self.results[i] = ("evaluated", done)
            return
        self._after_proposal(i, plan["code"])

    def _request(self, plan: dict[str, Any]) -> ProposalRequest:
        insp = tuple(self.programs[x] for x in plan["inspirations"])
        return ProposalRequest(island=plan["island"], parent=self.programs[plan["parent_id"]],
                               inspirations=insp, contract=self.config.contract,
                               iteration=plan["iteration"], seed=plan["seed"])

    def _early_reject(self, i: int, code: str | None) -> str | None:
        if code is None:
            return "no_code"
        parent = self.programs[self.plans[i]["parent_id"]]
        if normalize_code(code) == normalize_code(parent.code):
            return "noop"
        h = code_hash(code)
        if h in self.hashes or any(v == h for k, v in self.candidate_hashes.items() if k < i):
            return "duplicate"
        return None

    def _after_proposal(self, i: int, code: str | None) -> None:
        reason = self._early_reject(i, code)
        if reason is not None or code is None:
            self.results[i] = (reason or "no_code", None)
            return
        self.candidate_hashes[i] = code_hash(code)
        pid = self.plans[i]["program_id"]
        self.store.evaluation_started(i, pid)
        self.load.eval_queued(i)
        fut = self._pools[1].submit(_call_evaluate, self.load.timed(i, self.evaluate), code)
        self._futures[fut] = ("evaluate", i, time.time())

    def _complete(self, fut: Future[Any]) -> None:
        kind, i, started = self._futures.pop(fut)
        if kind == "propose":
            self.load.proposal_finished()
            prop: Proposal = fut.result()
            h = code_hash(prop.code) if prop.code is not None else None
            self.store.record_proposal(i, prop, h)
            self.plans[i] = {**self.plans[i], "state": "proposed", "code": prop.code}
            self._after_proposal(i, prop.code)
            return
        result: EvalResult = fut.result()  # an unexpected evaluator exception ends the run
        self.evaluations += 1
        plan = self.plans[i]
        self.store.record_evaluation(i, plan["program_id"], self.candidate_hashes[i], result,
                                     started)
        self.results[i] = ("evaluated", result)

    def _apply_ready(self) -> None:
        while self.next_apply in self.results:
            i = self.next_apply
            outcome, result = self.results.pop(i)
            with self.store.tx():
                outcome, prog = self._apply(i, outcome, result)
                self.next_apply += 1
                if (i + 1) % self.config.mapelites.migration_interval == 0:
                    self._migrate(i)
                plan = self._plan_next()
                if plan is not None:
                    self._dispatch(plan)
                self._save_state()
            self.candidate_hashes.pop(i, None)
            if self.on_progress:
                self.on_progress(Progress(i, outcome, prog, self.best, self.next_apply,
                                          len(self._futures)))

    def _apply(self, i: int, outcome: str,
               result: EvalResult | None) -> tuple[str, Program | None]:
        plan = self.plans.pop(i)
        code = plan["code"]
        if outcome == "evaluated" and code_hash(code) in self.hashes:
            outcome = "duplicate"
        prog = None
        if outcome == "evaluated" and result is not None:
            parent = self.programs[plan["parent_id"]]
            prog = self._program(plan["program_id"], code, parent, plan["island"],
                                 parent.generation + 1, result)
            self._add_program(prog, i, plan["inspirations"])
            self._insert(plan["island"], prog, i)
        self.store.finish_iteration(i, outcome)
        best = self.best
        if prog is not None and result is not None and result.passed_all and prog.fitness \
                is not None and (best is None or best.fitness is None
                                 or prog.fitness < best.fitness):
            self.best_id, self.since_improvement = prog.id, 0
            self.store.event("new_best", i, prog.id, fitness=prog.fitness)
        else:
            self.since_improvement += 1
        return outcome, prog

    def _migrate(self, i: int) -> None:
        values: dict[str, list[float]] = {}
        for p in self.programs.values():
            if p.valid:
                for k, v in p.features.items():
                    values.setdefault(k, []).append(v)
        refit = self.archive.refit(values, self.programs.values())
        moves = self.archive.migrate()
        for m in moves:
            self.store.record_migration(i, m.src, m.dst, m.program.id, m.cell, m.accepted)
        if refit or moves:
            for island, cells in enumerate(self.archive.cells):
                self.store.set_cells(island, {k: (p.id, p.fitness or 0.0)
                                              for k, p in cells.items()})

    @property
    def best(self) -> Program | None:
        return self.programs.get(self.best_id) if self.best_id else None

    def _result(self, reason: str) -> RunResult:
        return RunResult(best=self.best, seed=self.programs[SEED_ID],
                         programs=tuple(self.store.programs()), iterations=self.next_apply,
                         stop_reason=reason, evaluations=self.evaluations)


def run(config: EvolveConfig, proposers: Proposer | Sequence[Proposer], evaluate: Evaluator,
        store_path: str | Path, *, initial_code: str, resume: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        load: LoadTracker | None = None, isolated: bool = False) -> RunResult:
    """Evolve ``initial_code``; everything is recorded in the SQLite database at ``store_path``.

    With ``resume=True`` an existing database continues where it stopped (proposals in flight
    are asked again, evaluations in flight are quarantined as RUNTIME_FAILED, nothing finished
    is evaluated again); with ``resume=False`` an existing run is
    an error. ``load``: the tracker handed to the proposers (default: a new one).
    ``isolated``: ``evaluate`` runs each candidate in a child process, which cannot take the
    run down, so an evaluation in flight was stopped by the run's end: it is evaluated again
    on resume, not quarantined.
    """
    props = [proposers] if isinstance(proposers, Proposer) else list(proposers)
    path = Path(store_path)
    with Store(path) as store:
        if not resume and store.get_state("initialized"):
            raise ConfigError(f"{path} already holds an evolution run",
                              hint="pass resume=True to continue it, or use a new path")
        return Controller(config, props, evaluate, store, initial_code, on_progress,
                          load, isolated).run()
