"""The forge loop end to end on the host emulator: rounds, gate, table, logs, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.forge.run import forge_matrix
from kernforge.forge.sessions import emulated_compiler, emulated_sessions
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

CELLS = [Cell(STENCILS["star_1"], Shape(32, 12, 10), Precision.FP32),
         Cell(STENCILS["box_1"], Shape(24, 10, 9), Precision.FP64)]


def _forge(tmp_path: Path, rounds: int) -> dict:
    return forge_matrix(CELLS, sessions=emulated_sessions, compiler=emulated_compiler,
                        table_path=tmp_path / "matrix.json", perf_log=tmp_path / "perf.jsonl",
                        idea_log=tmp_path / "ideas.md", rounds=rounds, device="host-emulator",
                        say=lambda m: None)


def test_forge_rounds_write_table_and_logs(tmp_path: Path) -> None:
    summary = _forge(tmp_path, rounds=2)
    table = mx.load_table(tmp_path / "matrix.json")
    assert set(table) == {c.id for c in CELLS}  # every incumbent passed the oracle and is kept
    for cell in CELLS:
        entry = table[cell.id]
        assert entry["seconds"] > 0 and entry["error"] <= cell.precision.tolerance
        assert mx.build(entry["design"], cell, entry["params"]) is not None
    lines = [json.loads(x) for x in (tmp_path / "perf.jsonl").read_text().splitlines()]
    assert lines and all(x["verdict"] in ("accepted", "rejected") for x in lines)
    assert {x["round"] for x in lines} <= {1, 2}
    accepted = [x for x in lines if x["verdict"] == "accepted"]
    for x in accepted:  # the gate's rule, as logged
        assert x["speedup"] >= 1.02 and x["ci"][0] > 1.0
    assert [r["change"] for r in summary["rounds"]] == ["design", "pf"]
    assert len(summary["final"]) == len(CELLS)
    ideas = (tmp_path / "ideas.md").read_text()
    assert "| 1 | design:" in ideas and "Zero-regression pass" in ideas


@pytest.mark.slow  # two forge runs; the rounds test above is the quick one
def test_forge_resumes_from_the_table(tmp_path: Path) -> None:
    _forge(tmp_path, rounds=1)
    before = mx.load_table(tmp_path / "matrix.json")
    _forge(tmp_path, rounds=1)  # starts from the accepted incumbents, not from naive
    after = mx.load_table(tmp_path / "matrix.json")
    for cid, entry in before.items():
        if after[cid]["design"] != entry["design"]:  # only through an accepted change
            assert len(after[cid]["history"]) > len(entry["history"])
            assert "design:" in after[cid]["history"][-1]
        # the lineage of accepted changes carries over from run to run
        assert after[cid]["history"][:len(entry["history"])] == entry["history"]


def test_a_parameter_round_never_offers_the_incumbent_again() -> None:
    """Parameters added after a design keep their first value implicit (its operators keep
    their keys), so an incumbent from the table lacks them: the round must not re-offer it."""
    from kernforge.forge.loop import Incumbent, _candidates, round_plan

    cell = Cell(STENCILS["star_1"], Shape(64, 32, 16), Precision.FP32)
    inc = Incumbent("zmarch", {"tx": 32, "ty": 8, "vx": 2, "lz": 14})
    own = mx.build(inc.design, cell, inc.params)
    assert own is not None
    for change in ("pf", "smem"):
        keys = [op.key for op in _candidates(cell, inc, change)]
        assert keys and own.key not in keys and len(set(keys)) == len(keys)
    t4 = Cell(STENCILS["star_1_t4"], Shape(64, 32, 16), Precision.FP32)
    keys = [op.key for op in _candidates(t4, Incumbent("temporal", {"tx": 32, "ty": 32}), "pipe")]
    assert keys == ["temporal[lz=14,pipe=1,steps=4,tx=32,ty=32]"]
    keys = [op.key for op in _candidates(cell, Incumbent("ztile", {"tx": 8, "ty": 4}), "ca")]
    assert keys == ["ztile[ca=1,lz=14,st=2,tx=8,ty=4,vx=4]"] and round_plan(1, ["ca"]) == ["ca"]
    plan = round_plan(16)
    assert plan[0] == "design" and {"vx", "ry", "lz", "ty", "tx", "block", "pipe", "pf", "smem",
                                     "cx", "cy", "minb", "fs"} <= set(plan)


def test_an_option_the_incumbent_excludes_is_offered_without_the_conflict() -> None:
    """``ry`` needs the plain z-marching kernel: an incumbent with ``pn`` (or with ``pf`` and
    ``xs`` together) is offered ``ry`` with the conflicting options set back to their defaults,
    its geometry kept; an option that builds as asked keeps every other option."""
    from kernforge.forge.loop import Incumbent, _candidates

    cell = Cell(STENCILS["star_2"], Shape(64, 32, 16), Precision.FP32)
    keys = [op.key for op in _candidates(
        cell, Incumbent("zmarch", {"tx": 32, "ty": 8, "vx": 4, "lz": 8, "pn": 1}), "ry")]
    assert keys == ["zmarch[lz=8,ry=2,tx=32,ty=8,vx=4]", "zmarch[lz=8,ry=4,tx=32,ty=8,vx=4]"]
    keys = [op.key for op in _candidates(
        cell, Incumbent("zmarch", {"tx": 16, "ty": 4, "vx": 4, "lz": 8, "pf": 2, "xs": 1}), "sc")]
    assert keys == ["zmarch[lz=8,sc=1,tx=16,ty=4,vx=4]"]
    keys = [op.key for op in _candidates(
        cell, Incumbent("zmarch", {"tx": 32, "ty": 8, "vx": 4, "lz": 8, "ry": 2}), "sc")]
    assert keys == ["zmarch[lz=8,ry=2,sc=1,tx=32,ty=8,vx=4]"]


def test_the_design_round_also_offers_the_incumbents_geometry() -> None:
    """A new design is screened at its defaults and with the incumbent's values of the
    parameters the two share, so it is not judged on a worse tile than the incumbent's."""
    from kernforge.forge.loop import Incumbent, _candidates

    cell = Cell(STENCILS["star_1"], Shape(64, 32, 16), Precision.FP32)
    inc = Incumbent("zmarch", {"tx": 16, "ty": 4, "vx": 2, "lz": 7, "pf": 2})
    ops = _candidates(cell, inc, "design")
    keys = [op.key for op in ops]
    assert len(set(keys)) == len(keys)
    assert "ztile[lz=7,st=2,tx=16,ty=4,vx=2]" in keys  # tx, ty, vx, lz shared; pf is not
    default = mx.build("ztile", cell, mx.defaults("ztile", cell))
    assert default is not None and default.key in keys
    assert {op.design for op in ops} == {"ztile", "planesweep", "naive"}


