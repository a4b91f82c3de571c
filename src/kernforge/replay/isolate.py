"""Supervised evaluation: candidate code runs in a worker process, never in the caller's.

:class:`Isolation` is a small pool of local worker processes (:mod:`.isolate_worker`) that keep
recordings and compiled modules warm between requests. A candidate that kills its worker (a
signal: segmentation fault, abort, bus error, illegal instruction; on the GPU, an illegal
address or a trap leaves the context unusable and the worker ends itself) or that runs past its
limit costs that candidate only: it comes back as ``RUNTIME_FAILED`` (with the signal and the
stage it died in) or ``TIMEOUT``, the worker is replaced, and the caller goes on.

Limits. A request has two stages: compile (``Limits.compile_timeout_s``), then run, announced by
the worker once the candidate compiled. The run limit is ``timeout_factor`` times the fastest
first run seen for that recording (the baseline, learned from OK evaluations) times the runs the
request makes, and at least ``min_timeout_s``; before any OK evaluation of a recording it is
``first_timeout_s``. Validation gets ``validate_timeout_s`` for its run stage.

Start-up. A worker imports kernforge and, for each backend in ``warm`` (and every backend the
pool was asked for before it started, when it replaces a lost worker), makes that backend ready
before it reads its first request: on CUDA, CuPy imported, the context created, NVRTC loaded,
the fingerprint kernels built, the cache-flush buffer allocated. Started with the pool (the CLI
starts it before it loads its own backend), that overlaps the caller's own set-up (loading
recordings, its own backend, the search space) instead of delaying the first candidate. A
request carries the recording's path, never its arrays; the worker loads each recording once and
keeps it. Closing the pool hangs up on its workers and does not wait for their exits (each tears
down a device context); they are reaped in the background.

Use ``with Isolation() as iso: evaluate_variant(rec, v, isolate=iso)`` (also ``replay``,
``validate``, ``tune_recording`` and the evolve evaluator take ``isolate=``); the CLI commands
use it unless given ``--in-process``. The stencil forge and bench reuse the pool through
:meth:`Isolation.call` (``kernforge.forge.isolated``).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..core import KernforgeError, Measurement, Recording, Status, Variant
from ..core.errors import ConfigError, WorkerLost, error_from_json

REAPER = "kernforge-reap"  # the name of the threads that wait for closed workers to exit
HINT = ("the worker was replaced and the run went on; run the candidate with --in-process "
        "under a debugger (gdb, compute-sanitizer) to see where it fails")


@dataclass(frozen=True)
class Limits:
    """The supervisor's watchdog settings (seconds)."""

    min_timeout_s: float = 10.0
    timeout_factor: float = 50.0
    first_timeout_s: float = 120.0
    compile_timeout_s: float = 300.0
    validate_timeout_s: float = 1800.0

    def run_limit(self, baseline_s: float | None, runs: int) -> float:
        if baseline_s is None:
            return self.first_timeout_s
        return max(self.min_timeout_s, self.timeout_factor * baseline_s * max(1, runs))


def _signal_name(code: int) -> tuple[str, str]:
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"signal {-code}", "unknown signal"
    return sig.name, signal.strsignal(sig) or sig.name


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return text[-limit:]


