"""The forge over several processes (one per GPU) and its time budget, on the host emulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.core import ConfigError
from kernforge.forge.parallel import cost, forge_parallel, partition
from kernforge.forge.run import forge_matrix
from kernforge.forge.sessions import emulated_compiler, emulated_sessions
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell, matrix

SMALL = [Cell.parse("star_1/32x12x10/fp32"), Cell.parse("box_1/24x10x9/fp64"),
         Cell.parse("star_2/20x12x12/fp32")]


def test_partition_covers_every_cell_once_and_balances_the_cost() -> None:
    cells = matrix()
    groups = partition(cells, 2)
    assert sorted(c.id for g in groups for c in g) == sorted(c.id for c in cells)
    loads = [sum(cost(c) for c in g) for g in groups]
    assert max(loads) / min(loads) < 1.1  # greedy longest-first: within 10% here
    assert len(partition(cells[:1], 4)) == 1  # never an empty group
    with pytest.raises(ConfigError):
        partition(cells, 0)


def test_a_budget_stops_rounds_but_keeps_the_final_pass(tmp_path: Path) -> None:
    summary = forge_matrix(SMALL[:1], sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=tmp_path / "m.json", perf_log=tmp_path / "p.jsonl",
                           idea_log=tmp_path / "ideas.md", rounds=4, budget_s=1e-3,
                           say=lambda m: None)
    assert [r["round"] for r in summary["rounds"]] == [1]  # the first round always runs
    assert summary["stopped"] and "time budget" in summary["stopped"]
    assert len(summary["final"]) == 1  # the zero-regression pass still ran
    assert "Stopped early" in (tmp_path / "ideas.md").read_text()


@pytest.mark.slow
def test_two_forge_processes_merge_into_one_run(tmp_path: Path) -> None:
    start = tmp_path / "start.json"
    other = {"design": "naive", "params": {"block": [32, 8, 1]}, "seconds": 1.0, "error": 0.0,
             "history": []}
    start.write_text(json.dumps({"version": mx.TABLE_VERSION,
                                 "cells": {"star_1/512x512x512/fp16": other}}))
    lines: list[str] = []
    summary = forge_parallel(SMALL, tmp_path / "out", gpus=2, start_table=start, rounds=1,
                             emulate=True, devices=[], changes=["design", "lz"], say=lines.append)
    out = tmp_path / "out"
    assert summary["failed"] == [] and len(summary["parts"]) == 2
    table = mx.load_table(out / "matrix.json")
    assert set(table) == {c.id for c in SMALL} | {"star_1/512x512x512/fp16"}
    assert table["star_1/512x512x512/fp16"] == other  # cells not forged are carried over
    logged = {json.loads(x)["cell"] for x in (out / "perf-log.jsonl").read_text().splitlines()}
    assert logged <= {c.id for c in SMALL} and logged
    assert all(r["accepted"] + r["rejected"] + r["unchanged"] == len(SMALL)
               for r in summary["rounds"])
    assert len(summary["final"]) == len(SMALL)
    assert any(x.startswith("[gpu1]") for x in lines)  # each process's output, labelled
    assert (out / "ideas.md").read_text().count("## Forge run") == 2
    assert [r["change"] for r in summary["rounds"]] == ["design", "lz"]  # --changes reached them
    for bad in ({"changes": ["bogus"]}, {"seed_design": "bogus"}):  # refused before any process
        with pytest.raises(ConfigError, match="bogus"):
            forge_parallel(SMALL, tmp_path / "bad", gpus=2, start_table=start, rounds=1,
                           emulate=True, devices=[], say=lines.append, **bad)
    assert not (tmp_path / "bad").exists()
