from __future__ import annotations

import random

import pytest

from kernforge.core import ConfigError, Status
from kernforge.evolve.store import Store
from kernforge.evolve.types import EvalResult, Program, Proposal, RecordingResult


def _prog(pid: str, fit: float | None = 1.0) -> Program:
    return Program(id=pid, code=f"code {pid}", parent_id=None if pid == "a" else "a", island=1,
                   generation=0 if pid == "a" else 1, fitness=fit,
                   status=Status.OK if fit else Status.COMPILE_FAILED,
                   features={"code_size": 3.0}, median_s=fit, error=0.0, created=5.0)


def test_round_trip(tmp_path):
    path = tmp_path / "run.db"
    rng = random.Random(3)
    rng.random()
    with Store(path) as s:
        s.add_program(_prog("a"), "ha", -1)
        s.add_program(_prog("b", None), "hb", 0, ("a",))
        s.plan_iteration(0, 1, "a", ("a",), 0, 42, "b")
        s.record_proposal(0, Proposal(code="x", model="m", latency_s=0.5, prompt_tokens=10,
                                      completion_tokens=3, cached_tokens=7, cost=0.01), "hx")
        s.evaluation_started(0, "b")
        res = EvalResult(Status.OK, fitness=2.0, error=1e-9, config={"block": 64},
                         recordings=(RecordingResult("r0", Status.OK, 2.0, 0.0),),
                         extra={"num_regs": 32})
        s.record_evaluation(0, "b", "hx", res, 1.0)
        s.put_cell(1, "0,1", "a", 1.0, 0)
        s.record_migration(0, 1, 2, "a", "0,1", True)
        v, st, g = rng.getstate()
        s.set_state("rng", [v, list(st), g])
        s.finish_iteration(0, "evaluated")
    with Store(path) as s:
        assert s.programs() == [_prog("a"), _prog("b", None)]
        assert s.evaluation(0) == res
        assert s.cells() == {1: {"0,1": ("a", 1.0)}}
        assert s.llm_calls()[0]["cached_tokens"] == 7
        it = s.iterations()[0]
        assert it["inspirations"] == ("a",) and it["state"] == "applied" and it["code"] == "x"
        d = s.get_state("rng")
        r2 = random.Random()
        r2.setstate((d[0], tuple(d[1]), d[2]))
        assert r2.random() == rng.random()
        ids = [e["id"] for e in s.events()]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        kinds = {e["kind"] for e in s.events()}
        assert {"program_added", "evaluation_started", "evaluation_finished", "migration",
                "cell_updated", "iteration_planned", "iteration_applied"} <= kinds
        lineage = s.conn.execute("SELECT * FROM lineage ORDER BY kind").fetchall()
        assert lineage == [("b", "a", "inspiration"), ("b", "a", "parent")]
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_transaction_rolls_back(tmp_path):
    with Store(tmp_path / "r.db") as s:
        try:
            with s.tx():
                s.add_program(_prog("a"), "ha", -1)
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        assert s.programs() == [] and s.events() == []


def test_a_damaged_database_is_a_config_error_naming_it(tmp_path):
    path = tmp_path / "evolve.db"
    with Store(path) as s:
        s.add_program(_prog("a"), "ha", -1)
    path.write_bytes(bytes(range(256)) * 32)  # overwritten with something else
    with pytest.raises(ConfigError, match="evolve.db: not a usable evolution database") as exc:
        Store(path)
    assert "move the file away" in exc.value.hint and "--out" in exc.value.hint


@pytest.mark.slow
def test_a_locked_database_is_kept_not_called_damaged(tmp_path):
    import sqlite3

    from kernforge.core.errors import damaged_database

    path = tmp_path / "evolve.db"
    with Store(path) as s:
        s.add_program(_prog("a"), "ha", -1)
    holder = sqlite3.connect(path, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ConfigError, match="cannot use the evolution database") as exc:
            Store(path)
        assert "kept as it is" in exc.value.hint and "move the file away" not in exc.value.hint
    finally:
        holder.rollback()
        holder.close()
    with Store(path) as s:  # the file was fine all along
        assert [p.id for p in s.programs()] == ["a"]
    assert not damaged_database(sqlite3.OperationalError("database is locked"))