class _Worker:
    """One worker process and the socket to it."""

    def __init__(self, directory: Path, env: dict[str, str] | None,
                 warm: tuple[str, ...] = (), pool_closed: threading.Event | None = None) -> None:
        self.pool_closed = pool_closed or threading.Event()
        self.crash = Path(tempfile.mkstemp(dir=directory, prefix="worker-", suffix=".crash")[1])
        self.out = self.crash.with_suffix(".out")
        # its temporary files (compiler, sanitizer builds) in a folder of its own, removed with
        # it even when it is killed (a hang, Ctrl-C) before its own cleanup could run
        self.tmp = self.crash.with_suffix(".tmp")
        self.tmp.mkdir()
        env = {**(env if env is not None else os.environ), "TMPDIR": str(self.tmp)}
        ours, theirs = socket.socketpair()
        # the supervisor's command line, so that provenance written in the worker names it
        code = ("from kernforge.replay.isolate_worker import serve; "
                f"serve({theirs.fileno()}, {str(self.crash)!r}, {tuple(warm)!r}, "
                f"{list(sys.argv)!r})")
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         env=env, start_new_session=True)
        theirs.close()
        self.conn = Connection(ours.detach())

    def request(self, msg: tuple[Any, ...], first_limit: float,
                run_limit: float) -> tuple[Any, bool]:
        """Send ``msg``; wait for the answer under the stage limits. Raises WorkerLost."""
        self.conn.send(msg)
        stage, deadline = "compile", time.monotonic() + first_limit
        while True:
            left = deadline - time.monotonic()
            try:
                ready = left > 0 and self.conn.poll(left)
                reply = self.conn.recv() if ready else None
            except (EOFError, OSError):
                raise self._lost(stage) from None
            if reply is None:
                limit = first_limit if stage == "compile" else run_limit
                self.kill()
                raise WorkerLost(Status.TIMEOUT, f"the candidate did not finish its {stage} "
                                 f"stage within {limit:.1f} s; its worker was killed",
                                 f"timeout:{stage}")
            if reply[0] == "stage":
                stage, deadline = reply[1], time.monotonic() + run_limit
                continue
            if reply[0] == "raise":
                err = error_from_json(reply[1])
                if reply[2]:  # the worker ends itself: its device context is unusable
                    self.close()
                raise err
            return reply[1], bool(reply[2])

    def _lost(self, stage: str) -> WorkerLost:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            name, what = _signal_name(code)
            cause = f"killed by {name} ({what})"
        else:
            name, cause = f"exit {code}", f"exited with status {code}"
        said = [ln for ln in _tail(self.out).splitlines() if ln.strip()][-5:]
        detail = "".join(f"\n  {ln}" for ln in said)  # what the kernel itself printed
        return WorkerLost(Status.RUNTIME_FAILED, f"the candidate killed its worker process in "
                          f"the {stage} stage: {cause}{detail}", name)

    def alive(self) -> bool:
        """Running and not hung up on (a closed worker may take a moment to exit)."""
        return not self.conn.closed and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        self.proc.wait()
        self.close()

    def close(self) -> None:
        """Hang up; the worker, idle or ending itself, exits on its own. A thread reaps it
        (its exit tears down its device context: no reason to hold the caller, whose next
        candidate needs a new worker anyway), kills it if still there after 30 s and removes
        its files. A hung worker is killed and waited for instead (:meth:`kill`): its kernel
        may still be running on the device."""
        try:
            self.conn.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            # not a daemon: an interpreter that exits first waits for it (no files left)
            threading.Thread(target=self._reap, name=REAPER).start()
        else:
            self._remove_files()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self._remove_files()
        if self.pool_closed.is_set():  # the pool's directory, once its last worker is gone
            try:
                self.crash.parent.rmdir()
            except OSError:
                pass

    def _remove_files(self) -> None:
        for path in (self.crash, self.out):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def lost_measurement(lost: WorkerLost) -> Measurement:
    """A lost worker as the candidate's failure (typed data with a hint)."""
    reason = "timeout" if lost.status is Status.TIMEOUT else "runtime:failed"
    return Measurement(lost.status, message=f"{lost.message}\n  hint: {HINT}",
                       extra=(("error", "WorkerLost"), ("cause", lost.cause), ("hint", HINT),
                              ("reason", reason)))


