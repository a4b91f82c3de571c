"""Tuning a native unit: launch geometry, shared-memory carveout, PTX JIT options (a PTX image,
or the PTX inside a recorded fatbin), and -- when the unit carries its NVRTC source or a file
was bound to it (``--source``) -- the source compiled again under the cuda backend's knobs.

The candidates form the unit's search space (:func:`native_space`: one change at a time from
the recorded configuration), searched by the study every unit is tuned by
(:func:`kernforge.tune.tune`); the space is small, so its default sampler is ``exhaustive``
(every candidate once). Each trial is evaluated in the unit's session child at the recorded
addresses (:mod:`.native_session`), verified against the recorded outputs before it is timed;
a candidate that crashes costs only itself. The fastest verified candidate is then compared
with the recorded configuration interleaved, as every comparison is (adaptive passes, the
GPU's idle check: :mod:`.native_child`), and kept only when its verdict
(:func:`~.native_child.judged`, by the judge recordings have) is "faster" and ``refuse``
finds nothing else against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..backends import fatbin
from ..backends.image_build import BindingError
from ..core import Measurement, Tolerance
from ..core.native import NativeBuild, NativeRecording, NativeSource
from ..harness.verdict import NOISE_BAND, Judgement
from ..tune import (
    Budget,
    ChangedAtMost,
    Dimension,
    SearchSpace,
    TrialRecord,
    TuneResult,
    tune,
)
from .cache_protocol import protocol_for
from .native import NativeVariant
from .native_child import judged, run_isolated, unless_faster
from .native_session import NativeSession

Refuse = Callable[[Judgement], str | None]  # why a verdict's winner is not kept (None: kept)

BLOCKS_1D = (64, 128, 256, 512, 1024)
BLOCKS_2D = ((16, 8), (16, 16), (32, 4), (32, 8), (32, 16), (64, 2), (64, 4), (128, 2),
             (128, 4), (256, 1))
BLOCKS_3D = ((32, 4, 2), (32, 4, 4), (32, 8, 2), (64, 4, 2), (16, 8, 4), (32, 2, 4))
CARVEOUTS = (0, 100)
# CUjit_option values: CU_JIT_CACHE_MODE 1 = cache global loads in L2 only (cg), 2 = L1 too (ca)
PTX_JIT = ((("max_registers", 32),), (("max_registers", 64),), (("max_registers", 128),),
           (("optimization_level", 3),), (("cache_mode", 1),), (("cache_mode", 2),))
# cuda backend knobs tried one at a time on a source build (verification decides each)
SOURCE_KNOBS: tuple[tuple[tuple[str, Any], ...], ...] = (
    (("maxrregcount", 32),), (("maxrregcount", 64),), (("maxrregcount", 128),),
    (("extra_device_vectorization", True),), (("ptxas_dlcm", "ca"),), (("ptxas_dlcm", "cg"),),
    (("ftz", True),))


def _cc(rec: NativeRecording) -> tuple[int, int] | None:
    cc = rec.identity.get("compute_capability")
    return (int(cc[0]), int(cc[1])) if cc and len(cc) == 2 and cc[0] else None


def source_knobs(rec: NativeRecording, src: NativeSource, *, tolerant: bool = False
                 ) -> list[tuple[tuple[str, Any], ...]]:
    """Knob settings for a source build: registers, vectorization, cache modifiers, denormals,
    launch bounds of the recorded block, and fast math -- on only with a tolerance (it changes
    results), off when the program compiled with it."""
    out = list(SOURCE_KNOBS)
    tpb = rec.block[0] * rec.block[1] * rec.block[2]
    out += [(("launch_bounds_max", tpb), ("launch_bounds_min_blocks", m)) for m in (0, 2, 4)]
    fast = any(o.lstrip("-") == "use_fast_math" for o in src.options)
    if fast:
        out.append((("use_fast_math", False),))
    elif tolerant:
        out.append((("use_fast_math", True),))
    return out


def candidates(rec: NativeRecording, *, source: NativeSource | None = None,
               tolerant: bool = False, defines: Sequence[Sequence[tuple[str, str]]] = ()
               ) -> list[NativeVariant]:
    """The recorded configuration first, then block shapes that launch the same threads per
    dimension, carveouts, JIT options (a PTX image, or the PTX of a fatbin), and builds of the
    source (``source``, else the unit's captured one): as recorded, each knob of
    :func:`source_knobs`, each set of ``defines``."""
    _, by, bz = rec.block
    if by == bz == 1:
        shapes = [(x, 1, 1) for x in BLOCKS_1D]
    elif bz == 1:
        shapes = [(x, y, 1) for x, y in BLOCKS_2D]
    else:
        shapes = list(BLOCKS_3D)
    out = [NativeVariant()]
    out += [NativeVariant(block=s) for s in shapes if s != rec.block]  # type: ignore[arg-type]
    out += [NativeVariant(carveout=c) for c in CARVEOUTS]
    if rec.image_kind == "ptx":
        out += [NativeVariant(jit=j) for j in PTX_JIT]
    elif rec.image_kind == "fatbin" and fatbin.ptx_for(rec.image_bytes(), _cc(rec)) is not None:
        ptx = NativeBuild(kind="ptx")
        out += [NativeVariant(build=ptx)] + [NativeVariant(jit=j, build=ptx) for j in PTX_JIT]
    src = source or rec.source
    if src is not None:
        base = NativeBuild(source=src)
        out.append(NativeVariant(build=base))
        out += [NativeVariant(build=replace(base, knobs=k))
                for k in source_knobs(rec, src, tolerant=tolerant)]
        out += [NativeVariant(build=replace(base, defines=tuple(d))) for d in defines if d]
    return out


def combined(variants: Sequence[NativeVariant], results: Sequence[Measurement]
             ) -> NativeVariant | None:
    """The fastest verified geometry change (block, carveout) joined with the fastest verified
    image change (JIT options, build), when both beat the recorded configuration."""
    base = results[0].median if results and results[0].ok else None
    if base is None:
        return None
    faster = [(m.median, v) for v, m in zip(variants[1:], results[1:])
              if m.ok and m.median < base]
    geo = min(((t, v) for t, v in faster if not v.jit and v.build is None),
              key=lambda tv: tv[0], default=None)
    img = min(((t, v) for t, v in faster if (v.jit or v.build is not None)
               and v.block is None and v.carveout is None), key=lambda tv: tv[0], default=None)
    if geo is None or img is None:
        return None
    return NativeVariant(block=geo[1].block, carveout=geo[1].carveout, jit=img[1].jit,
                         build=img[1].build)


def evaluate_all(unit: Path, variants: Sequence[NativeVariant], *, repeat: int = 10,
                 warmup: int = 3, progress: Callable[[int, int], None] | None = None,
                 tolerance: Tolerance | str | None = None, dtype: str | None = None
                 ) -> list[Measurement]:
    """One measurement per variant; after a crash the remaining ones run in a fresh child."""
    done: list[Measurement] = []
    while len(done) < len(variants):
        rest = list(variants[len(done):])
        out = run_isolated(unit, rest, repeat=repeat, warmup=warmup, tolerance=tolerance,
                           dtype=dtype)
        ms = out["measurements"]
        ran = [m for m in ms if not m.message.startswith("not run: an earlier variant")]
        done += ran or ms[:1]
        if progress:
            progress(len(done), len(variants))
    return done


@dataclass
class NativeTuning:
    """What tuning one native unit found."""

    unit: Path
    rec: NativeRecording
    variants: list[NativeVariant]
    results: list[Measurement]
    best: int | None = None
    speedup: float | None = None
    ci: tuple[float, float] | None = None
    medians: tuple[float, float] | None = None  # recorded, best: from the interleaved passes
    refused: str | None = None
    speed: Judgement | None = None  # the interleaved comparison's verdict
    notes: list[str] = field(default_factory=list)
    study: TuneResult | None = None  # the study that searched the unit's space
    sampler: str = ""

    @property
    def win(self) -> bool:
        return self.best is not None and self.refused is None

    def to_json(self) -> dict[str, Any]:
        r = self.rec
        return {"unit": str(self.unit), "kernel": r.entry, "name": r.name,
                "grid": list(r.grid), "block": list(r.block), "shared_mem": r.shared_mem,
                "identity": dict(r.identity),
                "evaluations": [{"variant": v.to_json(), "label": v.label(),
                                 "status": m.status.value, "message": m.message[:300],
                                 "median": m.median if m.samples else None}
                                for v, m in zip(self.variants, self.results)],
                "best": None if self.best is None else self.variants[self.best].to_json(),
                "best_label": None if self.best is None else self.variants[self.best].label(),
                "speedup": self.speedup, "ci": list(self.ci) if self.ci else None,
                "medians": list(self.medians) if self.medians else None,
                "win": self.win, "refused": self.refused, "notes": self.notes,
                "speed": self.speed.to_json() if self.speed else None}


GEOMETRY, CARVEOUT, IMAGE = "launch.block", "carveout", "image"  # a native unit's dimensions
RECORDED = "recorded"  # the image value of the recorded module image, as the program loaded it


@dataclass(frozen=True)
class NativeSpace:
    """A native unit's search space (the block shape, the carveout, the image: JIT options or
    a build, by label), and the variant each of its configurations is."""

    space: SearchSpace
    images: Mapping[str, NativeVariant]

    def variant(self, config: Mapping[str, Any], rec: NativeRecording) -> NativeVariant:
        block = config.get(GEOMETRY)
        image = self.images[config.get(IMAGE, RECORDED)]
        return NativeVariant(block=None if block is None or tuple(block) == rec.block
                             else tuple(block),  # type: ignore[arg-type]
                             carveout=config.get(CARVEOUT), jit=image.jit, build=image.build)


def native_space(rec: NativeRecording, *, source: NativeSource | None = None,
                 tolerant: bool = False, defines: Sequence[Sequence[tuple[str, str]]] = ()
                 ) -> NativeSpace:
    """The space of :func:`candidates`: each of its dimensions changed alone from the recorded
    configuration (the baseline), so an exhaustive study evaluates every candidate once."""
    cands = candidates(rec, source=source, tolerant=tolerant, defines=defines)
    images = {RECORDED: NativeVariant()}
    images.update((v.label(), NativeVariant(jit=v.jit, build=v.build))
                  for v in cands if v.jit or v.build is not None)
    values: dict[str, list[Any]] = {GEOMETRY: [rec.block] + [v.block for v in cands if v.block is not None],
              CARVEOUT: [None] + [v.carveout for v in cands if v.carveout is not None],
              IMAGE: list(images)}
    dims = [Dimension.categorical(n, vs) for n, vs in values.items() if len(vs) > 1]
    start = {d.name: values[d.name][0] for d in dims}
    rules = [ChangedAtMost(tuple(start), 1, start)] if len(dims) > 1 else []
    return NativeSpace(SearchSpace(dims, rules, start), images)


def tune_native(unit: Path, rec: NativeRecording, *, repeat: int = 10, passes: int = 7,
                band: float = NOISE_BAND, refuse: Refuse = unless_faster,
                sampler: str = "exhaustive", budget: Budget | None = None,
                seed: int | None = 0, storage: Path | None = None,
                on_trial: Callable[[TrialRecord], None] | None = None,
                tolerance: Tolerance | None = None, dtype: str | None = None,
                source: NativeSource | None = None,
                defines: Sequence[Sequence[tuple[str, str]]] = ()) -> NativeTuning:
    """The unit's study (:func:`kernforge.tune.tune` over :func:`native_space`, ``sampler``
    under ``budget``; kept in ``storage``, a run directory, and resumed from it), every trial
    evaluated in one :class:`~.native_session.NativeSession`; then the fastest geometry
    change joined with the fastest image change (:func:`combined`), and the fastest verified
    configuration compared with the recorded one interleaved, judged within ``band``, and
    gated (``refuse``: by default, kept only when faster)."""
    ns = native_space(rec, source=source, tolerant=tolerance is not None, defines=defines)
    budget = budget or Budget(trials=None)
    points = sum(1 for _ in ns.space.valid_points())
    if budget.trials is not None and budget.trials > points:  # a sampled search ends once
        budget = replace(budget, trials=points)  # every point is evaluated, not stalled
    with NativeSession(unit, repeat=repeat, tolerance=tolerance, dtype=dtype,
                       flush=protocol_for(rec).flush) as session:
        study = tune(ns.space, lambda config: session.evaluate(ns.variant(config, rec)),
                     sampler=sampler, budget=budget, storage=storage,
                     study_name=unit.name, seed=seed, on_trial=on_trial, isolated=True)
        done = [t for t in study.trials if t.evaluated]
        first = [t for t in done if t is study.baseline] or done[:1]
        trials = first + [t for t in done if t not in first]
        variants = [ns.variant(t.config, rec) for t in trials]
        results = [t.measurement for t in trials]
        both = combined(variants, results)
        if both is not None and both not in variants:
            variants.append(both)
            results.append(session.evaluate(both))
    return _gated(NativeTuning(unit, rec, variants, results, study=study, sampler=sampler),
                  refuse, passes=passes, band=band, tolerance=tolerance, dtype=dtype)


def keep(t: NativeTuning, cmp: dict[str, Any], refuse: Refuse, band: float) -> NativeTuning:
    """``t`` with the figures and the verdict of ``cmp`` (a comparison of the recorded
    configuration with ``t``'s best), refused as ``refuse`` says."""
    t.speedup, t.ci = cmp["speedup"], (cmp["ci"][0], cmp["ci"][1])
    t.medians = (cmp["median_a"], cmp["median_b"])
    t.speed = judged(cmp, band)
    t.refused = refuse(t.speed)
    return t


def _gated(t: NativeTuning, refuse: Refuse, *, passes: int, band: float,
           tolerance: Tolerance | None, dtype: str | None) -> NativeTuning:
    """``t``'s fastest verified configuration compared with the recorded one interleaved,
    kept only when ``refuse`` finds nothing against its verdict."""
    results = t.results
    base = results[0] if results else None
    if base is None or not base.ok or not t.variants[0].is_recorded:
        why = f"{base.status.value} {base.message}" if base is not None else "not evaluated"
        t.refused = f"the recorded configuration does not replay: {why}"
        return t
    ok = [i for i, m in enumerate(results) if i > 0 and m.ok]
    if not ok:
        t.refused = "no other configuration verified"
        return t
    best = min(ok, key=lambda i: results[i].median)
    if results[best].median >= base.median:
        t.refused = "no configuration was faster than the recorded one"
        return t
    t.best = best
    cmp = run_isolated(t.unit, [t.variants[0], t.variants[best]], repeat=3, warmup=1,
                       compare_pair=(0, 1), passes=passes, tolerance=tolerance,
                       dtype=dtype).get("compare")
    if not cmp:
        t.refused = "the interleaved comparison did not complete"
        return t
    return keep(t, cmp, refuse, band)


RESULT = "native.json"  # native results of tuning and evolution runs before result.json
RESULT_FORMAT = "kernforge-native-tune"


NOT_DEFINED = "the built image does not define the recorded kernel"


def bind(unit: Path, rec: NativeRecording, src: NativeSource) -> bool:
    """Whether ``src`` (a ``--source`` file) builds ``rec``'s kernel: compiled standalone, the
    recorded entry defined with the recorded parameter layout, and (run once at the recorded
    addresses) the recorded results. False when the file does not define the kernel (another
    unit's, then); :class:`~kernforge.backends.image_build.BindingError` for any other mismatch."""
    m = run_isolated(unit, [NativeVariant(build=NativeBuild(source=src))], repeat=1,
                     warmup=0)["measurements"][0]
    if m.ok:
        return True
    if NOT_DEFINED in m.message:
        return False
    hint = ("compile the file as the program's build did (its -I include paths and -D "
            "defines); binding needs the kernel's translation unit to compile standalone, with "
            "the same mangled name and parameters")
    if m.status.value == "WRONG_RESULT":
        raise BindingError(f"{src.program} compiles {rec.name}, but the kernel built from it "
                           f"does not reproduce the recorded results: {m.message[:400]}",
                           hint=hint)
    raise BindingError(f"{src.program} cannot stand in for {rec.name}: {m.status.value} "
                       f"{m.message[:600]}", hint=hint)
