"""A stencil operator as the product's kernel variants: one cuda-backend ``Variant`` per launch.

An :class:`~kernforge.stencil.operator.Operator` is CUDA source plus launches by argument role;
the product runs, times, validates and deploys ``core.Variant`` objects. :func:`variants` maps
one onto the other without changing a byte: the source as generated (so the pinned source
hashes and the figures measured on them stand), each launch's entry and geometry as its
``LaunchConfig``, the operator's NVRTC options as the cuda backend's ``extra_options`` knob
(the backend then compiles with NVRTC exactly as the forge and the bench load an operator).
What a ``Variant`` does not carry stays beside it: the launch's argument roles and its
preferred shared-memory carveout (a function attribute).

An operator of one launch (every single-sweep cell's, and a fused temporal one) *is* one
variant (:func:`single`): replayed, validated and deployed as any recorded kernel is
(``kernforge.apps.operator_unit``). An operator of several launches (chained sweeps through
``tmp``) is several kernels; a replay unit holds one launch, so it is not one variant.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..core import CompileOptions, ConfigError, KernelSource, LaunchConfig, Variant
from .operator import Operator


@dataclass(frozen=True)
class LaunchVariant:
    """One launch of an operator: the variant, the roles of its arguments in parameter order
    (``in``, ``coef``, ``out``, ``tmp``), the carveout it asks for (-1: the driver's)."""

    variant: Variant
    args: tuple[str, ...]
    carveout: int = -1


def variants(op: Operator) -> tuple[LaunchVariant, ...]:
    opts = CompileOptions.of({"extra_options": shlex.join(op.options)}) if op.options \
        else CompileOptions()
    return tuple(LaunchVariant(Variant(KernelSource(op.source, la.entry, "cuda"), opts,
                                       LaunchConfig(la.grid, la.block, la.shared_bytes)),
                               la.args, la.carveout) for la in op.launches)


def single(op: Operator) -> LaunchVariant:
    """The one launch of a one-launch operator; :class:`ConfigError` for several."""
    if len(op.launches) != 1:
        raise ConfigError(f"{op.cell_id} {op.key} applies the stencil in {len(op.launches)} "
                          f"launches; a replay unit (and so a variant to validate or deploy) "
                          f"is one launch",
                          hint="use a one-launch operator of the cell (a single-sweep design, "
                               "or the temporal design's fused kernel: fs equal to the steps)")
    return variants(op)[0]
