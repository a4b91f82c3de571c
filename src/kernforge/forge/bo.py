"""The ``tpe`` forge round: Bayesian optimization over the incumbent design's whole space.

A one-change round moves one parameter, a pair round two; on the H200 the pair round was
accepted in 19 of 80 cell rounds where one-change rounds had converged, so the
parameters interact. This round searches every parameter of the incumbent's design at once with
the tune layer's TPE sampler (:class:`kernforge.tune.samplers.tpe.TPE`: multivariate, grouped,
constant liar), one study per cell, seeded by the cell's id and the round's ``seed`` (a
parameter: ``tpe`` on the command line is seed 1, ``tpeN`` seed N), its first trial the
incumbent.

The cells' studies run in lockstep: each of :data:`BATCHES` batches asks every study for
:data:`PER_BATCH` configurations, compiles all of them at once (parallel nvcc, as every round
does), screens each cell's in one session and tells the times back. The fastest screened
candidates (:data:`FINALISTS`) then go through the same gate as every round's: screened again
beside the incumbent, the oracle on fresh inputs, the interleaved comparison (median >= 1 +
band, bootstrap interval above 1). The search only proposes; the gate decides.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core import Measurement, Status
from ..stencil import designs
from ..stencil import matrix as mx
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from ..tune.space import SearchSpace
from .ideas import describe, tpe_name
from .isolated import RUN_ERRORS, describe_failure

if TYPE_CHECKING:
    from .compile import Built
    from .loop import Forge

BATCHES = 3
PER_BATCH = 16
FINALISTS = 2
ASK_LIMIT = 4 * PER_BATCH  # asks per cell and batch (refused and already screened ones are free)


def _geometry(design: str) -> tuple[str, ...]:
    """Ordinal dimensions; every other parameter is an option (the design declares them)."""
    return designs.get(design).geometry


def _skipped(design: str) -> tuple[str, ...]:
    """Not worth trials, kept as the incumbent has them (the design's ``untuned``)."""
    return designs.get(design).untuned


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _options(design: str, cell: Cell) -> tuple[str, ...]:
    """The design's option parameters searched together as one categorical ``variant``."""
    return tuple(k for k, v in mx.space(design, cell).items()
                 if k not in _geometry(design) and k not in _skipped(design) and len(v) > 1)


def search_space(design: str, cell: Cell, params: dict[str, Any]) -> SearchSpace | None:
    """The incumbent design's parameters for ``cell``, the incumbent ``params`` as the
    baseline (a parameter it leaves out is at its first value); ``None`` when there is nothing
    to search.

    The design's tile geometry (its ``geometry``) are ordinal dimensions (sorted values,
    the incumbent's own among them: a slab's z-chunk of 30 lies outside the list). Its other
    knobs, the options, form one categorical dimension ``variant`` of the combinations the
    design builds at the incumbent's geometry: drawn one by one, nine in ten random z-marching
    combinations are refused, and the sampler's random startup trials would be mostly wasted.
    The design's ``untuned`` knobs stay as the incumbent has them."""
    space = mx.space(design, cell)
    current = {k: params.get(k, v[0]) for k, v in space.items()}
    dims: dict[str, Any] = {}
    for name in _geometry(design):
        if name in space and len({*space[name], current[name]}) > 1:
            dims[name] = {"ordinal": sorted({*space[name], current[name]})}
    for name in _skipped(design):
        if name in space and current[name] != space[name][0]:
            dims[name] = {"ordinal": [current[name]]}  # kept as the incumbent has it
    names = _options(design, cell)
    fixed = {k: v for k, v in current.items() if k not in names}
    own = tuple(current[n] for n in names)
    variants = [combo for combo in itertools.product(*(space[n] for n in names))
                if combo == own
                or mx.build(design, cell, {**fixed, **dict(zip(names, combo))}) is not None]
    if len(variants) > 1:
        dims["variant"] = {"categorical": variants}
    if not dims:
        return None
    base = {k: current[k] for k in dims if k != "variant"}
    if "variant" in dims:
        base["variant"] = own
    return SearchSpace.from_mapping({"dimensions": dims, "baseline": base})


def _config_params(design: str, cell: Cell, config: dict[str, Any]) -> dict[str, Any]:
    """A trial's configuration as operator parameters (what it leaves out at the first
    value; the ``variant`` spread into its options)."""
    space = mx.space(design, cell)
    out = {k: v[0] for k, v in space.items()}
    out.update({k: v for k, v in config.items() if k != "variant"})
    if "variant" in config:
        out.update(zip(_options(design, cell), config["variant"], strict=True))
    return out


def _study(cell: Cell, space: SearchSpace, seed: int = 1) -> Any:
    """The cell's study: in memory, seeded by the cell's id and ``seed`` (a rerun from the
    same incumbent asks the same first batch: no time is known yet when it is asked for;
    another seed asks another). Seed 1 hashes the cell's id alone, seed N the id and the
    round's name ``#tpeN``, so every seed asks what its round name asked before."""
    from ..tune.samplers.tpe import TPE

    salt = "" if seed == 1 else f"#{tpe_name(seed)}"
    return TPE(space, seed=zlib.crc32((cell.id + salt).encode()), study_name=f"forge-{cell.id}")


def first_batch(cell: Cell, design: str, params: dict[str, Any],
                seed: int = 1) -> list[Operator]:
    """The operators a ``tpe`` round compiles first for this incumbent: the incumbent (the
    study's first trial) and up to :data:`PER_BATCH` - 1 others, distinct. The same every time:
    no time is known yet when they are asked for, and the study is seeded by the cell's id, so
    ``kernforge stencil precompile`` can build them ahead."""
    space = search_space(design, cell, params)
    if space is None or space.size() <= 1:
        return []
    ops = {op.key: op for _, op in _Search(cell, design, _study(cell, space, seed)).ask()}
    return list(ops.values())


@dataclass
class _Search:
    """One cell's study and what it has learnt: operators screened (seconds, build) and
    operators that failed (status, message), by key."""

    cell: Cell
    design: str
    study: Any
    screened: dict[str, tuple[float, Built]] = field(default_factory=dict)
    failed: dict[str, tuple[Status, str]] = field(default_factory=dict)

    def result(self, key: str) -> Measurement:
        """What the study is told for an operator measured or failed in this round."""
        if key in self.screened:
            return Measurement(Status.OK, samples=(self.screened[key][0],))
        return Measurement(*self.failed[key])

    def ask(self) -> list[tuple[Any, Operator]]:
        """Trials building up to :data:`PER_BATCH` distinct operators neither measured nor
        failed yet (at most :data:`ASK_LIMIT` asks; a trial repeating one of them is kept and
        told its time after screening). The others are told at once: a configuration the
        design refuses (z-marching's ``ry`` with ``pn``, ...) so, one whose operator was
        measured that time, one that failed that status."""
        out: list[tuple[Any, Operator]] = []
        keys: set[str] = set()
        for _ in range(ASK_LIMIT):
            if len(keys) >= PER_BATCH:
                break
            trial = self.study.ask()
            if trial is None:
                break
            op = mx.build(self.design, self.cell,
                          _config_params(self.design, self.cell, trial.config))
            if op is None:
                self.study.tell(trial, Measurement(Status.INVALID_CONFIG,
                                                   "the design refuses it"), origin="invalid")
            elif op.key in self.screened or op.key in self.failed:
                self.study.tell(trial, self.result(op.key), origin="cached")
            else:
                keys.add(op.key)
                out.append((trial, op))  # a duplicate in the batch is told after screening
        return out

    def screen(self, forge: Forge, asked: list[tuple[Any, Operator]],
               built: dict[tuple[str, str], Built], base: dict[str, Any]) -> None:
        """Screen the batch in one session and tell every trial its result; failures go to
        the performance log as every round's do."""
        todo = []
        for trial, op in asked:
            b = built[(self.cell.id, op.key)]
            if b.ok:
                todo.append((trial, b))
                continue
            if op.key not in self.failed:
                self.failed[op.key] = (Status.COMPILE_FAILED, "nvcc failed")
                forge._log({**base, "to": op.key, "verdict": "rejected",
                            "reason": "compile error", "log": b.log[-500:]})
            self.study.tell(trial, self.result(op.key))
        if not todo:
            return
        with forge.sessions(self.cell) as session:
            for trial, b in todo:
                key = b.op.key
                if key not in self.screened and key not in self.failed:
                    try:
                        self.screened[key] = (session.screen(b), b)
                    except RUN_ERRORS as exc:
                        self.failed[key] = (exc.status or Status.LAUNCH_FAILED, str(exc))
                        forge._log({**base, "to": key, "verdict": "rejected",
                                    "reason": describe_failure(exc)})
                self.study.tell(trial, self.result(key))


def tpe_round(forge: Forge, rnd: int, seed: int = 1) -> dict[str, int]:
    """One matrix-wide TPE round over ``forge``'s cells with the studies' ``seed``; accepted /
    rejected / unchanged. Logged under the round's name (:func:`.ideas.tpe_name`).

    With a deadline (the run's time budget), no batch after the first starts unless the time
    of the slowest batch so far, twice over (the batch, then the gate and the final pass),
    still fits; the round then gates what it has screened."""
    change = tpe_name(seed)
    counts = {"accepted": 0, "rejected": 0, "unchanged": 0}
    searches: dict[str, _Search] = {}
    incs: dict[str, Operator] = {}
    for cell in forge.cells:
        inc = forge.incumbents[cell.id]
        space = search_space(inc.design, cell, inc.params)
        if space is None or space.size() <= 1:
            counts["unchanged"] += 1
            continue
        searches[cell.id] = _Search(cell, inc.design, _study(cell, space, seed))
        incs[cell.id] = forge._op(cell)
    cells = [c for c in forge.cells if c.id in searches]
    bases = {c.id: {"round": rnd, "change": change, "idea": describe(change), "cell": c.id,
                    "from": incs[c.id].key, "device": forge.device} for c in cells}
    inc_built: dict[str, Built] = {}
    slowest = 0.0
    for batch in range(BATCHES):
        if batch and forge.deadline is not None \
                and forge.clock() + 2 * slowest > forge.deadline:
            forge.say(f"round {rnd} ({change}): batches {batch + 1}-{BATCHES} skipped (time "
                      f"budget; a batch took {slowest:.0f} s)")
            break
        t0 = forge.clock()
        asked = {cid: search.ask() for cid, search in searches.items()}
        todo = [op for pairs in asked.values() for _, op in pairs]
        if batch == 0:
            todo += list(incs.values())
        forge.say(f"round {rnd} ({change}): batch {batch + 1}/{BATCHES}, compiling "
                  f"{len(todo)} operators")
        built = {(b.op.cell_id, b.op.key): b for b in forge.compiler(todo)}
        if batch == 0:
            inc_built = {cid: built[(cid, op.key)] for cid, op in incs.items()}
        for cell in cells:
            searches[cell.id].screen(forge, asked[cell.id], built,
                                     {**bases[cell.id], "date": _now()})
        slowest = max(slowest, forge.clock() - t0)
    for cell in cells:
        search = searches[cell.id]
        found = sorted((t, key) for key, (t, _) in search.screened.items()
                       if key != incs[cell.id].key)
        finalists = [search.screened[key][1] for _, key in found[:FINALISTS]]
        forge._log({**bases[cell.id], "date": _now(), "verdict": "searched",
                    "trials": len(search.screened), "failed": len(search.failed),
                    "screened": [[key, t] for t, key in found[:5]],
                    "incumbent_screened": search.screened.get(incs[cell.id].key, (None,))[0]})
        if not finalists:
            counts["rejected"] += 1
            continue
        counts[forge._gate(cell, rnd, change, inc_built[cell.id], finalists)] += 1
    return counts
