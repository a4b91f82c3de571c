"""Routed launches against the event path, on any ``cupy`` (the stand-in of
kernforge.testing.fakecupy, or CuPy on a GPU in test_deploy_gpu.py): a deployment with routes
and the same deployment seen only through events run the same launches; what each launch did
must be identical."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kernforge.backends import events
from kernforge.deploy import Deployment, DeploySpec, entry_from_recording
from kernforge.record import load_recording, record

SHIFTED = r"""
#ifndef SHIFT
#define SHIFT 0
#endif
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + SHIFT;
}
"""


class Counting(Deployment):
    """A deployment counting the launches it ran through a route (``direct``: those of them
    converted in one pass)."""

    routed = 0
    direct = 0

    def run_routed(self, *args: Any) -> Any:
        self.routed += 1
        return super().run_routed(*args)

    def run_converted(self, *args: Any) -> Any:
        self.routed += 1
        self.direct += 1
        return super().run_converted(*args)


class EventsOnly:
    """The same deployment as a substituter without routes: every launch becomes an event."""

    def __init__(self, dep: Deployment) -> None:
        self.dep = dep

    def covers(self, *args: Any) -> bool:
        return self.dep.covers(*args)

    def substitute(self, event: Any, launch: Any) -> Any:
        return self.dep.substitute(event, launch)


def _launches(cp: Any) -> list[Callable[[Any], Any]]:
    """Launches of ``k`` like the recorded one (n=256, grid 2 x block 128) and each differing
    in one property; each returns the written array."""
    f32 = cp.float32

    def launch(n: int = 256, a: Any = None, nn: Any = None, grid: Any = (2,),
               block: Any = (128,), same: bool = False, strided: bool = False,
               **kw: Any) -> Callable[[Any], Any]:
        def run(k: Any) -> Any:
            x = cp.arange(2 * n, dtype=f32)[::2] if strided else cp.arange(n, dtype=f32)
            y = x if same else cp.zeros(n, dtype=f32)
            k(grid, block, (x, y, np.float32(2) if a is None else a,
                            n if nn is None else nn), **kw)
            return y
        return run

    return [launch(), launch(n=128, grid=(1,)), launch(same=True), launch(strided=True),
            launch(a=2.0), launch(a=np.float32(-0.0)), launch(nn=np.int64(256)),
            launch(nn=255), launch(grid=2, block=128), launch(grid=(2, 1), block=(128, 1)),
            launch(grid=(np.int64(2),)), launch(shared_mem=0), launch(shared_mem=64)]


def run_both(cp: Any, tmp: Path, synchronize: Callable[[], None] = lambda: None,
             to_host: Callable[[Any], np.ndarray] = np.asarray
             ) -> tuple[list[Any], list[Any], Counting]:
    """Record one launch of SHIFTED, deploy it with ``#define SHIFT 100``, then run every
    launch of :func:`_launches` alternating with the recorded one, twice over: through a
    deployment with routes and through the same deployment seen only through events. Returns
    what each run saw (per launch: the written array on the host or the error; the report)."""
    k = cp.RawKernel(SHIFTED, "scale")
    with record(tmp / "rec") as rec:
        _launches(cp)[0](k)
    r = load_recording(rec.paths[0])
    spec = DeploySpec((entry_from_recording(
        r, r.variant.with_(defines={"SHIFT": "100"}), baseline_s=2.0, tuned_s=1.0,
        speedup=2.0, speedup_ci=None),))
    runs = []
    for routes in (True, False):
        # SHIFT=100 changes the results on purpose (to see which kernel ran), so the
        # first-launch re-verification (deploy/reverify.py) would refuse it: off here, as this
        # compares routes with events, not the check (a test marked ``reverify``, such as the
        # GPU one, would otherwise see every launch fall back)
        dep = Counting(spec, verify="off")
        events.set_substituter(dep if routes else EventsOnly(dep))
        seen: list[Any] = []
        try:
            for other in _launches(cp):
                for run in (other, _launches(cp)[0], other, other):
                    try:
                        y = run(k)
                        synchronize()
                        seen.append(to_host(y).tobytes())
                    except Exception as exc:  # noqa: BLE001 - the outcome compared
                        seen.append(f"{type(exc).__name__}: {exc}")
        finally:
            events.set_substituter(None)
        seen.append(dep.report().kernels)
        runs.append((seen, dep))
    return runs[0][0], runs[1][0], runs[0][1]
