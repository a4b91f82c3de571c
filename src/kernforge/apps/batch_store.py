"""The state of a batch of applications, persisted in SQLite (``RUNS/batch.db``).

One row per program: its manifest and the manifest's hash, its status (``PENDING`` never
started, ``RUNNING`` started and not finished, a run in flight or one killed with its batch,
``STOPPED`` stopped at its budget, ``INVALID`` its manifest does not load, ``DONE`` finished
for good), its outcome and reason, the application's own state, the end-to-end speedup and
the device time it has taken. ``meta`` holds the budgets (``budget_s`` the latest
allocation's, ``budget_since_s`` the batch's device time when it was given), the longest
attempt of a milestone stopped at its share (``stopped/NAME/MILESTONE``), ``events`` every
transition. Each
update is one transaction (write-ahead log, ``synchronous=FULL``): a ``kill -9`` loses at
most the last few seconds of a program's time, which its next heartbeat would have written.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError
from .store import transaction

DB_NAME = "batch.db"
LOCK_NAME = "batch.lock"
STATUSES = ("PENDING", "RUNNING", "STOPPED", "INVALID", "DONE")
OUTCOMES = ("INTEGRATED", "NOT FASTER", "INCONCLUSIVE", "FAILED", "SKIPPED")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS programs (
  name TEXT PRIMARY KEY, seq INTEGER NOT NULL, manifest TEXT NOT NULL, sha256 TEXT NOT NULL,
  status TEXT NOT NULL, outcome TEXT NOT NULL, app_state TEXT NOT NULL, reason TEXT NOT NULL,
  speedup REAL, spent_s REAL NOT NULL, attempts INTEGER NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, name TEXT NOT NULL,
  status TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL);
"""
_COLUMNS = ("name, seq, manifest, sha256, status, outcome, app_state, reason, speedup, "
            "spent_s, attempts, updated")


class BatchStoreError(ConfigError):
    """A batch directory whose ``batch.db`` is not a readable batch database (exit 2)."""


@dataclass(frozen=True)
class Program:
    name: str
    seq: int
    manifest: str
    sha256: str
    status: str
    outcome: str
    app_state: str
    reason: str
    speedup: float | None
    spent_s: float
    attempts: int
    updated: float

    @property
    def settled(self) -> bool:
        return self.status == "DONE"


class BatchStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.executescript(_SCHEMA)
            self.conn.execute(f"SELECT {_COLUMNS} FROM programs LIMIT 1").fetchall()
            self.conn.execute("SELECT key, value FROM meta LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise BatchStoreError(f"{path}: not a readable batch database ({exc})",
                                  hint="give the batch another --out (each program's run "
                                       "directory under apps/ is still there to read)"
                                  ) from None

    @classmethod
    def open(cls, out: Path) -> BatchStore:
        return cls(out / DB_NAME)

    def close(self) -> None:
        self.conn.close()

    def _tx(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        transaction(self.conn, *statements)

    # ---- budgets and totals --------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str | None) -> None:
        self._tx(("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value)))

    def allocation(self) -> tuple[float | None, float]:
        """(the budget of the latest ``--budget``, or None; the batch's device time when it
        was given): the time spent since is this allocation's."""
        b = self.meta("budget_s")
        return (None if b is None else float(b)), float(self.meta("budget_since_s") or 0.0)

    def set_budget(self, budget_s: float) -> None:
        """A new allocation's budget: what was spent before is history, not subtracted."""
        self._tx(("INSERT OR REPLACE INTO meta VALUES ('budget_s', ?)", (repr(budget_s),)),
                 ("INSERT OR REPLACE INTO meta VALUES ('budget_since_s', ?)",
                  (repr(self.spent_s()),)))

    def stopped_s(self, name: str) -> dict[str, float]:
        """Per milestone of the program, the longest attempt a batch stopped at its share."""
        rows = self.conn.execute("SELECT key, value FROM meta WHERE key LIKE ?",
                                 (f"stopped/{name}/%",)).fetchall()
        return {k.rsplit("/", 1)[1]: float(v) for k, v in rows}

    def note_stopped(self, name: str, milestone: str, seconds: float) -> None:
        key = f"stopped/{name}/{milestone}"
        before = float(self.meta(key) or 0.0)
        self.set_meta(key, repr(max(before, seconds)))

    def spent_s(self) -> float:
        """The device time the batch has taken: every program's, and that of runs
        ``--remeasure`` set aside."""
        (total,) = self.conn.execute("SELECT COALESCE(SUM(spent_s), 0) FROM programs"
                                     ).fetchone()
        return float(total) + float(self.meta("retired_s") or 0.0)

    # ---- programs ------------------------------------------------------------------------
    def program(self, name: str) -> Program | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM programs WHERE name = ?",
                                (name,)).fetchone()
        return None if row is None else Program(*row)

    def programs(self) -> list[Program]:
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM programs ORDER BY seq, name")
        return [Program(*r) for r in rows.fetchall()]

    def _event(self, name: str, status: str, outcome: str, reason: str
               ) -> tuple[str, tuple[Any, ...]]:
        return ("INSERT INTO events (t, name, status, outcome, reason) VALUES (?, ?, ?, ?, ?)",
                (time.time(), name, status, outcome, reason))

    def add(self, name: str, seq: int, manifest: str, sha: str) -> Program:
        """The program's row, created PENDING when new (its order and path updated)."""
        if self.program(name) is None:
            self._tx((("INSERT INTO programs VALUES (?, ?, ?, ?, 'PENDING', '', '', "
                      "'not started', NULL, 0, 0, ?)"), (name, seq, manifest, sha, time.time())),
                     self._event(name, "PENDING", "", "added"))
        else:
            self._tx(("UPDATE programs SET seq = ?, manifest = ? WHERE name = ?",
                      (seq, manifest, name)))
        p = self.program(name)
        assert p is not None
        return p

    def reset(self, name: str, sha: str, why: str) -> None:
        """Start the program again from nothing (its time so far kept in the batch's total)."""
        p = self.program(name)
        assert p is not None
        retired = float(self.meta("retired_s") or 0.0) + p.spent_s
        self._tx(("INSERT OR REPLACE INTO meta VALUES ('retired_s', ?)", (str(retired),)),
                 (("UPDATE programs SET status = 'PENDING', outcome = '', app_state = '', "
                  "reason = 'not started', speedup = NULL, spent_s = 0, sha256 = ?, "
                  "updated = ? WHERE name = ?"), (sha, time.time(), name)),
                 ("DELETE FROM meta WHERE key LIKE ?", (f"stopped/{name}/%",)),
                 self._event(name, "PENDING", "", why))

    def begin(self, name: str) -> None:
        self._tx((("UPDATE programs SET status = 'RUNNING', outcome = '', reason = 'running', "
                  "attempts = attempts + 1, updated = ? WHERE name = ?"), (time.time(), name)),
                 self._event(name, "RUNNING", "", "started"))

    def heartbeat(self, name: str, spent_s: float) -> None:
        self._tx(("UPDATE programs SET spent_s = ?, updated = ? WHERE name = ?",
                  (spent_s, time.time(), name)))

    def finish(self, name: str, status: str, outcome: str, reason: str, *,
               app_state: str = "", speedup: float | None = None,
               spent_s: float | None = None) -> None:
        assert status in STATUSES and outcome in (*OUTCOMES, "")
        self._tx((("UPDATE programs SET status = ?, outcome = ?, app_state = ?, reason = ?, "
                  "speedup = ?, spent_s = COALESCE(?, spent_s), updated = ? WHERE name = ?"),
                  (status, outcome, app_state, reason, speedup, spent_s, time.time(), name)),
                 self._event(name, status, outcome, reason))

    def events(self) -> list[tuple[float, str, str, str, str]]:
        return list(self.conn.execute("SELECT t, name, status, outcome, reason FROM events "
                                      "ORDER BY seq").fetchall())


def in_use(out: Path) -> bool:
    """Whether a batch holds ``out``'s lock now (``--status``: a program RUNNING in the
    database of a batch no longer running was interrupted with it)."""
    try:
        fd = os.open(out / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def lock(out: Path) -> int:
    """An exclusive lock on the batch directory while this batch runs (released by the
    kernel when the process dies, even by ``kill -9``)."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise ConfigError(f"{out} is in use by another kernforge app batch"
                          + (f" (pid {holder})" if holder else ""),
                          hint="wait for it to end, or watch it with kernforge app batch "
                               f"--status --out {out}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
