"""A stencil operator as a replay unit: recorded, validated and exported like any kernel.

A one-launch operator is one cuda-backend variant (:func:`kernforge.stencil.variant.single`:
its source unchanged, its launch, its NVRTC options). :func:`record_operator` runs a reference
operator once through a backend on a cell's fields, drawn from a seed as the forge draws them
(``in`` and ``coef`` uniform in [0, 1); ``out`` holding the input's boundary and a NaN interior,
so a point the kernel forgets fails), and writes that launch as a replay unit, as ``kernforge
record`` writes one. Each written buffer's policy is the oracle's gate as an absolute
tolerance: ``|out - ref| <= gate * max|ref|`` at every point is the oracle's scale-invariant
error (``kernforge.stencil.oracle``) within the precision's gate, so designs that round
differently pass and a wrong point does not.

:func:`validate_operator` runs :func:`kernforge.replay.validate` on a candidate operator against
that unit: static checks, sanitizers, repeated verification, poisoned outputs, fresh inputs
(differential against the reference), the interleaved re-measurement through the harness
protocol, the roofline, zero regression. :func:`deploy_entry` makes an accepted, significant
result a deployment entry (the rule of ``kernforge export``): it replaces launches of the
reference kernel, e.g. those ``kernforge.apply_stencil`` makes through ``kernforge.Kernel``.
A deployment swaps a kernel for a variant of the same kernel name, so the candidate must be of
the reference's design (the entry is named after the design); another design is validated but
not exported.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..backends import Backend, get_backend
from ..core import ConfigError, Recording, Tolerance, Variant
from ..deploy.entries import entry_from_recording
from ..deploy.gate import NOISE_BAND, refusal
from ..deploy.spec import DeployEntry
from ..forge.measure import DeviceCell
from ..record.format import load_recording, write_recording
from ..replay.validate import Validation, validate
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from ..stencil.variant import single

PathLike = str | os.PathLike[str]
ORIGIN = "kernforge.apps.operator_unit"


def operator_variant(op: Operator) -> Variant:
    """The cuda-backend variant of a one-launch operator (ConfigError for several, or for one
    that asks for a shared-memory carveout: a Variant does not carry it, so what would be
    validated and deployed is not what the forge timed)."""
    lv = single(op)
    if lv.carveout >= 0:
        raise ConfigError(f"{op.cell_id} {op.key} asks for a shared-memory carveout of "
                          f"{lv.carveout} %, which a kernel variant does not carry",
                          hint="validate the operator without its carveout knob (l1=0)")
    return lv.variant


def gate_policy(expected: np.ndarray, gate: float) -> Tolerance:
    """The oracle's gate on one output as a per-buffer policy: ``|out - ref|`` at most
    ``gate`` times the largest ``|ref|``; NaN fails."""
    values = np.abs(np.asarray(expected, dtype=np.float64))
    finite = values[np.isfinite(values)]
    scale = float(finite.max()) if finite.size else 0.0
    return Tolerance("abs", atol=gate * scale)


def _cell(op: Operator) -> Cell:
    try:
        return Cell.parse(op.cell_id)
    except ConfigError as exc:
        raise ConfigError(f"{op.cell_id}: not a cell of the matrix ({exc.message})",
                          hint="record operators of the matrix's cells (stencil/NXxNYxNZ/"
                               "precision)") from None


def record_operator(op: Operator, root: PathLike, *, backend: Backend | str = "cuda",
                    seed: int = 0) -> Recording:
    """Run ``op`` (one launch) once on its cell's fields drawn from ``seed`` and write that
    launch under ``root`` as a replay unit; returns the unit, loaded."""
    launch = single(op)
    cell = _cell(op)
    be = get_backend(backend)
    compiled = be.compile(launch.variant)
    params = compiled.signature
    if len(params) != len(launch.args) or not all(p.pointer for p in params):
        raise ConfigError(f"{op.key}: {launch.variant.source.entry} takes "
                          f"{[p.name for p in params]}, its launch passes roles {launch.args}",
                          hint="an operator's kernel takes one array per role")
    fields = DeviceCell.allocate(cell, seed, xp=np, tmp="tmp" in launch.args).fields
    before = {p.name: np.array(fields[role], copy=True)
              for p, role in zip(params, launch.args, strict=True)}
    buffers = [be.to_device(before[p.name]) for p in params]
    be.launch(compiled, buffers)
    be.synchronize()
    after = {p.name: np.asarray(be.to_host(b)) for p, b in zip(params, buffers, strict=True)}
    gate = cell.precision.tolerance
    policies = {p.name: gate_policy(after[p.name], gate) for p in params if not p.const}
    capture: dict[str, Any] = {"origin": ORIGIN, "cell": op.cell_id, "operator": op.key,
                               "roles": list(launch.args), "seed": seed}
    path = write_recording(root, backend=be, variant=compiled.variant,
                           args=list(zip(params, buffers, strict=True)), prologue=before,
                           epilogue=after, policies=policies, capture=capture)
    return load_recording(path)


def _check_cell(recording: Recording, op: Operator) -> None:
    shape = _cell(op).shape.array_shape
    wrong = [a.name for a in recording.args if a.is_array and tuple(a.shape) != shape]
    if wrong:
        raise ConfigError(f"{op.cell_id} {op.key} is built for arrays of shape {list(shape)}; "
                          f"{recording.name}'s {wrong} are not",
                          hint="validate an operator of the recorded cell")


def validate_operator(candidate: Operator, recording: Recording, **kw: Any) -> Validation:
    """:func:`kernforge.replay.validate` of ``candidate``'s variant against ``recording`` (a
    unit of :func:`record_operator`); ``kw`` go to ``validate`` (``backend``, ``integrity``,
    ``passes``, ``band``, ``ledger``, ``figure``, ...)."""
    _check_cell(recording, candidate)
    kw.setdefault("case", f"{candidate.cell_id} {recording.source.entry}")
    return validate(recording, operator_variant(candidate), **kw)


def deploy_entry(recording: Recording, candidate: Operator, validation: Validation, *,
                 band: float = NOISE_BAND) -> DeployEntry:
    """The deployment entry of an accepted, significant validation of ``candidate`` against
    ``recording`` (:func:`kernforge.deploy.gate.refusal`, as ``kernforge export``)."""
    if not validation.accepted or validation.ab is None:
        raise ConfigError(f"{validation.case}: {candidate.key} was {validation.verdict} "
                          f"({validation.reason}): {validation.message}",
                          hint="export only a validation that passed every gate")
    ab = validation.ab
    idle = validation.idle.idle if validation.idle is not None else None
    why = refusal(verified=True, idle=idle, speedup=ab.speedup, ci=(ab.ci_low, ab.ci_high),
                  band=band)
    if why:
        raise ConfigError(f"{validation.case}: {candidate.key} not exported: {why}",
                          hint="a deployment keeps only significant wins measured on an idle "
                               "device")
    variant = operator_variant(candidate)
    if variant.source.entry != recording.source.entry:
        raise ConfigError(f"{candidate.key} is kernel {variant.source.entry!r}, the recorded "
                          f"launch is of {recording.source.entry!r}: a deployment replaces a "
                          f"kernel by a variant of the same kernel",
                          hint="record the operator the application runs with the candidate's "
                               "design, or deploy the candidate through the dispatch table")
    variant = variant.with_(options=recording.options.merged(variant.options).as_dict())
    return entry_from_recording(recording, variant, baseline_s=ab.median_a,
                                tuned_s=ab.median_b, speedup=ab.speedup,
                                speedup_ci=(ab.ci_low, ab.ci_high), verified=True, idle=idle)
