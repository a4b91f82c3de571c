"""The ``tpe`` forge round: its search space, its first trial (the incumbent), and the round
end to end on the host emulator (lockstep batches, every trial told, the gate decides)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.forge import bo
from kernforge.forge.run import forge_matrix
from kernforge.forge.sessions import emulated_compiler, emulated_sessions
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

CELLS = [Cell(STENCILS["star_1"], Shape(32, 12, 10), Precision.FP32),
         Cell(STENCILS["box_1"], Shape(24, 10, 9), Precision.FP64)]


def test_the_search_space_is_the_designs_with_the_incumbent_as_baseline() -> None:
    cell = Cell(STENCILS["star_2"], Shape(64, 32, 40), Precision.FP64)
    params = {"tx": 32, "ty": 8, "vx": 2, "lz": 8, "cw": 1}
    space = bo.search_space("zmarch", cell, params)
    full = mx.space("zmarch", cell)
    names = [d.name for d in space.dimensions]
    assert "l1" not in names and set(names) == set(full) - {"l1"}
    for d in space.dimensions:
        assert list(d.choices) == sorted({*full[d.name], params.get(d.name, full[d.name][0])})
    base = space.baseline
    assert all(base[k] == v for k, v in params.items())
    assert all(base[k] == full[k][0] for k in names if k not in params)  # implicit defaults
    # the first trial's configuration builds the incumbent itself (the same key)
    own = mx.build("zmarch", cell, params)
    again = mx.build("zmarch", cell, bo._config_params("zmarch", cell, base))
    assert own is not None and again is not None and again.key == own.key
    # a skipped parameter the incumbent has set stays as it is
    kept = bo.search_space("zmarch", cell, {**params, "l1": 1})
    assert kept.baseline["l1"] == 1 and list(kept["l1"].choices) == [1]


def test_a_tpe_round_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bo, "BATCHES", 2)
    monkeypatch.setattr(bo, "PER_BATCH", 5)
    said: list[str] = []
    summary = forge_matrix(CELLS, sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=tmp_path / "matrix.json", perf_log=tmp_path / "perf.jsonl",
                           idea_log=tmp_path / "ideas.md", changes=["design", "tpe"],
                           device="host-emulator", say=said.append)
    assert [r["change"] for r in summary["rounds"]] == ["design", "tpe"]
    tpe = summary["rounds"][1]
    assert tpe["accepted"] + tpe["rejected"] + tpe["unchanged"] == len(CELLS)
    assert sum("batch 2/2" in m for m in said) == 1  # lockstep: one compile per batch
    lines = [json.loads(x) for x in (tmp_path / "perf.jsonl").read_text().splitlines()]
    searched = [x for x in lines if x["verdict"] == "searched"]
    assert {x["cell"] for x in searched} == {c.id for c in CELLS}
    for x in searched:
        assert 2 <= x["trials"] <= 2 * 5 + 1  # the incumbent plus distinct operators screened
        assert x["incumbent_screened"] > 0
        times = [t for _, t in x["screened"]]
        assert times == sorted(times) and x["from"] not in [k for k, _ in x["screened"]]
    for x in lines:
        if x["round"] == 2 and x["verdict"] == "accepted":  # the gate's rule, as logged
            assert x["change"] == "tpe" and x["speedup"] >= 1.02 and x["ci"][0] > 1.0
    assert not summary["regressed"]
    table = mx.load_table(tmp_path / "matrix.json")
    for cell in CELLS:
        assert mx.build(table[cell.id]["design"], cell, table[cell.id]["params"]) is not None
    assert "| 2 | tpe: Bayesian optimization" in (tmp_path / "ideas.md").read_text()


def test_the_first_batch_is_known_before_the_run(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``first_batch`` (what scripts/stencil_precompile.py compiles ahead) is exactly what the
    round compiles first, incumbents aside: seeded random startup trials, no time known yet."""
    monkeypatch.setattr(bo, "BATCHES", 1)
    kw: dict = {"sessions": emulated_sessions, "table_path": tmp_path / "matrix.json",
                "perf_log": tmp_path / "perf.jsonl", "idea_log": tmp_path / "ideas.md",
                "device": "host-emulator", "say": lambda m: None}
    forge_matrix(CELLS, compiler=emulated_compiler, changes=["design"], **kw)
    table = mx.load_table(tmp_path / "matrix.json")
    expected = {(c.id, op.key) for c in CELLS
                for op in bo.first_batch(c, table[c.id]["design"], table[c.id]["params"])}
    assert len(expected) > len(CELLS)
    calls: list[list] = []

    def recording(ops):
        calls.append(list(ops))
        return emulated_compiler(calls[-1])

    forge_matrix(CELLS, compiler=recording, changes=["tpe"], **kw)
    first = {(op.cell_id, op.key) for op in calls[0]}
    incumbents = {(c.id, mx.build(table[c.id]["design"], c, table[c.id]["params"]).key)
                  for c in CELLS}
    assert first - incumbents == expected - incumbents