@dataclass
class Isolation:
    """A pool of ``workers`` supervised worker processes (started at once; a worker that a
    candidate killed is replaced on the next request). ``warm``: backends (``"cuda"``) each
    worker makes ready as it starts, before its first request."""

    workers: int = 1
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] | None = None
    warm: tuple[str, ...] = ()
    replaced: int = 0  # workers replaced after a crash, a hang or a sticky fault
    started: int = 0  # worker processes started, the first ones and every replacement

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"Isolation(workers={self.workers}) needs at least one worker")
        self.warm = tuple(dict.fromkeys(self.warm))
        self._dir = Path(tempfile.mkdtemp(prefix="kernforge-workers-"))
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._baseline: dict[str, float] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()  # set: no new requests; reapers remove the directory
        for _ in range(self.workers):  # started now: they get ready while the caller works
            self._idle.put(self._start())

    def _start(self) -> _Worker:
        with self._lock:
            self.started += 1
            warm = self.warm
        return _Worker(self._dir, self.env, warm, self._closed)

    def _warm_also(self, backend: str | None) -> None:
        """Replacements make ready what this pool was asked for (a named backend)."""
        if backend is not None and backend not in self.warm:
            with self._lock:
                self.warm = (*self.warm, backend)

    def __enter__(self) -> Isolation:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        while True:
            try:
                w = self._idle.get_nowait()
            except queue.Empty:
                break
            if w is not None:
                w.close()  # no wait: each ends on its own, side by side
        try:
            self._dir.rmdir()
        except OSError:
            pass

    # ---- requests ---------------------------------------------------------------------------
    def _run(self, msg: tuple[Any, ...], first_limit: float, run_limit: float) -> Any:
        if self._closed.is_set():
            raise ConfigError("this Isolation pool is closed", hint="use a new Isolation()")
        w = self._idle.get()
        try:
            if w is None or not w.alive():
                if w is not None:
                    w.close()  # it died idle: its socket and files go with it
                w = self._start()
            value, recycle = w.request(msg, first_limit, run_limit)
            if recycle:  # the worker ends itself: its device context is unusable
                w.close()
                w = None
                with self._lock:
                    self.replaced += 1
            return value
        except WorkerLost:
            if w is not None:
                w.kill()
            w = None
            with self._lock:
                self.replaced += 1
            raise
        except KernforgeError:
            if w is not None and not w.alive():  # it ended itself after a sticky fault
                w = None
                with self._lock:
                    self.replaced += 1
            raise
        finally:
            if self._closed.is_set() and w is not None:
                w.close()  # the pool was closed while this request ran: no one will take it
                w = None
            self._idle.put(w)

    def _learn(self, key: str, m: Measurement) -> None:
        run = dict(m.stages).get("run")
        if m.ok and run:
            with self._lock:
                self._baseline[key] = min(self._baseline.get(key, run), run)

    def evaluate(self, recording: Recording, variant: Variant, *,
                 backend: str | None = None, **kw: Any) -> Measurement:
        """:func:`kernforge.replay.engine.evaluate_variant` in a worker; a crash or a hang is
        the candidate's RUNTIME_FAILED or TIMEOUT."""
        key = str(Path(recording.path).resolve())
        self._warm_also(backend or recording.backend)
        runs = 1 if kw.get("verify_only") else int(kw.get("warmup", 3)) + \
            int(kw.get("repeat", 10)) + 2
        if kw.get("integrity") not in (None, "basic"):
            runs += 20
        with self._lock:
            base = self._baseline.get(key)
        limit = self.limits.run_limit(base, runs)
        try:
            m = self._run(("evaluate", key, variant, backend, kw),
                          self.limits.compile_timeout_s, limit)
        except WorkerLost as lost:
            return lost_measurement(lost)
        self._learn(key, m)
        return m

    def validate(self, recording: Recording, variant: Variant | None, *,
                 backend: str | None = None, **kw: Any) -> Any:
        """:func:`kernforge.replay.validate.validate` in a worker; a crash or a hang rejects
        the candidate (RUNTIME_FAILED or TIMEOUT)."""
        from .validate import lost_validation

        key = str(Path(recording.path).resolve())
        self._warm_also(backend or recording.backend)
        try:
            return self._run(("validate", key, variant, backend, kw),
                             self.limits.compile_timeout_s, self.limits.validate_timeout_s)
        except WorkerLost as lost:
            v = variant or recording.variant
            return lost_validation(kw.get("case") or recording.name, v.key(),
                                   lost_measurement(lost), kw.get("ledger"), kw.get("figure"))

    def call(self, target: str, *args: Any, timeout_s: float | None = None,
             **kwargs: Any) -> Any:
        """``module:function`` called in a worker; raises :class:`WorkerLost` when the worker
        dies or ``timeout_s`` passes."""
        limit = timeout_s if timeout_s is not None else self.limits.validate_timeout_s
        return self._run(("call", target, args, kwargs), self.limits.compile_timeout_s, limit)


def backend_name(backend: Any) -> str | None:
    """A backend given as a name or an instance, as the worker resolves it (by name)."""
    if backend is None or isinstance(backend, str):
        return backend
    return str(backend.name)