def test_the_design_round_does_not_carry_a_name_that_means_something_else() -> None:
    """``ry`` is the plane sweep's rows per thread in a shared tile and z-marching's rows with
    their own queues: a plane-sweep incumbent's ``ry`` is not given to the z-marching candidate
    (nor the reverse), which keeps the incumbent's geometry as the plain kernel."""
    from kernforge.forge.loop import Incumbent, _candidates

    cell = Cell(STENCILS["star_1"], Shape(256, 256, 256), Precision.FP32)
    for ry in (4, 8):
        keys = [op.key for op in _candidates(cell, Incumbent(
            "planesweep", {"tx": 32, "ty": 4, "vx": 1, "ry": ry, "lz": 64}), "design")]
        assert "zmarch[lz=64,tx=32,ty=4,vx=1]" in keys
        assert not any(k.startswith("zmarch") and "ry=" in k for k in keys)
    keys = [op.key for op in _candidates(cell, Incumbent(
        "zmarch", {"tx": 32, "ty": 8, "vx": 4, "lz": 8, "ry": 2}), "design")]
    assert not any(k.startswith("planesweep") and "ry=2" in k for k in keys)


def test_explicit_changes_replace_the_fixed_order() -> None:
    import pytest

    from kernforge.core import ConfigError
    from kernforge.forge.loop import round_plan

    assert round_plan(2, ["design", "st", "lz"]) == ["design", "st", "lz"]
    with pytest.raises(ConfigError, match="bogus"):
        round_plan(1, ["design", "bogus"])
    assert "st" in round_plan(99)


