"""The forge's evaluation journal: quarantine and replay on ``--resume``.

Every screen, check and compare of a forge run is written to ``evaluations.jsonl`` in the
run's directory before it runs (``start``) and with its outcome after (``done``: the value, or
the typed error). ``kernforge stencil forge --resume`` runs the same plan again from the same
start table and replays the journal: a finished evaluation gives its recorded outcome without
running, so every decision comes out as it did; an evaluation that started and never finished
(its candidate killed the worker, or the whole run was killed during it) is recorded
RUNTIME_FAILED ("quarantined on resume ... killed its worker or the run") and not run again.
From the first request the journal does not hold (or that differs from it: a time budget can
end a batch earlier) the run goes on live, journaling as before.

Seeds: sessions are opened and checks get their inputs from seeds this wrapper draws, in the
order an uninterrupted run draws them, so the evaluations after the replayed ones see the
inputs they would have seen.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core import ConfigError, KernelRuntimeError, KernforgeError
from ..core.errors import error_from_json, error_to_json
from ..core.jsonio import write_bytes_atomic
from ..stencil.spec import Cell
from .compile import Built

QUARANTINE = ("quarantined on resume: its evaluation started in an earlier call and never "
              "finished (it killed its worker or the run)")
HINT = ("it is not run again; run it alone with --in-process under gdb or compute-sanitizer "
        "to see where it fails")


class Journal:
    """The journal file of one run; ``past``: the entries a resumed run replays."""

    def __init__(self, path: Path, plan: dict[str, Any], resume: bool) -> None:
        self.path, self.plan = path, plan
        self.past: list[dict[str, Any]] = []
        self.quarantined: list[dict[str, Any]] = []
        if resume and path.exists():
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            head = lines[0] if lines else {}
            if head.get("plan") != plan:
                raise ConfigError(f"cannot resume {path.parent}: it holds a run of another "
                                  "plan (cells, rounds, changes, band, seeds or build differ)",
                                  hint="resume with the earlier options, or use a new --out")
            self.header = head
            done = {e["n"]: e for e in lines[1:] if "done" in e}
            self.past = [{**e, **done.get(e["n"], {})} for e in lines[1:] if "start" in e]
            self._rewrite(len(self.past))
        else:
            self.header = {"journal": 1, "plan": plan}
        self.n = 0

    @property
    def resumed(self) -> bool:
        return bool(self.past)

    def _rewrite(self, upto: int) -> None:
        rows = [self.header]
        for e in self.past[:upto]:
            rows.append({"n": e["n"], "start": e["start"]})
            if "done" in e:
                rows.append({"n": e["n"], "done": e["done"]})
        write_bytes_atomic(self.path, "".join(json.dumps(r) + "\n" for r in rows).encode())
        del self.past[upto:]

    def write_header(self, **fields: Any) -> None:
        """A fresh journal (a new run), with ``fields`` kept for a resume (the perf log's size)."""
        self.header.update(fields)
        self._rewrite(0)

    def _append(self, row: dict[str, Any]) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()

    def run(self, what: list[Any], fn: Callable[[], Any]) -> Any:
        """``fn()`` journaled as evaluation ``what``, or its outcome replayed."""
        n, self.n = self.n, self.n + 1
        if n < len(self.past):
            e = self.past[n]
            if e["start"] == what:
                done = e.get("done")
                if done is None:  # it never finished: quarantined, recorded, not run again
                    err = KernelRuntimeError(f"{what[1]} of {' vs '.join(what[2:])}: "
                                             f"{QUARANTINE}", hint=HINT)
                    e["done"] = done = {"error": error_to_json(err)}
                    self._append({"n": n, "done": done})
                    self.quarantined.append({"cell": what[0], "evaluation": what[1:]})
                if "error" in done:
                    raise error_from_json(done["error"])
                return done["value"]
            self._rewrite(n)  # the run went another way here: live from now on
        self._append({"n": n, "start": what})
        try:
            value = fn()
        except KernforgeError as exc:
            self._append({"n": n, "done": {"error": error_to_json(exc)}})
            raise
        self._append({"n": n, "done": {"value": value}})
        return value


class JournaledSession:
    """A session whose evaluations go through the journal; the inner session (in-process or
    supervised) is opened on the first evaluation that actually runs."""

    def __init__(self, journal: Journal, factory: Any, cell: Cell, seed: int) -> None:
        self.journal, self.factory, self.cell = journal, factory, cell
        self.data = seed
        self._stack = contextlib.ExitStack()
        self._inner: Any = None

    def _session(self) -> Any:
        if self._inner is None:
            self._inner = self._stack.enter_context(self.factory(self.cell, seed=self.data))
        return self._inner

    def close(self) -> None:
        self._stack.close()

    def screen(self, built: Built) -> float:
        return float(self.journal.run([self.cell.id, "screen", built.op.key],
                                      lambda: self._session().screen(built)))

    def compare(self, a: Built, b: Built) -> tuple[float, float, float, float, float]:
        out = self.journal.run([self.cell.id, "compare", a.op.key, b.op.key],
                               lambda: list(self._session().compare(a, b)))
        return tuple(out)  # type: ignore[return-value]

    def check(self, built: Built) -> tuple[bool, float, str]:
        from .sessions import _seed

        seed = _seed(None)
        try:
            out = self.journal.run([self.cell.id, "check", built.op.key],
                                   lambda: list(self._session().check(built, seed=seed)))
        finally:
            if self._inner is None:  # replayed: a session opened later starts from these inputs
                self.data = seed
        return bool(out[0]), float(out[1]), str(out[2])


def journaled(journal: Journal, factory: Any) -> Callable[[Cell], Any]:
    """``factory`` (``factory(cell, seed=...)``, sessions whose ``check`` takes ``seed``)
    behind ``journal``."""

    @contextlib.contextmanager
    def sessions(cell: Cell) -> Iterator[JournaledSession]:
        from .sessions import _seed

        session = JournaledSession(journal, factory, cell, _seed(None))
        try:
            yield session
        finally:
            session.close()

    return sessions
