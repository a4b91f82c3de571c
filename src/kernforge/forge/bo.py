"""The ``tpe`` forge round: Bayesian optimization over the incumbent design's whole space.

A one-change round moves one parameter, a pair round two; on the H200 the pair round was
accepted in 19 of 80 cell rounds where one-change rounds had converged (session 10), so the
parameters interact. This round searches every parameter of the incumbent's design at once with
the tune layer's TPE sampler (:class:`kernforge.tune.samplers.tpe.TPE`: multivariate, grouped,
constant liar), one study per cell, seeded by the cell's id, its first trial the incumbent.

The cells' studies run in lockstep: each of :data:`BATCHES` batches asks every study for
:data:`PER_BATCH` configurations, compiles all of them at once (parallel nvcc, as every round
does), screens each cell's in one session and tells the times back. The fastest screened
candidates (:data:`FINALISTS`) then go through the same gate as every round's: screened again
beside the incumbent, the oracle on fresh inputs, the interleaved comparison (median >= 1 +
band, bootstrap interval above 1). The search only proposes; the gate decides.
"""

from __future__ import annotations

import itertools
import zlib
from typing import TYPE_CHECKING, Any

from ..core import CompileError, LaunchError, Measurement, Status
from ..stencil import matrix as mx
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from ..tune.space import SearchSpace

if TYPE_CHECKING:
    from .compile import Built
    from .loop import Forge

BATCHES = 3
PER_BATCH = 16
FINALISTS = 2
ASK_LIMIT = 4 * PER_BATCH  # asks per cell and batch (refused and already screened ones are free)
SKIP_PARAMS = ("l1",)  # measured without effect on the H200 (session 9): not worth trials


GEOMETRY = ("vx", "lz", "ty", "tx")  # ordinal dimensions; every other parameter is an option


def _options(design: str, cell: Cell) -> tuple[str, ...]:
    """The design's option parameters searched together as one categorical ``variant``."""
    return tuple(k for k, v in mx.space(design, cell).items()
                 if k not in GEOMETRY and k not in SKIP_PARAMS and len(v) > 1)


def search_space(design: str, cell: Cell, params: dict[str, Any]) -> SearchSpace | None:
    """The incumbent design's parameters for ``cell``, the incumbent ``params`` as the
    baseline (a parameter it leaves out is at its first value); ``None`` when there is nothing
    to search.

    The tile geometry (``vx``, ``lz``, ``ty``, ``tx``) are ordinal dimensions (sorted values,
    the incumbent's own among them: a slab's ``lz=30`` lies outside the list). The options
    (``pf``, ``smem``, ``xs``, ``pn``, ``ry``, ``sc``, ``h2``, ``cw``, ``pw``, ``minb``) form
    one categorical dimension ``variant`` of the combinations the design builds at the
    incumbent's geometry: drawn one by one, nine in ten random z-marching combinations are
    refused (``ry`` or ``sc`` with ``pn``, ``xs`` with ``smem``, ...), and the sampler's random
    startup trials would be mostly wasted. ``l1`` (no effect on the H200) stays as it is."""
    space = mx.space(design, cell)
    current = {k: params.get(k, v[0]) for k, v in space.items()}
    dims: dict[str, Any] = {}
    for name in GEOMETRY:
        if name in space and len({*space[name], current[name]}) > 1:
            dims[name] = {"ordinal": sorted({*space[name], current[name]})}
    for name in SKIP_PARAMS:
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


def _study(cell: Cell, space: SearchSpace) -> Any:
    """The cell's study: in memory, seeded by the cell's id (a rerun from the same incumbent
    asks the same first batch: its startup trials are random, no time is known yet)."""
    from ..tune.samplers.tpe import TPE

    return TPE(space, seed=zlib.crc32(cell.id.encode()), study_name=f"forge-{cell.id}")


def first_batch(cell: Cell, design: str, params: dict[str, Any]) -> list[Operator]:
    """The operators a ``tpe`` round compiles first for this incumbent (the incumbent and
    :data:`PER_BATCH` distinct others): ``scripts/stencil_precompile.py`` builds them ahead."""
    space = search_space(design, cell, params)
    if space is None or space.size() <= 1:
        return []
    return [op for _, op in _ask(_study(cell, space), design, cell, {})]


