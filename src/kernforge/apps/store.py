"""The application's state and milestones, persisted in SQLite (``OUT/app.db``).

Every transition is one transaction (write-ahead log, ``synchronous=FULL``): after a
``kill -9`` the database holds every transition that was committed and nothing of the one in
flight. ``milestones`` holds the latest row per milestone (``RUNNING``, ``DONE``, ``FAILED``,
``SKIPPED``) with its reason and figures (JSON); ``events`` is the append-only history of
every state and milestone transition. A resumed run skips milestones that are ``DONE`` or
``SKIPPED`` and redoes one left ``RUNNING`` by a killed process.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError

STATES = ("PENDING", "OUT_OF_SCOPE", "BLOCKED", "RESEARCH", "DROPPED", "INCONCLUSIVE",
          "INTEGRATED")
FINAL = frozenset(STATES[1:])
DB_NAME = "app.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS app (
  id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, manifest TEXT NOT NULL,
  manifest_sha256 TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL,
  figures TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS milestones (
  name TEXT PRIMARY KEY, status TEXT NOT NULL, reason TEXT NOT NULL, figures TEXT NOT NULL,
  started REAL NOT NULL, finished REAL);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, kind TEXT NOT NULL,
  name TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL, figures TEXT NOT NULL);
"""

_PROBES = ("SELECT name, manifest, manifest_sha256, state, reason, figures, updated FROM app",
           "SELECT name, status, reason, figures, started, finished FROM milestones",
           "SELECT seq, t, kind, name, status, reason, figures FROM events")


@dataclass(frozen=True)
class Milestone:
    name: str
    status: str  # RUNNING, DONE, FAILED, SKIPPED
    reason: str
    figures: dict[str, Any]
    started: float
    finished: float | None

    @property
    def settled(self) -> bool:
        """Finished for good: a resumed run does not redo it."""
        return self.status in ("DONE", "SKIPPED")


@dataclass(frozen=True)
class AppState:
    name: str
    manifest: str
    manifest_sha256: str
    state: str
    reason: str
    figures: dict[str, Any]
    updated: float


def _dump(figures: dict[str, Any] | None) -> str:
    return json.dumps(figures or {}, sort_keys=True, default=str)



def transaction(conn: sqlite3.Connection, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run ``statements`` as one immediate transaction: all of them or none (also when the
    process is killed between two of them)."""
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    try:
        for sql, params in statements:
            cur.execute(sql, params)
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise

class AppStoreError(ConfigError):
    """A run directory whose ``app.db`` is not a readable run database (exit 2)."""


class AppStore:
    """One application's run database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.executescript(_SCHEMA)
            for probe in _PROBES:
                self.conn.execute(probe + " LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise AppStoreError(
                f"{path}: not a readable run database ({exc})",
                hint="the run's state is lost (its logs/ and recording/ are still there to "
                     "read): start the application again with another --out") from None

    @classmethod
    def open(cls, out: Path) -> AppStore:
        return cls(out / DB_NAME)

    def close(self) -> None:
        self.conn.close()

    def _tx(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        transaction(self.conn, *statements)

    def _event(self, kind: str, name: str, status: str, reason: str, figures: str
               ) -> tuple[str, tuple[Any, ...]]:
        return (("INSERT INTO events (t, kind, name, status, reason, figures) VALUES "
                "(?, ?, ?, ?, ?, ?)"), (time.time(), kind, name, status, reason, figures))

    # ---- the application's state --------------------------------------------------------
    def init(self, name: str, manifest: str, sha: str) -> None:
        """The first row (PENDING); a no-op when the run already exists."""
        if self.app() is not None:
            return
        self._tx(("INSERT INTO app VALUES (1, ?, ?, ?, 'PENDING', 'not started', '{}', ?)",
                  (name, manifest, sha, time.time())),
                 self._event("state", name, "PENDING", "not started", "{}"))

    def app(self) -> AppState | None:
        row = self.conn.execute("SELECT name, manifest, manifest_sha256, state, reason, "
                                "figures, updated FROM app WHERE id = 1").fetchone()
        if row is None:
            return None
        return AppState(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6])

    def set_state(self, state: str, reason: str, figures: dict[str, Any] | None = None) -> None:
        if state not in STATES:
            raise ValueError(f"unknown state {state!r}")
        f = _dump(figures)
        self._tx(("UPDATE app SET state = ?, reason = ?, figures = ?, updated = ? WHERE id = 1",
                  (state, reason, f, time.time())),
                 self._event("state", "app", state, reason, f))

    # ---- milestones ----------------------------------------------------------------------
    def milestone(self, name: str) -> Milestone | None:
        row = self.conn.execute("SELECT name, status, reason, figures, started, finished FROM "
                                "milestones WHERE name = ?", (name,)).fetchone()
        return None if row is None else Milestone(row[0], row[1], row[2], json.loads(row[3]),
                                                  row[4], row[5])

    def milestones(self) -> list[Milestone]:
        rows = self.conn.execute("SELECT name FROM milestones ORDER BY started").fetchall()
        return [m for (n,) in rows if (m := self.milestone(n)) is not None]

    def begin(self, name: str) -> None:
        self._tx((("INSERT OR REPLACE INTO milestones VALUES (?, 'RUNNING', 'started', '{}', ?, "
                  "NULL)"), (name, time.time())),
                 self._event("milestone", name, "RUNNING", "started", "{}"))

    def finish(self, name: str, status: str, reason: str,
               figures: dict[str, Any] | None = None) -> Milestone:
        f = _dump(figures)
        now = time.time()
        self._tx((("INSERT INTO milestones VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO "
                  "UPDATE SET status = excluded.status, reason = excluded.reason, figures = "
                  "excluded.figures, finished = excluded.finished"),
                  (name, status, reason, f, now, now)),
                 self._event("milestone", name, status, reason, f))
        m = self.milestone(name)
        assert m is not None
        return m

    def events(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT seq, t, kind, name, status, reason, figures FROM "
                                 "events ORDER BY seq").fetchall()
        return [{"seq": r[0], "t": r[1], "kind": r[2], "name": r[3], "status": r[4],
                 "reason": r[5], "figures": json.loads(r[6])} for r in rows]