def test_a_candidate_that_cannot_launch_is_rejected_not_fatal(tmp_path: Path) -> None:
    """A variant the driver refuses (CUDA_ERROR_INVALID_VALUE, too many resources) is one
    rejected candidate in the performance log; the round and the run go on."""
    from collections.abc import Iterator
    from contextlib import contextmanager

    from kernforge.core import LaunchError

    @contextmanager
    def sessions(cell: Cell) -> Iterator[object]:
        with emulated_sessions(cell) as session:
            real = session.screen

            def screen(built):  # type: ignore[no-untyped-def]
                if built.op.design != "naive":
                    raise LaunchError("launch failed: CUDA_ERROR_INVALID_VALUE")
                return real(built)

            session.screen = screen  # type: ignore[method-assign]
            yield session

    summary = forge_matrix(CELLS[:1], sessions=sessions, compiler=emulated_compiler,
                           table_path=tmp_path / "matrix.json", perf_log=tmp_path / "p.jsonl",
                           idea_log=tmp_path / "ideas.md", rounds=2, say=lambda m: None)
    lines = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    refused = [x for x in lines if "LaunchError" in x.get("reason", "")]
    assert refused and all(x["verdict"] == "rejected" for x in refused)
    assert mx.load_table(tmp_path / "matrix.json")[CELLS[0].id]["design"] == "naive"
    assert [r["round"] for r in summary["rounds"]] == [1, 2]


class _CostModel:
    """Emulated sessions (real kernels, real oracle) with deterministic timings: a naive
    operator costs ``naive`` seconds, every other design ``other``."""

    def __init__(self, naive: float, other: float) -> None:
        self.naive, self.other = naive, other

    def t(self, built) -> float:  # type: ignore[no-untyped-def]
        return self.naive if built.op.design == "naive" else self.other

    def __call__(self, cell: Cell):  # type: ignore[no-untyped-def]
        from contextlib import contextmanager

        @contextmanager
        def session():  # type: ignore[no-untyped-def]
            with emulated_sessions(cell) as s:
                s.screen = self.t  # type: ignore[method-assign]
                s.compare = lambda a, b: (self.t(a) / self.t(b), 0.99 * self.t(a) / self.t(b),
                                          1.01 * self.t(a) / self.t(b), self.t(a), self.t(b))
                yield s
        return session()


def test_the_final_pass_compares_changed_cells_with_their_start(tmp_path: Path) -> None:
    from kernforge.forge.final import regressions
    from kernforge.forge.loop import Forge

    cell = CELLS[0]
    kw: dict = {"compiler": emulated_compiler, "table_path": tmp_path / "m.json",
                "perf_log": tmp_path / "p.jsonl", "idea_log": tmp_path / "i.md",
                "say": lambda m: None}
    summary = forge_matrix([cell], sessions=_CostModel(1.0, 0.5), rounds=1, **kw)
    [rec] = summary["final"]
    assert rec["changed"] and rec["start"].startswith("naive") and rec["speedup_vs_start"] == 2.0
    assert not rec["regressed"] and not summary["regressed"]
    # the same operators on a machine where the new design is now slower than the naive one:
    forge = Forge([cell], kw["table_path"], kw["perf_log"], emulated_compiler,
                  _CostModel(1.0, 1.5))
    forge.start[cell.id] = ("naive", mx.defaults("naive", cell))
    [rec] = regressions(forge)
    assert rec["regressed"] and rec["speedup_vs_start"] < 1.0
    # a later run that changes nothing: its time is compared only as drift, never a verdict
    summary = forge_matrix([cell], sessions=_CostModel(1.0, 0.6), rounds=1, **kw)
    [rec] = summary["final"]
    assert not rec["changed"] and "speedup_vs_start" not in rec
    assert rec["drift"] and not rec["regressed"]
    assert "drift, not a verdict" in (tmp_path / "i.md").read_text()


