"""The null backend's own behaviour (the conformance suite covers the shared contract)."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.backends.null import NullBackend
from kernforge.core import CompileError, KernelRuntimeError, KernelSource, SignatureError, Variant

SCALE = '''
FACTOR = 1
def scale(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = FACTOR * a * x[:n]
'''


def test_defines_become_globals() -> None:
    b = NullBackend()
    x, y = np.arange(4.0), np.zeros(4)
    compiled = b.compile(Variant(KernelSource(SCALE.replace("FACTOR = 1\n", ""), "scale",
                                              "python"), defines=(("FACTOR", "3"),)))
    b.launch(compiled, [x, y, 2.0, 4])
    assert y.tolist() == [0.0, 6.0, 12.0, 18.0]


def test_signature_from_annotations() -> None:
    params = NullBackend().parse_signature(KernelSource(SCALE, "scale", "python"))
    assert [(p.name, p.dtype, p.pointer, p.const) for p in params] == [
        ("x", "float64", True, True), ("y", "float64", True, False),
        ("a", "float64", False, False), ("n", "int32", False, False)]


@pytest.mark.parametrize("code, match", [
    ("def f(x) -> None: pass", "no C-type annotation"),
    ('def f(x: "double **") -> None: pass', "unsupported type"),
    ("def g() -> None: pass", "not found"),
])
def test_signature_errors(code: str, match: str) -> None:
    with pytest.raises(SignatureError, match=match):
        NullBackend().parse_signature(KernelSource(code, "f", "python"))


def test_syntax_error_is_typed() -> None:
    # a syntax error found while reading the signature: SignatureError, or CompileError since
    # "parsing is compiling" for this backend; either way a typed error that says so
    with pytest.raises((SignatureError, CompileError), match="does not parse"):
        NullBackend().parse_signature(KernelSource("def f(:", "f", "python"))


def test_load_error_and_runtime_error_are_typed() -> None:
    b = NullBackend()
    with pytest.raises(CompileError, match="NameError"):
        b.compile(Variant(KernelSource('undefined_name\ndef f(x: "double *") -> None: pass',
                                       "f", "python")))
    raising = 'def f(x: "double *") -> None:\n    raise ValueError("x")'
    boom = b.compile(Variant(KernelSource(raising, "f", "python")))
    with pytest.raises(KernelRuntimeError, match="ValueError"):
        b.launch(boom, [np.zeros(1)])
