"""The forge loop for the stencil matrix: one change per round, gate, accept or revert, logs.

Rounds are matrix-wide. Round 1 changes the *design* (structure) of every cell's incumbent;
each later round changes one parameter of the incumbent's design (vector width, z-chunk, block
shape, register blocking, ...). Per cell and round:

1. build and compile the candidates (the incumbent with that one change), all cells of the round
   at once, in parallel (nvcc), before anything runs;
2. screen: time the incumbent and every candidate (median of a few runs);
3. gate the fastest candidate: the float64 oracle on fresh random inputs, then an interleaved
   A/B comparison against the incumbent; accept only when the median speedup clears the band
   and the bootstrap interval of the speedup lies above 1;
4. accept (the dispatch table is rewritten atomically at once, so a killed run loses nothing) or
   revert (the incumbent stays); either way one line goes to the performance log.

Operators are specialized per cell, so a change to one cell cannot regress another; the zero-
regression gate across accepted cells is the final pass (:func:`regressions`): every accepted
cell is measured again and compared with its persisted prior best. The rounds may measure one
build of an operator (nvcc cubins, compiled in parallel) and dispatch load another (NVRTC);
``Forge.final_compiler`` then makes the final pass measure the deployed build, so a win that
exists only in the rounds' build is reverted, not shipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.jsonio import write_json_atomic
from ..stencil import designs
from ..stencil import matrix as mx
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from .compile import Built
from .ideas import describe, tpe_seed
from .isolated import RUN_ERRORS, describe_failure
from .pairs import PAIR_LIMIT, pair_candidates
from .plan import check_plan, parse_seeds, round_plan  # noqa: F401 - their home was here


class Session(Protocol):
    """Measurement of one cell on one device (arrays allocated once per cell and round)."""

    def screen(self, built: Built) -> float: ...  # median seconds of a few runs
    def compare(self, a: Built, b: Built) -> tuple[float, float, float, float, float]: ...
    # -> (speedup of b over a, ci_low, ci_high, median seconds a, median seconds b)
    def check(self, built: Built) -> tuple[bool, float, str]: ...  # (ok, error, detail)


SessionFactory = Callable[[Cell], Any]  # a context manager yielding a Session
Compiler = Callable[[Sequence[Operator]], list[Built]]


@dataclass
class Incumbent:
    design: str
    params: dict[str, Any]
    seconds: float | None = None
    history: list[str] = field(default_factory=list)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _compatible(cell: Cell, inc: Incumbent, change: str, value: Any) -> Operator | None:
    """``change=value`` where the incumbent's other options exclude it (e.g. ``ry`` needs the
    plain z-marching kernel, the incumbent has ``pn``): the incumbent with one option set back
    to its default, else with every option but the design's tile geometry set back."""
    space = mx.space(inc.design, cell)
    geometry = designs.get(inc.design).geometry
    others = [k for k in inc.params if k != change and k not in geometry and k in space]
    tries = [{**inc.params, k: space[k][0], change: value} for k in others]
    tries.append({**{k: v for k, v in inc.params.items() if k in geometry}, change: value})
    for params in tries:
        op = mx.build(inc.design, cell, params)
        if op is not None:
            return op
    return None


def _candidates(cell: Cell, inc: Incumbent, change: str) -> list[Operator]:
    ops: list[Operator] = []
    if change == "design":
        # each other design at its defaults, and with the incumbent's values of the parameters
        # the two share (the same tile and z-chunk: a new structure is not judged on a worse
        # geometry than the one the incumbent was tuned to); a knob whose meaning is either
        # design's own (its ``unshared``) is never carried
        for design in mx.applicable(cell):
            if design == inc.design:
                continue
            own = {*designs.get(inc.design).unshared, *designs.get(design).unshared}
            base = mx.defaults(design, cell)
            shared = {k: v for k, v in inc.params.items()
                      if k in mx.space(design, cell) and k not in own}
            for params in (base, {**base, **shared}):
                op = mx.build(design, cell, params)
                if op is not None and op.key not in {o.key for o in ops}:
                    ops.append(op)
        return ops
    current = mx.build(inc.design, cell, inc.params)
    keys = {current.key} if current is not None else set()
    if change in ("pairs", "pairs2"):
        return pair_candidates(cell, inc.design, inc.params, exclude=keys,
                               skip=PAIR_LIMIT if change == "pairs2" else 0)
    values = mx.space(inc.design, cell).get(change, ())
    for value in values:
        if inc.params.get(change) == value:
            continue
        op = mx.build(inc.design, cell, {**inc.params, change: value})
        if op is None:
            op = _compatible(cell, inc, change, value)
        if op is not None and op.key not in keys:  # a parameter's first value may be implicit
            keys.add(op.key)
            ops.append(op)
    return ops