def tpe_round(forge: Forge, rnd: int, change: str = "tpe") -> dict[str, int]:
    """One matrix-wide TPE round over ``forge``'s cells; accepted / rejected / unchanged."""
    counts = {"accepted": 0, "rejected": 0, "unchanged": 0}
    studies: dict[str, Any] = {}
    incs: dict[str, Operator] = {}
    for cell in forge.cells:
        inc = forge.incumbents[cell.id]
        space = search_space(inc.design, cell, inc.params)
        if space is None or space.size() <= 1:
            counts["unchanged"] += 1
            continue
        studies[cell.id] = _study(cell, space)
        incs[cell.id] = forge._op(cell)
    cells = [c for c in forge.cells if c.id in studies]
    screened: dict[str, dict[str, tuple[float, Built]]] = {c.id: {} for c in cells}
    inc_built: dict[str, Built] = {}
    for batch in range(BATCHES):
        asked = {cell.id: _ask(studies[cell.id], forge.incumbents[cell.id].design, cell,
                               screened[cell.id]) for cell in cells}
        todo = [op for pairs in asked.values() for _, op in pairs]
        if batch == 0:
            todo += list(incs.values())
        forge.say(f"round {rnd} ({change}): batch {batch + 1}/{BATCHES}, compiling "
                  f"{len(todo)} operators")
        built = {(b.op.cell_id, b.op.key): b for b in forge.compiler(todo)}
        if batch == 0:
            inc_built = {cid: built[(cid, op.key)] for cid, op in incs.items()}
        for cell in cells:
            _screen_batch(forge, cell, studies[cell.id], asked[cell.id], built,
                          screened[cell.id])
    for cell in cells:
        found = sorted((t, key) for key, (t, _) in screened[cell.id].items()
                       if key != incs[cell.id].key)
        finalists = [screened[cell.id][key][1] for _, key in found[:FINALISTS]]
        forge._log({"round": rnd, "change": change, "cell": cell.id, "verdict": "searched",
                    "from": incs[cell.id].key, "trials": len(screened[cell.id]),
                    "screened": [[key, t] for t, key in found[:5]],
                    "incumbent_screened": screened[cell.id].get(incs[cell.id].key, (None,))[0]})
        if not finalists:
            counts["rejected"] += 1
            continue
        counts[forge._gate(cell, rnd, change, inc_built[cell.id], finalists)] += 1
    return counts


def _ask(study: Any, design: str, cell: Cell,
         screened: dict[str, tuple[float, Built]]) -> list[tuple[Any, Operator]]:
    """Up to :data:`PER_BATCH` trials that build an operator not screened yet (asking at most
    :data:`ASK_LIMIT` times): a configuration the design refuses (z-marching's ``ry`` with
    ``pn``, ...) is told so at once, one whose operator was screened gets that time."""
    out: list[tuple[Any, Operator]] = []
    for _ in range(ASK_LIMIT):
        if len(out) >= PER_BATCH:
            break
        trial = study.ask()
        if trial is None:
            break
        op = mx.build(design, cell, _config_params(design, cell, trial.config))
        if op is None:
            study.tell(trial, Measurement(Status.INVALID_CONFIG, "the design refuses it"),
                       origin="invalid")
        elif op.key in screened:
            study.tell(trial, Measurement(Status.OK, samples=(screened[op.key][0],)),
                       origin="cached")
        else:
            out.append((trial, op))
    return out


def _screen_batch(forge: Forge, cell: Cell, study: Any, asked: list[tuple[Any, Operator]],
                  built: dict[tuple[str, str], Built],
                  screened: dict[str, tuple[float, Built]]) -> None:
    """Screen one cell's batch in one session and tell every trial its result (a duplicate
    within the batch the time already measured, a failing one its status)."""
    todo = []
    for trial, op in asked:
        if not built[(cell.id, op.key)].ok:
            study.tell(trial, Measurement(Status.COMPILE_FAILED, "nvcc failed"))
        else:
            todo.append((trial, built[(cell.id, op.key)]))
    if not todo:
        return
    with forge.sessions(cell) as session:
        for trial, b in todo:
            if b.op.key in screened:  # a duplicate within this batch
                study.tell(trial, Measurement(Status.OK, samples=(screened[b.op.key][0],)),
                           origin="cached")
                continue
            try:
                t = session.screen(b)
            except (LaunchError, CompileError) as exc:
                study.tell(trial, Measurement(Status.LAUNCH_FAILED, str(exc)))
                continue
            screened[b.op.key] = (t, b)
            study.tell(trial, Measurement(Status.OK, samples=(t,)))
