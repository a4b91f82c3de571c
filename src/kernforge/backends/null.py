"""The ``null`` backend: kernels written in Python over numpy arrays, run in-process.

It compiles nothing (``exec`` of the source) and needs no compiler, so tests of every layer
above the backends run anywhere. A kernel is a Python function whose parameters are annotated
with C types, the same way a C kernel declares them::

    def scale(x: "const double *", y: "double *", a: "double", n: "int") -> None:
        y[:n] = a * x[:n]

Its "device memory" is host memory; ``#define``s become module globals; the only knob is
``opt_level``, which does nothing and exists so option plumbing is exercised.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core import (
    CompileError,
    KernelRuntimeError,
    KernelSource,
    LaunchConfig,
    Param,
    SignatureError,
    Variant,
)
from .base import Backend, Knob
from .host import HostMemory
from .signature import C_TYPES, QUALIFIERS


def _param(arg: ast.arg, entry: str) -> Param:
    ann = arg.annotation
    if not (isinstance(ann, ast.Constant) and isinstance(ann.value, str)):
        raise SignatureError(f"parameter {arg.arg!r} of {entry} has no C-type annotation",
                             hint='annotate every parameter, e.g. x: "const double *"')
    text = " ".join(ann.value.replace("*", " * ").split())
    pointer = text.count("*")
    base = " ".join(w for w in text.replace("*", " ").split() if w not in QUALIFIERS)
    if base not in C_TYPES or pointer > 1:
        raise SignatureError(f"parameter {arg.arg!r} of {entry}: unsupported type {ann.value!r}",
                             hint="use a C scalar type or a single pointer to one")
    return Param(arg.arg, text, C_TYPES[base], bool(pointer),
                 pointer == 1 and "const" in text.split("*")[0].split())


class NullBackend(HostMemory, Backend):
    name = "null"
    language = "python"

    def knobs(self) -> tuple[Knob, ...]:
        return (Knob("opt_level", "choice", "O0", ("O0", "O1", "O2", "O3"),
                     doc="accepted and ignored"),)

    def identity(self) -> dict[str, Any]:
        return {"device": "host (null backend)", "compiler": "python exec",
                "numpy": np.__version__}

    def parse_signature(self, source: KernelSource,
                        defines: Mapping[str, str] | None = None) -> tuple[Param, ...]:
        try:
            tree = ast.parse(source.code)
        except SyntaxError as exc:  # for this backend, parsing is compiling
            raise CompileError(f"python kernel source does not parse: {exc}",
                               log=str(exc)) from exc
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == source.entry:
                return tuple(_param(a, source.entry) for a in node.args.args)
        raise SignatureError(f"entry point {source.entry!r} not found in the python source",
                             hint="define it with def at module level")

    def _compile(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[Any, str]:
        env: dict[str, Any] = {"np": np}
        for k, v in variant.defines:
            try:
                env[k] = ast.literal_eval(v)
            except (ValueError, SyntaxError):
                env[k] = v
        name = f"<kernforge-null-{hashlib.sha1(variant.source.code.encode()).hexdigest()[:8]}>"
        try:
            exec(compile(variant.source.code, name, "exec"), env)  # noqa: S102 - it is the backend
        except Exception as exc:  # the "compiler" failed: report it as data
            raise CompileError(f"python kernel failed to load: {type(exc).__name__}: {exc}",
                               log=str(exc)) from exc
        return env[variant.source.entry], ""

    def _launch(self, handle: Any, args: Sequence[Any], launch: LaunchConfig) -> None:
        try:
            handle(*args)
        except Exception as exc:
            raise KernelRuntimeError(f"python kernel raised {type(exc).__name__}: {exc}") from exc

