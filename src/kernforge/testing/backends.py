"""The backend conformance suite: every backend in the registry passes these tests.

Use it from a test module::

    from kernforge.testing.backends import BackendConformance

    class TestConformance(BackendConformance):
        pass

The ``backend`` fixture is parametrized over ``BACKENDS.names()``; a backend that cannot run
here (``BackendUnavailableError`` on construction) is skipped. Each backend *language* needs
one entry in :data:`SAMPLES` -- a new backend with a new language adds one, and the suite
fails until it does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from ..backends.base import BACKENDS, Backend, Knob
from ..core import (
    ArgumentError,
    BackendUnavailableError,
    CompileError,
    CompileOptions,
    ConfigError,
    KernelSource,
    LaunchConfig,
    Param,
    Variant,
)

_AXPY_SIG = (Param("x", "const double *", "float64", True, True),
             Param("y", "double *", "float64", True, False),
             Param("a", "double", "float64"), Param("n", "int", "int32"))
SCALAR_VALUES = (1.5, -7, 2**40 + 3, 200, 0.1)
SCALAR_DTYPES = ("float32", "int32", "int64", "uint8", "float64")


@dataclass(frozen=True)
class SampleKernels:
    """Kernels in one language that the suite compiles and runs.

    - ``axpy(const double *x, double *y, double a, int n)``: ``y[i] = a*x[i] + y[i] + SHIFT``
      for ``i < n``, where the tunable ``SHIFT`` defaults to 0;
    - ``scalars(double *out, float f, int i, long long l, unsigned char u, double d)``: writes
      its five scalars, in order, into ``out[0..4]``;
    - ``broken``: an ``axpy`` the compiler rejects (signature given, so parsing is not tested);
    - ``launch(n)``: a launch configuration that covers ``n`` elements.
    """

    axpy: KernelSource
    scalars: KernelSource
    broken: KernelSource
    launch: Callable[[int], LaunchConfig]


_C_AXPY = """\
#ifndef SHIFT
#define SHIFT 0
#endif
void axpy(const double *restrict x, double *restrict y, double a, int n) {
    #pragma omp parallel for
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i] + SHIFT;
}
"""
_C_SCALARS = """\
void scalars(double *out, float f, int i, long long l, unsigned char u, double d) {
    out[0] = f; out[1] = i; out[2] = (double)l; out[3] = u; out[4] = d;
}
"""
_C_BROKEN = """\
void axpy(const double *x, double *y, double a, int n) {
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + kf_undeclared_identifier;
}
"""
_PY_AXPY = """\
SHIFT = globals().get("SHIFT", 0)

def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n] + SHIFT
"""
_PY_SCALARS = """\
def scalars(out: "double *", f: "float", i: "int", l: "long long", u: "unsigned char",
            d: "double") -> None:
    assert (type(f), type(i), type(l), type(u), type(d)) == (
        np.float32, np.int32, np.int64, np.uint8, np.float64), "scalars of the wrong width"
    out[:5] = (f, i, l, u, d)
