"""Stencil programs: what a stencil or PDE kernel computes, general enough for real programs'
kernels (several fields, coefficient fields, time levels, in-place updates, reductions), and
their float64 oracle. See docs/stencil-programs.md."""

from .expr import (
    Bin,
    Const,
    ConstMem,
    Expr,
    Neg,
    Param,
    Tap,
    degree,
    describe,
    polynomial,
    reach,
    tap,
    taps,
)
from .model import (
    FACES,
    RULES,
    FaceRule,
    Field,
    Output,
    Reduction,
    StencilProgram,
    boundary,
    program,
)
from .oracle import Result, apply, error_bound

__all__ = ["FACES", "RULES", "Bin", "Const", "ConstMem", "Expr", "FaceRule", "Field", "Neg",
           "Output", "Param", "Reduction", "Result", "StencilProgram", "Tap", "apply",
           "boundary", "degree", "describe", "error_bound", "polynomial", "program", "reach",
           "tap", "taps"]
