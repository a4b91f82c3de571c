"""Supervised forge evaluation on a real GPU (``pytest -m gpu tests/forge/test_isolated_gpu.py``,
under 60 s on an H200): a candidate that reads far out of bounds (an illegal address), one that
traps and one that never ends, among honest ones; the run completes, the three are classified
with their causes, the honest plane sweep is evaluated, gated and accepted in both cells, and
the final pass checks both cells' operators on the oracle in a fresh context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.stencil.spec import Cell

from .faulty import faulty_compiler

pytestmark = pytest.mark.gpu

A, B = Cell.parse("star_1/96x64x32/fp32"), Cell.parse("star_1/96x64x32/fp64")


def test_faulty_candidates_on_the_gpu_cost_only_themselves(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.forge.nvrtc import build_deployed
    from kernforge.forge.run import forge_run
    from kernforge.replay.isolate import Isolation, Limits

    faults = {f"{A.id}|zmarch": "oob", f"{A.id}|ztile": "trap", f"{B.id}|zmarch": "hang"}
    with Isolation(limits=Limits(min_timeout_s=3, first_timeout_s=30)) as iso:
        summary = forge_run([A, B], tmp_path, start_table=None, rounds=1, isolate=iso,
                            compiler=faulty_compiler(faults, build_deployed), say=print)
        assert iso.replaced >= 3
    perf = [json.loads(x) for x in (tmp_path / "perf-log.jsonl").read_text().splitlines()]
    why = {(x["cell"], x.get("to", "").split("[")[0]): x for x in perf}
    print(*(f"{k}: {v['verdict']} {v.get('reason', '')[:160]}" for k, v in why.items()),
          sep="\n")
    oob, trap, hang = why[(A.id, "zmarch")], why[(A.id, "ztile")], why[(B.id, "zmarch")]
    assert oob["reason"].startswith("RUNTIME_FAILED") and "illegal" in oob["reason"].lower()
    assert trap["reason"].startswith("RUNTIME_FAILED")
    assert hang["reason"].startswith("TIMEOUT")
    for cell in (A, B):
        assert why[(cell.id, "planesweep")]["verdict"] == "accepted"
    assert [r["oracle_ok"] for r in summary["final"]] == [True, True]
    assert not summary["regressed"]
