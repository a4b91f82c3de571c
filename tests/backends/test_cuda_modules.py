"""backends/cuda_modules.py on the host: what it asks of CuPy and how it types CuPy's errors.

CuPy and a GPU are not here, so a stand-in CuPy module records each ``RawModule`` it is asked
for and fails the way CuPy fails (a ``CompileException`` carrying NVRTC's log, a
``CUDADriverError``); tests/forge/test_sessions_gpu.py and tests/stencil/test_measure_gpu.py load
real modules on the GPU."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from kernforge.backends import cuda_modules
from kernforge.core import CompileError, LaunchError


class CompileException(Exception):
    pass


class CUDADriverError(Exception):
    pass


def stand_in(made: list[dict[str, Any]]) -> Any:
    class RawModule:
        def __init__(self, **kw: Any) -> None:
            made.append(kw)
            self.kw = kw
            if "broken" in kw.get("code", ""):
                raise CompileException("op.cu(3): error: expected a ';'\n1 error detected")
            if kw.get("path") == "refused.cubin":
                raise CUDADriverError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION")

        def get_function(self, name: str) -> str:
            if name == "missing":
                raise AttributeError("named symbol not found")
            return f"fn:{name}"

        def compile(self) -> None:
            made.append({"compiled": self.kw["code"]})

    cuda = types.SimpleNamespace(compiler=types.SimpleNamespace(CompileException=CompileException),
                                 driver=types.SimpleNamespace(CUDADriverError=CUDADriverError))
    return types.SimpleNamespace(RawModule=RawModule, cuda=cuda)


def test_a_source_module_passes_only_what_it_is_given() -> None:
    made: list[dict[str, Any]] = []
    cp = stand_in(made)
    cuda_modules.source_module(cp, "k")
    cuda_modules.source_module(cp, "k", options=("-a",), name_expressions=())
    assert made == [{"code": "k"}, {"code": "k", "options": ("-a",), "name_expressions": ()}]
    cuda_modules.compile_module(cp, "k", ("-b",))
    assert made[-2:] == [{"code": "k", "options": ("-b",)}, {"compiled": "k"}]


def test_load_source_gets_the_entries_and_types_the_failures() -> None:
    made: list[dict[str, Any]] = []
    cp = stand_in(made)
    fns = cuda_modules.load_source(cp, "ok", ["-x"], ("a", "b"), what="cell (op)")
    assert fns == {"a": "fn:a", "b": "fn:b"} and made == [{"code": "ok", "options": ("-x",)}]
    with pytest.raises(CompileError) as err:
        cuda_modules.load_source(cp, "broken", [], ("a",), what="cell (op)")
    assert "NVRTC could not compile cell (op):" in str(err.value)
    assert "expected a ';'" in (err.value.log or "")
    with pytest.raises(CompileError, match="could not build cell \\(op\\): AttributeError"):
        cuda_modules.load_source(cp, "ok", [], ("missing",), what="cell (op)")


def test_load_image_types_a_refused_cubin() -> None:
    made: list[dict[str, Any]] = []
    cp = stand_in(made)
    assert cuda_modules.load_image(cp, Path("a.cubin"), ("k",), what="op") == {"k": "fn:k"}
    assert made == [{"path": "a.cubin"}]
    with pytest.raises(LaunchError, match="op: the driver refused its cubin") as err:
        cuda_modules.load_image(cp, Path("refused.cubin"), ("k",), what="op")
    assert "nvcc" in (err.value.hint or "")
