"""The ``tpe`` forge round: its search space, its first trial (the incumbent), and the round
end to end on the host emulator (lockstep batches, every trial told, the gate decides)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from optuna.trial import TrialState

from kernforge.core import LaunchError
from kernforge.forge import bo
from kernforge.forge.compile import Built
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
    assert space is not None
    full = mx.space("zmarch", cell)
    assert set(space.names) == {"vx", "lz", "ty", "tx", "variant"}  # l1 left as it is
    for name in ("vx", "lz", "ty", "tx"):
        assert list(space[name].choices) == sorted(full[name])
    options = bo._options("zmarch", cell)
    # l1 and z-marching's minb left as they are (no effect; spills)
    assert set(options) == set(full) - {"vx", "lz", "ty", "tx", "l1", "minb"}
    assert "minb" in bo._options("zbox", Cell(STENCILS["box_1"], cell.shape, cell.precision))
    variants = list(space["variant"].choices)
    assert len(set(variants)) == len(variants) > 5
    geometry = {k: params[k] for k in ("vx", "lz", "ty", "tx")}
    for combo in variants:  # every option combination offered builds at this geometry
        assert mx.build("zmarch", cell, {**geometry, **dict(zip(options, combo))}) is not None
    # fewer than a fifth of all combinations build: drawn one by one, most would be refused
    every = 1
    for name in options:
        every *= len(full[name])
    assert len(variants) < every / 5
    # the first trial (the baseline) builds the incumbent itself (the same key)
    own = mx.build("zmarch", cell, params)
    again = mx.build("zmarch", cell, bo._config_params("zmarch", cell, space.baseline))
    assert own is not None and again is not None and again.key == own.key
    assert dict(zip(options, space.baseline["variant"]))["cw"] == 1
    # an incumbent off the value lists (a slab's lz=30) keeps its value among the choices
    off = bo.search_space("zmarch", cell, {**params, "lz": 30, "l1": 1})
    assert off is not None and 30 in off["lz"].choices and off.baseline["lz"] == 30
    assert off.baseline["l1"] == 1 and list(off["l1"].choices) == [1]  # l1 kept as it is
    assert bo._config_params("zmarch", cell, off.baseline)["l1"] == 1



def test_the_seed_is_a_parameter_hashed_as_its_round_name_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1 (``tpe``) hashes the cell's id, seed N the id and ``#tpeN``: a rerun of a recorded
    round asks what it asked before the seed became a parameter."""
    import zlib

    from kernforge.tune.samplers import tpe

    seeds: list[int | None] = []
    real = tpe.TPE

    def spy(space, *, seed=None, **kw):
        seeds.append(seed)
        return real(space, seed=seed, **kw)

    monkeypatch.setattr(tpe, "TPE", spy)
    cell = CELLS[0]
    space = bo.search_space("zmarch", cell, mx.defaults("zmarch", cell))
    assert space is not None
    for seed in (1, 2, 9):
        bo._study(cell, space, seed)
    assert seeds == [zlib.crc32(cell.id.encode()), zlib.crc32(f"{cell.id}#tpe2".encode()),
                     zlib.crc32(f"{cell.id}#tpe9".encode())]

