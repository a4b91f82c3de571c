"""What a deployment costs the host per kernel launch, measured on this machine.

A tiny kernel (``scale``: y[i] = a * x[i]; 16 elements on the CPU, one block of 256 threads on
the GPU, so the launch itself is the cost) is launched many times in each mode below, and its
host time per launch taken:

- ``plain``: no deployment (cpu: a ``kernforge.Kernel``; cuda: CuPy's own ``RawKernel``);
- ``hooks, no deployment`` (cuda only): the same kernel made while the CuPy hooks are
  installed (what ``kernforge run`` and the demo run an application with);
- ``not in the spec``: a deployment whose spec lists no entry for the kernel;
- ``replaced``: the launch matches the entry and runs the tuned variant (the same code with
  another option: ``-O3`` on the cpu, ``maxrregcount=32`` on the GPU);
- ``problem mismatch``: the kernel is in the spec, but launched with another integer scalar;
- ``replaced, varied (1 in 3)``: launches alternating between the matching problem and two
  others (another ``n``, another shape).

Each mode runs ``batches`` batches of ``launches`` launches, the modes interleaved (drifts of
the host cancel); a mode's figure is the median over the batches, its overhead the median of
the per-batch differences to ``plain``. On the GPU the device is synchronized before and after
each batch, outside the timed region: what is timed is the host's launch calls (the tiny
kernel runs in less time than a launch takes to issue). :attr:`OverheadTable.per_launch_s`
(the overhead of ``replaced``) is what :mod:`.worth` compares a tuned kernel's saving with.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends import Kernel, LaunchEvent, cupy_hooks, events, get_backend
from ..core import ConfigError, KernforgeError
from .entries import entry_from_event
from .runtime import Deployment
from .spec import DeployEntry, DeploySpec

SCALE_C = r"""
void scale(const double *restrict x, double *restrict y, double a, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = a * x[i];
}
"""
SCALE_CUDA = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
BACKENDS = ("cpu", "cuda")
PLAIN, HOOKS, MISSING = "plain", "hooks, no deployment", "not in the spec"
REPLACED, MISMATCH, VARIED = "replaced", "problem mismatch", "replaced, varied (1 in 3)"


@dataclass(frozen=True)
class OverheadTable:
    """Seconds per launch, per mode (one figure per batch), and how they were taken."""

    backend: str
    device: str
    launches: int
    batches: int
    cache: bool
    times: dict[str, list[float]] = field(default_factory=dict)

    def median(self, mode: str) -> float:
        return statistics.median(self.times[mode])

    def overhead(self, mode: str) -> float:
        """Median over the batches of (this mode - plain), seconds per launch."""
        return statistics.median(t - p for t, p in zip(self.times[mode], self.times[PLAIN]))

    @property
    def issue_s(self) -> float:
        """Host time of a plain launch (no hooks), seconds."""
        return self.median(PLAIN)

    @property
    def per_launch_s(self) -> float:
        """What a replaced launch costs the host beyond a plain one."""
        return self.overhead(REPLACED)

    def lines(self) -> list[str]:
        out = [f"host time per launch, {self.backend} backend ({self.device}), kernel scale, "
               f"median of {self.batches} batches of {self.launches} launches"
               + ("" if self.cache else " (decision cache off)")]
        for mode in self.times:
            extra = "" if mode == PLAIN else f"   overhead {self.overhead(mode) * 1e6:+8.2f} us"
            out.append(f"  {mode:28s} {self.median(mode) * 1e6:8.2f} us{extra}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "device": self.device, "launches": self.launches,
                "batches": self.batches, "cache": self.cache,
                "median_s": {m: self.median(m) for m in self.times},
                "overhead_s": {m: self.overhead(m) for m in self.times if m != PLAIN}}


class _Capture:
    """A launch observer keeping the events it sees."""

    def __init__(self) -> None:
        self.events: list[LaunchEvent] = []

    def before(self, event: LaunchEvent) -> None:
        self.events.append(event)

    def after(self, token: Any, error: BaseException | None) -> None:
        pass


def entry_like(launch: Callable[[], None], options: dict[str, Any]) -> DeployEntry:
    """The entry replacing launches like ``launch()`` by the same code with ``options``."""
    capture = _Capture()
    events.add_observer(capture)
    try:
        launch()
    finally:
        events.remove_observer(capture)
    if len(capture.events) != 1:
        raise KernforgeError(f"the measurement kernel's launch was seen {len(capture.events)} "
                             "times, not once", hint="report this as a kernforge bug")
    event = capture.events[0]
    return entry_from_event(event, event.variant.with_(options=options), baseline_s=1.0,
                            tuned_s=1.0, speedup=1.0, speedup_ci=None,
                            recording="(the overhead measurement)")


def _per_launch(run: Callable[[], None], launches: int, sync: Callable[[], None]) -> float:
    """Seconds per call of ``run`` over ``launches`` calls (after a few untimed ones)."""
    for _ in range(max(10, launches // 20)):
        run()
    sync()
    t0 = time.perf_counter()
    for _ in range(launches):
        run()
    elapsed = time.perf_counter() - t0
    sync()
    return elapsed / launches


def _cycle(*runs: Callable[[], None]) -> Callable[[], None]:
    state = [0]

    def varied() -> None:
        state[0] = (state[0] + 1) % len(runs)
        runs[state[0]]()

    return varied


def _cpu_modes() -> tuple[dict[str, Callable[[], None]], DeployEntry, Callable[[], None],
                          Callable[[], None]]:
    n = 16
    k = Kernel(SCALE_C, "scale", backend="cpu")
    x, y = np.arange(float(n)), np.zeros(n)
    x2, y2 = np.arange(float(2 * n)), np.zeros(2 * n)
    matching = (lambda: k(x, y, 2.0, n, threads=1))
    entry = entry_like(matching, {"opt_level": "O3"})
    mismatch = (lambda: k(x, y, 2.0, n - 1, threads=1))
    other = (lambda: k(x2, y2, 2.0, 2 * n, threads=1))

    def check() -> None:
        if y.tolist() != (2.0 * x).tolist():
            raise KernforgeError("the measurement kernel computed wrong results")

    modes = {PLAIN: matching, MISSING: matching, REPLACED: matching, MISMATCH: mismatch,
             VARIED: _cycle(matching, mismatch, other)}
    return modes, entry, (lambda: None), check


def _cuda_modes(cp: Any) -> tuple[dict[str, Callable[[], None]], DeployEntry,
                                  Callable[[], None], Callable[[], None]]:
    """The modes on the GPU; the CuPy hooks are installed (``k`` is a hooked kernel)."""
    n = 256
    plain = cupy_hooks.original_class(cp, "RawKernel")(SCALE_CUDA, "scale")
    k = cp.RawKernel(SCALE_CUDA, "scale")  # made while the hooks are installed
    x = cp.arange(n, dtype=cp.float32)
    y = cp.zeros_like(x)
    x2 = cp.arange(2 * n, dtype=cp.float32)
    y2 = cp.zeros_like(x2)
    a = np.float32(2.0)
    matching = (lambda: k((1,), (n,), (x, y, a, n)))
    entry = entry_like(matching, {"maxrregcount": 32})
    mismatch = (lambda: k((1,), (n,), (x, y, a, n - 1)))
    other = (lambda: k((1,), (n,), (x2, y2, a, 2 * n)))

    def check() -> None:
        if not bool((y == 2 * x).all()):
            raise KernforgeError("the measurement kernel computed wrong results")

    modes = {PLAIN: (lambda: plain((1,), (n,), (x, y, a, n))), HOOKS: matching,
             MISSING: matching, REPLACED: matching, MISMATCH: mismatch,
             VARIED: _cycle(matching, mismatch, other)}
    return modes, entry, cp.cuda.runtime.deviceSynchronize, check


def measure_overhead(backend: str = "cpu", *, launches: int = 2000, batches: int = 15,
                     cache: bool = True) -> OverheadTable:
    """The table of the module doc, on ``backend`` ("cpu": the host C compiler; "cuda": CuPy
    and a GPU, else :class:`~kernforge.core.BackendUnavailableError`). ``cache``: the
    deployments decide from their decision cache (False: every launch from scratch).

    Raises :class:`~kernforge.core.KernforgeError` when a matching launch was not replaced,
    another was, or the kernel's results are wrong; ConfigError while launch observers (a
    recording) are registered, since they would be measured too."""
    if backend not in BACKENDS:
        raise ConfigError(f"no overhead measurement for backend {backend!r}",
                          hint=f"choose one of: {', '.join(BACKENDS)}")
    if launches < 1 or batches < 1:
        raise ConfigError("launches and batches must be at least 1",
                          hint="e.g. --launches 2000 --batches 15")
    if events.has_observers():
        raise ConfigError("launch observers are registered (a recording?): they would be "
                          "measured too", hint="measure outside a recording")
    cp = None
    if backend == "cuda":
        from ..backends.cuda import require_cupy

        cp = require_cupy("measuring the deployment overhead with --backend cuda",
                          "run it on a machine with an NVIDIA GPU and CuPy (cupy-cuda13x), "
                          "or use --backend cpu")
        get_backend("cuda")
    hooked = cupy_hooks.install() if cp is not None else False
    previous = events.set_substituter(None)
    try:
        modes, entry, sync, check = _cuda_modes(cp) if cp is not None else _cpu_modes()
        specs = {MISSING: DeploySpec(()), REPLACED: DeploySpec((entry,)),
                 MISMATCH: DeploySpec((entry,)), VARIED: DeploySpec((entry,))}
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(batches):
            for mode, run in modes.items():
                # verify="off": a per-launch cost of the steady state; the once-per-process
                # re-verification (deploy/reverify.py) is not a launch cost
                dep = Deployment(specs[mode], cache=cache, verify="off") if mode in specs \
                    else None
                events.set_substituter(dep)
                try:
                    times[mode].append(_per_launch(run, launches, sync))
                finally:
                    events.set_substituter(None)
                if dep is not None:
                    _check_counts(mode, dep)
        check()
    finally:
        events.set_substituter(previous)
        if hooked:
            cupy_hooks.uninstall()
    device = str(entry.device.get("device"))
    return OverheadTable(backend, device, launches, batches, cache, times)


def _check_counts(mode: str, dep: Deployment) -> None:
    counts = dep.report().kernels.get("scale")
    replaced = counts.replaced if counts else 0
    fallback = counts.fallback if counts else 0
    wrong = (mode == REPLACED and (fallback or not replaced)) or \
        (mode in (MISSING, MISMATCH) and replaced) or (mode == VARIED and not replaced)
    if wrong:
        raise KernforgeError(f"mode {mode!r}: {replaced} launch(es) replaced, {fallback} "
                             f"fallback(s) ({counts.reasons if counts else {}})",
                             hint="the measurement does not measure what it says: report "
                                  "this as a kernforge bug")
