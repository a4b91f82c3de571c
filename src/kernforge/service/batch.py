"""Requests in flight: evaluations sent to the workers in batches, one Dask task per batch.

A task costs the scheduler, the worker and the client a few milliseconds of bookkeeping and
round trips (the worker's synchronous announcement to the monitor among them); an evaluation
of a small kernel on a GPU takes about as long. :meth:`Client.submit_many` therefore cuts a
list of requests into batches of consecutive requests (:func:`batch_size`), each evaluated in
order by one task (:func:`.tasks.evaluate_batch_task`): announced once, every evaluation
still compiled, verified, timed and checked exactly as alone, under its own watchdog stages.
All batches go to the scheduler in one message, keyed in submission order, so they run in
that order and every worker's queue stays full until the end; work stealing evens out the
last batches. Each request keeps its :class:`Pending`, and results come back in order.

A worker that dies in a batch is charged to the evaluation that was running
(:func:`.monitor.item_of`): that one resolves to the classified death, the others of the batch
are evaluated again in a new batch (their results died with the worker). Where nothing names
the evaluation, each one is sent again alone. A worker that its nanny closed, killed or
restarted while it ran a batch (the worker announces it, :mod:`.monitor`) judged nothing: the
whole batch is sent again, up to :data:`CLOSE_RETRIES` times.
"""

from __future__ import annotations

import math
import threading
import uuid
from typing import TYPE_CHECKING, Any

import distributed
from distributed.scheduler import KilledWorker

from ..core import KernforgeError, Measurement, Status
from ..core import errors as _errors
from .config import RESOURCE
from .monitor import KEY_PREFIX, classify, item_of
from .tasks import Raised, Request, evaluate_batch_task

if TYPE_CHECKING:
    from .client import Client

#: the most evaluations one task carries
MAX_BATCH = 16
#: batches per worker a list of requests is cut into at least (the tail stays short)
BATCHES_PER_WORKER = 8
#: times a batch is sent again after its nanny closed its worker (not a crash) while it ran
CLOSE_RETRIES = 2


class ServiceError(KernforgeError):
    """The service itself failed (no workers, scheduler gone, request cancelled)."""


def reraise(value: Raised) -> None:
    cls = getattr(_errors, value.kind, None)
    if not (isinstance(cls, type) and issubclass(cls, KernforgeError)):
        cls = ServiceError
    try:
        err = cls(value.message, hint=value.hint)
    except TypeError:
        err = ServiceError(value.message, hint=value.hint)
    raise err


def batch_size(requests: int, workers: int, limit: int = MAX_BATCH) -> int:
    """Evaluations per task for ``requests`` over ``workers``: at least
    ``BATCHES_PER_WORKER`` batches per worker, at most ``limit`` evaluations each."""
    if requests <= 0:
        return 1
    per = math.ceil(requests / (max(1, workers) * BATCHES_PER_WORKER))
    return max(1, min(limit, per))


def chunks(requests: list[Request], size: int) -> list[list[Request]]:
    return [requests[i:i + size] for i in range(0, len(requests), max(1, size))]


class Batch:
    """One task evaluating requests in order; its results once fetched (or, after its worker
    died, where each one's result comes from)."""

    def __init__(self, client: Client, requests: list[Request], future: Any,
                 attempt: int = 0) -> None:
        self.client, self.requests, self.future = client, requests, future
        self.attempt = attempt  # times these requests were sent again after a worker close
        self._values: list[Any] | None = None  # Measurement | Raised | (Batch, index)
        self._lock = threading.Lock()

    @property
    def key(self) -> str:
        return str(self.future.key)

    def done(self) -> bool:
        return self._values is not None or bool(self.future.done())

    def value(self, index: int, timeout: float | None = None) -> Measurement | Raised:
        with self._lock:
            if self._values is None:
                self._values = self._fetch(timeout)
            got = self._values[index]
        if isinstance(got, tuple):  # evaluated again in another batch
            other, at = got
            return other.value(at, timeout)
        return got

    def _fetch(self, timeout: float | None) -> list[Any]:
        try:
            values = self.future.result(timeout=timeout)
        except KilledWorker:
            return self._recover()
        except distributed.client.FutureCancelledError as exc:
            raise ServiceError(f"request {self.key} was cancelled: {exc}",
                               hint="the scheduler or the client was shut down") from exc
        finally:
            if self.future.done():
                self.future.release()
        if len(values) != len(self.requests):
            raise ServiceError(f"request {self.key} returned {len(values)} results for "
                               f"{len(self.requests)} evaluations")
        return list(values)

    def _recover(self) -> list[Any]:
        """The death charged to the evaluation that was running; the others again."""
        record = self.client.death_record(self.key)
        if record is not None and record.get("closed") is not None \
                and self.attempt < CLOSE_RETRIES:  # its nanny closed it: not a verdict
            (resent,) = submit_batches(self.client, self.requests, len(self.requests),
                                       attempt=self.attempt + 1)
            return [(resent, i) for i in range(len(self.requests))]
        dead = death_measurement(record, self.key)
        if len(self.requests) == 1:
            return [dead]
        item = item_of(record) if record is not None else None
        if item is None or not 0 <= item < len(self.requests):
            again = [submit_batches(self.client, [r], 1)[0] for r in self.requests]
            return [(b, 0) for b in again]
        rest = [r for i, r in enumerate(self.requests) if i != item]
        (other,) = submit_batches(self.client, rest, len(rest))
        values: list[Any] = []
        for i in range(len(self.requests)):
            values.append(dead if i == item else (other, i if i < item else i - 1))
        return values


def death_measurement(record: dict[str, Any] | None, key: str) -> Measurement:
    if record is None:
        return Measurement(Status.RUNTIME_FAILED, message=(
            "the workers holding this request died before it finished (KilledWorker); "
            "it was not seen running a candidate"), extra=(("key", key),))
    return classify(record)


class Pending:
    """One request in flight; :meth:`result` waits for its Measurement."""

    def __init__(self, batch: Batch, index: int) -> None:
        self.batch, self.index = batch, index
        self._value: Measurement | None = None

    @property
    def request(self) -> Request:
        return self.batch.requests[self.index]

    @property
    def key(self) -> str:
        """The key of the task that carries this request (shared by its batch)."""
        return self.batch.key

    def done(self) -> bool:
        return self.batch.done()

    def result(self, timeout: float | None = None) -> Measurement:
        if self._value is None:
            value = self.batch.value(self.index, timeout)
            if isinstance(value, Raised):
                reraise(value)
            assert isinstance(value, Measurement)
            self._value = value
        return self._value


def submit_batches(client: Client, requests: list[Request], size: int,
                   attempt: int = 0) -> list[Batch]:
    """Send ``requests`` as tasks of ``size`` consecutive requests each, in one message."""
    groups = chunks(requests, size)
    run = uuid.uuid4().hex[:16]
    keys = [f"{KEY_PREFIX}eval-{run}{i:08d}-x{len(g)}" for i, g in enumerate(groups)]
    futures = client.dask.map(evaluate_batch_task, groups, key=keys, pure=False,
                              resources={RESOURCE: 1}, retries=0)
    return [Batch(client, g, f, attempt) for g, f in zip(groups, futures, strict=True)]
