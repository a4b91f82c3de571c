"""Verifying a fused operator whose step has elided companions (apps/elide_companion.py), on
the device (run by apps/fused_gpu.py).

The fused kernel stands for T whole steps but writes only the grids: the elided companions'
buffers (a per-step diagnostic) are left to the step the interposer always holds after a fused
launch, which runs as the original launches. So the candidate is what a deployment runs: the
fused launch, then the recorded sequence's step T+1 as recorded (stencil and every companion);
the reference is the recorded sequence's first T+1 steps from the same state (the recorded one,
then fresh grids). Every region the sequence writes is compared:

- IN's and OUT's buffers under the kernel's tolerance for T+1 steps
  (:func:`.fused.tolerance_steps`; the last step is the original on both sides, so it carries
  the error of the first T amplified by at most ``sum|w|``, which the T+1-step bound covers);
  the fused launch alone must leave IN's buffer as it was;
- the bytes the elided companions write, as elements of their pointee type (from the mangled
  name; unknown: bit for bit) under :func:`diag_tolerance`, which follows from the fields';
- every other byte of those regions bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..core import Tolerance
from ..harness.verify import check_buffer, passes
from ..replay.native import NativeReplay, NativeVariant
from . import fused as fz
from . import lift_companion as lc
from .operator_gpu import AdapterRun, ReplayTarget
from .probe import Recognized

FRESH_SEEDS = (21, 22)


def diag_tolerance(want: np.ndarray, field_err: float, points: int, dtype: str) -> np.ndarray:
    """Per diagnostic value, how far it may move when the fields move by at most
    ``field_err`` per point: a sum ``D = sum (a_i - b_i)^2`` over at most ``points`` points
    of two field values (the demo's change norm; a sum of fewer terms, as a block's partial
    sum, is bounded by the same). With ``|error of a_i - b_i| <= 2E``,
    ``|D' - D| <= 4E sum|d_i| + 4 N E^2 <= 4E sqrt(N D) + 4 N E^2`` (Cauchy-Schwarz), plus
    the rounding of two sums of ``N`` non-negative terms in ``dtype`` (``2 N eps D``). ``D``
    is the reference's value, never the candidate's."""
    d = np.abs(want.astype(np.float64))
    n, e = float(points), float(field_err)
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return 4 * e * np.sqrt(n * d) + 4 * n * e * e + 2 * n * eps * d


class ElidedCheck:
    """The check of ``steps`` fused steps of sequence ``whole`` whose step has the companions
    ``comps`` (some elided), against its first ``steps + 1`` recorded steps; ``t``: the
    replay target of its first launch (IN and OUT), on the same placement."""

    def __init__(self, whole: NativeReplay, t: ReplayTarget, r: Recognized, steps: int,
                 comps: Sequence[lc.Companion]) -> None:
        assert whole.sequence is not None
        self.whole, self.t, self.r, self.steps = whole, t, r, steps
        v = NativeVariant()
        self.after = whole.sequence.calls(v, steps=steps + 1)[
            len(whole.sequence.calls(v, steps=steps)):]
        self.elided = [w for c in comps for w in c.elided or ()]
        self.regions = [i for i, g in enumerate(whole.rec.regions) if g.epilogue is not None]
        self.refs: dict[str, tuple[float, dict[int, np.ndarray]]] = {}
        self.inputs: dict[int, dict[int, np.ndarray]] = {}

    def _read(self) -> dict[int, np.ndarray]:
        drv, rec = self.whole.drv, self.whole.rec
        return {i: np.frombuffer(drv.dtoh(self.whole.addr[i], rec.regions[i].size),
                                 dtype=np.uint8).copy() for i in self.regions}

    def _scale(self) -> float:
        dt, got = np.dtype(self.r.dtype), self.t.read()
        m = max(float(np.nanmax(np.abs(got[p][:self.r.points * dt.itemsize].view(dt)
                                       .astype(np.float64))))
                for p in (self.r.in_param, self.r.out_param))
        return m if np.isfinite(m) else 1.0

    def _reference(self, key: str, place: Callable[[], None]
                   ) -> tuple[float, dict[int, np.ndarray]]:
        if key not in self.refs:
            place()
            scale = self._scale()
            assert self.whole.sequence is not None
            self.whole.sequence.run(NativeVariant(), steps=self.steps + 1)
            self.refs[key] = scale, self._read()
        return self.refs[key]

    def compare(self, run: AdapterRun, key: str, place: Callable[[], None]) -> str | None:
        """From the state ``place()`` puts: the fused launch, then the recorded step T+1;
        why it differs from the reference's T+1 steps, or None."""
        scale, want = self._reference(key, place)
        place()
        before = self.t.read((self.r.in_param,))[self.r.in_param]
        run.run()
        if not np.array_equal(self.t.read((self.r.in_param,))[self.r.in_param], before):
            return "the fused kernel wrote into IN's buffer (it must only read it)"
        drv = self.whole.drv
        for call in self.after:
            drv.check(call(), "cuLaunchKernel")
        drv.synchronize()
        got = self._read()
        return self.differs(got, want, scale)

    def _grids(self) -> list[tuple[int, int, int]]:
        """(region, start, end) of IN's and OUT's buffers."""
        out = []
        for p in (self.r.in_param, self.r.out_param):
            ri, off = self.t.where[p]
            out.append((ri, off, off + next(b.nbytes for b in self.t.buffers if b.param == p)))
        return out

    def differs(self, got: dict[int, np.ndarray], want: dict[int, np.ndarray], scale: float
                ) -> str | None:
        r, dt = self.r, np.dtype(self.r.dtype)
        rtol, atol = fz.tolerance_steps(r, scale, self.steps + 1)
        seen = {i: np.zeros(len(want[i]), dtype=bool) for i in self.regions}
        for name, (ri, lo, hi) in zip(("IN", "OUT"), self._grids(), strict=True):
            k = (hi - lo) // dt.itemsize * dt.itemsize
            g, v = got[ri][lo:lo + k].view(dt), want[ri][lo:lo + k].view(dt)
            tol = Tolerance("rel", rtol=rtol, atol=atol)
            if not passes(g, v, tol):  # the full check only says why
                c = check_buffer(name, g, v, tol)
                return f"{name} differs from {self.steps + 1} recorded steps: {c.describe()}"
            seen[ri][lo:lo + k] = True
        top = max([scale] + [float(np.nanmax(np.abs(want[ri][lo:lo + (hi - lo) // dt.itemsize
                                                          * dt.itemsize].view(dt)), initial=0))
                             for ri, lo, hi in self._grids()])
        if not np.isfinite(top) and self.elided:
            return ("the recorded steps leave non-finite grid values: no bound for what the "
                    "elided companions write")
        err = atol + rtol * top  # what a field value may move, per point
        for w in self.elided:
            why = self._diag(w, got[w.region][w.start:w.end], want[w.region][w.start:w.end],
                             err)
            if why:
                return why
            seen[w.region][w.start:w.end] = True
        for i in self.regions:
            bad = np.flatnonzero((got[i] != want[i]) & ~seen[i])
            if bad.size:
                return (f"region {i} differs from {self.steps + 1} recorded steps at byte "
                        f"{int(bad[0])} ({bad.size} bytes), outside the grids and the elided "
                        "companions' output")
        return None

    def _diag(self, w: lc.Written, got: np.ndarray, want: np.ndarray, err: float
              ) -> str | None:
        what = f"what the elided companions wrote ({w.describe()})"
        dt = np.dtype(w.dtype) if w.dtype in ("float32", "float64") else None
        if dt is None or got.size % dt.itemsize:
            same = np.array_equal(got, want)
            return None if same else f"{what} is not bit for bit the recorded steps'"
        g, v = got.view(dt).astype(np.float64), want.view(dt).astype(np.float64)
        tol = diag_tolerance(v, err, self.r.points, str(dt))
        ok = (g == v) | (np.isfinite(g) & np.isfinite(v) & (np.abs(g - v) <= tol))
        if ok.all():
            return None
        i = int(np.flatnonzero(~ok)[0])
        return (f"{what} differs from {self.steps + 1} recorded steps: element {i} is "
                f"{g[i]!r}, recorded {v[i]!r}, allowed +-{tol[i]:.3g} by the fields' "
                f"error {err:.3g} per point")

    def recorded(self, run: AdapterRun) -> tuple[str | None, list[str]]:
        why = self.compare(run, "recorded", self.t.rp.restore)
        if why:
            return f"from the recorded state: {why}", []
        done = (f"recorded state: {self.steps} fused steps and one recorded step match "
                f"{self.steps + 1} recorded steps on every region written "
                f"({len(self.elided)} elided outputs included)")
        return None, [done]

    def fresh(self, run: AdapterRun) -> tuple[str | None, list[str]]:
        r, dt = self.r, np.dtype(self.r.dtype)
        bufs = {b.param: b for b in self.t.buffers}
        done: list[str] = []
        for seed in FRESH_SEEDS:
            if seed not in self.inputs:
                rng = np.random.default_rng(seed)
                x = np.zeros(bufs[r.in_param].nbytes, dtype=np.uint8)
                x[:r.points * dt.itemsize] = rng.uniform(-1, 1, r.points).astype(dt) \
                    .view(np.uint8)
                y = rng.uniform(2, 3, bufs[r.out_param].nbytes // dt.itemsize).astype(dt)
                self.inputs[seed] = {r.in_param: x, r.out_param: y.view(np.uint8)}

            def place(c: dict[int, np.ndarray] = self.inputs[seed]) -> None:
                self.t.place(c)

            why = self.compare(run, f"seed {seed}", place)
            if why:
                return f"fresh input (seed {seed}): {why}", done
            done.append(f"fresh input seed {seed}: matches on every region written")
        return None, done
