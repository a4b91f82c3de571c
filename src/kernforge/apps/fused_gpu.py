"""The GPU half of fusion, run in a child process of its own (apps/fused.py says what a fused
operator must do).

``python -m kernforge.apps.fused_gpu REQUEST.json RESULT.json``: the native unit is placed on
the device as its replay places it and recognized as operator matching recognizes it
(:func:`.operator_gpu.recognized`). The reference for ``T`` steps is the *original* recorded
kernel launched ``T`` times with the IN and OUT pointers swapped after each launch; for a
sequence unit (``kernforge record --sequence N``) of at least ``T`` steps, it is the recorded
sequence itself: its first ``T`` steps' launches as recorded (recognition looks at its first
launch alone, on the same placement). A step's boundary kernels (the launches between the
stencil's first two, apps/fused_steps.py) are lifted to face rules and folded into the
candidates; the reference is then the recorded sequence, so ``T`` is at most its whole steps.
When some companions are elided (per-step diagnostics), a candidate is checked as a deployment
runs it, the fused launch then the recorded step T+1, against T+1 recorded steps on every
region written (apps/fused_elided.py), so ``T`` is at most the whole steps minus one.
The fused candidates' adapters are compiled together; each is run from the recorded state and kept only
when OUT's whole buffer matches the reference's under the kernel's tolerance over ``T`` steps
and IN's buffer is unchanged, then screened against ``T`` original launches (median of
``repeat`` runs each, L2 flushed before each; all memory restored before the original's
runs and the candidate's first, the memory one launch writes before each of the candidate's
next: it leaves IN as it found it). The screened ones are
checked the same way from fresh random inputs, fastest first, until one passes; that one is
timed against the ``T`` launches with the interleaved protocol.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import CompileError, ConfigError, KernforgeError, Tolerance
from ..harness.checkers import RecordedChecker
from ..harness.compare import interleave
from ..harness.verify import passes
from ..record.native_format import read_native
from ..replay.native import NativeReplay, NativeVariant
from ..replay.native_sequence import first_launch
from ..stencil import faces as fc
from . import fused as fz
from . import lift_companion as lc
from . import narrow
from .adapter import layout
from .fused_elided import ElidedCheck
from .fused_steps import step_companions, whole_steps
from .operator_gpu import AdapterRun, ReplayTarget, built, fastest_passing, recognized
from .phases import Phases, watch
from .probe import Recognized
from .process import child_main

FRESH_SEEDS = (21, 22)


def swapped(params: bytes, a: int, b: int) -> bytes:
    """``params`` with the 8-byte words at offsets ``a`` and ``b`` exchanged."""
    raw = bytearray(params)
    raw[a:a + 8], raw[b:b + 8] = params[b:b + 8], params[a:a + 8]
    return bytes(raw)


class Steps:
    """The original kernel launched ``steps`` times from the recorded parameters, IN and OUT
    swapped after every launch (what a program's time loop does)."""

    def __init__(self, rp: NativeReplay, fuse: dict[str, int]) -> None:
        self.rp = rp
        rec, drv = rp.rec, rp.drv
        fn = drv.function(drv.load(rp.image), rec.entry)
        other = swapped(rp.params, fuse["in_offset"], fuse["out_offset"])
        self.calls = [drv.prepare(fn, rec.grid, rec.block, rec.shared_mem,
                                  rp.params if i % 2 == 0 else other, rec.launch_attrs)
                      for i in range(fuse["steps"])]

    def run(self) -> None:
        for call in self.calls:
            self.rp.drv.check(call(), "cuLaunchKernel")
        self.rp.drv.synchronize()

    def time(self) -> float:
        self.rp.restore()  # the steps write IN too
        self.rp.drv.flush_l2()
        return self.rp.drv.time_calls(self.calls)


class RecordedSteps:
    """The first ``steps`` steps of a recorded sequence, its launches as recorded (``whole``:
    the sequence's replay, placed where the first launch's replay is)."""

    def __init__(self, whole: NativeReplay, steps: int) -> None:
        self.whole, self.steps = whole, steps

    def run(self) -> None:
        assert self.whole.sequence is not None
        self.whole.sequence.run(NativeVariant(), steps=self.steps)

    def time(self) -> float:
        assert self.whole.sequence is not None
        self.whole.restore()
        self.whole.drv.flush_l2()
        return self.whole.sequence.time(NativeVariant(), steps=self.steps)


def _references(rp: NativeReplay, whole: NativeReplay | None, slots: Any, r: Recognized,
                steps: Sequence[int]) -> dict[int, Steps | RecordedSteps]:
    """Per number of steps, what a fused kernel must reproduce: the recorded sequence where
    it holds that many steps, else the first launch re-launched with IN and OUT swapped."""
    have = int(whole.rec.sequence.get("steps", 0)) if whole is not None else 0
    return {s: RecordedSteps(whole, s) if whole is not None and have >= s
            else Steps(rp, fz.fuse_field(slots, r, s)) for s in steps}


def _scale(t: ReplayTarget, r: Recognized, got: dict[int, np.ndarray] | None = None) -> float:
    """max |value| over the grid points of IN and OUT as they are now on the device (as
    ``got`` read them)."""
    dt, n = np.dtype(r.dtype), r.points
    got = t.read() if got is None else got
    vals = [np.abs(got[p][:n * dt.itemsize].view(dt).astype(np.float64))
            for p in (r.in_param, r.out_param)]
    m = max(float(np.nanmax(v)) if v.size else 0.0 for v in vals)
    return m if np.isfinite(m) else 1.0


Reference = tuple[float, np.ndarray, np.ndarray]  # scale, OUT after T steps, IN as placed


class References:
    """What every candidate is compared with, made once: per (steps, state) the reference,
    per seed the fresh inputs."""

    def __init__(self) -> None:
        self.refs: dict[tuple[int, str], Reference] = {}
        self.inputs: dict[int, dict[int, np.ndarray]] = {}


def _reference(t: ReplayTarget, r: Recognized, seq: Steps | RecordedSteps, place: Any
               ) -> Reference:
    """From the state ``place()`` puts: its scale, OUT after the reference's steps, and IN
    as placed (the fused kernel must leave it so)."""
    place()
    before = t.read((r.in_param, r.out_param))
    scale = _scale(t, r, before)
    seq.run()
    want = t.read((r.out_param,))
    return scale, want[r.out_param], before[r.in_param]


def _compare(t: ReplayTarget, r: Recognized, steps: int, seq: Steps | RecordedSteps,
             run: AdapterRun, place: Any, ref: Reference) -> str | None:
    """Place the state (``place()``) and run the fused kernel from it; why it differs from
    the reference's ``ref`` (taken from the same state), or None."""
    dt = np.dtype(r.dtype)
    scale, want, before = ref
    place()
    run.run()
    got = t.read((r.in_param, r.out_param))
    rtol, atol = fz.tolerance_steps(r, scale, steps)
    k = len(got[r.out_param]) // dt.itemsize * dt.itemsize
    i, o = f"param{r.in_param}", f"param{r.out_param}"
    tol = Tolerance("rel", rtol=rtol, atol=atol)
    if passes(got[r.in_param], before) and \
            passes(got[r.out_param][:k].view(dt), want[:k].view(dt), tol):
        return None  # the full check below only says why not
    res = RecordedChecker({i: before, o: want[:k].view(dt)}, {o: tol}).check(
        {i: got[r.in_param], o: got[r.out_param][:k].view(dt)})
    if res.ok:
        return None
    bad = res.failed_checks[0]
    if bad.name == i:
        return "the fused kernel wrote into IN's buffer (it must only read it)"
    return f"OUT differs from {steps} {_what(seq)}: {bad.describe()}"


def validate(t: ReplayTarget, r: Recognized, steps: int, seq: Steps | RecordedSteps,
             run: AdapterRun, refs: References | None = None) -> tuple[str | None, list[str]]:
    """(why the fused kernel is wrong or None, what was checked): from the recorded state
    (:func:`validate_recorded`), then from fresh inputs (:func:`validate_fresh`)."""
    refs = References() if refs is None else refs
    why, done = validate_recorded(t, r, steps, seq, run, refs)
    if why:
        return why, done
    why, more = validate_fresh(t, r, steps, seq, run, refs)
    return why, done + more


def _what(seq: Steps | RecordedSteps) -> str:
    return "recorded steps of the sequence" if isinstance(seq, RecordedSteps) \
        else "original launches"


def validate_recorded(t: ReplayTarget, r: Recognized, steps: int, seq: Steps | RecordedSteps,
                      run: AdapterRun, refs: References) -> tuple[str | None, list[str]]:
    """The fused kernel from the recorded state against the reference's ``steps``. ``refs``
    keeps the reference of each (steps, state): the same for every candidate of those
    steps, so the original's ``T`` launches run once per state, not once per candidate."""
    key = (steps, "recorded")
    if key not in refs.refs:
        refs.refs[key] = _reference(t, r, seq, t.rp.restore)
    why = _compare(t, r, steps, seq, run, t.rp.restore, refs.refs[key])
    if why:
        return f"from the recorded state: {why}", []
    return None, [f"recorded state: OUT matches {steps} {_what(seq)}, IN unchanged"]


def validate_fresh(t: ReplayTarget, r: Recognized, steps: int, seq: Steps | RecordedSteps,
                   run: AdapterRun, refs: References) -> tuple[str | None, list[str]]:
    """The fused kernel from fresh random inputs (OUT preset to other values than IN)
    against the reference's ``steps`` from the same inputs (made once, in ``refs``)."""
    dt = np.dtype(r.dtype)
    done: list[str] = []
    bufs = {b.param: b for b in t.buffers}
    for seed in FRESH_SEEDS:
        if seed not in refs.inputs:
            rng = np.random.default_rng(seed)
            x = np.zeros(bufs[r.in_param].nbytes, dtype=np.uint8)
            x[:r.points * dt.itemsize] = rng.uniform(-1, 1, r.points).astype(dt).view(np.uint8)
            y = rng.uniform(2, 3, bufs[r.out_param].nbytes // dt.itemsize).astype(dt)
            refs.inputs[seed] = {r.in_param: x, r.out_param: y.view(np.uint8)}
        contents = refs.inputs[seed]

        def place(c: dict[int, np.ndarray] = contents) -> None:
            t.place(c)

        key = (steps, f"seed {seed}")
        if key not in refs.refs:
            refs.refs[key] = _reference(t, r, seq, place)
        why = _compare(t, r, steps, seq, run, place, refs.refs[key])
        if why:
            return f"fresh input (seed {seed}): {why}", done
        done.append(f"fresh input seed {seed}: matches")
    return None, done


def fused_time(run: AdapterRun) -> float:
    """One timed fused launch from the whole recorded state (a reference run before it may
    have left IN changed): all memory restored once, not its written part again."""
    run.rp.restore()
    return run.time(restore=False)


def session(unit: str, out_dir: str, repeat: int, passes: int, steps: Sequence[int],
            prefer: Sequence[Any] | None = None) -> dict[str, Any]:
    """The child's work (the module docstring), its phase timings in the result's
    ``phases`` (:mod:`.phases`); ``prefer``: the ``[T, operator]`` pairs to try, the others
    left out (:func:`.narrow.keep`)."""
    ph = Phases()
    res = _session(unit, out_dir, repeat, passes, steps, ph, prefer)
    res["phases"] = ph.figures(len(res.get("tried") or ()))
    return res


def _session(unit: str, out_dir: str, repeat: int, passes: int, steps: Sequence[int],
             ph: Phases, prefer: Sequence[Any] | None = None) -> dict[str, Any]:
    with ph("setup"):
        got = _setup(unit, steps, ph)
    if isinstance(got, dict):
        return got
    return _fuse(got, out_dir, repeat, passes, ph, prefer)


Setup = tuple[Any, NativeReplay | None, NativeReplay, ReplayTarget, Recognized,
              tuple[lc.Companion, ...], Any, list[int]]


def _setup(unit: str, steps: Sequence[int], ph: Phases) -> Setup | dict[str, Any]:
    """The unit placed and recognized, the step's companions classified, the step counts
    its sequence holds whole; or the refusal."""
    rec = read_native(unit)
    whole = NativeReplay(rec) if rec.is_sequence else None
    rp = first_launch(whole) if whole is not None else NativeReplay(rec)
    t = ReplayTarget(rp)
    watch(ph, rp, t)
    if whole is not None:
        ph.timed(whole, "restore", "state")
    r = recognized(t)
    if isinstance(r, str):
        return {"nomatch": r}
    comps: tuple[lc.Companion, ...] = ()
    if whole is not None:  # the step's boundary kernels, folded as face rules
        got = step_companions(whole, r)
        if isinstance(got, lc.Refused):
            return {"nomatch": f"not fusable: the step's companions neither fold nor elide: "
                               f"{got.reason}", "recognized": r.describe()}
        comps = got
    faces = lc.groups(comps)
    bufs = {b.param: b for b in t.buffers}
    why = fz.refusal(r, bufs[r.in_param].nbytes, bufs[r.out_param].nbytes, faces)
    if why:
        return {"nomatch": f"not fusable: {why}", "recognized": r.describe()}
    elided = any(c.elided is not None for c in comps)
    steps = list(steps)
    if comps:  # the reference: the recorded steps, boundary kernels included
        assert whole is not None
        whole_n = whole_steps(whole, len(comps))
        have = whole_n - 1 if elided else whole_n
        steps = [s for s in steps if s <= have]
        if not steps:
            return {"nomatch": f"not fusable: the sequence holds {whole_n} whole steps; "
                               "the reference for T steps is T recorded steps "
                               + ("and one more after them (elided companions: record "
                                  "--sequence T+2 or more)" if elided else
                                  "(record --sequence T+1 or more)"),
                    "recognized": r.describe()}
    return rec, whole, rp, t, r, comps, faces, steps


def _fuse(got: Setup, out_dir: str, repeat: int, passes: int, ph: Phases,
          prefer: Sequence[Any] | None = None) -> dict[str, Any]:
    """Every candidate compiled, checked from the recorded state and screened; the fastest
    that passes on fresh inputs timed against the reference's ``T`` launches."""
    rec, whole, rp, t, r, comps, faces, steps = got
    elided = any(c.elided is not None for c in comps)
    slots = layout(rec)
    arch = f"sm_{rp.drv.attribute('cc_major')}{rp.drv.attribute('cc_minor')}"
    seqs = _references(rp, whole, slots, r, steps)
    for seq in seqs.values():  # the reference's launches, run once per state
        ph.timed(seq, "run", "reference")
    checks = {s: ElidedCheck(whole, t, r, s, comps) for s in steps} \
        if elided and whole is not None else {}
    base: dict[int, float] = {}
    with ph("baseline", len(seqs)):
        for s, seq in seqs.items():
            for _ in range(2):
                seq.time()
            base[s] = statistics.median(seq.time() for _ in range(repeat))
    tried: list[dict[str, Any]] = []
    screened: list[tuple[float, dict[str, Any], tuple[int, AdapterRun, bytes, list[str]]]] = []
    refs = References()
    with ph("compile"):
        cands = narrow.keep(fz.candidates(r, steps, faces=faces), prefer,
                            lambda c: [c[0], c[1].key])
        made = built(cands, lambda c: fz.fused_adapter(
            c[1], r, slots, len(rec.param_bytes), c[0]), arch)
    ph.count("compile", sum(not isinstance(a, KernforgeError) for _, a, _ in made))
    for (s, op), ad, image in made:
        row: dict[str, Any] = {"operator": op.key, "steps": s}
        tried.append(row)
        try:
            if isinstance(ad, KernforgeError):
                raise ad
            if isinstance(image, CompileError):
                raise image
            with ph("load", 1):
                run = AdapterRun(rp, ad, image)
            with ph("check", 1):
                bad, done = checks[s].recorded(run) if checks else \
                    validate_recorded(t, r, s, seqs[s], run, refs)
        except (ConfigError, CompileError, KernforgeError) as exc:
            row["refused"] = exc.message
            continue
        if bad:
            row["refused"] = bad
            continue
        with ph("screen", 1):
            rp.restore()  # all of it once (a reference run writes IN); it only reads IN
            for _ in range(2):
                run.time()
            med = statistics.median(run.time() for _ in range(repeat))
        row.update(median_s=med, originals_s=base[s],
                   screen_speedup=base[s] / med if med > 0 else None)
        if med > 0:
            screened.append((base[s] / med, row, (s, run, image, done)))

    def on_fresh(c: tuple[int, AdapterRun, bytes, list[str]]) -> str | None:
        with ph("fresh", 1):
            why, more = checks[c[0]].fresh(c[1]) if checks else \
                validate_fresh(t, r, c[0], seqs[c[0]], c[1], refs)
        c[3].extend(more)
        return why

    best = fastest_passing(screened, on_fresh)
    if best is None:
        reasons = "; ".join(f"{x['operator']}: {x.get('refused')}" for x in tried)
        return {"nomatch": f"recognized {r.describe()}, but no fused operator passed: "
                           f"{reasons}", "recognized": r.describe(), "tried": tried}
    s, run, image, done = best
    seq = seqs[s]
    with ph("final", 1):
        for _ in range(3):
            seq.time()
        ab = interleave(seq.time, lambda: fused_time(run), passes=passes, per_pass=3)
        stem = Path(out_dir) / f"{rec.path.name}.fused{s}"
        stem.with_suffix(".cu").write_text(run.ad.source)
        stem.with_suffix(".cubin").write_bytes(image)
    return {"recognized": r.describe(), "cell": r.cell.id, "operator": run.ad.operator.key,
            "steps": s, "fuse": fz.fuse_field(slots, r, s), "entry": run.ad.entry,
            "grid": list(run.ad.grid), "block": list(run.ad.block),
            "shared_mem": run.ad.shared_bytes,
            "carveout": run.ad.carveout if run.ad.carveout >= 0 else None,
            "image": str(stem.with_suffix(".cubin")), "source": str(stem.with_suffix(".cu")),
            "arch": arch, "device": rp.drv.identity(), "checks": done, "tried": tried,
            "speedup": ab.speedup, "ci": [ab.ci_low, ab.ci_high],
            "median_original_s": ab.median_a, "median_fused_s": ab.median_b,
            "points": r.points, "faces": fc.describe(faces),
            "companions": [c.evidence() for c in comps],
            "gcells_s": r.points * s / ab.median_b / 1e9 if ab.median_b > 0 else None,
            "ratios": list(ab.ratios)}


def main(argv: Sequence[str]) -> int:
    return child_main(argv, lambda req: session(
        req["unit"], req["out_dir"], int(req["repeat"]), int(req["passes"]),
        [int(s) for s in req.get("steps") or fz.STEPS], req.get("prefer")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