"""
_PY_BROKEN = """\
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = (a * x[:n]
"""

_CUDA_AXPY = """\
#ifndef SHIFT
#define SHIFT 0
#endif
extern "C" __global__ void axpy(const double *__restrict__ x, double *__restrict__ y, double a,
                                int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + SHIFT;
}
"""
_CUDA_SCALARS = """\
extern "C" __global__ void scalars(double *out, float f, int i, long long l, unsigned char u,
                                   double d) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = f; out[1] = i; out[2] = (double)l; out[3] = u; out[4] = d;
    }
}
"""
_CUDA_BROKEN = """\
extern "C" __global__ void axpy(const double *x, double *y, double a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + kf_undeclared_identifier;
}
"""


def _cuda_launch(n: int) -> LaunchConfig:
    return LaunchConfig(grid=(max(1, (n + 127) // 128), 1, 1), block=(128, 1, 1))


SAMPLES: dict[str, SampleKernels] = {
    "c": SampleKernels(
        KernelSource(_C_AXPY, "axpy", "c"), KernelSource(_C_SCALARS, "scalars", "c"),
        KernelSource(_C_BROKEN, "axpy", "c", _AXPY_SIG), lambda n: LaunchConfig(threads=2)),
    "python": SampleKernels(
        KernelSource(_PY_AXPY, "axpy", "python"), KernelSource(_PY_SCALARS, "scalars", "python"),
        KernelSource(_PY_BROKEN, "axpy", "python", _AXPY_SIG), lambda n: LaunchConfig()),
    "cuda": SampleKernels(
        KernelSource(_CUDA_AXPY, "axpy", "cuda"), KernelSource(_CUDA_SCALARS, "scalars", "cuda"),
        KernelSource(_CUDA_BROKEN, "axpy", "cuda", _AXPY_SIG), _cuda_launch),
}


def samples_for(backend: Backend) -> SampleKernels:
    """The sample kernels in ``backend.language``; fails the test if there are none."""
    if backend.language not in SAMPLES:
        pytest.fail(f"no sample kernels for language {backend.language!r} (backend "
                    f"{backend.name!r}): add an entry to kernforge.testing.backends.SAMPLES")
    return SAMPLES[backend.language]


def bad_values(knob: Knob) -> list[Any]:
    """Values that ``knob.check`` must refuse."""
    if knob.kind == "choice":
        return ["no-such-value", None]
    if knob.kind == "bool":
        return ["yes", 1, None]
    if knob.kind == "str":
        return [None, 1, b"bytes"]
    return [knob.low - 1, knob.high + 1, 1.5, True, "3"]


def good_values(knob: Knob) -> list[Any]:
    """Every value worth compiling with: each choice, both bools, the int bounds."""
    if knob.kind == "choice":
        return list(knob.choices)
    if knob.kind == "bool":
        return [False, True]
    if knob.kind == "str":
        return [knob.default]  # free-form: no value but the default is known to be valid
    return sorted({knob.low, knob.default, knob.high})


def _data(n: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal(n)


class BackendConformance:
    """Tests every backend passes. Subclass it in a test module (class name ``Test...``)."""

    n = 1000

    @pytest.fixture(params=BACKENDS.names())
    def backend(self, request: Any, tmp_path: Any, monkeypatch: Any) -> Backend:
        monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "kernforge-cache"))
        try:
            return BACKENDS.get(request.param)()
        except BackendUnavailableError as exc:
            pytest.skip(f"backend {request.param!r} unavailable here: {exc}")

    # ---- helpers --------------------------------------------------------------------------
    def run_axpy(self, backend: Backend, variant: Variant, *, tolerant: bool = False,
                 a: Any = 2.5) -> tuple[np.ndarray, np.ndarray]:
        """(result, numpy reference without SHIFT) of one axpy launch (the sample's launch)."""
        x, y = _data(self.n)
        launch = samples_for(backend).launch(self.n)
        compiled = backend.compile(replace(variant, launch=launch), tolerant=tolerant)
        dx, dy = backend.to_device(x), backend.to_device(y)
        backend.launch(compiled, [dx, dy, a, self.n], launch)
        backend.synchronize()
        return backend.to_host(dy), float(a) * x + y

    # ---- knobs and options ----------------------------------------------------------------
    def test_knobs_well_formed(self, backend: Backend) -> None:
        knobs = backend.knobs()
        names = [k.name for k in knobs]
        assert len(names) == len(set(names)), f"duplicate knob names: {names}"
        for k in knobs:
            assert k.name.isidentifier() and k.doc, f"knob {k.name!r} needs a name and a doc"
            assert k.kind in ("choice", "bool", "int", "str"), f"knob {k.name!r}: kind {k.kind!r}"
            k.check(k.default)
            if k.kind == "choice":
                assert len(k.choices) >= 2, f"choice knob {k.name!r} has < 2 choices"
            if k.kind == "int":
                assert k.low <= k.default <= k.high
            for v in good_values(k):
                k.check(v)
        resolved = backend.resolve_options(CompileOptions())
        assert resolved == backend.default_options()
        assert set(resolved.as_dict()) == set(names)

    def test_unknown_option_is_config_error(self, backend: Backend) -> None:
        with pytest.raises(ConfigError, match="no_such_option") as err:
            backend.resolve_options(CompileOptions.of(no_such_option=1))
        assert err.value.hint and all(k.name in err.value.hint for k in backend.knobs())

    def test_bad_value_is_config_error(self, backend: Backend) -> None:
        for k in backend.knobs():
            for bad in bad_values(k):
                with pytest.raises(ConfigError, match=k.name):
                    backend.resolve_options(CompileOptions.of({k.name: bad}), tolerant=True)

    def test_needs_tolerance_knobs_refused_when_bitwise(self, backend: Backend) -> None:
        sample = samples_for(backend)
        for k in backend.knobs():
            if not k.needs_tolerance:
                continue
            value = next(v for v in good_values(k) if v not in (False, k.default))
            with pytest.raises(ConfigError, match=k.name):
                backend.compile(Variant(sample.axpy, CompileOptions.of({k.name: value})))
            backend.resolve_options(CompileOptions.of({k.name: value}), tolerant=True)

    # ---- compile and launch ---------------------------------------------------------------
    def test_compile_and_launch_match_numpy(self, backend: Backend) -> None:
        out, ref = self.run_axpy(backend, Variant(samples_for(backend).axpy))
        np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-13)

    def test_every_knob_value_compiles_and_runs(self, backend: Backend) -> None:
        """Each value, with the other knobs at their defaults, runs correctly -- or is refused
        as a ConfigError naming a knob (an invalid combination), never anything else."""
        sample = samples_for(backend)
        names = [k.name for k in backend.knobs()]
        for k in backend.knobs():
            for v in good_values(k):
                variant = Variant(sample.axpy, CompileOptions.of({k.name: v}))
                try:
                    out, ref = self.run_axpy(backend, variant, tolerant=True)
                except ConfigError as exc:
                    assert v != k.default and any(n in str(exc) for n in names), exc
                    continue
                np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12,
                                           err_msg=f"with {k.name}={v!r}")

    def test_constants_are_compiled_in_and_enforced(self, backend: Backend) -> None:
        variant = Variant(samples_for(backend).axpy, constants=(("n", self.n), ("a", 2.5)))
        out, ref = self.run_axpy(backend, variant)
        np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-13)
        with pytest.raises(ConfigError, match="constant"):
            self.run_axpy(backend, variant, a=3.0)

    def test_defines_change_behaviour(self, backend: Backend) -> None:
        variant = Variant(samples_for(backend).axpy, defines=(("SHIFT", "3"),))
        out, ref = self.run_axpy(backend, variant)
        np.testing.assert_allclose(out, ref + 3, rtol=1e-13, atol=1e-13)

    def test_compile_cache_hit(self, backend: Backend) -> None:
        variant = Variant(samples_for(backend).axpy)
        first = backend.compile(variant)
        second = backend.compile(variant)
        assert not first.cached and second.cached
        assert second.handle is first.handle and second.compile_s == 0.0
        other = backend.compile(variant.with_(defines={"SHIFT": 1}))
        assert not other.cached and other.handle is not first.handle
        relaunched = backend.compile(variant.with_(launch=LaunchConfig(threads=1)))
        assert relaunched.cached, "the launch configuration is not part of the compile cache key"

    def test_broken_source_is_compile_error(self, backend: Backend) -> None:
        with pytest.raises(CompileError) as err:
            backend.compile(Variant(samples_for(backend).broken))
        assert str(err.value).strip()
        assert err.value.status is not None and err.value.status.value == "COMPILE_FAILED"

    def test_time_launch_is_positive(self, backend: Backend) -> None:
        sample = samples_for(backend)
        compiled = backend.compile(Variant(sample.axpy))
        x, y = _data(self.n)
        args = [backend.to_device(x), backend.to_device(y), 2.0, self.n]
        backend.flush_cache()
        t = backend.time_launch(compiled, args, sample.launch(self.n))
        assert isinstance(t, float) and 0.0 < t < 10.0

    # ---- arguments ------------------------------------------------------------------------
    def test_scalars_passed_with_declared_width(self, backend: Backend) -> None:
        compiled = backend.compile(Variant(samples_for(backend).scalars))
        out = backend.to_device(np.zeros(5))
        args = [out, *SCALAR_VALUES]
        converted = backend.convert_args(compiled, args)
        assert [str(np.asarray(v).dtype) for v in converted[1:]] == list(SCALAR_DTYPES)
        backend.launch(compiled, args, samples_for(backend).launch(5))
        backend.synchronize()
        assert backend.to_host(out).tolist() == [1.5, -7.0, float(2**40 + 3), 200.0, 0.1]

    def test_wrong_arguments_are_argument_errors(self, backend: Backend) -> None:
        sample = samples_for(backend)
        compiled = backend.compile(Variant(sample.axpy))
        x, y = (backend.to_device(v) for v in _data(8))
        x32 = backend.to_device(np.zeros(8, np.float32))
        cases = {
            "too few": [x, y, 2.0],
            "too many": [x, y, 2.0, 8, 1],
            "wrong dtype": [x32, y, 2.0, 8],
            "scalar for pointer": [1.0, y, 2.0, 8],
            "array for scalar": [x, y, x, 8],
            "int out of range": [x, y, 2.0, 2**40],
            "non-integral int": [x, y, 2.0, 2.5],
            "string for int": [x, y, 2.0, "8"],
        }
        for what, args in cases.items():
            with pytest.raises(ArgumentError):
                backend.launch(compiled, args, sample.launch(8))
                pytest.fail(f"{what}: accepted")

    # ---- memory and identity --------------------------------------------------------------
    def test_device_buffers_round_trip_and_are_copies(self, backend: Backend) -> None:
        a = np.arange(16, dtype=np.float64)
        buf = backend.to_device(a)
        a[:] = -1
        back = backend.to_host(buf)
        assert back.tolist() == list(range(16)) and back.dtype == np.float64
        back[:] = 99
        assert backend.to_host(buf).tolist() == list(range(16)), "to_host must return a copy"
        new = np.full(16, 7.0)
        backend.restore(buf, new)
        new[:] = 0
        assert backend.to_host(buf).tolist() == [7.0] * 16
        assert backend.is_buffer(buf)

    def test_identity_names_the_device(self, backend: Backend) -> None:
        ident = backend.identity()
        assert isinstance(ident.get("device"), str) and ident["device"]
        json.dumps(ident)  # stored in recordings: must be JSON
