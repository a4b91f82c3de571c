"""Watching an evolution run from outside (tests that kill a run mid-way and resume it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def finished_evaluations(db: Path) -> int:
    """Evaluations finished so far in a run's store, read while the run writes it (0 while
    the store does not exist yet or is busy)."""
    try:
        con = sqlite3.connect(str(db), timeout=1)
        try:
            n = con.execute("SELECT COUNT(*) FROM events WHERE kind='evaluation_finished'"
                            ).fetchone()[0]
        finally:
            con.close()
        return int(n)
    except sqlite3.Error:
        return 0
