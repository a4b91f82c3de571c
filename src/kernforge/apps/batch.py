"""``kernforge app batch``: many manifests through the workflow, one after another, into one
batch directory that a later batch resumes.

Layout of ``RUNS``: ``batch.db`` (:mod:`.batch_store`), ``apps/NAME/`` (each program's
``kernforge app run`` directory, for ``kernforge app report RUNS/apps/*``), ``logs/NAME.log``
(its output, appended run after run), ``previous/`` (runs set aside by ``--remeasure`` or a
changed manifest).

Each program runs as its own ``kernforge app run`` process (``--resume`` when its directory
holds a started run), killed with the batch (PR_SET_PDEATHSIG) and stopped at its share of
this allocation's budget (:mod:`.budget`): SIGINT, then SIGKILL after a grace period. A
program finished is reported, not run again; one interrupted (the batch killed, its budget
spent) goes on from its last finished milestone in the next batch, before the programs not
started yet. A program whose next milestone is known to need more than its share
(:mod:`.batch_estimate`) is deferred, not started and stopped; the time left when every
program had its turn goes to the programs stopped or deferred, pass after pass.
"""

from __future__ import annotations

import fnmatch
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core import ConfigError
from ..core.errors import Interrupted, exit_cause
from . import budget
from .batch_entries import Entry
from .batch_estimate import Need, next_need
from .batch_store import BatchStore, Program, lock
from .cuda_presence import gpu_refusal
from .manifest import AppManifestError, load_manifest
from .process import die_with_parent
from .report import AppResult, load
from .store import DB_NAME, FINAL, AppStore, AppStoreError, Milestone

NEED_MARGIN = 1.5  # time left over: a deferred program gets this much more than it needs
OUTCOME_OF = {"INTEGRATED": "INTEGRATED", "DROPPED": "NOT FASTER", "RESEARCH": "NOT FASTER",
              "INCONCLUSIVE": "INCONCLUSIVE", "BLOCKED": "FAILED", "OUT_OF_SCOPE": "SKIPPED"}


def outcome_words(outcome: str, app_state: str | None) -> str:
    """A finished program's outcome and its application's state, the state once when they
    are the same word (``INCONCLUSIVE``, ``INTEGRATED``), ``-`` when there is none."""
    if outcome == app_state:
        return outcome
    return f"{outcome} ({app_state or '-'})"


