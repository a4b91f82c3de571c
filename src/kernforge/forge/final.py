"""The forge's final pass: every cell with an accepted operator checked again, the cells this
run changed compared interleaved with their start (in the deployed build where the rounds
measured another; :class:`kernforge.forge.loop.Forge`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..core import BackendUnavailableError, CompileError
from ..stencil import matrix as mx
from .isolated import RUN_ERRORS

if TYPE_CHECKING:
    from .loop import Forge


def regressions(forge: Forge) -> list[dict[str, Any]]:
    """The zero-regression pass over every cell with an accepted operator.

    Each cell's final operator is checked against the oracle again. A cell whose operator
    changed during this run is compared, interleaved in the same session, with the operator the
    run started from: it regressed when the oracle fails or it is not faster (a chain of gated
    acceptances that ends slower than its start). A cell whose operator did not change cannot
    regress from code; its time is compared with the persisted prior best only as *drift*
    (that number may come from another run or machine), reported but not a verdict. The
    operators are built by ``forge.final_compiler`` where the rounds' build is not the deployed
    one (``build``: "deployed" where the pass timed what dispatch runs). A start that fails in
    this build (``start_failed``) leaves the final operator judged alone.
    """
    out = []
    finals = {c.id: forge._op(c) for c in forge.cells}
    starts = {c.id: op for c in forge.cells
              if (op := mx.build(forge.start[c.id][0], c, forge.start[c.id][1])) is not None
              and op.key != finals[c.id].key}
    ops = [*finals.values(), *starts.values()]
    try:
        builds = (forge.final_compiler or forge.compiler)(ops)
    except BackendUnavailableError as exc:  # no deployed build here: judge the rounds' build
        forge.say(f"final pass: the deployed build is unavailable ({exc.message}); judging "
                  f"the rounds' build instead")
        builds = forge.compiler(ops)
    built = {(b.op.cell_id, b.op.key): b for b in builds}
    for cell in forge.cells:
        prior = forge.table.get(cell.id, {}).get("seconds")
        if prior is None:
            continue
        final = built[(cell.id, finals[cell.id].key)]
        start = built.get((cell.id, starts[cell.id].key)) if cell.id in starts else None
        rec: dict[str, Any] = {"cell": cell.id, "prior_s": prior, "final": final.op.key,
                               "changed": start is not None,
                               "build": "deployed" if final.deployed else "rounds'"}
        with forge.sessions(cell) as session:
            try:
                now = session.screen(final)
                good, err, detail = session.check(final)
            except RUN_ERRORS as exc:
                now, good, err, detail = float("inf"), False, float("nan"), str(exc)
            if start is not None and math.isfinite(now):  # the final one built and ran
                try:
                    if not start.ok:
                        raise CompileError(f"{start.op.key}: {start.log[-300:]}")
                    speedup, lo, hi, t_a, t_b = session.compare(start, final)
                    rec.update(start=start.op.key, speedup_vs_start=speedup, ci=[lo, hi],
                               start_s=t_a, now_s=t_b)
                    if forge.originals.get(cell.id) is None:
                        ok_s, err_s, _ = session.check(start)  # it may become the entry
                        rec.update(start_ok=ok_s, start_error=err_s)
                except RUN_ERRORS as exc:
                    rec.update(start=start.op.key, start_failed=str(exc)[-300:])
        rec.setdefault("now_s", now)
        rec.update(ratio=rec["now_s"] / prior, oracle_ok=good, error=err, detail=detail,
                   source_changed=mx.source_sha(final.op)
                   != forge.table[cell.id].get("source_sha"))
        slower = rec.get("speedup_vs_start", 1.0) < 1.0
        rec["regressed"] = (not good) or slower
        rec["drift"] = not rec["changed"] and rec["ratio"] > 1.0 + forge.band
        out.append(rec)
    return out
