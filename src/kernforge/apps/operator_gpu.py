"""The GPU half of operator matching, run in a child process of its own.

``python -m kernforge.apps.operator_gpu REQUEST.json RESULT.json``: the native unit is placed on
the device as its replay places it (:class:`~kernforge.replay.native.NativeReplay`), probed
through :class:`ReplayTarget` (:func:`.probe.recognize`), and the candidate operators' adapters
are compiled together; each is checked against the recorded outputs and screened (each row of
``tried`` gets its median and its ratio to the original's, screened the same way); then,
fastest first, checked against the original kernel on fresh random inputs until one passes
(:func:`fastest_passing`), and that one is timed against the original with the replay's
interleaved protocol (L2 flushed, written memory restored, events around the launch only).
A kernel that faults on a probe costs only this process (:mod:`.operator_match` reads the
cause).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from ..backends.cuda_image import compile_images
from ..backends.cxx_names import pointee_dtype
from ..core import CompileError, ConfigError, KernforgeError, Tolerance
from ..core.native import NativeRecording
from ..harness.checkers import RecordedChecker
from ..harness.compare import interleave
from ..harness.verify import passes
from ..record.native_format import read_native
from ..replay.native import NativeReplay, NativeVariant
from . import narrow
from .adapter import Adapter, adapter, candidates, layout
from .phases import Phases, watch
from .probe import NotAStencil, ProbeBuffer, Recognized, recognize, tolerance
from .process import child_main

RECORDED = NativeVariant()
FRESH_SEEDS = (11, 12)


def int_params(rec: NativeRecording) -> tuple[int, ...]:
    """The values of the 4- and 8-byte parameters that are not pointers."""
    out = []
    for p in rec.params:
        if p.size in (4, 8) and not p.pointers:
            out.append(int.from_bytes(rec.param_bytes[p.offset:p.offset + p.size], "little"))
    return tuple(out)


def pointer_table(rec: NativeRecording, region: int) -> int:
    """How many 8-byte words of a region's recorded contents point into a recorded region (a
    table of pointers, as ``double **rows``, is no grid: probing it with numbers would fault)."""
    raw = np.asarray(rec.prologue(region), dtype=np.uint8)
    words = raw[:raw.size // 8 * 8].view(np.uint64)
    return sum(int(np.count_nonzero((words >= r.address) & (words < r.end)))
               for r in rec.regions)


class ReplayTarget:
    """A native unit as a probe target: each pointer parameter's view of its allocation."""

    def __init__(self, rp: NativeReplay) -> None:
        rec = rp.rec
        self.rp = rp
        self.where: dict[int, tuple[int, int]] = {}  # param -> (region, offset in it)
        bufs = []
        for i, p in enumerate(rec.params):
            if p.size == 8 and len(p.pointers) == 1 and p.pointers[0][0] == p.offset:
                ri = p.pointers[0][1]
                ptr = int.from_bytes(rec.param_bytes[p.offset:p.offset + 8], "little")
                off = ptr - rec.regions[ri].address
                self.where[i] = (ri, off)
                bufs.append(ProbeBuffer(i, rec.regions[ri].size - off,
                                        rec.regions[ri].epilogue is not None, ri))
        self.buffers = tuple(bufs)
        self.ints = int_params(rec)
        self.dtype = pointee_dtype(rec.entry)

    def address(self, param: int) -> int:
        ri, off = self.where[param]
        return self.rp.addr[ri] + off

    def place(self, contents: Mapping[int, np.ndarray]) -> None:
        self.rp.restore()
        for p, raw in contents.items():
            self.rp.drv.htod(self.address(p), np.ascontiguousarray(raw, dtype=np.uint8))

    def read(self, params: Sequence[int] | None = None) -> dict[int, np.ndarray]:
        """Each pointer parameter's buffer as it is on the device (``params``: those only)."""
        return {b.param: np.frombuffer(self.rp.drv.dtoh(self.address(b.param), b.nbytes),
                                       dtype=np.uint8).copy() for b in self.buffers
                if params is None or b.param in params}

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.place(contents)
        self.rp.run(RECORDED)
        return self.read()


class AdapterRun:
    """The adapter loaded into the replay's context, launched with the recorded parameters."""

    def __init__(self, rp: NativeReplay, ad: Adapter, image: bytes) -> None:
        self.rp, self.ad = rp, ad
        self.fn = rp.drv.function(rp.drv.load(image), ad.entry)
        if ad.carveout >= 0:
            rp.drv.set_carveout(self.fn, ad.carveout)

    def run(self) -> None:
        self.rp.drv.launch(self.fn, self.ad.grid, self.ad.block, self.ad.shared_bytes,
                           self.rp.params, self.rp.rec.launch_attrs)
        self.rp.drv.synchronize()

    def time(self, restore: bool = True) -> float:
        """One timed launch from the recorded state: the written memory restored first
        (``restore``: False where the caller just restored all of it), the L2 flushed."""
        if restore:
            self.rp.restore(only_written=True)
        self.rp.drv.flush_l2()
        return self.rp.drv.time_launch(self.fn, self.ad.grid, self.ad.block,
                                       self.ad.shared_bytes, self.rp.params,
                                       self.rp.rec.launch_attrs)