@pytest.mark.slow
def test_a_tpe_round_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lockstep batches; every trial told (none left running), also the failing ones: a
    candidate that does not compile or launch is logged, never compiled or screened twice;
    every searched cell goes through the gate."""
    monkeypatch.setattr(bo, "BATCHES", 2)
    monkeypatch.setattr(bo, "PER_BATCH", 5)
    studies: list = []
    real_study = bo._study

    def keep(cell, space, seed=1):
        studies.append(real_study(cell, space, seed))
        return studies[-1]

    monkeypatch.setattr(bo, "_study", keep)
    compiled: list[tuple[str, str]] = []
    screened: list[tuple[str, str]] = []

    incumbents: set[str] = set()

    seen: dict[str, dict[tuple[str, str], int]] = {"c": {}, "l": {}}

    def bad(cell_id: str, key: str, what: str) -> bool:  # every third candidate fails
        if key in incumbents:
            return False
        order = seen[what].setdefault((cell_id, key), len(seen[what]))
        return order % 3 == 1

    def compiler(ops):
        ops = list(ops)
        compiled.extend({(op.cell_id, op.key) for op in ops})  # compile_all dedups a call
        out = emulated_compiler(ops)
        return [Built(b.op, None, "injected", 0.0) if bad(b.op.cell_id, b.op.key, "c") else b
                for b in out]

    @contextlib.contextmanager
    def sessions(cell):
        with emulated_sessions(cell) as real:
            class Failing:
                def screen(self, built):
                    screened.append((built.op.cell_id, built.op.key))
                    if bad(built.op.cell_id, built.op.key, "l"):
                        raise LaunchError("injected")
                    return real.screen(built)

                def __getattr__(self, name):
                    return getattr(real, name)
            yield Failing()

    said: list[str] = []
    kw: dict = {"table_path": tmp_path / "matrix.json", "perf_log": tmp_path / "perf.jsonl",
                "idea_log": tmp_path / "ideas.md", "device": "host-emulator"}
    forge_matrix(CELLS, sessions=emulated_sessions, compiler=emulated_compiler,
                 changes=["design"], say=lambda m: None, **kw)
    table = mx.load_table(tmp_path / "matrix.json")
    incumbents.update(mx.build(table[c.id]["design"], c, table[c.id]["params"]).key
                      for c in CELLS)
    compiled.clear()
    summary = forge_matrix(CELLS, sessions=sessions, compiler=compiler, changes=["tpe"],
                           say=said.append, **kw)
    assert [r["change"] for r in summary["rounds"]] == ["tpe"]
    tpe = summary["rounds"][0]
    assert tpe["accepted"] + tpe["rejected"] + tpe["unchanged"] == len(CELLS)
    assert sum("batch 2/2" in m for m in said) == 1  # lockstep: one compile per batch
    assert len(studies) == len(CELLS)
    for sampler in studies:  # every trial told
        assert not sampler.study.get_trials(states=(TrialState.RUNNING,))
    lines = [y for y in map(json.loads, (tmp_path / "perf.jsonl").read_text().splitlines())
             if y["change"] == "tpe"]  # not the design round's
    searched = [x for x in lines if x["verdict"] == "searched"]
    assert {x["cell"] for x in searched} == {c.id for c in CELLS}
    for x in searched:
        assert 1 <= x["trials"] + x["failed"] <= 2 * 5 + 1
        assert x["incumbent_screened"] > 0 and x["device"] == "host-emulator" and x["date"]
        times = [t for _, t in x["screened"]]
        assert times == sorted(times) and x["from"] not in [k for k, _ in x["screened"]]
        # then the gate's verdict on the cell
        assert [y for y in lines if y["cell"] == x["cell"] and (
            y["verdict"] == "accepted" or str(y.get("reason")).startswith(
                ("no candidate faster", "not faster", "oracle")))]
    assert sum(x["failed"] for x in searched) >= 2
    failures = [x for x in lines if x["verdict"] == "rejected"
                and x.get("reason") in ("compile error", "LaunchError: injected")]
    assert {x["reason"] for x in failures} == {"compile error", "LaunchError: injected"}
    # a failed candidate is not compiled again in a later batch, nor screened twice
    keys_failed = {(x["cell"], x["to"]) for x in failures}
    assert all(compiled.count(k) == 1 for k in keys_failed)
    assert all(screened.count(k) <= 1 for k in keys_failed)
    for x in lines:
        if x["verdict"] == "accepted":  # the gate's rule, as logged
            assert x["speedup"] >= 1.02 and x["ci"][0] > 1.0
    assert not summary["regressed"]
    table = mx.load_table(tmp_path / "matrix.json")
    for cell in CELLS:
        assert mx.build(table[cell.id]["design"], cell, table[cell.id]["params"]) is not None
    assert "| 1 | tpe: Bayesian optimization" in (tmp_path / "ideas.md").read_text()


def test_a_naive_incumbent_and_a_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """A cell still on the naive kernel (block shapes from JSON) is searched too, its few
    operators each once; past the deadline no batch after the first starts."""
    cell = CELLS[0]
    ops = bo.first_batch(cell, "naive", {"block": [32, 8, 1]})
    assert len({op.key for op in ops}) == len(ops) == len(mx.space("naive", cell)["block"])
    monkeypatch.setattr(bo, "PER_BATCH", 3)
    ticks = iter(range(0, 10_000, 100))  # every clock reading 100 s later
    said: list[str] = []
    forge_matrix([cell], sessions=emulated_sessions, compiler=emulated_compiler,
                 table_path=tmp_path / "matrix.json", perf_log=tmp_path / "perf.jsonl",
                 idea_log=tmp_path / "ideas.md", changes=["tpe"], budget_s=250,
                 clock=lambda: float(next(ticks)), say=said.append)
    assert any("batches 2-3 skipped" in m for m in said)
    assert not any("batch 2/3" in m for m in said)


@pytest.mark.slow
def test_the_first_batch_is_known_before_the_run(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``first_batch`` (what ``kernforge stencil precompile`` compiles ahead) is exactly what the
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


@pytest.mark.slow
def test_tpe2_asks_other_points_from_the_same_incumbent(tmp_path: Path) -> None:
    """Seeded by the cell's id and the round's name: tpe asks the same first batch every run,
    tpe2 another one (besides the incumbent, first in both), and it runs as a round."""
    cell = CELLS[0]
    params = mx.defaults("zmarch", cell)
    first = {op.key for op in bo.first_batch(cell, "zmarch", params)}
    again = {op.key for op in bo.first_batch(cell, "zmarch", params)}
    second = {op.key for op in bo.first_batch(cell, "zmarch", params, seed=2)}
    others = [{op.key for op in bo.first_batch(cell, "zmarch", params, seed=i)}
              for i in range(3, 7)]
    inc = mx.build("zmarch", cell, params)
    assert inc is not None and first == again and inc.key in first & second
    assert all(inc.key in o and len(o) > 1 for o in others)
    batches = {frozenset(first), frozenset(second), *map(frozenset, others)}
    assert len(batches) == 6
    summary = forge_matrix([cell], sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=tmp_path / "matrix.json", perf_log=tmp_path / "p.jsonl",
                           idea_log=tmp_path / "ideas.md", changes=["design", "tpe2"],
                           say=lambda m: None)
    assert [r["change"] for r in summary["rounds"]] == ["design", "tpe2"]
    logged = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert any(x["change"] == "tpe2" and x["verdict"] == "searched" for x in logged)
