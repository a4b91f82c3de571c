"""A host stand-in for CuPy (no GPU): the ``cupy`` module's Python surface that the hooks and a
deployment touch, and a ``cuda`` backend instance with the cuda knobs whose compiled "kernels"
add the tuned ``#define SHIFT`` to the output (so the output shows which ran; ``#define FAIL``:
the launch fails). Kernels run with numpy; ``noop`` (:data:`NOOP`) does nothing, so that a
launch of it costs only the host work around it.

Used by tests/deploy (test_cupy_deploy.py, test_cupy_fastpath.py, through the ``cp`` fixture),
by benchmarks/cupy_hook_overhead.py (kernforge's host time per hooked launch) and by
``python -m kernforge.testing.fakecupy`` (the deployment overhead table of
kernforge.deploy.overhead on this stand-in). The real thing is tests/deploy/test_deploy_gpu.py.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np

from ..backends import base, cupy_hooks
from ..backends.cuda import KNOBS
from ..backends.null import NullBackend
from ..backends.signature import parse_signature
from ..core import KernelSource, LaunchConfig, LaunchError, Param, Variant

SRC = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) { }
template <typename T>
__global__ void axpy(const T* x, T* y, T a, long long n) { }
"""
LOWERED = {"axpy<float>": "_Z4axpyIfEvPKT_PS0_S0_x"}
NOOP = r"""
extern "C" __global__ void noop(const float* x, float* y, float a, int n) { }
"""


def _scale(args: tuple[Any, ...], shift: float = 0.0) -> None:
    x, y, a, n = args
    y[:n] = np.float32(a) * x[:n]
    if shift:  # (not +0.0 either: the sign of a zero product shows)
        y[:n] += np.float32(shift)


class FakeRawKernel:
    def __init__(self, code: str, name: str, options: tuple = (), backend: str = "nvrtc",
                 **kw: Any) -> None:
        self.code, self.name, self.options, self.backend = code, name, options, backend

    def __call__(self, grid: Any, block: Any, args: tuple, **kwargs: Any) -> None:
        if self.name == "scale":
            _scale(args)
        elif self.name == "noop":
            pass
        else:
            x, y, a, n = args
            y[:n] += a * x[:n]


class FakeRawModule:
    def __init__(self, *, code: str, options: tuple = (), name_expressions: Any = None) -> None:
        self.code, self.options = code, options
        self.name_expressions = tuple(name_expressions) if name_expressions else None

    def get_function(self, name: str) -> FakeRawKernel:
        return FakeRawKernel(self.code, LOWERED.get(name, name), self.options)


class FakeCuda(NullBackend):
    """Host memory, the cuda knobs; a compiled kernel adds the #define SHIFT to its output."""

    name = "cuda"
    language = "cuda"
    deploy_keys = ("device", "arch")
    launches: ClassVar[list[tuple[str, LaunchConfig]]] = []

    def knobs(self):  # type: ignore[no-untyped-def]
        return KNOBS

    def identity(self) -> dict[str, Any]:
        return {"device": "fake gpu", "arch": "sm_00", "driver": 1}

    def parse_signature(self, source: KernelSource, defines: Any = None) -> tuple[Param, ...]:
        return parse_signature(source, substitutions=defines)

    def _compile(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[Any, str]:
        shift = float(dict(variant.defines).get("SHIFT", 0))
        fail = "FAIL" in dict(variant.defines)
        entry = variant.source.entry
        if entry == "noop":
            return (lambda args, launch: None), ""

        def run(args: tuple[Any, ...], launch: LaunchConfig) -> None:
            if fail:
                raise LaunchError("the stand-in's launch failed (#define FAIL)")
            FakeCuda.launches.append((entry, launch))
            if entry == "scale":
                _scale(args, shift)
            else:
                x, y, a, n = args
                y[:n] += a * x[:n] + shift
        return run, ""

    def _launch(self, handle: Any, args: Any, launch: LaunchConfig) -> None:
        handle(tuple(args), launch)

    def prepared_launch(self, compiled: Any, launch: LaunchConfig) -> Any:
        """As the cuda backend's: the launch checked once, then one call per launch."""
        self.check_launch(launch)
        handle = compiled.handle

        def fire(args: Any) -> None:
            handle(tuple(args), launch)

        return fire


def fake_module() -> types.ModuleType:
    fake: Any = types.ModuleType("cupy")
    fake.RawKernel, fake.RawModule, fake.ndarray = FakeRawKernel, FakeRawModule, np.ndarray
    fake.arange, fake.zeros_like, fake.float32 = np.arange, np.zeros_like, np.float32
    fake.zeros = np.zeros
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        deviceSynchronize=lambda: None, getDeviceCount=lambda: 1))
    return fake


@contextmanager
def standing_in() -> Iterator[types.ModuleType]:
    """The stand-in as ``cupy`` and the ``cuda`` backend, the hooks installed (outside
    pytest; the tests use the ``cp`` fixture of test_cupy_deploy.py)."""
    saved_module = sys.modules.get("cupy")
    saved_backend = base._instances.get("cuda")
    fake = sys.modules["cupy"] = fake_module()
    base._instances["cuda"] = FakeCuda()
    cupy_hooks.install()
    try:
        yield fake
    finally:
        cupy_hooks.uninstall()
        sys.modules.pop("cupy", None)
        if saved_module is not None:
            sys.modules["cupy"] = saved_module
        base._instances.pop("cuda", None)
        if saved_backend is not None:
            base._instances["cuda"] = saved_backend


def main() -> int:
    """The deployment overhead table on the CuPy path of this stand-in (host time only)."""
    import argparse

    from ..deploy.overhead import measure_overhead

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--no-cache", action="store_true")
    args = ap.parse_args()
    with standing_in():
        table = measure_overhead("cuda", launches=args.launches, batches=args.batches,
                                 cache=not args.no_cache)
    print("\n".join(table.lines()).replace("cuda backend", "cuda backend on the CuPy stand-in"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
