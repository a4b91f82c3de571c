"""Tune one recorded launch: a search space from the backend, every trial a verified replay,
the winner re-measured interleaved against the recorded configuration, results on disk.

A run directory holds one folder per tuned unit::

    <run>/<unit>/study.db            the Optuna study (resumable)
    <run>/<unit>/<unit>.space.json   the search space
    <run>/<unit>/result.json         best configuration and variant, interleaved speedup and
                                     medians (baseline_median_s / best_median_s)
    <run>/<unit>/history.png         time per trial and best so far
    <run>/<unit>/result.earlier-<n>.json  earlier results a ``--remeasure`` kept

``result.json`` (format ``kernforge-tune-result``, schema 1) is what ``kernforge export``
turns into a deployment spec.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from ..backends import Backend, get_backend
from ..core import ConfigError, KernforgeError, Measurement, Recording, Status, Variant
from ..core.jsonio import sign, write_json_atomic
from ..harness import ABResult
from ..harness.plots import tuning_png
from ..harness.verdict import ci_label
from ..tune import Budget, Dimension, ProductAtMost, SearchSpace, TrialRecord, TuneResult, tune
from .engine import evaluate_variant
from .isolate import Isolation
from .prepare import TolerancePolicy, is_tolerant, resolve_policies
from .validate import Validation, validate

RESULT_FORMAT = "kernforge-tune-result"
RESULT_NAME = "result.json"
RESULT_VERSION = 1


@dataclass
class TuningOutcome:
    recording: Recording
    directory: Path
    study: TuneResult
    best_variant: Variant
    baseline_s: float | None
    best_s: float | None
    ab: ABResult | None  # interleaved best vs recorded; None when the baseline stayed best
    validation: Validation | None = None  # every integrity gate, run on the winner

    @property
    def speedup(self) -> float:
        rejected = self.validation is not None and not self.validation.accepted
        return self.ab.speedup if self.ab and not rejected else 1.0


def _dimension(name: str, values: tuple[Any, ...]) -> Dimension:
    if all(isinstance(v, bool) for v in values):
        return Dimension.boolean(name, default=values[0])
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return Dimension.ordinal(name, sorted(values), default=values[0])
    return Dimension.categorical(name, values, default=values[0])


def build_space(recording: Recording, backend: Backend, *, preset: str = "standard",
                user: Mapping[str, Any] | None = None, tolerant: bool = False,
                variant: Variant | None = None) -> SearchSpace:
    """The backend's dimensions around the recorded variant (its values are the baseline),
    plus the user's own (``user``: a parsed space file; same names override). ``variant``:
    another source for the recorded launch (an evolved candidate), whose own dimensions count
    (e.g. ``launch.coarsen_z`` for a source written for it)."""
    dims = backend.tuning_dimensions(variant or recording.variant, preset)
    risky = {f"opt.{k.name}" for k in backend.knobs() if k.needs_tolerance}
    if not tolerant:
        dims = {n: v for n, v in dims.items() if n not in risky}
    return space_from_dimensions(recording, dims, user=user, preset=preset)


def space_from_dimensions(recording: Recording, dims: Mapping[str, tuple[Any, ...]], *,
                          user: Mapping[str, Any] | None = None,
                          preset: str = "custom") -> SearchSpace:
    """A search space from name -> values (the first value is the recorded one)."""
    if not any(not a.is_array for a in recording.args):
        dims = {n: v for n, v in dims.items() if n != "const.scalars"}
    dimensions = {n: _dimension(n, v) for n, v in dims.items() if len(v) > 1}
    constraints: list[Any] = []
    baseline = {n: v[0] for n, v in dims.items() if n in dimensions}
    if user:
        own = SearchSpace.from_mapping(user)
        dimensions.update({d.name: d for d in own.dimensions})
        constraints.extend(own.constraints)
        baseline.update({d.name: own.baseline[d.name] for d in own.dimensions})
    if "launch.block" in dimensions:
        constraints.append(ProductAtMost(("launch.block",), 1024))
    if not dimensions:
        raise ConfigError(f"nothing to tune for {recording.name} with preset {preset!r}",
                          hint="use a larger preset, or declare dimensions with --space")
    return SearchSpace(list(dimensions.values()), constraints, baseline)


def make_evaluator(recording: Recording, backend: Backend, *, tolerance: TolerancePolicy = None,
                   warmup: int = 2, repeat: int = 7, flush: bool | None = None,
                   isolate: Isolation | None = None
                   ) -> Callable[[dict[str, Any]], Measurement]:
    """config -> the realized variant, replayed: verified against the recording, then timed
    (in a supervised worker with ``isolate``)."""
    scalars = {a.name: a.value for a in recording.args if not a.is_array}

    def evaluate(config: dict[str, Any]) -> Measurement:
        try:
            variant = backend.realize(recording.variant, config, scalars)
        except KernforgeError as exc:
            return Measurement(exc.status or Status.INVALID_CONFIG, message=str(exc))
        return evaluate_variant(recording, variant, backend=backend, tolerance=tolerance,
                                warmup=warmup, repeat=repeat, flush=flush, isolate=isolate)

    return evaluate


def finished_result(directory: Path) -> Path | None:
    """The unit's result.json when its tuning (or evolution) finished: it is written last, so
    it exists only then. ``--resume`` reports such a unit instead of measuring it again."""
    path = Path(directory) / RESULT_NAME
    return path if path.is_file() else None


def keep_earlier(path: Path) -> Path | None:
    """Move a finished result aside, beside the new one to come, as
    ``result.earlier-<n>.json`` (``n`` the next free number; export reads only result.json)."""
    if not path.is_file():
        return None
    n = 1
    while (path.parent / f"{path.stem}.earlier-{n}{path.suffix}").exists():
        n += 1
    kept = path.parent / f"{path.stem}.earlier-{n}{path.suffix}"
    path.replace(kept)
    return kept


def tune_recording(recording: Recording, run_dir: Path, *, preset: str = "standard",
                   sampler: str = "tpe", budget: Budget | None = None, seed: int | None = 0,
                   user_space: Mapping[str, Any] | None = None,
                   tolerance: TolerancePolicy = None, repeat: int = 7, warmup: int = 2,
                   resume: bool = False, remeasure: bool = False, passes: int = 7,
                   on_trial: Callable[[TrialRecord], None] | None = None,
                   isolate: Isolation | None = None) -> TuningOutcome:
    """Tune ``recording`` into ``run_dir/<unit>/`` and write its result.json and history.png.
    ``isolate``: every trial and the winner's validation run in supervised workers.
    ``resume`` continues an unfinished study; a finished one (its result.json written) is
    an error unless ``remeasure``, which measures it again and keeps the earlier result as
    ``result.earlier-<n>.json``."""
    be = get_backend(recording.backend)
    directory = Path(run_dir) / recording.name
    if (directory / "study.db").exists() and not (resume or remeasure):
        raise ConfigError(f"{directory} already holds a study",
                          hint="pass --resume to continue it, or choose another --out")
    done = finished_result(directory)
    if done is not None and not remeasure:
        raise ConfigError(f"{directory}: the tuning of {recording.name} finished; its "
                          f"{RESULT_NAME} stands and is not measured again",
                          hint="pass --remeasure to measure it again (the earlier result is "
                               "kept beside the new one)")
    directory.mkdir(parents=True, exist_ok=True)
    tolerant = is_tolerant(recording, resolve_policies(recording, tolerance))
    space = build_space(recording, be, preset=preset, user=user_space, tolerant=tolerant)
    evaluate = make_evaluator(recording, be, tolerance=tolerance, warmup=warmup, repeat=repeat,
                              isolate=isolate)
    study = tune(space, evaluate, sampler=sampler, budget=budget, storage=directory,
                 study_name=recording.name, seed=seed, on_trial=on_trial)
    scalars = {a.name: a.value for a in recording.args if not a.is_array}
    best = study.best_trial
    best_variant = be.realize(recording.variant, best.config, scalars) if best \
        else recording.variant
    baseline_s = study.baseline.median if study.baseline else None
    ab, validation = None, None
    if best is not None and best.config != (study.baseline.config if study.baseline else None):
        # the winner passes every integrity gate before a speedup is written (its canonical
        # re-measurement is the interleaved comparison reported)
        claimed = baseline_s / best.median if baseline_s and best.median else None
        validation = validate(recording, best_variant, backend=be, tolerance=tolerance,
                              passes=passes, claimed=claimed,
                              ledger=directory / "ledger.jsonl", isolate=isolate)
        ab = validation.ab
    outcome = TuningOutcome(recording, directory, study, best_variant, baseline_s,
                            best.median if best else None, ab, validation)
    if remeasure:
        keep_earlier(directory / RESULT_NAME)
    write_result(outcome, sampler=sampler, preset=preset)
    plot_history(outcome, directory / "history.png", sampler=sampler)
    return outcome


def variant_json(variant: Variant, original: Variant) -> dict[str, Any]:
    return {"code": variant.source.code if variant.source.code != original.source.code else None,
            "options": variant.options.as_dict(), "defines": dict(variant.defines),
            "constants": dict(variant.constants), "launch": variant.launch.to_json()}


def write_result(o: TuningOutcome, *, sampler: str, preset: str) -> Path:
    best = o.study.best_trial
    data = {
        "format": RESULT_FORMAT, "schema_version": RESULT_VERSION,
        "kernforge_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "unit": o.recording.name, "recording": str(Path(o.recording.path).resolve()),
        "backend": o.recording.backend, "sampler": sampler, "preset": preset,
        "evaluations": o.study.evaluations, "trials": len(o.study.trials),
        "stop_reason": o.study.stop_reason,
        "status": ("NO_VALID_TRIAL" if best is None else "INCONCLUSIVE"
                   if o.validation is not None and o.validation.verdict == "inconclusive"
                   else "REJECTED"
                   if o.validation is not None and not o.validation.accepted else "OK"),
        "best": {"config": best.config if best else None,
                 "variant": variant_json(o.best_variant, o.recording.variant)},
        # the interleaved re-measurement's medians (their ratio is the speedup); the search's
        # own figures (separate runs, the best of many: biased low) under their own names
        "baseline_median_s": o.ab.median_a if o.ab else o.baseline_s,
        "best_median_s": o.ab.median_b if o.ab else o.best_s,
        "search_baseline_median_s": o.baseline_s, "search_best_median_s": o.best_s,
        "speedup": o.speedup,
        "speedup_ci": [o.ab.ci_low, o.ab.ci_high] if o.ab and o.speedup != 1.0 else None,
        "interleaved": o.ab.to_json() if o.ab else None,
        "validation": o.validation.to_json() if o.validation else None,
        "provenance": o.validation.provenance if o.validation else None,
    }
    path = o.directory / RESULT_NAME
    write_json_atomic(path, sign(data))  # export refuses a result edited after this
    return path


def history_points(study: TuneResult) -> tuple[list[tuple[int, float | None]], int]:
    """(evaluation number, median or None when it failed) per evaluation, and the number of
    cache hits (trials answered without an evaluation)."""
    evaluated = [t for t in study.trials if t.evaluated]
    return ([(i, t.median if t.ok and t.median is not None else None)
             for i, t in enumerate(evaluated, 1)], sum(1 for t in study.trials if t.cached))


def plot_history(o: TuningOutcome, path: Path, *, sampler: str) -> Path:
    """history.png: one point per evaluation in order (cache hits are not evaluations: not
    drawn, counted in the caption), the best so far, the recorded configuration at its
    measured median; the title: :func:`history_title`."""
    points, hits = history_points(o.study)
    return tuning_png(path, points, recorded_s=o.baseline_s, cache_hits=hits,
                      title=history_title(o, sampler=sampler))


def history_title(o: TuningOutcome, *, sampler: str) -> str:
    """history.png's title: the interleaved re-measurement's own figure (best vs recorded)
    with its verdict word, as the tune table shows them; a rejected winner by its reason."""
    v = o.validation
    if o.ab is None:
        figure = "the recorded configuration stayed the best"
    elif v is not None and not v.accepted and v.verdict != "inconclusive":
        figure = f"the best configuration was REJECTED ({v.reason or v.status.value})"
    else:
        word = v.speed.verdict.value if v is not None and v.speed is not None \
            else "not validated"
        figure = (f"interleaved speedup {o.ab.speedup:.3f}x [{ci_label(o.ab.confidence)} "
                  f"{o.ab.ci_low:.3f}, {o.ab.ci_high:.3f}], best vs recorded: {word}")
    idle = v.idle if v is not None else None
    if idle is not None and idle.idle is False:
        figure += (f"\nmeasured while the device was busy ({idle.utilisation or 1.0:.0%}): "
                   f"not a win")
    device = o.recording.identity.get("device", "?")
    return f"{o.recording.name} ({sampler}, {device}):\n{figure}"
