"""The population store: one SQLite database per evolution run (WAL, one transaction per
state change, durable across ``kill -9``).

Every state change appends a row to ``events`` (monotonically increasing id) in the same
transaction as the table rows it describes, so the tables and the event log never disagree.
Only one thread (the controller's) writes; workers never touch the database.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernforge.core import ConfigError, Status
from kernforge.core.errors import damaged_database

from .types import EvalResult, Program, Proposal, RecordingResult

SCHEMA_VERSION = 1
QUARANTINED = ("quarantined on resume: its evaluation started and never finished, so it killed "
               "its worker or the run; it is not run again")

SCHEMA = """
CREATE TABLE IF NOT EXISTS programs (
  id TEXT PRIMARY KEY, code TEXT NOT NULL, code_hash TEXT NOT NULL, parent_id TEXT,
  island INTEGER NOT NULL, generation INTEGER NOT NULL, iteration INTEGER NOT NULL,
  fitness REAL, status TEXT NOT NULL, features TEXT NOT NULL, median_s REAL, error REAL,
  created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS programs_hash ON programs(code_hash);
CREATE TABLE IF NOT EXISTS lineage (
  child_id TEXT NOT NULL, parent_id TEXT NOT NULL, kind TEXT NOT NULL,
  PRIMARY KEY (child_id, parent_id, kind));
CREATE TABLE IF NOT EXISTS iterations (
  iteration INTEGER PRIMARY KEY, island INTEGER NOT NULL, parent_id TEXT NOT NULL,
  inspirations TEXT NOT NULL, proposer INTEGER NOT NULL, seed INTEGER NOT NULL,
  program_id TEXT NOT NULL, state TEXT NOT NULL, code TEXT, code_hash TEXT,
  diff_text TEXT, outcome TEXT);
CREATE TABLE IF NOT EXISTS evaluations (
  iteration INTEGER PRIMARY KEY, program_id TEXT NOT NULL, code_hash TEXT NOT NULL,
  status TEXT NOT NULL, fitness REAL, error REAL, median_s REAL, config TEXT NOT NULL,
  recordings TEXT NOT NULL, message TEXT NOT NULL, extra TEXT NOT NULL,
  passed_all INTEGER NOT NULL, started REAL, finished REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
  island INTEGER NOT NULL, cell TEXT NOT NULL, program_id TEXT NOT NULL, fitness REAL NOT NULL,
  PRIMARY KEY (island, cell));
CREATE TABLE IF NOT EXISTS migrations (
  id INTEGER PRIMARY KEY AUTOINCREMENT, iteration INTEGER NOT NULL, src INTEGER NOT NULL,
  dst INTEGER NOT NULL, program_id TEXT NOT NULL, cell TEXT NOT NULL, accepted INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS llm_calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT, iteration INTEGER NOT NULL, model TEXT NOT NULL,
  latency_s REAL NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
  cached_tokens INTEGER NOT NULL, cost REAL NOT NULL, error TEXT,
  backfill INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, kind TEXT NOT NULL,
  iteration INTEGER, program_id TEXT, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _dumps(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


class Store:
    """A handle on one run's database. Use :meth:`tx` for any multi-row change."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), isolation_level=None,
                                    check_same_thread=False)
        self._depth = 0
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            with self.tx() as c:
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                cols = {r[1] for r in c.execute("PRAGMA table_info(llm_calls)")}
                if "backfill" not in cols:  # a store written before the column existed
                    c.execute("ALTER TABLE llm_calls ADD COLUMN backfill INTEGER NOT NULL "
                              "DEFAULT 0")
                if self.get_state("schema_version") is None:
                    self.set_state("schema_version", SCHEMA_VERSION)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            if not damaged_database(exc):  # locked, full, an I/O error: the file may be fine
                raise ConfigError(f"{self.path}: cannot use the evolution database ({exc})",
                                  hint="another process may hold it, or the disk is full or "
                                       "failing; the file is kept as it is") from None
            raise ConfigError(f"{self.path}: not a usable evolution database ({exc})",
                              hint="its programs cannot be read: move the file away to start "
                                   "this kernel's evolution afresh, or evolve into a new run "
                                   "directory (another --out)") from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction (nested calls join the outer one)."""
        if self._depth:
            self._depth += 1
            try:
                yield self.conn
            finally:
                self._depth -= 1
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")
        finally:
            self._depth = 0

    # -- events and run state ------------------------------------------------------------
    def event(self, kind: str, iteration: int | None = None, program_id: str | None = None,
              **data: Any) -> int:
        with self.tx() as c:
            cur = c.execute("INSERT INTO events(ts, kind, iteration, program_id, data) "
                            "VALUES (?,?,?,?,?)",
                            (time.time(), kind, iteration, program_id, _dumps(data)))
            return int(cur.lastrowid or 0)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT id, ts, kind, iteration, program_id, data FROM events"
        rows = self.conn.execute(q + (" WHERE kind=?" if kind else "") + " ORDER BY id",
                                 (kind,) if kind else ()).fetchall()
        return [{"id": r[0], "ts": r[1], "kind": r[2], "iteration": r[3], "program_id": r[4],
                 "data": json.loads(r[5])} for r in rows]

    def set_state(self, key: str, value: Any) -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO run_state(key, value) VALUES (?,?)",
                      (key, _dumps(value)))

    def get_state(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM run_state WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    # -- programs --------------------------------------------------------------------------
    def add_program(self, p: Program, code_hash: str, iteration: int,
                    inspirations: tuple[str, ...] = ()) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO programs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (p.id, p.code, code_hash, p.parent_id, p.island, p.generation, iteration,
                       p.fitness, p.status.value, _dumps(p.features), p.median_s, p.error,
                       p.created))
            if p.parent_id:
                c.execute("INSERT OR IGNORE INTO lineage VALUES (?,?,?)",
                          (p.id, p.parent_id, "parent"))
            for i in inspirations:
                c.execute("INSERT OR IGNORE INTO lineage VALUES (?,?,?)", (p.id, i, "inspiration"))
            self.event("program_added", iteration, p.id, status=p.status.value,
                       fitness=p.fitness, island=p.island)

    def programs(self) -> list[Program]:
        rows = self.conn.execute(
            "SELECT id, code, parent_id, island, generation, fitness, status, features, "
            "median_s, error, created FROM programs ORDER BY iteration, id").fetchall()
        return [Program(id=r[0], code=r[1], parent_id=r[2], island=r[3], generation=r[4],
                        fitness=r[5], status=Status(r[6]), features=json.loads(r[7]),
                        median_s=r[8], error=r[9], created=r[10]) for r in rows]

    def program_hashes(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT code_hash FROM programs")}

    # -- iterations (the plan of each step; in-flight work is re-queued from here) ---------
    def plan_iteration(self, iteration: int, island: int, parent_id: str,
                       inspirations: tuple[str, ...], proposer: int, seed: int,
                       program_id: str) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO iterations(iteration, island, parent_id, inspirations, "
                      "proposer, seed, program_id, state) VALUES (?,?,?,?,?,?,?,?)",
                      (iteration, island, parent_id, _dumps(list(inspirations)), proposer,
                       seed, program_id, "planned"))
            self.event("iteration_planned", iteration, program_id, island=island,
                       parent_id=parent_id)

    def record_proposal(self, iteration: int, prop: Proposal, code_hash: str | None) -> None:
        with self.tx() as c:
            c.execute("UPDATE iterations SET state='proposed', code=?, code_hash=?, diff_text=? "
                      "WHERE iteration=?", (prop.code, code_hash, prop.diff_text, iteration))
            c.execute("INSERT INTO llm_calls(iteration, model, latency_s, prompt_tokens, "
                      "completion_tokens, cached_tokens, cost, error, backfill) "
                      "VALUES (?,?,?,?,?,?,?,?,?)",
                      (iteration, prop.model, prop.latency_s, prop.prompt_tokens,
                       prop.completion_tokens, prop.cached_tokens, prop.cost, prop.error,
                       int(prop.backfill)))
            self.event("proposal_finished", iteration, model=prop.model, error=prop.error,
                       latency_s=prop.latency_s)

    def iterations(self, unfinished_only: bool = False) -> list[dict[str, Any]]:
        q = ("SELECT iteration, island, parent_id, inspirations, proposer, seed, program_id, "
             "state, code, code_hash, diff_text, outcome FROM iterations")
        q += " WHERE state != 'applied'" if unfinished_only else ""
        keys = ("iteration", "island", "parent_id", "inspirations", "proposer", "seed",
                "program_id", "state", "code", "code_hash", "diff_text", "outcome")
        out = []
        for r in self.conn.execute(q + " ORDER BY iteration"):
            d = dict(zip(keys, r))
            d["inspirations"] = tuple(json.loads(d["inspirations"]))
            out.append(d)
        return out

    def finish_iteration(self, iteration: int, outcome: str) -> None:
        with self.tx() as c:
            c.execute("UPDATE iterations SET state='applied', outcome=? WHERE iteration=?",
                      (outcome, iteration))
            self.event("iteration_applied", iteration, outcome=outcome)

    # -- evaluations -------------------------------------------------------------------------
    def evaluation_started(self, iteration: int, program_id: str) -> None:
        self.event("evaluation_started", iteration, program_id)

    def record_evaluation(self, iteration: int, program_id: str, code_hash: str,
                          r: EvalResult, started: float | None = None) -> None:
        recs = [{"name": x.name, "status": x.status.value, "median_s": x.median_s,
                 "error": x.error, "message": x.message} for x in r.recordings]
        med = min((x.median_s for x in r.recordings if x.median_s is not None), default=None)
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO evaluations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      (iteration, program_id, code_hash, r.status.value, r.fitness, r.error, med,
                       _dumps(r.config), _dumps(recs), r.message, _dumps(r.extra),
                       int(r.passed_all), started, time.time()))
            self.event("evaluation_finished", iteration, program_id, status=r.status.value,
                       fitness=r.fitness)

    def quarantine(self, iteration: int, program_id: str, code_hash: str) -> EvalResult | None:
        """On resume: a candidate whose evaluation started (in an earlier session) and never
        finished killed its worker or the run. It is recorded RUNTIME_FAILED, not run again;
        returns that result (None when its evaluation never started)."""
        started = self.conn.execute(
            "SELECT 1 FROM events WHERE kind='evaluation_started' AND iteration=? LIMIT 1",
            (iteration,)).fetchone()
        if started is None:
            return None
        r = EvalResult(status=Status.RUNTIME_FAILED, message=QUARANTINED,
                       extra={"quarantined": True})
        self.record_evaluation(iteration, program_id, code_hash, r)
        return r

    def evaluation(self, iteration: int) -> EvalResult | None:
        row = self.conn.execute(
            "SELECT status, fitness, error, config, recordings, message, extra "
            "FROM evaluations WHERE iteration=?", (iteration,)).fetchone()
        if row is None:
            return None
        recs = tuple(RecordingResult(name=x["name"], status=Status(x["status"]),
                                     median_s=x["median_s"], error=x["error"],
                                     message=x["message"]) for x in json.loads(row[4]))
        return EvalResult(status=Status(row[0]), fitness=row[1], error=row[2],
                          config=json.loads(row[3]), recordings=recs, message=row[5],
                          extra=json.loads(row[6]))

    # -- MAP-Elites cells and migrations ------------------------------------------------------
    def set_cells(self, island: int, cells: dict[str, tuple[str, float]]) -> None:
        """Replace one island's cells (cell key -> (program id, fitness))."""
        with self.tx() as c:
            c.execute("DELETE FROM cells WHERE island=?", (island,))
            c.executemany("INSERT INTO cells VALUES (?,?,?,?)",
                          [(island, k, pid, f) for k, (pid, f) in sorted(cells.items())])

    def put_cell(self, island: int, cell: str, program_id: str, fitness: float,
                 iteration: int) -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO cells VALUES (?,?,?,?)",
                      (island, cell, program_id, fitness))
            self.event("cell_updated", iteration, program_id, island=island, cell=cell,
                       fitness=fitness)

    def cells(self) -> dict[int, dict[str, tuple[str, float]]]:
        out: dict[int, dict[str, tuple[str, float]]] = {}
        for isl, cell, pid, fit in self.conn.execute(
                "SELECT island, cell, program_id, fitness FROM cells ORDER BY island, cell"):
            out.setdefault(isl, {})[cell] = (pid, fit)
        return out

    def record_migration(self, iteration: int, src: int, dst: int, program_id: str,
                         cell: str, accepted: bool) -> None:
        with self.tx() as c:
            c.execute("INSERT INTO migrations(iteration, src, dst, program_id, cell, accepted) "
                      "VALUES (?,?,?,?,?,?)", (iteration, src, dst, program_id, cell,
                                               int(accepted)))
            self.event("migration", iteration, program_id, src=src, dst=dst, cell=cell,
                       accepted=accepted)

    def llm_calls(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT iteration, model, latency_s, prompt_tokens, "
                                "completion_tokens, cached_tokens, cost, error, backfill "
                                "FROM llm_calls "
                                "ORDER BY id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur]
