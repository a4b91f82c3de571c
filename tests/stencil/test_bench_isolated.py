"""The supervised stencil bench on a numpy stand-in device: our operator segfaulting in one
cell, a baseline hanging in another: each costs that runner only (RUNTIME_FAILED, TIMEOUT),
the cells' other runners are benched in a fresh worker, the run goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernforge.forge.bench import BenchConfig, bench
from kernforge.forge.bench_isolated import IsolatedBench
from kernforge.replay.isolate import Isolation, Limits
from kernforge.stencil.spec import Cell

from .crashing_device import HANG_CELL, SEGV_CELL

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.mark.slow
def test_a_crashing_or_hanging_runner_costs_only_itself() -> None:
    cells = [Cell.parse(c) for c in (SEGV_CELL, HANG_CELL, "star_2/18x12x10/fp64")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    logs: list[str] = []
    with Isolation(limits=Limits(first_timeout_s=10, validate_timeout_s=60), env=env) as iso:
        res = bench(cells, BenchConfig(baselines=("naive",), repeat=2, passes=2, seed=3),
                    log=logs.append, isolate=IsolatedBench(
                        iso, "tests.stencil.crashing_device:CrashingDevice"))
        assert iso.replaced == 2
    by = {row["cell"]: {r["name"]: r for r in row["runners"]} for row in res["cells"]}
    segv = by[SEGV_CELL]["ours"]
    assert segv["status"] == "error" and segv["failure"] == "RUNTIME_FAILED"
    assert "SIGSEGV" in segv["reason"] and "hint:" in segv["reason"]
    assert by[SEGV_CELL]["naive"]["status"] == "ok"  # benched again without ours
    hang = by[HANG_CELL]["naive"]
    assert hang["failure"] == "TIMEOUT" and "did not finish" in hang["reason"]
    assert by[HANG_CELL]["ours"]["status"] == "ok"
    assert all(r["status"] == "ok" for r in by["star_2/18x12x10/fp64"].values())
    assert res["device"] == {"device": "numpy stand-in"}
    assert any("SIGSEGV" in m for m in logs) and any("TIMEOUT" in m for m in logs)