def test_the_final_pass_judges_the_deployed_build(tmp_path: Path) -> None:
    """The rounds may time another build than dispatch loads (GPU: nvcc cubins vs NVRTC): with
    a final_compiler the final pass times the deployed one; a win that exists only in the
    rounds' build is reverted, and a kept cell's entry carries its deployed time."""
    import dataclasses

    cell = CELLS[0]

    def deployed_builds(ops):  # type: ignore[no-untyped-def]
        return [dataclasses.replace(b, deployed=True) for b in emulated_compiler(ops)]

    class Builds(_CostModel):  # the non-naive design: 0.5 s as the rounds built it
        def __init__(self, deployed: float) -> None:
            super().__init__(1.0, 0.5)
            self.deployed = deployed

        def t(self, built) -> float:  # type: ignore[no-untyped-def]
            if built.op.design != "naive" and built.deployed:
                return self.deployed
            return super().t(built)

    def run(deployed: float, name: str) -> tuple[dict, dict]:
        summary = forge_matrix([cell], sessions=Builds(deployed), compiler=emulated_compiler,
                               final_compiler=deployed_builds, rounds=1,
                               table_path=tmp_path / f"{name}.json",
                               perf_log=tmp_path / "p.jsonl", idea_log=tmp_path / "i.md",
                               say=lambda m: None)
        return summary, mx.load_table(tmp_path / f"{name}.json")[cell.id]

    summary, entry = run(1.5, "slower")  # faster in the rounds, slower as deployed
    [rec] = summary["final"]
    assert rec["build"] == "deployed" and rec["changed"] and rec["speedup_vs_start"] < 1.0
    assert rec["reverted"] and entry["design"] == "naive" and entry["seconds"] == 1.0
    summary, entry = run(0.8, "kept")
    [rec] = summary["final"]
    assert not rec.get("reverted") and entry["design"] != "naive"
    assert entry["seconds"] == 0.8  # the deployed time, not the rounds' 0.5
    assert "in the deployed build (NVRTC)" in (tmp_path / "i.md").read_text()
    # without a final compiler the rounds' build is judged (the emulator: one build)
    summary = forge_matrix([cell], sessions=Builds(1.5), compiler=emulated_compiler, rounds=1,
                           table_path=tmp_path / "plain.json", perf_log=tmp_path / "p.jsonl",
                           idea_log=tmp_path / "i2.md", say=lambda m: None)
    [rec] = summary["final"]
    assert rec["build"] == "rounds'" and not rec.get("reverted")


def test_a_start_that_fails_in_the_final_build_leaves_the_final_judged_alone(
        tmp_path: Path) -> None:
    import dataclasses

    cell = CELLS[0]

    def no_naive(ops):  # type: ignore[no-untyped-def]
        return [dataclasses.replace(b, cubin=None, log="nvrtc: error in naive")
                if b.op.design == "naive" else b for b in emulated_compiler(ops)]

    summary = forge_matrix([cell], sessions=_CostModel(1.0, 0.5), compiler=emulated_compiler,
                           final_compiler=no_naive, rounds=1, table_path=tmp_path / "m.json",
                           perf_log=tmp_path / "p.jsonl", idea_log=tmp_path / "i.md",
                           say=lambda m: None)
    [rec] = summary["final"]
    assert rec["changed"] and "error in naive" in rec["start_failed"]
    assert rec["oracle_ok"] and not rec["regressed"] and "speedup_vs_start" not in rec
    assert mx.load_table(tmp_path / "m.json")[cell.id]["design"] != "naive"


