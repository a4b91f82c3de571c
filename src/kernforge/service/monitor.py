"""The scheduler side of the service: a Dask SchedulerPlugin that knows which evaluation each
worker is running, turns a worker's death into a classified result, and keeps the metrics.

Workers talk to it only through Dask events (``log_event``): a synchronous *start* event before
a request runs any candidate code, batched *stage* and *end* events, the restarted worker's
*death* event carrying its predecessor's crash log, and a *deposit* event from a worker that
ends itself on purpose (a GPU context left unusable) with the Measurement it produced.

On *start* the plugin raises the task's ``suspicious`` count to the scheduler's
``allowed_failures``: if this worker dies now, the scheduler marks the task erred
(``KilledWorker``) instead of handing the candidate to the next worker, while the requests
merely queued on the dead worker are rescheduled as usual. *End* of a request's last
evaluation resets it.

A request may be a batch of evaluations run one after the other (keys ``kf-eval-<id>-x<n>``):
it is announced once, each stage and end event names its item, and a death is charged to the
item that was running (:func:`item_of`); the client evaluates the others again.
"""

from __future__ import annotations

import re
import time
from collections import Counter, OrderedDict, defaultdict, deque
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ..core import Measurement, Status

PLUGIN = "kernforge-monitor"
KEY_PREFIX = "kf-"
START, STAGE, END = "kernforge-start", "kernforge-stage", "kernforge-end"
DEATH, DEPOSIT = "kernforge-death", "kernforge-deposit"
STAGE_MARK = "kernforge-stage:"  # first line of a worker's crash log: the stage it was in
MAX_DEATHS = 10_000
RATE_WINDOW_S = 60.0
_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
            "Floating-point exception": "SIGFPE", "Floating point exception": "SIGFPE",
            "Illegal instruction": "SIGILL"}


