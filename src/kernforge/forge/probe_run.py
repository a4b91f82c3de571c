"""The runs of ``kernforge stencil probe`` (:mod:`.probe`): each variant built, run and checked
against the oracle, then all of them timed in interleaved passes, by default in a supervised
worker process of the command (``kernforge.replay.isolate.Isolation``).

The worker holds the probe's state between requests (the device, the cell's fields, the copy
bandwidth, one runner per variant that passed its check) and writes the variant it is about to
build or run to a stage file. A variant that kills the worker (a signal; on the GPU a sticky
fault, after which the worker ends itself), hangs past its limit, or fails to compile, launch
or run costs that variant only: it is reported with its Status (RUNTIME_FAILED, TIMEOUT,
COMPILE_FAILED, LAUNCH_FAILED) and cause, and the probe goes on in a fresh worker, which builds
the surviving variants again. A variant that fails the oracle is a :class:`ConfigError`, as
without a worker: a probe must keep the operator's results.

Limits per request (the supervisor's ``Limits``): a build and check ``first_timeout_s``; the
timed passes ``timeout_factor`` times the slowest variant's checked run times the runs they
make, at least ``min_timeout_s``; a fresh worker gets ``first_timeout_s`` more for its start and
``first_timeout_s`` per variant it builds again.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..core import CompileError, ConfigError, KernelRuntimeError, LaunchError, Status
from ..core.errors import WorkerLost
from ..harness.compare import round_robin
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from .bench_isolated import DEVICE, _device
from .check_isolated import StageFile, healthy, stage_writer, sticky
from .isolated import HINT

SEED = 7  # the probe's inputs
WARMUP = 3
_STATE: dict[str, Any] = {"key": None}


def name_of(op: Operator) -> str:
    return op.key + (f"+{op.notes}" if op.notes else "")


def _add(st: dict[str, Any], index: int, op: Operator) -> float:
    """Build ``op``, run it once, check it: the seconds of that run (host clock)."""
    dev, dcell = st["dev"], st["dcell"]
    name = name_of(op)
    runner = dev.operator_runner(op, dcell, name)
    t0 = time.perf_counter()
    runner.run()
    dev.synchronize()
    took = time.perf_counter() - t0
    res = dcell.check(runner.output())
    if not res.ok:
        raise ConfigError(f"{name} fails the oracle: {res}",
                          hint="a probe must keep the operator's results")
    st["runs"][index] = runner
    return took


def _time(st: dict[str, Any], order: list[int], passes: int, stage: Any) -> dict[int, list[float]]:
    dev, runs = st["dev"], st["runs"]
    for i in order:
        stage(str(i))
        for _ in range(WARMUP):
            runs[i].run()
        dev.synchronize()

    def timed(i: int) -> Any:
        def run() -> float:
            stage(str(i))
            return float(dev.once(runs[i]))
        return run

    # by position: a repeat is its own; each pass one run of every variant, in order
    samples = round_robin([timed(i) for i in order], passes=passes)
    return dict(zip(order, samples, strict=True))


def close() -> None:
    """Drop the probe's state (its fields and runners)."""
    _STATE.clear()
    _STATE["key"] = None


def request(token: str, target: str, cell: Cell, held: list[tuple[int, Operator]], action: str,
            arg: Any, stage_file: str) -> Any:
    """The worker's side (also called in-process): the state of the probe ``token`` of
    ``cell`` on the device ``target`` names, with a runner for each of ``held`` (built again in a fresh
    worker), then ``action``: "open" (the copy bandwidth), "add" (``arg``: index and operator;
    the seconds of its checked run) or "time" (``arg``: passes; per index, the samples)."""
    stage = stage_writer(stage_file)
    stage("")
    dev = _device(target)
    if _STATE["key"] != (token, target, cell.id):
        close()
        copy = dev.copy_bandwidth(cell.shape.points * cell.precision.itemsize)
        _STATE.update(key=(token, target, cell.id), dev=dev, dcell=dev.allocate(cell, seed=SEED),
                      copy=(copy.bytes_per_s, copy.method), runs={})
    st = _STATE
    try:
        keep = {i for i, _ in held}
        for i in [i for i in st["runs"] if i not in keep]:
            del st["runs"][i]  # a variant lost meanwhile
        for i, op in held:
            if i not in st["runs"]:
                stage(str(i))
                _add(st, i, op)
        if action == "open":
            return st["copy"]
        if action == "add":
            index, op = arg
            stage(str(index))
            return _add(st, index, op)
        return _time(st, [i for i, _ in held], int(arg), stage)
    except Exception as exc:
        if healthy(dev):
            raise
        close()  # a sticky fault: answered, then this worker ends
        raise sticky(f"{type(exc).__name__}: {getattr(exc, 'message', exc)}") from None


