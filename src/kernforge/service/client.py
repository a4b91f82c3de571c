"""The replay service's client: submit evaluate / validate / tune requests, read metrics.

``Client()`` starts a local cluster owned by the client (closed with it); ``Client(address)``
connects to a running scheduler (``kernforge serve start``, ``dask scheduler`` + ``dask worker
--nthreads 1 --resources replay=1``, or any cluster whose workers offer ``replay=1``);
``Client.from_state()`` to the one ``kernforge serve`` started. The code that uses it is the
same in every case.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import distributed

from ..core import (
    BackendUnavailableError,
    ConfigError,
    Measurement,
    Recording,
    RecordingNotFoundError,
    Variant,
)
from .batch import Pending, ServiceError, batch_size, death_measurement, reraise, submit_batches
from .cluster import start_cluster
from .config import RESOURCE, ServiceConfig
from .monitor import KEY_PREFIX, death_of, ensure_monitor, snapshot
from .tasks import Limits, Raised, Request
from .worker import PRELOAD_KEY, ReplayPlugin, preload, worker_summary

RecordingRef = str | os.PathLike[str] | Recording


@dataclass(frozen=True)
class Metrics:
    """What ``kernforge serve status`` shows (counters since the monitor was installed)."""

    workers: int
    evaluations: int
    evaluations_per_s: float  # over the last minute (or the uptime, if shorter)
    queued: int  # requests waiting for a worker
    running: int
    worker_restarts: int
    deaths: int  # requests whose worker died while running them (crash or watchdog)
    by_status: Mapping[str, int]
    stage_mean_s: Mapping[str, float]  # compile, restore, run, verify, measure
    uptime_s: float
    closed: int = 0  # evaluations whose worker its nanny closed or restarted (not a crash)

    @classmethod
    def from_snapshot(cls, d: Mapping[str, Any]) -> Metrics:
        return cls(int(d.get("workers", 0)), int(d.get("evaluations", 0)),
                   float(d.get("evaluations_per_s", 0.0)), int(d.get("queued", 0)),
                   int(d.get("running", 0)), int(d.get("worker_restarts", 0)),
                   int(d.get("deaths", 0)), dict(d.get("by_status", {})),
                   dict(d.get("stage_mean_s", {})), float(d.get("uptime_s", 0.0)),
                   int(d.get("closed", 0)))

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _path(recording: RecordingRef) -> str:
    raw = recording.path if isinstance(recording, Recording) else recording
    return os.path.abspath(os.fspath(raw))


class Client:
    """A connection to a replay service (see the module docstring)."""

    def __init__(self, address: str | None = None, *, config: ServiceConfig | None = None,
                 limits: Limits | None = None, connect_timeout: float = 60.0,
                 cause_wait_s: float = 30.0) -> None:
        self.config = config or ServiceConfig()
        self.limits = limits or Limits(self.config.min_timeout_s, self.config.timeout_factor,
                                       self.config.compile_timeout_s,
                                       self.config.state_cache_mb << 20)
        self.cause_wait_s = cause_wait_s
        self.cluster: Any = None
        target: Any = address
        if address is None:
            self.cluster = start_cluster(self.config)
            target = self.cluster
        try:
            self.dask = distributed.Client(target, timeout=connect_timeout,
                                           set_as_default=False)
        except OSError as exc:
            self._close_cluster()
            raise ServiceError(f"cannot reach the scheduler at {address}: {exc}",
                               hint="start one with `kernforge serve start`, or check the "
                                    "address") from exc
        try:
            self.dask.run_on_scheduler(ensure_monitor)
            self.dask.register_plugin(ReplayPlugin(), name=ReplayPlugin.name)
            self._check_workers()
        except BaseException:  # no Client to close comes back: close what was opened here
            self.close()
            raise

    @classmethod
    def from_state(cls, state: Path | None = None, **kw: Any) -> Client:
        """Connect to the service ``kernforge serve start`` left in ``state``."""
        from .daemon import read_state
        return cls(read_state(state)["address"], **kw)

    @property
    def address(self) -> str:
        return str(self.dask.scheduler.address)

    def worker_info(self) -> dict[str, dict[str, Any]]:
        """The scheduler's record of every worker, by address, asked afresh. Not
        ``dask.Client.scheduler_info()``: a periodic refresh without workers overwrites its
        cache, so on a loaded machine it could read as no workers at all."""
        identity = self.dask.sync(self.dask.scheduler.identity, n_workers=-1)
        return dict(identity.get("workers", {}))

    def _check_workers(self) -> None:
        workers = self.worker_info()
        if workers and not any(RESOURCE in w.get("resources", {}) for w in workers.values()):
            raise ConfigError(
                f"no worker of {self.address} offers the resource {RESOURCE!r}",
                hint=f"start workers with `dask worker ADDRESS --nthreads 1 --resources "
                     f"{RESOURCE}=1` (one per GPU or core group)")

    # ---- requests ---------------------------------------------------------------------------
    def request(self, recording: RecordingRef, variant: Variant | None = None, *,
                config: Mapping[str, Any] | None = None, tolerance: Any = None,
                warmup: int = 3, repeat: int = 10, flush: bool | None = None,
                verify_only: bool = False, timeout_s: float | None = None) -> Request:
        """One evaluation of ``variant`` (default: the recorded one) or of the tuning point
        ``config`` on ``recording``, for :meth:`submit_many`; ``timeout_s`` fixes the run
        watchdog (default: derived from the recorded variant's time)."""
        if variant is not None and config is not None:
            raise ConfigError("give a variant or a tuning config, not both")
        return Request(_path(recording), variant, dict(config) if config else None, tolerance,
                       warmup, repeat, flush, verify_only, timeout_s, self.limits)

    def submit(self, recording: RecordingRef, variant: Variant | None = None,
               **kw: Any) -> Pending:
        """Queue one evaluation (see :meth:`request`), alone in its task."""
        return self.submit_many([self.request(recording, variant, **kw)], batch=1)[0]

    def submit_many(self, requests: Iterable[Request], *, batch: int | None = None
                    ) -> list[Pending]:
        """Queue many evaluations at once, in batches of ``batch`` consecutive requests per
        task (default: :func:`.batch.batch_size` for the replay workers there are now; 1 sends
        each alone); one Pending per request, in order (see :mod:`.batch`)."""
        reqs = list(requests)
        if not reqs:
            return []
        if batch is not None and (isinstance(batch, bool) or batch < 1):
            raise ConfigError(f"batch={batch!r} must be a positive integer")
        size = batch if batch is not None else batch_size(len(reqs), self.replay_workers())
        out: list[Pending] = []
        for b in submit_batches(self, reqs, size):
            out += [Pending(b, i) for i in range(len(b.requests))]
        return out

    def evaluate(self, recording: RecordingRef, variant: Variant | None = None,
                 **kw: Any) -> Measurement:
        """Evaluate one variant (see :meth:`request`) and wait for its Measurement."""
        return self.submit(recording, variant, **kw).result()

    def evaluate_many(self, recording: RecordingRef, variants: Iterable[Variant | None], *,
                      batch: int | None = None, **kw: Any) -> list[Measurement]:
        """Evaluate many variants of one recording in parallel, results in order."""
        pending = self.submit_many([self.request(recording, v, **kw) for v in variants],
                                   batch=batch)
        return [p.result() for p in pending]

    def validate(self, recordings: RecordingRef | Sequence[RecordingRef],
                 variant: Variant | None = None, *, config: Mapping[str, Any] | None = None,
                 tolerance: Any = None) -> list[Measurement]:
        """Verify (no timing) one variant or tuning point on each recording."""
        recs = [recordings] if isinstance(recordings, (str, os.PathLike, Recording)) \
            else list(recordings)
        pending = self.submit_many([self.request(r, variant, config=config, tolerance=tolerance,
                                                 verify_only=True, warmup=0, repeat=0)
                                    for r in recs])
        return [p.result() for p in pending]

    def tune(self, recording: RecordingRef, **kw: Any) -> Any:
        """Parallel TPE over the workers (see :func:`kernforge.service.tuning.tune_remote`)."""
        from .tuning import tune_remote
        return tune_remote(self, recording, **kw)

    def call(self, fn: Any, *args: Any, key: str = "task", **kw: Any) -> Any:
        """Run ``fn(*args)`` on a replay worker and return its value (re-raising Raised)."""
        future = self.dask.submit(fn, *args, key=f"{KEY_PREFIX}{key}-{uuid.uuid4().hex}",
                                  pure=False, resources={RESOURCE: 1}, retries=0, **kw)
        try:
            value = future.result()
        finally:
            future.release()
        if isinstance(value, Raised):
            reraise(value)
        return value

    def death_record(self, key: str) -> dict[str, Any] | None:
        """The monitor's record of the death of the worker running request ``key``, with its
        crash log once the restarted worker sent it (waiting up to ``cause_wait_s``)."""
        deadline = time.monotonic() + self.cause_wait_s
        record = self.dask.run_on_scheduler(death_of, key)
        while record is not None and record.get("text") is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
            record = self.dask.run_on_scheduler(death_of, key)
        return record

    def death(self, key: str) -> Measurement:
        """The Measurement of a request whose worker died while running it."""
        return death_measurement(self.death_record(key), key)

    # ---- the service ------------------------------------------------------------------------
    def load(self, recordings: Iterable[RecordingRef]) -> None:
        """Load recordings on every worker now, and on every worker that starts later."""
        paths = [_path(r) for r in recordings]
        for p in paths:
            if not Path(p).is_dir():
                what = "a file, not a recording" if Path(p).exists() else "no recording"
                raise RecordingNotFoundError(f"{what} at {p}",
                                             hint="give recorded unit directories")
        known = list(self.dask.get_metadata(PRELOAD_KEY, default=[]) or [])
        self.dask.set_metadata(PRELOAD_KEY, known + [p for p in paths if p not in known])
        self.dask.run(preload, paths)

    def metrics(self) -> Metrics:
        return Metrics.from_snapshot(self.dask.run_on_scheduler(snapshot))

    def workers(self) -> list[dict[str, Any]]:
        """Every worker: name, address, resources, and what its replay state holds."""
        info = self.worker_info()
        try:
            states = self.dask.run(worker_summary, on_error="return")
        except TypeError:  # older distributed
            states = self.dask.run(worker_summary)
        out = []
        for address, w in sorted(info.items(), key=lambda kv: str(kv[1].get("name"))):
            st = states.get(address)
            out.append({"name": w.get("name"), "address": address, "nanny": w.get("nanny"),
                        "resources": w.get("resources", {}),
                        **(st if isinstance(st, dict) else {"error": repr(st)})})
        return out

    def replay_workers(self) -> int:
        """How many workers offer the replay resource now."""
        workers = self.worker_info()
        return sum(1 for w in workers.values() if RESOURCE in w.get("resources", {}))

    def wait_for_workers(self, n: int = 1, timeout: float = 120.0) -> None:
        try:
            self.dask.wait_for_workers(n, timeout=timeout)
        except TimeoutError as exc:
            raise BackendUnavailableError(f"fewer than {n} workers joined {self.address} "
                                          f"within {timeout:g} s",
                                          hint="check the workers' logs") from exc

    def shutdown(self) -> None:
        """Stop the scheduler and its workers (the whole service), then close."""
        self.dask.shutdown()
        self._close_cluster()

    def _close_cluster(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def close(self) -> None:
        self.dask.close()
        self._close_cluster()

    def __enter__(self) -> Client:  # noqa: PYI034
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
