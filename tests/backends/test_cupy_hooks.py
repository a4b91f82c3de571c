"""The CuPy hooks and their recordings, on a fake ``cupy`` module (runs without CuPy or a GPU).

The fake has CuPy's Python-visible surface (RawKernel(code, name, options, backend, ...),
RawModule(code=..., name_expressions=...).get_function -> RawKernel with the lowered name), and
"runs" kernels with numpy implementations; the ``cuda`` backend instance is a host fake with
the cuda backend's knobs. The real thing is tested by test_cupy_hooks_gpu.py.
"""

from __future__ import annotations

import json
import pickle
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.backends import base, cupy_hooks
from kernforge.backends.cuda import KNOBS
from kernforge.backends.cupy_translate import CaptureWarning
from kernforge.backends.null import NullBackend
from kernforge.record import load_recording, record

SRC = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) { }
template <typename T>
__global__ void axpy(const T* x, T* y, T a, long long n) { }
template <typename T, int K>
__global__ void vec(const T* x) { }
"""
LOWERED = {"axpy<float>": "_Z4axpyIfEvPKT_PS0_S0_x", "axpy<double>": "_Z4axpyIdEvPKT_PS0_S0_x"}
CALLS: list[str] = []


def _run(name: str, args: tuple) -> None:
    CALLS.append(name)
    if name == "scale":
        x, y, a, n = args
        if x is not None:  # CuPy would pass a null pointer
            y[:n] = np.float32(a) * x[:n]
    elif name.startswith("_Z4axpy"):
        x, y, a, n = args
        y[:n] += a * x[:n]


class FakeRawKernel:
    def __init__(self, code: str, name: str, options: tuple = (), backend: str = "nvrtc", *,
                 translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 jitify: bool = False) -> None:
        self.code, self.name, self.options, self.backend = code, name, options, backend
        self.enable_cooperative_groups = enable_cooperative_groups
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid: Any, block: Any, args: tuple, **kwargs: Any) -> None:
        _run(self.name, args)

    def __getstate__(self) -> dict:
        return {"code": self.code, "name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["code"], state["name"])  # type: ignore[misc]


class FakeRawModule:
    def __init__(self, *, code: str, options: tuple = (), name_expressions: Any = None,
                 **kw: Any) -> None:
        self.code, self.options = code, options
        self.name_expressions = tuple(name_expressions) if name_expressions else None

    def get_function(self, name: str) -> FakeRawKernel:
        lowered = LOWERED.get(name, name) if self.name_expressions else name
        return FakeRawKernel(self.code, lowered, self.options)


class FakeCuda(NullBackend):
    name = "cuda"
    language = "cuda"

    def knobs(self):  # type: ignore[no-untyped-def]
        return KNOBS

    def identity(self) -> dict[str, Any]:
        return {"device": "fake"}


@pytest.fixture
def cp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    fake = types.ModuleType("cupy")
    fake.RawKernel, fake.RawModule, fake.ndarray = FakeRawKernel, FakeRawModule, np.ndarray
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        deviceSynchronize=lambda: None))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(base._instances, "cuda", FakeCuda())
    monkeypatch.setattr(cupy_hooks, "_warned", set())
    CALLS.clear()
    yield fake
    cupy_hooks.uninstall()


def test_install_uninstall_restores_the_classes(cp: Any) -> None:
    assert not cupy_hooks.installed()
    assert cupy_hooks.install() and not cupy_hooks.install()
    assert cp.RawKernel is not FakeRawKernel and issubclass(cp.RawKernel, FakeRawKernel)
    assert cupy_hooks.original_class(cp, "RawModule") is FakeRawModule
    assert isinstance(FakeRawKernel("", "k"), cp.RawKernel)  # CuPy's own instances still pass
    assert cupy_hooks.uninstall() and not cupy_hooks.uninstall()
    assert cp.RawKernel is FakeRawKernel and cp.RawModule is FakeRawModule
    assert cupy_hooks.original_class(cp, "RawKernel") is FakeRawKernel


def test_without_observers_calls_go_straight_through(cp: Any, tmp_path: Path) -> None:
    cupy_hooks.install()
    k = cp.RawKernel(SRC, "scale")
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    k((1,), (4,), (x, y, np.float32(2), 4))
    assert CALLS == ["scale"] and y.tolist() == [0, 2, 4, 6]
    assert not list(tmp_path.iterdir())


def test_raw_kernel_launch_is_recorded(cp: Any, tmp_path: Path) -> None:
    cupy_hooks.install()
    k = cp.RawKernel(SRC, "scale", options=("-std=c++17", "--fmad=false", "-DTILE=8"))
    x, y = np.arange(6, dtype=np.float32), np.full(6, 9, np.float32)
    with record(tmp_path) as rec:
        k((2, 1), 3, (x, y, np.float32(1.5), 6), shared_mem=16)
    r = load_recording(rec.paths[0], verify=True)
    assert r.name == "scale-0" and r.backend == "cuda" and r.source.code == SRC
    assert r.options.as_dict()["extra_options"] == "-std=c++17"
    assert r.options.as_dict()["fmad"] is False and r.defines == (("TILE", "8"),)
    assert r.launch.grid == (2, 1, 1) and r.launch.block == (3, 1, 1)
    assert r.launch.shared_mem == 16
    assert [(a.name, a.dtype) for a in r.args] == [("x", "float32"), ("y", "float32"),
                                                   ("a", "float32"), ("n", "int32")]
    assert r.arg("n").value == 6 and r.arg("a").value == 1.5
    np.testing.assert_array_equal(r.prologue("y"), np.full(6, 9, np.float32))
    np.testing.assert_array_equal(r.expected("y"), 1.5 * np.arange(6, dtype=np.float32))
    assert not r.arg("x").written and CALLS == ["scale"]


def test_module_template_in_place_buffer_and_capture_info(cp: Any, tmp_path: Path) -> None:
    cupy_hooks.install()
    mod = cp.RawModule(code=SRC, options=("--use_fast_math",),
                       name_expressions=["axpy<float>", "axpy<double>"])
    f = mod.get_function("axpy<double>")
    assert isinstance(f, cp.RawKernel) and isinstance(f, FakeRawKernel)
    f.max_dynamic_shared_size_bytes = 1024  # forwarded to CuPy's kernel
    assert f.max_dynamic_shared_size_bytes == 1024 and f.name == LOWERED["axpy<double>"]
    x, y = np.ones(5), np.arange(5.0)
    with record(tmp_path) as rec:
        f((1,), (5,), (x, y, 2.0, 5))  # y is read and written
    r = load_recording(rec.paths[0])
    assert r.name == "axpy-0" and r.source.entry == "axpy"
    assert r.options.as_dict()["name_expression"] == "axpy<double>"
    assert r.options.as_dict()["use_fast_math"] is True
    assert [a.dtype for a in r.args] == ["float64", "float64", "float64", "int64"]
    np.testing.assert_array_equal(r.prologue("y"), np.arange(5.0))
    np.testing.assert_array_equal(r.expected("y"), np.arange(5.0) + 2)
    capture = json.loads((rec.paths[0] / "manifest.json").read_text())["capture"]
    assert capture == {"origin": "cupy.RawModule", "symbol": LOWERED["axpy<double>"],
                       "name_expression": "axpy<double>", "options": ["--use_fast_math"]}


def test_unrecordable_launches_warn_once_and_still_run(cp: Any, tmp_path: Path) -> None:
    cupy_hooks.install()
    k = cp.RawKernel(SRC, "scale")
    y = np.zeros(4, np.float32)
    with record(tmp_path) as rec, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            k((1,), (4,), (None, y, np.float32(1), 4))
    assert [str(w.message) for w in caught if w.category is CaptureWarning] == [
        "kernforge: not recording CuPy kernel scale: argument 'x' is a null pointer (None)"]
    assert rec.paths == [] and CALLS == ["scale"] * 3


def test_unresolvable_template_warns_and_runs(cp: Any, tmp_path: Path) -> None:
    cupy_hooks.install()
    LOWERED["vec<float2, 4>"] = "_Z3vecI6float2Li4EEvPKT_"
    mod = cp.RawModule(code=SRC, name_expressions=["vec<float2, 4>"])
    with record(tmp_path) as rec, pytest.warns(CaptureWarning, match="float2"):
        mod.get_function("vec<float2, 4>")((1,), (1,), (np.zeros(2, np.float32),))
    assert rec.paths == [] and CALLS == ["_Z3vecI6float2Li4EEvPKT_"]


def test_record_installs_and_removes_hooks_when_cupy_is_imported(cp: Any,
                                                                 tmp_path: Path) -> None:
    with record(tmp_path):
        assert cupy_hooks.installed() and cp.RawKernel is not FakeRawKernel
    assert not cupy_hooks.installed() and cp.RawKernel is FakeRawKernel
    cupy_hooks.install()
    with record(tmp_path):
        pass
    assert cupy_hooks.installed()  # installed before: left alone


def test_pickles_as_cupy_class(cp: Any) -> None:
    cupy_hooks.install()
    k = cp.RawKernel(SRC, "scale")
    back = pickle.loads(pickle.dumps(k))
    assert type(back) is FakeRawKernel and back.name == "scale"
    f = cp.RawModule(code=SRC).get_function("scale")
    assert type(pickle.loads(pickle.dumps(f))) is FakeRawKernel


def test_run_app_hooks_only_when_cupy_is_importable(cp: Any, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    from kernforge.pipeline import pyapp
    monkeypatch.setattr(pyapp.importlib.util, "find_spec", lambda name: object())
    with pyapp.cupy_hooks_if_available() as hooked:
        assert hooked and cupy_hooks.installed()
    assert not cupy_hooks.installed()
    monkeypatch.setattr(pyapp.importlib.util, "find_spec", lambda name: None)
    with pyapp.cupy_hooks_if_available() as hooked:
        assert not hooked and not cupy_hooks.installed()
