"""Supervised forge evaluation on a real GPU (``pytest -m gpu -s tests/forge/test_isolated_gpu.py``,
under 60 s on an H200): a candidate that reads far out of bounds (an illegal address), one that
traps and one that never ends, among honest ones; the run completes, the three are classified
with their causes, each costing one worker; the honest candidates are evaluated, gated and one
is accepted in each cell; the final pass checks both cells' operators on the oracle.

The incumbent (naive) is built made ~1 ms slower (``slow``: thread 0 waits 2M cycles), so that
any honest candidate clearly beats it: at 96x64x32 the real naive kernel takes a few
microseconds and no design beats it reliably (the first H200 run accepted none). Every
evaluation (from the run's journal) and every verdict is printed before anything is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernforge.stencil.spec import Cell

from .faulty import faulty_compiler

pytestmark = pytest.mark.gpu

A, B = Cell.parse("star_1/96x64x32/fp32"), Cell.parse("star_1/96x64x32/fp64")
FAULTS = {"naive": "slow", f"{A.id}|zmarch": "oob", f"{A.id}|ztile": "trap",
          f"{B.id}|zmarch": "hang"}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def report(out: Path, replaced: int) -> list[dict[str, Any]]:
    """Print every evaluation (journal) and every verdict (performance log); the log."""
    print(f"\nworkers replaced: {replaced}\nevaluations (cell, what, operator: outcome):")
    starts: dict[int, list[Any]] = {}
    for e in _lines(out / "evaluations.jsonl")[1:]:
        if "start" in e:
            starts[e["n"]] = e["start"]
            continue
        what, done = starts.get(e["n"], ["?", "?"]), e.get("done", {})
        err = done.get("error")
        said = (f"{err.get('status')} {err.get('cls')}: {err.get('message', '')[:300]}" if err
                else f"OK {json.dumps(done.get('value'))[:120]}")
        print(f"  {what[0]} {what[1]} {' vs '.join(what[2:])}: {said}")
    never = sorted(set(starts) - {e["n"] for e in _lines(out / "evaluations.jsonl")[1:]
                                  if "done" in e})
    if never:
        print(f"  started, never finished: {[starts[n] for n in never]}")
    perf = _lines(out / "perf-log.jsonl")
    print("verdicts (cell, candidate: verdict, reason):")
    for x in perf:
        extra = f" screened={x['screened']}" if "screened" in x else ""
        speed = f" speedup={x['speedup']:.2f}" if "speedup" in x else ""
        print(f"  {x['cell']} {x.get('to', '-')}: {x['verdict']}{speed} "
              f"{x.get('reason', '')[:400]}{extra}")
    return perf


def test_faulty_candidates_on_the_gpu_cost_only_themselves(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.forge.nvrtc import build_deployed
    from kernforge.forge.run import forge_run
    from kernforge.replay.isolate import Isolation, Limits

    with Isolation(limits=Limits(min_timeout_s=3, timeout_factor=10,
                                 first_timeout_s=30)) as iso:
        summary = forge_run([A, B], tmp_path, start_table=None, rounds=1, isolate=iso,
                            compiler=faulty_compiler(FAULTS, build_deployed), say=print)
        replaced = iso.replaced
    perf = report(tmp_path, replaced)
    print("final:", json.dumps(summary["final"])[:1000])
    why = {(x["cell"], x.get("to", "").split("[")[0]): x for x in perf}
    oob, trap, hang = (why.get((c.id, d), {}) for c, d in ((A, "zmarch"), (A, "ztile"),
                                                           (B, "zmarch")))
    assert oob.get("reason", "").startswith("RUNTIME_FAILED"), oob
    assert "illegal" in oob["reason"].lower(), oob
    assert trap.get("reason", "").startswith("RUNTIME_FAILED"), trap
    assert hang.get("reason", "").startswith("TIMEOUT"), hang
    assert replaced >= 3  # one fresh worker per fault
    assert why.get((A.id, "planesweep"), {}).get("verdict") == "accepted"  # its only honest one
    assert any(x["cell"] == B.id and x["verdict"] == "accepted" for x in perf)
    assert [r["oracle_ok"] for r in summary["final"]] == [True, True]
    assert not summary["regressed"]