def test_a_seeded_design_is_tuned_and_judged_against_the_tables_operator(tmp_path: Path) -> None:
    """--seed-design: the cells start from that design's defaults (so its parameter rounds can
    run), while the final pass still compares the outcome with the table's operator."""
    import pytest

    from kernforge.core import ConfigError

    cell = Cell(STENCILS["star_1"], Shape(32, 12, 10), Precision.FP32)
    naive = mx.build("naive", cell, mx.defaults("naive", cell))
    assert naive is not None
    table = tmp_path / "matrix.json"
    table.write_text(json.dumps({"version": mx.TABLE_VERSION, "cells": {cell.id: {
        "design": "naive", "params": naive.params, "seconds": 1.0, "error": 0.0,
        "history": ["r1 design: earlier"]}}}))
    summary = forge_matrix([cell], sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=table, perf_log=tmp_path / "perf.jsonl",
                           idea_log=tmp_path / "ideas.md", changes=["pf"], rounds=1,
                           seed_design="zmarch", say=lambda m: None)
    entry = mx.load_table(table)[cell.id]
    (final,) = summary["final"]
    assert final["changed"] and final["start"] == naive.key  # judged against the table's
    assert not summary["regressed"]  # a seeded cell that ends slower is reverted, not kept
    if final.get("reverted"):  # emulator timings decide which; both must leave a sound table
        assert entry["design"] == "naive" and entry["history"] == ["r1 design: earlier"]
        assert "a regression) (1)" in (tmp_path / "ideas.md").read_text()
    else:
        assert entry["design"] == "zmarch"  # measured and saved as the incumbent in round 1
        assert entry["history"][:2] == ["r1 design: earlier", "seeded zmarch (from naive)"]
    from kernforge.forge.run import _append_ideas

    _append_ideas(tmp_path / "i2.md", [], [{"cell": cell.id, "regressed": False,
                                            "reverted": True}], "dev", 1)
    assert f"a regression) (1): {cell.id}" in (tmp_path / "i2.md").read_text()
    # restore() puts the entry from before the run back (what a slower outcome triggers)
    from kernforge.forge.loop import Forge

    forge = Forge([cell], table, tmp_path / "p2.jsonl", emulated_compiler, emulated_sessions,
                  seed_design="planesweep")
    assert forge.incumbents[cell.id].design == "planesweep" and cell.id in forge.seeded
    forge.table[cell.id] = {"design": "planesweep", "params": {}, "seconds": 9.0}
    forge.restore(cell.id)
    assert mx.load_table(table)[cell.id] == entry
    with pytest.raises(ConfigError, match="bogus"):
        forge_matrix([cell], sessions=emulated_sessions, compiler=emulated_compiler,
                     table_path=table, perf_log=tmp_path / "p.jsonl", idea_log=tmp_path / "i.md",
                     rounds=1, seed_design="bogus", say=lambda m: None)


def _seeded_forge(tmp_path: Path, table: Path):
    from kernforge.forge.loop import Forge

    cell = Cell(STENCILS["star_1"], Shape(32, 12, 10), Precision.FP32)
    naive = mx.build("naive", cell, mx.defaults("naive", cell))
    assert naive is not None
    original = json.loads(json.dumps({"design": "naive", "params": naive.params, "seconds": 1.0,
                                      "error": 0.0, "history": ["r1 design: earlier"]}))
    table.write_text(json.dumps({"version": mx.TABLE_VERSION, "cells": {cell.id: original}}))
    forge = Forge([cell], table, tmp_path / "p.jsonl", emulated_compiler, emulated_sessions,
                  seed_design="zmarch")
    return forge, cell, original


def test_a_seeded_operator_is_provisional_until_the_final_pass(tmp_path: Path) -> None:
    """Killed between its first acceptance and the final pass, a seeded run leaves the old
    entry in force for every reader: the seeded operator was never compared with it."""
    table = tmp_path / "matrix.json"
    forge, cell, original = _seeded_forge(tmp_path, table)
    op = forge._op(cell)
    forge._save(cell, op, 5.0, 0.0, 0)  # what round 1 writes for the seeded incumbent
    raw = json.loads(table.read_text())["cells"][cell.id]
    assert raw["design"] == "zmarch" and raw["provisional"]["original"] == original
    assert mx.load_table(table)[cell.id] == original  # dispatch, resume and merge see this
    assert mx.operator_for(cell, mx.load_table(table)).design == "naive"