def policy(r: Recognized, scale: float) -> Tolerance:
    """The kernel's tolerance: what a reordered sum of its terms may differ by."""
    eps = float(np.finfo(np.dtype(r.dtype)).eps)
    return Tolerance("rel", rtol=8 * eps, atol=tolerance(r.dtype, r.weights, scale))


Fresh = dict[int, tuple[dict[int, np.ndarray], dict[int, np.ndarray]]]


def named(r: Recognized, bufs: Mapping[int, np.ndarray]) -> dict[str, np.ndarray]:
    """Buffers (parameter -> bytes) by name, OUT's whole elements as the kernel's dtype."""
    dt = np.dtype(r.dtype)
    return {f"param{p}": a[:len(a) // dt.itemsize * dt.itemsize].view(dt)
            if p == r.out_param else a for p, a in bufs.items()}


def original_checker(r: Recognized, want: Mapping[int, np.ndarray]) -> RecordedChecker:
    """The original kernel's buffers ``want`` as the expected contents: OUT under the
    kernel's tolerance (scale 1: fresh inputs lie in [-1, 1)), every other buffer bitwise."""
    return RecordedChecker(named(r, want), {f"param{r.out_param}": policy(r, 1.0)})


def validate(t: ReplayTarget, r: Recognized, run: AdapterRun, fresh: Fresh | None = None
             ) -> tuple[str | None, list[str]]:
    """(why the adapter is wrong or None, what was checked): the recorded outputs under the
    kernel's tolerance (:func:`validate_recorded`), then the original kernel against the
    adapter on fresh random inputs (:func:`validate_fresh`)."""
    why, done = validate_recorded(t, r, run)
    if why:
        return why, done
    why, more = validate_fresh(t, r, run, fresh)
    return why, done + more


def recorded_scale(t: ReplayTarget, r: Recognized) -> float:
    """max |value| of IN's recorded grid points (the tolerance's scale)."""
    dt = np.dtype(r.dtype)
    n = r.points * dt.itemsize
    rec_in = np.asarray(t.rp.rec.prologue(t.where[r.in_param][0]), dtype=np.uint8)
    off = t.where[r.in_param][1]
    return float(np.nanmax(np.abs(rec_in[off:off + n].view(dt)))) if n else 1.0


def validate_recorded(t: ReplayTarget, r: Recognized, run: AdapterRun,
                      scale: float | None = None, figures: bool = True
                      ) -> tuple[str | None, list[str]]:
    """The adapter from the recorded state: its outputs against the recorded ones under the
    kernel's tolerance (``scale``: :func:`recorded_scale`, the same for every candidate).
    ``figures`` False: a passing check is decided without the error figures (nothing is
    said of it: the caller checks again with them where it needs them)."""
    rp = t.rp
    scale = recorded_scale(t, r) if scale is None else scale
    rp.restore()
    run.run()
    if not figures and rp.passes(policy(r, scale), r.dtype):
        return None, []
    checks = rp.verify(policy(r, scale), r.dtype)
    bad = [c.describe() for c in checks if not c.passed]
    if bad:
        return f"recorded outputs differ: {'; '.join(bad)}", []
    return None, [f"recorded outputs match ({', '.join(c.describe() for c in checks)})"]


def validate_fresh(t: ReplayTarget, r: Recognized, run: AdapterRun, fresh: Fresh | None = None
                   ) -> tuple[str | None, list[str]]:
    """The adapter against the original kernel on fresh random inputs. ``fresh`` keeps, per
    seed, the inputs and the original's outputs: they are the same for every candidate, so
    the original runs once per seed, not once per candidate."""
    fresh = {} if fresh is None else fresh
    dt = np.dtype(r.dtype)
    n = r.points * dt.itemsize
    inb = next(b for b in t.buffers if b.param == r.in_param)
    done: list[str] = []
    for seed in FRESH_SEEDS:
        if seed not in fresh:
            rng = np.random.default_rng(seed)
            x = np.zeros(inb.nbytes, dtype=np.uint8)
            x[:n] = rng.uniform(-1, 1, r.points).astype(dt).view(np.uint8)
            outb = next(b for b in t.buffers if b.param == r.out_param)
            y0 = rng.uniform(2, 3, outb.nbytes // dt.itemsize).astype(dt).view(np.uint8)
            contents = {r.in_param: x, r.out_param: y0}
            fresh[seed] = (contents, t.run(contents))
        contents, want = fresh[seed]
        t.place(contents)
        run.run()
        got, exp = named(r, t.read()), named(r, want)
        out = f"param{r.out_param}"
        if got.keys() == exp.keys() and all(  # the full check below only says why not
                passes(got[k], v, policy(r, 1.0) if k == out else Tolerance())
                for k, v in exp.items()):
            done.append(f"fresh input seed {seed}: matches the original")
            continue
        res = original_checker(r, want).check(got)
        if not res.ok:
            return (f"fresh input (seed {seed}) differs from the original: "
                    f"{res.failed_checks[0].describe()}"), done
        done.append(f"fresh input seed {seed}: matches the original")
    return None, done


ItemT = TypeVar("ItemT")
UNCHECKED = "not checked on fresh inputs: a faster candidate passed every check"


def fastest_passing(screened: Sequence[tuple[float, dict[str, Any], ItemT]],
                    check: Callable[[ItemT], str | None]) -> ItemT | None:
    """Of the candidates that passed from the recorded state and were screened (``rate``:
    higher is faster, the row, the candidate), the fastest that also passes ``check`` (the
    fresh inputs): checked fastest first, so the slower ones are not; a row whose check
    fails is refused with the reason, one never checked says so (``unchecked``)."""
    ordered = sorted(screened, key=lambda x: -x[0])
    for i, (_, row, item) in enumerate(ordered):
        why = check(item)
        if why is None:
            for _, other, _ in ordered[i + 1:]:
                other["unchecked"] = UNCHECKED
            return item
        row["refused"] = why
    return None


def recognized(t: ReplayTarget) -> Recognized | str:
    """The stencil the replayed unit computes, or why no operator may replace it."""
    rec = t.rp.rec
    globs = [r for r in rec.regions if r.kind == "global"]
    if globs:
        return (f"the kernel's module has {len(globs)} global(s) the program set "
                f"({sum(r.size for r in globs)} bytes, e.g. __constant__ "
                "coefficients): the deployment's problem key does not see them, "
                "so a baked operator could not follow a change")
    for b in t.buffers:
        if (n := pointer_table(rec, b.region)) > 0:
            return (f"parameter {b.param} points to memory holding {n} device "
                    "pointers (a table of pointers, not a grid)")
    r = recognize(t)
    return r.reason if isinstance(r, NotAStencil) else r


class _Source(Protocol):
    @property
    def source(self) -> str: ...


OpT = TypeVar("OpT")
AdT = TypeVar("AdT", bound=_Source)


def built(ops: Sequence[OpT], make: Callable[[OpT], AdT], arch: str
          ) -> list[tuple[OpT, AdT | KernforgeError, bytes | CompileError]]:
    """Every candidate's adapter (or why it has none) and its image (or why it does not
    compile), the images compiled together (:func:`compile_images`: in parallel with nvcc)
    before any candidate is checked."""
    ads: list[AdT | KernforgeError] = []
    for op in ops:
        try:
            ads.append(make(op))
        except KernforgeError as exc:  # ConfigError included
            ads.append(exc)
    sources = [a.source for a in ads if not isinstance(a, KernforgeError)]
    images = iter(compile_images(sources, arch))
    none = CompileError("no adapter to compile")
    return [(op, a, none if isinstance(a, KernforgeError) else next(images))
            for op, a in zip(ops, ads, strict=True)]


def session(unit: str, out_dir: str, repeat: int, passes: int,
            prefer: Sequence[str] | None = None) -> dict[str, Any]:
    """The child's work (the module docstring), its phase timings in the result's
    ``phases`` (:mod:`.phases`); ``prefer``: the operators to try, the others left out
    (:func:`.narrow.keep`)."""
    ph = Phases()
    res = _session(unit, out_dir, repeat, passes, ph, prefer)
    res["phases"] = ph.figures(len(res.get("tried") or ()))
    return res


def _session(unit: str, out_dir: str, repeat: int, passes: int, ph: Phases,
             prefer: Sequence[str] | None = None) -> dict[str, Any]:
    with ph("setup"):
        rec = read_native(unit)
        got = _recognized_unit(rec, ph)
    if isinstance(got, str):
        return {"nomatch": got}
    r, rp, t = got
    return _candidates(rec, rp, t, r, out_dir, repeat, passes, ph, prefer)


def _recognized_unit(rec: NativeRecording, ph: Phases
                     ) -> str | tuple[Recognized, NativeReplay, ReplayTarget]:
    if rec.is_sequence:  # an adapter replaces one launch, verified on one launch's state
        return ("a sequence unit: one-launch operator matching needs a one-launch unit "
                "(kernforge record without --sequence); fusion takes it")
    rp = NativeReplay(rec)
    t = ReplayTarget(rp)
    watch(ph, rp, t)
    r = recognized(t)
    return r if isinstance(r, str) else (r, rp, t)


def _candidates(rec: NativeRecording, rp: NativeReplay, t: ReplayTarget, r: Recognized,
                out_dir: str, repeat: int, passes: int, ph: Phases,
                prefer: Sequence[str] | None = None) -> dict[str, Any]:
    """Every candidate compiled, checked from the recorded state and screened; the fastest
    that passes on fresh inputs timed against the original."""
    cc = rp.drv.identity()
    arch = f"sm_{rp.drv.attribute('cc_major')}{rp.drv.attribute('cc_minor')}"
    tried: list[dict[str, Any]] = []
    with ph("baseline"):
        for _ in range(2):  # the original, screened as each candidate is: its speedup per row
            rp.time(RECORDED)
        original = statistics.median(rp.time(RECORDED) for _ in range(repeat))
    screened: list[tuple[float, dict[str, Any], tuple[AdapterRun, bytes, list[str]]]] = []
    with ph("setup"):
        scale = recorded_scale(t, r)
    with ph("compile"):
        made = built(narrow.keep(candidates(r), prefer, lambda op: op.key),
                     lambda op: adapter(op, r, layout(rec), len(rec.param_bytes)), arch)
    ph.count("compile", sum(not isinstance(a, KernforgeError) for _, a, _ in made))
    for op, ad, image in made:
        row: dict[str, Any] = {"operator": op.key}
        tried.append(row)
        try:
            if isinstance(ad, KernforgeError):
                raise ad
            if isinstance(image, CompileError):
                raise image
            with ph("load", 1):
                run = AdapterRun(rp, ad, image)
            with ph("check", 1):
                why, done = validate_recorded(t, r, run, scale, figures=False)
        except (ConfigError, CompileError, KernforgeError) as exc:
            row["refused"] = exc.message
            continue
        if why:
            row["refused"] = why
            continue
        with ph("screen", 1):
            for _ in range(2):
                run.time()
            med = statistics.median(run.time() for _ in range(repeat))
        row["median_s"] = med
        row["screen_speedup"] = original / med if med > 0 else None
        screened.append((1.0 / med if med > 0 else 0.0, row, (run, image, done)))
    fresh: Fresh = {}
    ph.timed(t, "run", "reference")  # the original on each fresh input

    def on_fresh(c: tuple[AdapterRun, bytes, list[str]]) -> str | None:
        with ph("fresh", 1):  # the recorded state again, for its figures; fresh inputs
            why, more = validate_recorded(t, r, c[0], scale)
            if why is None:
                why, fresh_done = validate_fresh(t, r, c[0], fresh)
                more += fresh_done
        c[2].extend(more)
        return why

    best = fastest_passing(screened, on_fresh)
    if best is None:
        reasons = "; ".join(f"{x['operator']}: {x.get('refused')}" for x in tried)
        return {"nomatch": f"recognized {r.describe()}, but no operator passed: {reasons}",
                "recognized": r.describe(), "cell": r.cell.id, "tried": tried,
                "original_screen_s": original}
    run, image, done = best
    with ph("final", 1):
        for _ in range(3):
            rp.time(RECORDED)
        ab = interleave(lambda: rp.time(RECORDED), run.time, passes=passes, per_pass=3)
        stem = Path(out_dir) / f"{rec.path.name}.adapter"
        stem.with_suffix(".cu").write_text(run.ad.source)
        stem.with_suffix(".cubin").write_bytes(image)
    return {"recognized": r.describe(), "cell": r.cell.id, "operator": run.ad.operator.key,
            "entry": run.ad.entry, "grid": list(run.ad.grid), "block": list(run.ad.block),
            "shared_mem": run.ad.shared_bytes,
            "carveout": run.ad.carveout if run.ad.carveout >= 0 else None,
            "image": str(stem.with_suffix(".cubin")), "source": str(stem.with_suffix(".cu")),
            "arch": arch, "device": cc, "checks": done, "tried": tried,
            "original_screen_s": original,
            "speedup": ab.speedup, "ci": [ab.ci_low, ab.ci_high],
            "median_original_s": ab.median_a, "median_adapter_s": ab.median_b,
            "ratios": list(ab.ratios)}


def main(argv: Sequence[str]) -> int:
    return child_main(argv, lambda req: session(req["unit"], req["out_dir"], int(req["repeat"]),
                                                int(req["passes"]), req.get("prefer")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
