"""Deployment entries from recordings: a tuned variant of a recorded launch, with its evidence."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..backends import BACKENDS, LaunchEvent
from ..backends.base import cached_dtype
from ..core import ConfigError, KernelSource, LaunchConfig, Recording, Variant
from .spec import DeployEntry, Evidence, KernelKey, Problem, ProblemArg, TunedVariant, json_scalar
from .specdoc import code_sha256

VALUE_KINDS = "iub"  # scalar dtypes matched by value: integers and bools


def name_expression(options: Mapping[str, Any]) -> str | None:
    """The cuda knob ``name_expression`` ('' or absent: the entry itself) as None or text."""
    return str(options.get("name_expression") or "") or None


def device_subset(backend: str, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a recorded identity that decide where a tuned variant is valid."""
    keys = BACKENDS.get(backend).deploy_keys
    return {k: identity.get(k) for k in keys}


def _problem(args: Sequence[tuple[str, bool, str, tuple[int, ...], Any]],
             launch: LaunchConfig, constants: Mapping[str, Any]) -> Problem:
    """The problem of a launch from (name, is array, dtype, shape, value) per argument."""
    out = []
    for name, is_array, dtype, shape, value in args:
        if is_array:
            out.append(ProblemArg(name, "array", dtype, tuple(shape)))
            continue
        by_value = np.dtype(dtype).kind in VALUE_KINDS or name in constants
        out.append(ProblemArg(name, "scalar", dtype, None,
                              json_scalar(value) if by_value else None))
    geometry = LaunchConfig(launch.grid, launch.block, launch.shared_mem)
    return Problem(tuple(out), geometry, aliases=())  # recorded buffers are distinct


def _entry(backend: str, original: KernelSource, options: Mapping[str, Any],
           defines: Mapping[str, str], args: Sequence[tuple[str, bool, str, tuple[int, ...], Any]],
           launch: LaunchConfig, variant: Variant, evidence: Evidence) -> DeployEntry:
    if variant.source.entry != original.entry:
        raise ConfigError(f"variant of {variant.source.entry!r} given for a launch of "
                          f"{original.entry!r}",
                          hint="pair each recording with a variant of the same kernel")
    for what, value in (("baseline_s", evidence.baseline_s), ("tuned_s", evidence.tuned_s),
                        ("speedup", evidence.speedup)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{what}={value!r} must be a finite positive number",
                              hint="export only results with a successful measurement")
    kernel = KernelKey(backend, original.language, original.entry, code_sha256(original.code),
                       name_expression(options), dict(options), dict(defines))
    constants = dict(variant.constants)
    tuned = TunedVariant(
        code=variant.source.code if variant.source.code != original.code else None,
        options=variant.options.as_dict(), defines=dict(variant.defines),
        constants={k: json_scalar(v) for k, v in constants.items()}, launch=variant.launch)
    return DeployEntry(kernel, device_subset(backend, evidence.identity),
                       _problem(args, launch, constants), tuned, evidence)


def _evidence(baseline_s: float, tuned_s: float, speedup: float,
              speedup_ci: tuple[float, float] | None, recording: str,
              identity: Mapping[str, Any]) -> Evidence:
    return Evidence(float(baseline_s), float(tuned_s), float(speedup),
                    (float(speedup_ci[0]), float(speedup_ci[1])) if speedup_ci else None,
                    recording, dict(identity))


def entry_from_recording(recording: Recording, variant: Variant, *, baseline_s: float,
                         tuned_s: float, speedup: float,
                         speedup_ci: tuple[float, float] | None,
                         verified: bool | None = None, idle: bool | None = None) -> DeployEntry:
    """The entry that replaces launches like ``recording`` by ``variant`` (complete: the
    recording's variant with the tuned overrides applied, e.g. ``recording.variant.with_(...)``).

    Integer and bool scalars become part of the problem by value, floating-point ones only
    when ``variant`` compiles them in as constants; arrays by dtype and shape."""
    args = [(a.name, a.is_array, a.dtype, tuple(a.shape), a.value) for a in recording.args]
    evidence = replace(_evidence(baseline_s, tuned_s, speedup, speedup_ci,
                                 str(recording.path.resolve()), recording.identity),
                       verified=verified, idle=idle)
    return _entry(recording.backend, recording.source, recording.options.as_dict(),
                  dict(recording.defines), args, recording.launch, variant, evidence)


def entry_from_event(event: LaunchEvent, variant: Variant, *, baseline_s: float,
                     tuned_s: float, speedup: float, speedup_ci: tuple[float, float] | None,
                     recording: str = "(a launch observed in this process)") -> DeployEntry:
    """As :func:`entry_from_recording`, for a launch seen by a launch observer and not
    recorded (the overhead measurement, :mod:`.overhead`): its arrays by dtype and shape, its
    scalars converted to their declared types, the device of its backend."""
    args = []
    for p, v in event.pairs:
        if p.pointer:
            args.append((p.name, True, str(v.dtype), tuple(v.shape), None))
        else:
            args.append((p.name, False, p.dtype, (), cached_dtype(p.dtype).type(v)))
    evidence = _evidence(baseline_s, tuned_s, speedup, speedup_ci, recording,
                         event.backend.identity())
    v = event.variant
    return _entry(event.backend.name, v.source, v.options.as_dict(), dict(v.defines), args,
                  v.launch, variant, evidence)