def test_a_seeded_design_is_kept_only_by_the_gates_rule(tmp_path: Path) -> None:
    table = tmp_path / "matrix.json"
    forge, cell, original = _seeded_forge(tmp_path, table)
    rec = {"cell": cell.id, "changed": True, "oracle_ok": True, "error": 1e-7, "now_s": 0.5,
           "speedup_vs_start": 1.001, "ci": [0.90, 1.10]}
    forge.settle([rec])  # within noise: the table's operator stays
    assert rec["reverted"] and mx.load_table(table)[cell.id] == original
    forge, cell, original = _seeded_forge(tmp_path, table)
    rec = {"cell": cell.id, "changed": True, "oracle_ok": True, "error": 1e-7, "now_s": 0.5,
           "speedup_vs_start": 1.05, "ci": [1.03, 1.07]}
    forge.settle([rec])  # never saved during the rounds: the final pass writes it
    kept = json.loads(table.read_text())["cells"][cell.id]
    assert rec["seeded"] == "kept" and kept["design"] == "zmarch" and "provisional" not in kept
    assert kept["seconds"] == 0.5 and "seeded zmarch (from naive)" in kept["history"]
    forge, cell, original = _seeded_forge(tmp_path, table)
    rec = {"cell": cell.id, "changed": True, "oracle_ok": False, "error": 1.0, "now_s": 0.5,
           "speedup_vs_start": 2.0, "ci": [1.9, 2.1]}
    forge.settle([rec])  # fast but wrong
    assert rec["reverted"] and mx.load_table(table)[cell.id] == original


def test_commit_or_revert_after_the_final_pass(tmp_path: Path) -> None:
    """Deterministic timings: a change accepted in the rounds that is slower than its start in
    the final pass is reverted; a seeded design is kept when it wins by the gate's rule and
    put back when it loses."""
    cell = CELLS[0]
    kw: dict = {"compiler": emulated_compiler, "perf_log": tmp_path / "p.jsonl",
                "idea_log": tmp_path / "i.md"}
    cost = _CostModel(1.0, 0.5)

    def slower_after_round_1(m: str) -> None:  # the machine changes before the final pass
        if m.startswith("round 1 (design): {"):  # its end, not its "compiling" line
            cost.other = 1.5

    table = tmp_path / "a.json"
    summary = forge_matrix([cell], sessions=cost, rounds=1, table_path=table,
                           say=slower_after_round_1, **kw)
    [rec] = summary["final"]
    assert rec["changed"] and rec["reverted"] and not summary["regressed"]
    entry = mx.load_table(table)[cell.id]  # no entry before: the checked start is written
    assert entry["design"] == "naive" and entry["error"] <= cell.precision.tolerance
    # seeded, winning: kept
    for other, kept in ((0.5, True), (1.5, False)):
        table = tmp_path / f"s{other}.json"
        original = {"design": "naive", "params": {"block": [32, 8, 1]}, "seconds": 1.0,
                    "error": 0.0, "history": []}
        table.write_text(json.dumps({"version": mx.TABLE_VERSION,
                                     "cells": {cell.id: original}}))
        summary = forge_matrix([cell], sessions=_CostModel(1.0, other), changes=["lz"],
                               rounds=1, table_path=table, seed_design="zmarch",
                               say=lambda m: None, **kw)
        [rec] = summary["final"]
        entry = mx.load_table(table)[cell.id]
        assert rec["seeded"] == ("kept" if kept else "reverted")
        assert entry == original if not kept else entry["design"] == "zmarch"


