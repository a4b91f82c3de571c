"""Deployment entries from recordings: a tuned variant of a recorded launch, with its evidence."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..backends import BACKENDS
from ..core import ConfigError, LaunchConfig, Recording, Variant
from .spec import DeployEntry, Evidence, KernelKey, Problem, ProblemArg, TunedVariant, json_scalar

VALUE_KINDS = "iub"  # scalar dtypes matched by value: integers and bools


def code_sha256(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def name_expression(options: Mapping[str, Any]) -> str | None:
    """The cuda knob ``name_expression`` ('' or absent: the entry itself) as None or text."""
    return str(options.get("name_expression") or "") or None


def device_subset(backend: str, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a recorded identity that decide where a tuned variant is valid."""
    keys = BACKENDS.get(backend).deploy_keys
    return {k: identity.get(k) for k in keys}


def _problem(recording: Recording, constants: Mapping[str, Any]) -> Problem:
    args = []
    for a in recording.args:
        if a.is_array:
            args.append(ProblemArg(a.name, "array", a.dtype, tuple(a.shape)))
            continue
        by_value = np.dtype(a.dtype).kind in VALUE_KINDS or a.name in constants
        args.append(ProblemArg(a.name, "scalar", a.dtype, None,
                               json_scalar(a.value) if by_value else None))
    launch = LaunchConfig(recording.launch.grid, recording.launch.block,
                          recording.launch.shared_mem)
    return Problem(tuple(args), launch, aliases=())  # a recording's buffers are distinct


def entry_from_recording(recording: Recording, variant: Variant, *, baseline_s: float,
                         tuned_s: float, speedup: float,
                         speedup_ci: tuple[float, float] | None) -> DeployEntry:
    """The entry that replaces launches like ``recording`` by ``variant`` (complete: the
    recording's variant with the tuned overrides applied, e.g. ``recording.variant.with_(...)``).

    Integer and bool scalars become part of the problem by value, floating-point ones only
    when ``variant`` compiles them in as constants; arrays by dtype and shape."""
    if variant.source.entry != recording.source.entry:
        raise ConfigError(f"variant of {variant.source.entry!r} given for a recording of "
                          f"{recording.source.entry!r}",
                          hint="pair each recording with a variant of the same kernel")
    for what, value in (("baseline_s", baseline_s), ("tuned_s", tuned_s), ("speedup", speedup)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{what}={value!r} must be a finite positive number",
                              hint="export only results with a successful measurement")
    original = recording.source
    kernel = KernelKey(recording.backend, original.language, original.entry,
                       code_sha256(original.code), name_expression(recording.options.as_dict()),
                       recording.options.as_dict(), dict(recording.defines))
    constants = dict(variant.constants)
    tuned = TunedVariant(
        code=variant.source.code if variant.source.code != original.code else None,
        options=variant.options.as_dict(), defines=dict(variant.defines),
        constants={k: json_scalar(v) for k, v in constants.items()}, launch=variant.launch)
    evidence = Evidence(float(baseline_s), float(tuned_s), float(speedup),
                        (float(speedup_ci[0]), float(speedup_ci[1])) if speedup_ci else None,
                        str(recording.path.resolve()), dict(recording.identity))
    return DeployEntry(kernel, device_subset(recording.backend, recording.identity),
                       _problem(recording, constants), tuned, evidence)
