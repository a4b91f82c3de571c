"""A stencil operator as the product's kernel variants: one cuda-backend ``Variant`` per launch.

An :class:`~kernforge.stencil.operator.Operator` is CUDA source plus launches by argument role;
the product runs, times, validates and deploys ``core.Variant`` objects. :func:`variants` maps
one onto the other without changing a byte: the source as generated (so the pinned source
hashes and the figures measured on them stand), each launch's entry and geometry as its
``LaunchConfig``, the operator's NVRTC options as the cuda backend's ``extra_options`` knob
(the backend then compiles with NVRTC exactly as the forge and the bench load an operator).
What a ``Variant`` does not carry stays beside it: the launch's argument roles and its
preferred shared-memory carveout (a function attribute).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..core import CompileOptions, KernelSource, LaunchConfig, Variant
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