@dataclass
class Batch:
    out: Path
    entries: list[Entry]
    budget_s: float | None = None  # None: the budget the batch was given before, if any
    program_budget_s: float | None = None
    remeasure: tuple[str, ...] = ()
    progress: Callable[[str], None] = lambda s: None
    python: str = field(default_factory=lambda: sys.executable)
    heartbeat_s: float = 5.0
    grace_s: float = 15.0

    def __post_init__(self) -> None:
        self.out = self.out.resolve()
        self.apps = self.out / "apps"
        self.stopped_at = 0.0  # when the run in flight was last asked to stop at its share

    def run(self) -> list[Program]:
        names = [e.name for e in self.entries]
        for g in self.remeasure:
            if not any(fnmatch.fnmatchcase(n, g) for n in names):
                raise ConfigError(f"--remeasure {g!r} matches no program of the batch "
                                  f"({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})",
                                  hint="a glob of the programs' names (each manifest's name)")
        fd = lock(self.out)
        self.store = BatchStore.open(self.out)
        try:
            if self.budget_s is not None:
                self.store.set_budget(self.budget_s)
            if self.program_budget_s is not None:
                self.store.set_meta("program_budget_s", repr(self.program_budget_s))
            for i, e in enumerate(self.entries):
                self._prepare(i, e)
            todo = []
            for e in self.entries:
                p = self.store.program(e.name)
                assert p is not None
                if p.status == "DONE":
                    self.progress(f"{e.name}: finished before: "
                                  f"{outcome_words(p.outcome, p.app_state)}; not run again")
                elif p.status != "INVALID":
                    todo.append(e)
            self._passes(self._resumed_first(todo))
            return [p for e in self.entries if (p := self.store.program(e.name))]
        finally:
            self.store.close()
            os.close(fd)

    def _resumed_first(self, todo: list[Entry]) -> list[Entry]:
        """Programs stopped mid-way (or interrupted) before those not started, each group in
        the batch's order."""
        def started(e: Entry) -> bool:
            p = self.store.program(e.name)
            return p is not None and p.attempts > 0
        return [e for e in todo if started(e)] + [e for e in todo if not started(e)]

    def _passes(self, todo: list[Entry]) -> None:
        """The programs in order, each with its share; then, while time is left, those
        stopped at their share or deferred go on with what is left, until a pass starts
        nothing."""
        self.later: list[Entry] = []
        self._pass(todo, first=True)
        while self.later:
            left = self._left()
            if left is not None and left < budget.MIN_START_S:
                break
            again, self.later = self.later, []
            if left is not None:
                self.progress(f"{budget.format_duration(left)} of the budget left: "
                              f"{len(again)} program(s) stopped at their share or deferred "
                              "go on")
            if not self._pass(again, first=False):
                break

    # ---- before the runs -----------------------------------------------------------------
    def _prepare(self, seq: int, e: Entry) -> None:
        p = self.store.add(e.name, seq, str(e.path), e.sha)
        again = p.status == "DONE" and any(fnmatch.fnmatchcase(e.name, g)
                                           for g in self.remeasure)
        if p.attempts and (again or p.sha256 != e.sha):
            why = "--remeasure" if again else "its manifest changed"
            moved = self._set_aside(e.name)
            self.store.reset(e.name, e.sha, f"{why}: run again from the start")
            self.progress(f"{e.name}: {why}: run again from the start"
                          + (f" (the earlier run kept in {moved})" if moved else ""))
        elif p.sha256 != e.sha:
            self.store.reset(e.name, e.sha, "its manifest changed before it started")
        if e.error:
            self.store.finish(e.name, "INVALID", "FAILED", f"the manifest does not load: "
                              f"{e.error}")
        elif self.store.program(e.name).status == "INVALID":  # type: ignore[union-attr]
            self.store.finish(e.name, "PENDING", "", "not started")

    def _set_aside(self, name: str) -> Path | None:
        run = self.apps / name
        if not run.exists():
            return None
        k = 1
        while (self.out / "previous" / f"{name}-{k}").exists():
            k += 1
        dest = self.out / "previous" / f"{name}-{k}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        run.rename(dest)
        return dest

    def _resumable(self, name: str) -> bool:
        """Does ``apps/NAME`` hold a started run (else it is started afresh: a directory
        left by a run killed before its first row, or a damaged database, is set aside)?"""
        run = self.apps / name
        if not (run / DB_NAME).is_file():
            if run.exists():
                self._set_aside(name)
            return False
        try:
            store = AppStore.open(run)
        except AppStoreError:
            self._set_aside(name)
            return False
        try:
            started = store.app() is not None
        finally:
            store.close()
        if not started:
            self._set_aside(name)
        return started

    # ---- one program ---------------------------------------------------------------------
    def _left(self) -> float | None:
        """What is left of this allocation's budget (None: no budget)."""
        b, since = self.store.allocation()
        return None if b is None else b - (self.store.spent_s() - since)

    def _pass(self, todo: list[Entry], *, first: bool) -> bool:
        """Run ``todo`` in order, each with its share of what is left; whether one started."""
        started = False
        for i, e in enumerate(todo):
            p = self.store.program(e.name)
            assert p is not None
            started |= self._one(e, p, len(todo) - i, first)
        return started

    def _one(self, e: Entry, p: Program, waiting: int, first: bool) -> bool:
        pb = self.store.meta("program_budget_s")
        left = self._left()
        alloc, _ = self.store.allocation()
        limit = budget.share(batch_left_s=left, programs_left=waiting,
                             program_budget_s=None if pb is None else float(pb),
                             program_spent_s=p.spent_s, allocation_s=alloc)
        if (no_gpu := self._no_gpu(e)) is not None:
            why = (f"not started: {no_gpu}; the same command on a machine with an NVIDIA GPU "
                   "runs it")
            self.store.finish(e.name, "STOPPED" if p.attempts else "PENDING", "SKIPPED", why)
            self.progress(f"{e.name}: SKIPPED: {why}")
            return False
        need = self._need(e)
        if not first and need is not None and limit is not None and left is not None \
                and pb is None:  # time left over: enough for what it is known to need
            limit = min(left, max(limit, NEED_MARGIN * need.seconds))
        if limit is not None and limit < budget.MIN_START_S:
            if not first:  # it keeps the reason it was stopped or deferred with
                return False
            if left is not None and left < budget.MIN_START_S:
                why = ("not started" if not p.attempts else "not resumed") + \
                    f": this batch's budget ({budget.format_duration(alloc or 0)}) is spent; " \
                    "a later batch with --budget goes on"
            else:
                why = (f"its own budget ({budget.format_duration(float(pb or 0))}) is spent "
                       f"after {budget.format_duration(p.spent_s)}")
            self.store.finish(e.name, "STOPPED" if p.attempts else "PENDING", "SKIPPED", why)
            self.progress(f"{e.name}: SKIPPED: {why}")
            return False
        if need is not None and limit is not None and need.seconds >= limit:
            why = (f"deferred: {need.describe()}, more than the {budget.format_duration(limit)}"
                   " it could have now; it goes on when a share is long enough")
            self.store.finish(e.name, "STOPPED" if p.attempts else "PENDING", "SKIPPED", why)
            self.progress(f"{e.name}: {why}")
            self.later.append(e)
            return False
        n = self.entries.index(e) + 1
        told = f"budget {budget.format_duration(limit)}" if limit is not None else "no budget"
        if left is not None:
            told += f" ({budget.format_duration(left)} left for {waiting} program(s))"
        self.progress(f"[{n}/{len(self.entries)}] {e.name}: "
                      f"{'resumed' if p.attempts else 'started'}, {told}")
        resume = self._resumable(e.name)
        self.store.begin(e.name)
        rc, spent, stopped, tail = self._child(e, resume, limit, p.spent_s)
        self._settle(e, rc, spent, stopped, limit, tail)
        return True

    @staticmethod
    def _no_gpu(e: Entry) -> str | None:
        try:
            return gpu_refusal(load_manifest(e.path))
        except AppManifestError:  # changed since the batch read it: app run says why
            return None

    def _need(self, e: Entry) -> Need | None:
        try:
            m = load_manifest(e.path)
        except AppManifestError:
            return None
        return next_need(self.apps / e.name, m, self.store.stopped_s(e.name))

    def _child(self, e: Entry, resume: bool, limit: float | None, base: float
               ) -> tuple[int, float, str, list[str]]:
        argv = [self.python, "-m", "kernforge", "app", "run", str(e.path),
                "--out", str(self.apps / e.name)] + (["--resume"] if resume else [])
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        tail: deque[str] = deque(maxlen=40)
        stopped = ""
        with open(self.out / "logs" / f"{e.name}.log", "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(argv)}\n")
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=die_with_parent())  # noqa: PLW1509
            assert proc.stdout is not None
            t0 = beat = time.monotonic()
            kill_at: float | None = None
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            buf = b""
            try:
                while True:
                    now = time.monotonic()
                    if limit is not None and not stopped and now - t0 > limit:
                        stopped = "budget"
                        self.stopped_at = time.time()
                        kill_at = self._stop(proc, now)
                    if kill_at is not None and now > kill_at:
                        _killpg(proc)
                    if now - beat >= self.heartbeat_s:
                        self.store.heartbeat(e.name, base + now - t0)
                        beat = now
                    if not sel.select(timeout=0.5):
                        continue
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    *lines, buf = (buf + chunk).split(b"\n")
                    for raw in lines:
                        line = raw.decode("utf-8", "replace").rstrip()
                        log.write(line + "\n")
                        tail.append(line)
                        self.progress(f"  {e.name} | {line}")
                    log.flush()
            except KeyboardInterrupt:
                self._stop(proc, time.monotonic())
                try:
                    proc.wait(self.grace_s)
                except subprocess.TimeoutExpired:
                    _killpg(proc)
                self.store.heartbeat(e.name, base + time.monotonic() - t0)
                raise Interrupted(f"{e.name} was stopped in its run; the same command goes "
                                  "on with it (finished programs are not run again)") from None
            finally:
                sel.close()
                proc.stdout.close()
            rc = proc.wait()
        return rc, base + time.monotonic() - t0, stopped, list(tail)

    def _note_stopped(self, name: str, r: AppResult) -> None:
        """How long the milestone it was stopped in had run: the next batch does not start
        it on a shorter share (:mod:`.batch_estimate`)."""
        m = innermost(r)
        if m is not None:
            self.store.note_stopped(name, m.name, max(0.0, self.stopped_at - m.started))

    def _stop(self, proc: subprocess.Popen[bytes], now: float) -> float:
        """Ask the run to stop (SIGINT: it kills its command and leaves its milestone to be
        redone); the time after which it is killed."""
        try:
            proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
        return now + self.grace_s

    def _settle(self, e: Entry, rc: int, spent: float, stopped: str, limit: float | None,
                tail: list[str]) -> None:
        run = self.apps / e.name
        try:
            r = load(run)
        except (ConfigError, OSError):
            r = None
        final = rc in (0, 9) and r is not None and r.app.state in FINAL
        if (stopped or rc == 130) and not final:  # it may have finished as it was stopped
            where = innermost(r) if r is not None else None
            at = f" in {where.name}" if where is not None else ""
            why = (f"stopped at its budget of {budget.format_duration(limit or 0)}{at}; a "
                   "later batch with time left goes on from there" if stopped else
                   f"interrupted{at}; the next batch goes on from there")
            self.store.finish(e.name, "STOPPED", "SKIPPED", why, spent_s=spent)
            self.progress(f"{e.name}: SKIPPED: {why}")
            if stopped and r is not None:
                self._note_stopped(e.name, r)
            if stopped:
                self.later.append(e)
            return
        if final and r is not None:
            outcome = OUTCOME_OF[r.app.state]
            self.store.finish(e.name, "DONE", outcome, r.app.reason, app_state=r.app.state,
                              speedup=r.geomean, spent_s=spent)
            g = f" {r.geomean:.3f}x" if r.geomean is not None else ""
            self.progress(f"{e.name}: {outcome_words(outcome, r.app.state)}{g} after "
                          f"{budget.format_duration(spent)}")
            return
        said = [ln.strip() for ln in tail if ln.strip().startswith(("error:", "hint:"))]
        why = " ".join(said) or f"kernforge app run {exit_cause(rc)}: " + " / ".join(tail[-3:])
        self.store.finish(e.name, "DONE", "FAILED", why,
                          app_state=r.app.state if r is not None and r.app.state in FINAL
                          else "", spent_s=spent)
        self.progress(f"{e.name}: FAILED: {why}")


def innermost(r: AppResult) -> Milestone | None:
    """The milestone a stopped run was in: of those left RUNNING (M3 and its strategy's),
    the latest begun."""
    running = [m for m in r.milestones.values() if m.status == "RUNNING"]
    return max(running, key=lambda m: m.started, default=None)


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
