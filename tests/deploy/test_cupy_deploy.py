"""Deployment of CuPy RawKernel / RawModule kernels, on a fake ``cupy`` module (no GPU).

The fake (kernforge.testing.fakecupy, the ``cp`` fixture of conftest.py) has CuPy's Python surface (as in
tests/backends/test_cupy_hooks.py) and runs kernels with numpy; the ``cuda`` backend instance is
a host fake with the cuda knobs whose compiled "kernels" add the tuned ``#define SHIFT`` to the
output, so the output shows which ran. The real thing is tests/deploy/test_deploy_gpu.py.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge import deploy
from kernforge.backends import base, cupy_hooks
from kernforge.core import KernelSource, LaunchConfig, Variant
from kernforge.deploy import DeploySpec, entry_from_recording
from kernforge.record import load_recording, record
from kernforge.testing.fakecupy import SRC, FakeCuda


def _scale_app(cp: Any, n: int = 8, block: int = 4) -> np.ndarray:
    k = cp.RawKernel(SRC, "scale", options=("-std=c++17",))
    y = np.zeros(n, np.float32)
    k(((n + block - 1) // block,), (block,), (np.arange(n, dtype=np.float32), y,
                                              np.float32(2), n))
    return y


def _tuned_spec(tmp_path: Path, cp: Any, **overrides: Any) -> DeploySpec:
    with record(tmp_path / "rec") as rec:
        _scale_app(cp)
    r = load_recording(rec.paths[0])
    variant = r.variant.with_(**overrides)
    return DeploySpec((entry_from_recording(r, variant, baseline_s=2.0, tuned_s=1.0,
                                            speedup=2.0, speedup_ci=None),))


def test_raw_kernel_is_replaced_with_the_entry_geometry(cp: Any, tmp_path: Path) -> None:
    plain = _scale_app(cp)
    spec = _tuned_spec(tmp_path, cp, defines={"SHIFT": "100"},
                       launch=LaunchConfig((1, 1, 1), (8, 1, 1)))
    with deploy.use(spec, cupy=False):
        tuned = _scale_app(cp)
        other = _scale_app(cp, n=16)  # another problem: the original
    np.testing.assert_array_equal(tuned, plain + 100)
    np.testing.assert_array_equal(other, 2 * np.arange(16, dtype=np.float32))
    assert FakeCuda.launches == [("scale", LaunchConfig((1, 1, 1), (8, 1, 1)))]
    counts = deploy.report().kernels["scale"]
    assert (counts.replaced, counts.fallback) == (1, 1)


def test_other_launch_geometry_runs_the_original(cp: Any, tmp_path: Path) -> None:
    spec = _tuned_spec(tmp_path, cp, defines={"SHIFT": "100"})
    with deploy.use(spec, cupy=False):
        y = _scale_app(cp, block=8)
    np.testing.assert_array_equal(y, 2 * np.arange(8, dtype=np.float32))
    assert deploy.report().kernels["scale"].reasons == {"problem mismatch": 1}


def test_module_template_is_replaced(cp: Any, tmp_path: Path) -> None:
    def app() -> np.ndarray:
        mod = cp.RawModule(code=SRC, name_expressions=["axpy<float>"])
        f = mod.get_function("axpy<float>")
        y = np.ones(4, np.float32)
        f((1,), (4,), (np.arange(4, dtype=np.float32), y, np.float32(3), 4))
        return y

    with record(tmp_path / "rec") as rec:
        plain = app()
    r = load_recording(rec.paths[0])
    assert r.options.get("name_expression") == "axpy<float>"
    entry = entry_from_recording(r, r.variant.with_(defines={"SHIFT": "10"}), baseline_s=2.0,
                                 tuned_s=1.0, speedup=2.0, speedup_ci=None)
    assert entry.kernel.name_expression == "axpy<float>"
    with deploy.use(DeploySpec((entry,)), cupy=False):
        tuned = app()
    np.testing.assert_array_equal(tuned, plain + 10)
    assert deploy.report().kernels["axpy<float>"].replaced == 1


def test_device_mismatch_and_hooks_are_untouched(cp: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _tuned_spec(tmp_path, cp, defines={"SHIFT": "100"})
    monkeypatch.setattr(FakeCuda, "identity", lambda self: {"device": "fake gpu",
                                                            "arch": "sm_99"})
    base._instances["cuda"] = FakeCuda()
    with deploy.use(spec):  # the hooks were installed by the fixture: not removed here
        y = _scale_app(cp)
    assert cupy_hooks.installed()
    np.testing.assert_array_equal(y, 2 * np.arange(8, dtype=np.float32))
    assert deploy.report().kernels["scale"].reasons == {"device mismatch": 1}


def test_one_raw_kernel_launched_repeatedly_with_several_problems(cp: Any,
                                                                  tmp_path: Path) -> None:
    """The hooked kernel keeps its description and the deployment its decisions: the same
    kernel object alternating between the tuned problem and others is matched every time."""
    spec = _tuned_spec(tmp_path, cp, defines={"SHIFT": "100"})
    k = cp.RawKernel(SRC, "scale", options=("-std=c++17",))
    with deploy.use(spec, cupy=False):
        for n in (8, 16, 8, 8, 16, 8):
            y = np.zeros(n, np.float32)
            k(((n + 3) // 4,), (4,), (np.arange(n, dtype=np.float32), y, np.float32(2), n))
            shift = 100 if n == 8 else 0
            np.testing.assert_array_equal(y, 2 * np.arange(n, dtype=np.float32) + shift)
        y = np.zeros(8, np.float32)
        k((2,), (4,), (np.arange(8, dtype=np.float32), y, np.float32(2), 7))  # another n
        np.testing.assert_array_equal(y[:7], 2 * np.arange(7, dtype=np.float32))
    counts = deploy.report().kernels["scale"]
    assert (counts.replaced, counts.fallback) == (4, 3)
    assert counts.reasons == {"problem mismatch": 3}


def test_overhead_measurement_on_the_cupy_path(cp: Any) -> None:
    """The GPU measurement's modes through the CuPy hooks (the fake runs them on the host):
    the plain mode is CuPy's own kernel, the others the hooked one, and the replaced mode runs
    the tuned kernel every time (else the measurement raises)."""
    from kernforge.deploy.overhead import HOOKS, PLAIN, REPLACED, measure_overhead

    table = measure_overhead("cuda", launches=5, batches=2)
    assert list(table.times)[:2] == [PLAIN, HOOKS] and len(table.times) == 6
    assert table.device == "fake gpu" and table.per_launch_s == table.overhead(REPLACED)
    tuned = [launch for name, launch in FakeCuda.launches if name == "scale"]
    assert len(tuned) >= 2 * 5 and tuned[0] == LaunchConfig((1, 1, 1), (256, 1, 1))
    assert cupy_hooks.installed()  # installed by the fixture: left installed


def test_cuda_prepared_launch_checks_once_and_launches_like_launch() -> None:
    """CudaBackend.prepared_launch (what a deployment's fast launch calls on the GPU) on a
    host stand-in for CuPy's function: the checks of ``_launch`` at preparation, then
    CuPy's call with the same arguments per launch, driver errors as LaunchError."""
    from kernforge.backends.base import Compiled
    from kernforge.backends.cuda import CudaBackend, CudaHandle
    from kernforge.core import ConfigError, LaunchError

    class DriverError(Exception):
        pass

    calls: list[tuple[Any, ...]] = []

    class Function:
        max_dynamic_shared_size_bytes = 0

        def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0) -> None:
            if args and args[0] == "fail":
                raise DriverError("CUDA_ERROR_LAUNCH_FAILED")
            calls.append((grid, block, args, shared_mem))

    backend = CudaBackend.__new__(CudaBackend)  # no GPU here: CuPy's namespace stood in
    backend.cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        driver=types.SimpleNamespace(CUDADriverError=DriverError)))
    backend.props = {"maxThreadsPerBlock": 1024, "sharedMemPerBlockOptin": 227 * 1024}
    variant = Variant(KernelSource(SRC, "scale", "cuda"))

    def compiled(block: Any = None, max_threads: int = 1024) -> Compiled:
        return Compiled(variant, (), CudaHandle(Function(), None, block, max_threads, 16, 0))

    big = LaunchConfig((4, 1, 1), (128, 1, 1), 64 * 1024)
    c = compiled()
    fire = backend.prepared_launch(c, big)
    assert c.handle.function.max_dynamic_shared_size_bytes == 64 * 1024  # set once, here
    fire([1, 2.0])
    fire((3, 4.0))
    backend._launch(c.handle, [5, 6.0], big)
    assert calls == [((4, 1, 1), (128, 1, 1), (1, 2.0), 65536),
                     ((4, 1, 1), (128, 1, 1), (3, 4.0), 65536),
                     ((4, 1, 1), (128, 1, 1), (5, 6.0), 65536)]
    with pytest.raises(LaunchError, match="CUDA_ERROR_LAUNCH_FAILED"):
        fire(["fail"])
    with pytest.raises(ConfigError, match="2048 threads"):
        backend.prepared_launch(c, LaunchConfig(block=(2048, 1, 1)))
    with pytest.raises(ConfigError, match="compiled for block"):
        backend.prepared_launch(compiled(block=(64, 1, 1)), big)
    with pytest.raises(LaunchError, match="limit of 64"):
        backend.prepared_launch(compiled(max_threads=64), big)