@dataclass
class Forge:
    """State and logs of one forge run over some cells."""

    cells: list[Cell]
    table_path: Path
    log_path: Path  # performance log (JSON lines, appended)
    compiler: Compiler
    sessions: SessionFactory
    band: float = 0.02
    device: str = ""
    say: Callable[[str], None] = print
    # start every cell that this design can build from its defaults instead of the table's
    # operator (a design the rounds can then tune; the table's operator stays the start that
    # the final zero-regression pass compares against)
    seed_design: str | None = None
    # per cell (id -> operator key, ``--seed-operator``): start it from that operator instead,
    # judged the same way (the table's operator stays the reference of the final pass)
    seeds: dict[str, str] = field(default_factory=dict)
    # when the run's time budget ends (``clock`` seconds): a round of several batches (``tpe``)
    # stops starting batches that would end too close to it
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    # the final pass's builds when the rounds' are not the deployed ones (GPU: NVRTC, as
    # dispatch and the bench build, where the rounds load nvcc cubins); None: ``compiler``
    final_compiler: Compiler | None = None
    table: dict[str, dict[str, Any]] = field(default_factory=dict)
    incumbents: dict[str, Incumbent] = field(default_factory=dict)
    originals: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # at the start
    seeded: set[str] = field(default_factory=set)  # cells started from seed_design or seeds
    settled: set[str] = field(default_factory=set)  # seeded cells the final pass decided

    def __post_init__(self) -> None:
        self.table = mx.load_table(self.table_path)
        self.start: dict[str, tuple[str, dict[str, Any]]] = {}
        for cell in self.cells:
            entry = self.table.get(cell.id)
            if entry and mx.build(entry["design"], cell, entry["params"]) is not None:
                self.incumbents[cell.id] = Incumbent(entry["design"], dict(entry["params"]),
                                                     entry.get("seconds"),
                                                     list(entry.get("history", [])))
            else:
                self.incumbents[cell.id] = Incumbent("naive", mx.defaults("naive", cell))
            inc = self.incumbents[cell.id]
            self.start[cell.id] = (inc.design, dict(inc.params))
            self.originals[cell.id] = json.loads(json.dumps(entry)) if entry else None
            if cell.id in self.seeds:
                op = mx.from_key(cell, self.seeds[cell.id])
                if op.key != self._op(cell).key:  # the table's own operator: nothing to judge
                    self.seeded.add(cell.id)
                    self.incumbents[cell.id] = Incumbent(
                        op.design, dict(op.params), None,
                        [*inc.history, f"seeded {op.key} (from {inc.design})"])
            elif self.seed_design and self.seed_design != inc.design \
                    and self.seed_design in mx.applicable(cell):
                params = mx.defaults(self.seed_design, cell)
                if mx.build(self.seed_design, cell, params) is not None:
                    self.seeded.add(cell.id)
                    self.incumbents[cell.id] = Incumbent(
                        self.seed_design, params, None,
                        [*inc.history, f"seeded {self.seed_design} (from {inc.design})"])

    def _op(self, cell: Cell) -> Operator:
        inc = self.incumbents[cell.id]
        op = mx.build(inc.design, cell, inc.params)
        assert op is not None
        return op

    def _log(self, record: dict[str, Any]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
            fh.flush()

    def _save(self, cell: Cell, op: Operator, seconds: float, error: float, rnd: int) -> None:
        inc = self.incumbents[cell.id]
        entry = {"design": op.design, "params": op.params, "seconds": seconds,
                 "error": error, "source_sha": mx.source_sha(op),
                 "round": rnd, "device": self.device, "date": _now(),
                 "history": inc.history}
        if cell.id in self.seeded and cell.id not in self.settled:
            # not yet compared with the table's operator: readers (mx.load_table) see the old
            # entry until the final pass settles it, also when this run is killed before then
            entry["provisional"] = {"original": self.originals[cell.id]}
        self.table[cell.id] = entry
        self._write()

    def _write(self) -> None:
        write_json_atomic(self.table_path, {"version": mx.TABLE_VERSION, "cells": self.table})

    def settle(self, final: list[dict[str, Any]]) -> None:
        """Commit or revert, after the final pass: a cell whose operator regressed (wrong, or
        slower than where this run started it) gets its entry from before the run back; a
        seeded cell keeps the tuned design only by the gate's rule (oracle passed, median
        speedup >= 1 + band with its interval above 1, in the final pass's interleaved
        comparison), else it too gets its old entry back."""
        cells = {c.id: c for c in self.cells}
        for rec in final:
            cid = rec["cell"]
            if cid not in self.seeded:
                if rec["regressed"] and rec["changed"]:
                    self.restore(cid, rec)
                    rec.update(regressed=False, reverted=True)
                elif rec["changed"] and rec.get("build") == "deployed" \
                        and self.final_compiler is not None and math.isfinite(rec["now_s"]):
                    # the entry's time and error as dispatch will run it (the rounds timed
                    # another build)
                    self.table[cid].update(seconds=rec["now_s"], error=rec["error"])
                    self._write()
                continue
            self.settled.add(cid)
            lo = (rec.get("ci") or [0.0])[0]
            if rec["oracle_ok"] and rec["changed"] and lo > 1.0 \
                    and rec.get("speedup_vs_start", 0.0) >= 1.0 + self.band:
                rnd = self.table.get(cid, {}).get("round", 0)
                self._save(cells[cid], self._op(cells[cid]), rec["now_s"], rec["error"], rnd)
                rec["seeded"] = "kept"
            else:
                self.restore(cid, rec)
                rec.update(regressed=False, reverted=True, seeded="reverted")

    def restore(self, cell_id: str, rec: dict[str, Any] | None = None) -> None:
        """Put a cell's table entry back as it was before this run; a cell that had none gets
        its starting operator when the final pass measured and checked it (else dispatch
        would fall back to defaults that may be the operator just judged worse)."""
        old = self.originals[cell_id]
        if old is not None:
            self.table[cell_id] = old
        elif rec is not None and rec.get("start_ok"):
            design, params = self.start[cell_id]
            op = mx.build(design, next(c for c in self.cells if c.id == cell_id), params)
            assert op is not None
            self.table[cell_id] = {"design": design, "params": params,
                                   "seconds": rec["start_s"], "error": rec["start_error"],
                                   "source_sha": mx.source_sha(op), "round": 0,
                                   "device": self.device, "date": _now(), "history": []}
        else:
            self.table.pop(cell_id, None)
        self._write()

    def run_round(self, rnd: int, change: str) -> dict[str, int]:
        """One matrix-wide round; returns counts of accepted / rejected / unchanged cells."""
        seed = tpe_seed(change)
        if seed is not None:
            from .bo import tpe_round

            return tpe_round(self, rnd, seed)
        plans = {c.id: _candidates(c, self.incumbents[c.id], change) for c in self.cells}
        todo = [op for ops in plans.values() for op in ops]
        todo += [self._op(c) for c in self.cells if plans[c.id]]
        self.say(f"round {rnd} ({change}): compiling {len(todo)} operators")
        built = {(b.op.cell_id, b.op.key): b for b in self.compiler(todo)}
        counts = {"accepted": 0, "rejected": 0, "unchanged": 0}
        for cell in self.cells:
            ops = plans[cell.id]
            if not ops:
                counts["unchanged"] += 1
                continue
            inc_op = self._op(cell)
            verdict = self._gate(cell, rnd, change, built[(cell.id, inc_op.key)],
                                 [built[(cell.id, o.key)] for o in ops])
            counts[verdict] += 1
        return counts

    def _try(self, rec: dict[str, Any], what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None after logging ``rec`` rejected: a typed failure of the
        candidate (compile, launch, a fault, or a crash or hang in its worker)."""
        try:
            return fn(*args)
        except RUN_ERRORS as exc:
            self._log({**rec, "verdict": "rejected", "reason": what + describe_failure(exc)})
            return None

    def _gate(self, cell: Cell, rnd: int, change: str, inc: Built, cands: list[Built]) -> str:
        base = {"round": rnd, "change": change, "idea": describe(change),
                "cell": cell.id, "from": inc.op.key, "date": _now(), "device": self.device}
        for bad in (c for c in cands if not c.ok):
            self._log({**base, "to": bad.op.key, "verdict": "rejected",
                       "reason": "compile error", "log": bad.log[-500:]})
        ok = [c for c in cands if c.ok]
        if not ok:
            return "rejected"
        with self.sessions(cell) as session:
            t_inc = self._try(base, "incumbent: ", session.screen, inc)
            if t_inc is None:
                return "rejected"
            if self.incumbents[cell.id].seconds is None:
                good, err, detail = self._try(base, "incumbent: ", session.check, inc) \
                    or (False, float("nan"), "it failed to run")
                if not good:
                    self._log({**base, "verdict": "incumbent wrong", "error": err,
                               "reason": detail})
                    return "rejected"
                self._save(cell, inc.op, t_inc, err, 0)
                self.incumbents[cell.id].seconds = t_inc
            timed = []
            for i, c in enumerate(ok):  # a variant that cannot run is rejected, not fatal
                t = self._try({**base, "to": c.op.key}, "", session.screen, c)
                if t is not None:
                    timed.append((t, i, c))
            timed.sort(key=lambda t: (t[0], t[1]))
            for t_c, _, cand in timed[:2]:  # the fastest; the runner-up if the fastest is wrong
                if t_c >= t_inc * (1.0 - self.band / 2):
                    break
                checked = self._try({**base, "to": cand.op.key}, "", session.check, cand)
                if checked is None:
                    continue
                good, err, detail = checked
                if not good:
                    self._log({**base, "to": cand.op.key, "verdict": "rejected",
                               "reason": f"oracle: {detail}", "error": err})
                    continue
                compared = self._try({**base, "to": cand.op.key}, "", session.compare, inc,
                                     cand)
                if compared is None:
                    return "rejected"
                speedup, lo, hi, t_a, t_b = compared
                rec = {**base, "to": cand.op.key, "speedup": speedup, "ci": [lo, hi],
                       "seconds_from": t_a, "seconds_to": t_b, "error": err}
                if speedup >= 1.0 + self.band and lo > 1.0:
                    inc_state = self.incumbents[cell.id]
                    inc_state.history.append(f"r{rnd} {change}: {inc.op.key} -> "
                                             f"{cand.op.key} ({speedup:.3f}x)")
                    inc_state.design, inc_state.params = cand.op.design, dict(cand.op.params)
                    inc_state.seconds = t_b
                    self._save(cell, cand.op, t_b, err, rnd)
                    self._log({**rec, "verdict": "accepted"})
                    self.say(f"  {cell.id}: {cand.op.key} accepted, {speedup:.3f}x")
                    return "accepted"
                self._log({**rec, "verdict": "rejected", "reason": "not faster (gate band)"})
                return "rejected"
            self._log({**base, "verdict": "rejected", "reason": "no candidate faster in screening",
                       "seconds_from": t_inc, "screened": [[c.op.key, t] for t, _, c in timed]})
        return "rejected"