@dataclass
class Lost:
    """A variant the probe could not keep: its Status, cause and message."""

    status: Status
    cause: str
    message: str


@dataclass
class ProbeRuns:
    """The supervisor's side: requests to a worker of ``supervisor`` (None: in this process)."""

    cell: Cell
    supervisor: Any = None
    target: str = DEVICE
    held: list[tuple[int, Operator]] = field(default_factory=list)
    lost: dict[int, Lost] = field(default_factory=dict)
    fresh: bool = True
    slowest: float = 0.0
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def _limit(self, action: str, passes: int = 0) -> float:
        lim = self.supervisor.limits
        if action == "time":
            runs = (WARMUP + passes) * max(1, len(self.held))
            base = float(lim.run_limit(self.slowest, runs))
        else:
            base = float(lim.first_timeout_s)
        extra = float(lim.first_timeout_s) * (1 + len(self.held)) if self.fresh else 0.0
        return base + extra

    def _call(self, action: str, arg: Any, passes: int = 0) -> Any:
        """``action`` until it is answered: a variant that fails on the way is set aside."""
        while True:
            stage = StageFile()
            try:
                if self.supervisor is None:
                    return request(self.token, self.target, self.cell, list(self.held),
                                   action, arg, str(stage.path))
                out = self.supervisor.call(f"{__name__}:request", self.token, self.target,
                                           self.cell, list(self.held), action, arg,
                                           str(stage.path), timeout_s=self._limit(action, passes))
                self.fresh = False
                return out
            except WorkerLost as lost:
                self.fresh = True
                failed = Lost(lost.status, lost.cause, f"{lost.message}; hint: {HINT}")
                index = stage.read()
            except (CompileError, LaunchError, KernelRuntimeError) as exc:
                if self.supervisor is None and not stage.read():
                    raise
                self.fresh = True  # after a sticky fault the worker ended itself
                status = exc.status or Status.RUNTIME_FAILED
                failed = Lost(status, type(exc).__name__, exc.message)
                index = stage.read()
            finally:
                stage.remove()
            if not index:
                raise KernelRuntimeError(f"the probe of {self.cell.id} failed before any "
                                         f"variant ran: {failed.message}", hint=HINT)
            self.lost[int(index)] = failed
            self.held = [(i, op) for i, op in self.held if i != int(index)]
            if action == "add" and int(index) == arg[0]:
                return None
            if action == "time" and not self.held:
                return {}  # the last variant was lost while timed: nothing left to time

    def open(self) -> tuple[float, str]:
        bps, method = self._call("open", None)
        return float(bps), str(method)

    def add(self, index: int, op: Operator) -> None:
        took = self._call("add", (index, op))
        if took is not None:
            self.held.append((index, op))
            self.slowest = max(self.slowest, float(took))

    def time(self, passes: int) -> dict[int, list[float]]:
        """Per surviving variant, its samples (a variant lost while timed is set aside and
        the others timed again)."""
        if not self.held:
            return {}
        times = self._call("time", passes, passes)
        return {int(i): list(v) for i, v in times.items()}

    def close(self) -> None:
        """In this process: the probe's state dropped (a worker drops it at the next probe)."""
        if self.supervisor is None:
            close()