def test_a_pair_round_changes_two_parameters_at_once() -> None:
    """``pairs``: the incumbent with two of the pair parameters changed, distinct operators,
    never the incumbent, at most PAIR_LIMIT, the same candidates on every call; and the
    combination a one-change climb cannot reach is among them when the cell has few."""
    from kernforge.forge.loop import Incumbent, _candidates
    from kernforge.forge.pairs import PAIR_LIMIT
    from kernforge.stencil import designs

    cell = Cell(STENCILS["box_2"], Shape(64, 32, 40), Precision.FP32)
    inc = Incumbent("zbox", {"tx": 32, "ty": 8, "vx": 4, "lz": 16, "pn": 1})
    own = mx.build(inc.design, cell, inc.params)
    assert own is not None
    ops = _candidates(cell, inc, "pairs")
    keys = [op.key for op in ops]
    assert 0 < len(ops) <= PAIR_LIMIT and len(set(keys)) == len(keys) and own.key not in keys
    assert keys == [op.key for op in _candidates(cell, inc, "pairs")]
    space = mx.space("zbox", cell)
    for op in ops:
        changed = {k for k in set(op.params) | set(own.params)
                   if op.params.get(k, space[k][0]) != own.params.get(k, space[k][0])}
        assert 1 <= len(changed) <= 2 and changed <= set(designs.get("zbox").paired), (
            op.key, changed)
    assert sum(len({k for k in op.params if op.params[k] != own.params.get(k)}) == 2
               for op in ops) > len(ops) // 2
    # a small space is offered whole: planesweep fp64 has 5 pair parameters on this cell
    every = _candidates(cell, Incumbent("planesweep", {"tx": 32, "ty": 4, "ry": 2, "lz": 16}),
                        "pairs")
    assert any(op.params.get("vx") == 2 and op.params.get("ty") == 8 for op in every)


@pytest.mark.slow
def test_a_pair_round_runs_end_to_end(tmp_path: Path) -> None:
    summary = forge_matrix(CELLS, sessions=emulated_sessions, compiler=emulated_compiler,
                           table_path=tmp_path / "matrix.json", perf_log=tmp_path / "perf.jsonl",
                           idea_log=tmp_path / "ideas.md", changes=["design", "pairs"],
                           device="host-emulator", say=lambda m: None)
    assert [r["change"] for r in summary["rounds"]] == ["design", "pairs"]
    lines = [json.loads(x) for x in (tmp_path / "perf.jsonl").read_text().splitlines()]
    assert any(x["change"] == "pairs" for x in lines)
    assert "| 2 | pairs: two parameters changed at once" in (tmp_path / "ideas.md").read_text()


def test_pairs2_is_the_next_page_of_the_pair_order() -> None:
    """``pairs2``: the candidates after the first PAIR_LIMIT of the same fixed order, none of
    them also in ``pairs``; together the two are the first 2 * PAIR_LIMIT of the whole list."""
    from kernforge.forge.loop import Incumbent, _candidates
    from kernforge.forge.pairs import PAIR_LIMIT, pair_candidates

    cell = Cell(STENCILS["star_2"], Shape(64, 32, 40), Precision.FP32)
    inc = Incumbent("zmarch", {"tx": 32, "ty": 8, "vx": 2, "lz": 8})
    own = mx.build(inc.design, cell, inc.params)
    assert own is not None
    first = [op.key for op in _candidates(cell, inc, "pairs")]
    second = [op.key for op in _candidates(cell, inc, "pairs2")]
    every = [op.key for op in pair_candidates(cell, inc.design, inc.params, exclude={own.key},
                                              limit=10_000)]
    assert len(every) > PAIR_LIMIT  # the test needs a second page
    assert first == every[:PAIR_LIMIT] and second == every[PAIR_LIMIT:2 * PAIR_LIMIT]
    assert second and not set(first) & set(second)
    assert second == [op.key for op in _candidates(cell, inc, "pairs2")]  # fixed order


def test_a_final_pass_without_its_deployed_build_judges_the_rounds_build(
        tmp_path: Path) -> None:
    from kernforge.core import BackendUnavailableError

    def unavailable(ops):  # type: ignore[no-untyped-def]
        raise BackendUnavailableError("no operator could be built with NVRTC (2 tried): x")

    said: list[str] = []
    summary = forge_matrix(CELLS[:1], sessions=_CostModel(1.0, 0.5), compiler=emulated_compiler,
                           final_compiler=unavailable, rounds=1,
                           table_path=tmp_path / "m.json", perf_log=tmp_path / "p.jsonl",
                           idea_log=tmp_path / "i.md", say=said.append)
    [rec] = summary["final"]
    assert rec["build"] == "rounds'" and rec["changed"] and not rec["regressed"]
    assert any("deployed build is unavailable" in m for m in said)