class Monitor(SchedulerPlugin):
    """Running requests per worker, deaths by task key, counters for the metrics."""

    name = PLUGIN

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.started = time.time()
        self.running: dict[str, dict[str, Any]] = {}  # worker address -> start message
        self.deaths: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.by_status: Counter[str] = Counter()
        self.stage_sum: defaultdict[str, float] = defaultdict(float)
        self.stage_n: Counter[str] = Counter()
        self.done: deque[float] = deque(maxlen=100_000)
        self.nannies: set[str] = set()
        self.restarts = 0
        self.closing: dict[str, str] = {}  # worker address -> the reason it announced closing
        self.closes = 0  # evaluations whose worker its nanny closed (not a crash) while running

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        for address, ws in scheduler.workers.items():
            self.nannies.add(ws.nanny or address)

    # ---- events from workers --------------------------------------------------------------
    def log_event(self, topic: str, msg: Any) -> None:
        if isinstance(msg, dict) and msg.get("action") == "closing-worker":
            # Dask's Worker.close logs this under the worker's address before it stops, and
            # the scheduler removes the worker only after this message (one ordered stream).
            # Only a close its nanny asked for (kill, close, restart) is Dask's own: a worker
            # closing itself ("worker-close": a signal, a failed event loop) may be the
            # candidate's doing; a worker already removed (retired, heartbeat lost) is not
            # running anything any more.
            reason = str(msg.get("reason", ""))
            known = self.scheduler is None or topic in self.scheduler.workers
            if known and closed_by_dask(reason):
                self.closing[str(topic)] = reason
            return
        handler = {START: self._start, STAGE: self._stage, END: self._end, DEATH: self._death,
                   DEPOSIT: self._deposit}.get(topic)
        if handler is not None and isinstance(msg, dict):
            handler(msg)

    def _task(self, key: str) -> Any:
        return self.scheduler.tasks.get(key) if self.scheduler is not None else None

    def _start(self, msg: dict[str, Any]) -> None:
        ts = self._task(msg["key"])
        if ts is not None:
            ts.suspicious = max(ts.suspicious, self.scheduler.allowed_failures)
        self.running[msg["worker"]] = dict(msg, t_seen=time.time(), t_stage=time.time())

    def _stage(self, msg: dict[str, Any]) -> None:
        run = self.running.get(msg["worker"])
        if run is not None and run["key"] == msg["key"]:
            run.update(stage=msg["stage"], timeout_s=msg["timeout_s"], t_stage=time.time(),
                       item=msg.get("item", 0))

    def _end(self, msg: dict[str, Any]) -> None:
        run = self.running.get(msg["worker"])
        mine = run is not None and run["key"] == msg["key"]
        if msg.get("last", True):
            if mine:
                del self.running[msg["worker"]]
            ts = self._task(msg["key"])
            if ts is not None:
                ts.suspicious = 0
        elif run is not None and mine:  # the next item starts: a death now is charged to it
            run.update(stage="start", timeout_s=0.0, t_stage=time.time(),
                       item=int(msg.get("item", 0)) + 1)
        if msg.get("count", True):
            self._count(msg.get("status", "OK"), msg.get("stages", {}))

    def _count(self, status: str, stages: dict[str, float]) -> None:
        self.by_status[status] += 1
        self.done.append(time.time())
        for name, seconds in stages.items():
            self.stage_sum[name] += float(seconds)
            self.stage_n[name] += 1

    def _death(self, msg: dict[str, Any]) -> None:
        """The restarted worker's predecessor left a crash log: attach it to its death."""
        for record in reversed(self.deaths.values()):
            if record.get("nanny") == msg.get("nanny") and record.get("text") is None:
                record["text"] = msg.get("text", "")
                return

    def _deposit(self, msg: dict[str, Any]) -> None:
        run = self.running.get(msg["worker"])
        if run is not None and run["key"] == msg["key"]:
            run["deposit"] = msg["measurement"]
            run["item"] = msg.get("item", run.get("item", 0))

    # ---- workers coming and going ---------------------------------------------------------
    def add_worker(self, scheduler: Any, worker: str) -> None:
        ws = scheduler.workers.get(worker)
        nanny = (ws.nanny if ws is not None else None) or worker
        if nanny in self.nannies:
            self.restarts += 1
        self.nannies.add(nanny)

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        closed = self.closing.pop(worker, None)
        run = self.running.pop(worker, None)
        if run is None:
            return
        record = dict(run, t_death=time.time(), text=None)
        if run.get("deposit") is None and closed is not None:
            # closed by Dask, not by the candidate: the client sends the request again
            record.update(closed=closed, text="")
            self.closes += evaluations_in(run["key"])
        elif run.get("deposit") is not None or not run.get("nanny"):
            record["text"] = ""  # nothing more will come: no successor will report
        self.deaths[run["key"]] = record
        while len(self.deaths) > MAX_DEATHS:
            self.deaths.popitem(last=False)
        if run.get("what") == "evaluate" and "closed" not in record:
            self._count(classify(record).status.value, {})

    # ---- what clients ask for (through run_on_scheduler) -----------------------------------
    def _evaluations_waiting(self) -> int:
        """Evaluations not started yet: those of every request a worker has not finished,
        less those the running ones have started."""
        total = 0
        for key, ts in self.scheduler.tasks.items():
            if isinstance(key, str) and key.startswith(f"{KEY_PREFIX}eval-") \
                    and ts.state in ("waiting", "queued", "no-worker", "processing"):
                total += evaluations_in(key)
        started = sum(int(r.get("item", 0)) + 1 for r in self.running.values()
                      if r.get("what") == "evaluate")
        return max(0, total - started)

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        prefix = self.scheduler.task_prefixes.get(f"{KEY_PREFIX}eval") if self.scheduler else None
        in_queue = self._evaluations_waiting() if prefix is not None else 0
        total = sum(self.by_status.values())
        recent = sum(1 for t in self.done if now - t <= RATE_WINDOW_S)
        span = min(RATE_WINDOW_S, max(now - self.started, 1e-9))
        return {
            "uptime_s": now - self.started, "evaluations": total,
            "by_status": dict(self.by_status),
            "evaluations_per_s": recent / span,
            "running": len(self.running), "queued": in_queue,
            "worker_restarts": self.restarts,
            "deaths": sum(1 for r in self.deaths.values() if "closed" not in r),
            "closed": self.closes,
            "workers": len(self.scheduler.workers) if self.scheduler else 0,
            "stage_mean_s": {k: self.stage_sum[k] / self.stage_n[k] for k in self.stage_n},
        }


