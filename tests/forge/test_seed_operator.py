"""--seed-operator CELL=KEY: a cell starts from a named operator of any design (e.g. one a
previous run's final pass restored), and the final pass judges it against the table's operator
as a seeded design is judged (host emulator; timings meaningless, the bookkeeping is not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.forge.loop import Forge, check_plan, parse_seeds
from kernforge.forge.parallel import forge_parallel
from kernforge.forge.run import forge_matrix
from kernforge.forge.sessions import emulated_compiler, emulated_sessions
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell

CELL = Cell.parse("star_1/32x12x10/fp32")
SEED = "zmarch[lz=5,tx=16,ty=4,vx=2]"  # not the defaults: the seed is the named operator


def _table(tmp_path: Path) -> tuple[Path, dict]:
    naive = mx.build("naive", CELL, mx.defaults("naive", CELL))
    assert naive is not None
    entry = {"design": "naive", "params": naive.params, "seconds": 1.0, "error": 0.0,
             "history": ["r1 design: earlier"]}
    table = tmp_path / "matrix.json"
    table.write_text(json.dumps({"version": mx.TABLE_VERSION, "cells": {CELL.id: entry}}))
    return table, json.loads(json.dumps(entry))


def test_from_key_builds_exactly_the_named_operator() -> None:
    op = mx.from_key(CELL, SEED)
    assert (op.design, op.key) == ("zmarch", SEED)
    assert mx.from_key(CELL, " planesweep[lz=5,ry=2,tx=32,ty=2,vx=1] ").design == "planesweep"
    assert mx.from_key(CELL, "naive[block=(32, 4, 2)]").params == {"block": (32, 4, 2)}
    for key, match in (("zmarch[lz=5]", r"builds zmarch\[lz=5,tx=32"),  # the defaults shown
                       ("zmarch", "not an operator key"), ("nosuch[lz=5]", "unknown stencil"),
                       ("zmarch[lz=five]", "integer"), ("zmarch[lz=5,,tx=16]", "integer"),
                       ("zbox[lz=5,tx=32,ty=8,vx=4]", "does not build"),  # zbox: box only
                       ("zmarch[lz=5,pw=1,tx=16,ty=4,vx=2]", "zmarch has no parameter pw"),
                       ("zmarch[lz=5,lz=6,tx=16,ty=4,vx=2]", "named twice"),
                       ("zmarch[lz=5,tx=16,ty=4,vx=(2, 2)]", "copy the key"),  # a tuple for int
                       ("naive[block=(32)]", "copy the key")):
        with pytest.raises(ConfigError, match=match):
            mx.from_key(CELL, key)
    # the parameters decide, not the spelling: order and spaces as a person may type them
    assert mx.from_key(CELL, "zmarch[vx=2, tx=16,lz=5,ty=4]").key == SEED
    # a key leaves out a parameter at its first value, which is not always the default:
    # the temporal kernel's pipe=0 (its space's default is the pipelined pipe=1)
    t4 = Cell.parse("star_1_t4/64x32x24/fp32")
    plain = mx.build("temporal", t4, {**mx.defaults("temporal", t4), "pipe": 0})
    assert plain is not None and "pipe" not in plain.key
    assert mx.from_key(t4, plain.key).source == plain.source


def test_a_seed_operator_starts_the_cell_and_is_judged_against_the_tables(tmp_path) -> None:
    table, original = _table(tmp_path)
    forge = Forge([CELL], table, tmp_path / "p.jsonl", emulated_compiler, emulated_sessions,
                  seed_design="ztile", seeds={CELL.id: SEED})  # the named operator wins
    assert forge._op(CELL).key == SEED and CELL.id in forge.seeded
    assert forge.start[CELL.id][0] == "naive"  # the final pass's reference: the table's
    # the table's own operator as a seed: nothing to judge, the cell is not seeded
    same = Forge([CELL], table, tmp_path / "q.jsonl", emulated_compiler, emulated_sessions,
                 seeds={CELL.id: mx.operator_for(CELL, mx.load_table(table)).key})
    assert CELL.id not in same.seeded and same._op(CELL).design == "naive"

    summary = forge_matrix([CELL], sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=table, perf_log=tmp_path / "perf.jsonl",
                           idea_log=tmp_path / "ideas.md", changes=["pf"], rounds=1,
                           seeds={CELL.id: SEED}, say=lambda m: None)
    (rec,) = summary["final"]
    assert rec["start"] == mx.operator_for(CELL, {CELL.id: original}).key
    assert rec["seeded"] in ("kept", "reverted") and not summary["regressed"]
    entry = mx.load_table(table)[CELL.id]
    if rec["seeded"] == "reverted":  # emulator timings decide which; both leave a sound table
        assert entry == original
    else:
        assert entry["design"] == "zmarch" and f"seeded {SEED} (from naive)" in entry["history"]
    first = json.loads((tmp_path / "perf.jsonl").read_text().splitlines()[0])
    assert first["from"] == SEED  # round 1 started from the seed


def test_bad_seeds_are_refused_before_any_work(tmp_path) -> None:
    assert parse_seeds([f"{CELL.id}={SEED}"]) == {CELL.id: SEED}
    # the cell id as --cell-ids spells it (Cell.parse: lower-case shape)
    assert parse_seeds([f"star_1/32X12X10/fp32={SEED}"]) == {CELL.id: SEED}
    for specs, match in (([SEED], "not CELL=KEY"), ([f"{CELL.id}=zmarch"], "not CELL=KEY"),
                         ([f"{CELL.id}={SEED}", f"star_1/32X12X10/fp32={SEED}"], "two seeds"),
                         ([f"=={SEED}"], "bad cell id")):
        with pytest.raises(ConfigError, match=match):
            parse_seeds(specs)
    with pytest.raises(ConfigError, match="does not forge"):
        check_plan(1, ["lz"], None, {"star_2/32x12x10/fp32": SEED}, [CELL])
    with pytest.raises(ConfigError, match="builds"):
        check_plan(1, ["lz"], None, {CELL.id: "zmarch[lz=5]"}, [CELL])
    out = tmp_path / "out"
    for spec in (f"{CELL.id}=zmarch[lz=5]", f"box_1/24x10x9/fp64={SEED}", SEED):
        assert main(["stencil", "forge", "--emulate", "--cell-ids", CELL.id, "--changes", "lz",
                     "--seed-operator", spec, "--out", str(out)]) == 2
    assert not out.exists()


@pytest.mark.slow
def test_the_cli_and_the_gpu_processes_take_seed_operators(tmp_path) -> None:
    table, _ = _table(tmp_path)
    out = tmp_path / "cli"
    assert main(["stencil", "forge", "--emulate", "--cell-ids", CELL.id, "--changes", "lz",
                 "--seed-operator", f"{CELL.id}={SEED}", "--table", str(table),
                 "--out", str(out)]) == 0
    (rec,) = json.loads((out / "forge-summary.json").read_text())["final"]
    assert rec["seeded"] in ("kept", "reverted")
    first = json.loads((out / "perf-log.jsonl").read_text().splitlines()[0])
    assert first["from"] == SEED
    # two processes: each gets the seeds of its own cells only
    box = Cell.parse("box_1/24x10x9/fp64")
    lines: list[str] = []
    summary = forge_parallel([CELL, box], tmp_path / "par", gpus=2, start_table=table,
                             rounds=1, changes=["lz"], emulate=True, devices=[],
                             say=lines.append, seeds={CELL.id: SEED})
    # a seed handed to the other process would fail its plan ("does not forge"): exit 2
    assert summary["failed"] == [] and [p["returncode"] for p in summary["parts"]] == [0, 0]
    recs = {r["cell"]: r for r in summary["final"]}
    assert recs[CELL.id]["seeded"] in ("kept", "reverted")


def test_a_seed_no_round_measured_is_reported_not_dropped_silently(tmp_path) -> None:
    table = tmp_path / "matrix.json"
    table.write_text(json.dumps({"version": mx.TABLE_VERSION, "cells": {}}))
    said: list[str] = []
    summary = forge_matrix([CELL], sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=table, perf_log=tmp_path / "perf.jsonl",
                           idea_log=tmp_path / "ideas.md", changes=["cw"], rounds=1,  # fp32: none
                           seeds={CELL.id: SEED}, say=said.append)
    assert summary["final"] == [] and mx.load_table(table) == {}
    assert any(f"{CELL.id}: the seeded {SEED} was never measured" in m for m in said)