# ---- functions run on the scheduler (client.run_on_scheduler) -------------------------------
def ensure_monitor(dask_scheduler: Any) -> bool:
    """Install the monitor unless there is one (several clients share it). True if added."""
    if PLUGIN in dask_scheduler.plugins:
        return False
    dask_scheduler.add_plugin(Monitor())
    plugin = dask_scheduler.plugins[PLUGIN]
    plugin.scheduler = dask_scheduler
    for address, ws in dask_scheduler.workers.items():
        plugin.nannies.add(ws.nanny or address)
    return True


def death_of(key: str, dask_scheduler: Any) -> dict[str, Any] | None:
    plugin = dask_scheduler.plugins.get(PLUGIN)
    record = plugin.deaths.get(key) if plugin is not None else None
    return dict(record) if record is not None else None


def snapshot(dask_scheduler: Any) -> dict[str, Any]:
    plugin = dask_scheduler.plugins.get(PLUGIN)
    return plugin.snapshot() if plugin is not None else {}


# ---- classification -------------------------------------------------------------------------
def closed_by_dask(reason: str) -> bool:
    """Whether a worker's closing reason is its nanny's (``nanny-kill``, ``nanny-close``,
    ``nanny-restart``, ``client-restart-workers-...``: the nanny passes its reason down)."""
    return reason.startswith("nanny-") or "restart" in reason


def evaluations_in(key: str) -> int:
    """Evaluations in the request ``key`` (``kf-eval-<id>-x<n>``; 1 without the suffix)."""
    head, sep, tail = key.rpartition("-x")
    return int(tail) if sep and head.startswith(f"{KEY_PREFIX}eval-") and tail.isdigit() \
        else 1


def item_of(record: dict[str, Any]) -> int | None:
    """Which evaluation of a batch a death is charged to: the one its deposit or its crash
    log's stage line names, else the one the monitor last saw; None when nothing says."""
    if record.get("deposit") is None:
        for line in (record.get("text") or "").splitlines():
            words = line.split()
            if line.startswith(STAGE_MARK) and len(words) == 4 and words[3].isdigit():
                return int(words[3])
            if line.strip():
                break
    item = record.get("item")
    return int(item) if isinstance(item, int) else None


def classify(record: dict[str, Any]) -> Measurement:
    """The Measurement of a request whose worker died while running it."""
    if record.get("deposit") is not None:
        return measurement_from_json(record["deposit"])
    if record.get("closed") is not None:  # what is left when sending it again did not help
        return Measurement(Status.RUNTIME_FAILED, message=(
            f"the worker running this request was closed by Dask (reason: "
            f"{record['closed'] or 'none given'}) before it finished, each time it was sent; "
            f"not a crash of the candidate: see the workers' logs"),
            extra=(("worker", record.get("worker")), ("closed", record["closed"])))
    text = record.get("text") or ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    stage, timeout = record.get("stage", "run"), float(record.get("timeout_s") or 0.0)
    while lines and lines[0].startswith(STAGE_MARK):
        words = lines.pop(0).split()
        if len(words) in (3, 4):
            stage, timeout = words[1], float(words[2])
    first = lines[0] if lines else ""
    extra: tuple[tuple[str, Any], ...] = (
        ("worker", record.get("worker")), ("stage", stage), ("timeout_s", timeout),
        ("crash_log", text[:2000]))
    if first.startswith("Timeout") or (not first and timeout and record.get("t_death", 0)
                                       - record.get("t_stage", 0) >= 0.9 * timeout):
        how = "" if first else " (judged by the time of death: no crash log reached the service)"
        return Measurement(Status.TIMEOUT, message=(
            f"no result within the watchdog's {timeout:.3g} s in the {stage} stage{how}; "
            f"the worker process was killed and restarted"), extra=extra)
    m = re.match(r"Fatal Python error: (.+)", first)
    if m:
        what = m.group(1).strip()
        sig = _SIGNALS.get(what)
        cause = f"{what} ({sig})" if sig else what
    else:
        cause = ("the worker process died without a fatal-signal report (killed: SIGKILL, out "
                 "of memory, or an exit)" if lines or text else
                 "the worker process died (no crash log reached the service)")
    return Measurement(Status.RUNTIME_FAILED, message=(
        f"the candidate crashed its worker process in the {stage} stage: {cause}; "
        f"the worker was restarted"), extra=extra)


def measurement_from_json(d: dict[str, Any]) -> Measurement:
    """The inverse of :meth:`Measurement.to_json` (buffer checks included)."""
    return Measurement.from_json(d)
