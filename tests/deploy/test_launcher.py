"""The fast launch of a cached decision (deploy/launcher.py), on C kernels built by the host
compiler: it launches exactly what ``Backend.launch`` would (or leaves the launch to it), a
repeated launch skips the full path, and the deployed application sees the same results and
errors with and without the decision cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge import deploy
from kernforge.backends import Kernel, events, get_backend
from kernforge.backends.cpu import CpuBackend
from kernforge.core import KernforgeError, LaunchConfig
from kernforge.deploy import Deployment, DeploySpec
from kernforge.deploy.launcher import prepare
from kernforge.record import load_recording, record

# out[i] = a * x[i] + b + BIAS; a double, b a float, n an int
AFFINE = """
#ifndef BIAS
#define BIAS 0
#endif
void affine(const double *restrict x, double *restrict out, double a, float b, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = a * x[i] + b + BIAS;
}
"""
N = 6


@pytest.fixture(autouse=True)
def _no_deployment_left() -> Iterator[None]:
    yield
    deploy.stop()
    assert events.substituter() is None


def _kernel() -> Kernel:
    return Kernel(AFFINE, "affine", backend="cpu")


def _spec(tmp_path: Path, **overrides: Any) -> DeploySpec:
    with record(tmp_path / "rec") as rec:
        _kernel()(np.arange(float(N)), np.zeros(N), 2.0, np.float32(0.5), N, threads=1)
    r = load_recording(rec.paths[0])
    variant = r.variant.with_(**(overrides or {"defines": {"BIAS": 100}}))
    return DeploySpec((deploy.entry_from_recording(r, variant, baseline_s=2.0, tuned_s=1.0,
                                                   speedup=2.0, speedup_ci=None),))


def _variations() -> list[tuple[Any, ...]]:
    """Arguments with the recorded key (arrays float64[6], n == 6 as an int), varying only
    what the key does not hold: scalar types and values, contiguity, writeability."""
    x, y = np.arange(float(N)), np.zeros(N)
    strided = np.arange(2.0 * N)[::2]
    frozen = np.zeros(N)
    frozen.flags.writeable = False
    return [(x, y, 2.0, 0.5, N), (x, y, 3.0, np.float32(0.25), N),
            (x, y, np.float64(-1.5), -0.0, N), (x, y, 2, 0.5, N), (x, y, True, 0.5, N),
            (x, y, 2.0, 1e39, N), (x, y, 2.0, float("nan"), N), (x, y, 2.0, float("inf"), N),
            (x, y, 2.0, 3.4028234663852886e38, N), (x, y, 2.0, np.float64(0.5), N),
            (strided, y, 2.0, 0.5, N), (x, frozen, 2.0, 0.5, N), (x, y, "2", 0.5, N),
            (x, y, np.float32(2.0), 0.5, N), (x, y, 0.1, 0.1, N)]


def test_fast_launch_equals_the_full_launch() -> None:
    backend = get_backend("cpu")
    compiled = backend.compile(_kernel().variant.with_(defines={"BIAS": 100}))
    launch = LaunchConfig(threads=1)
    first = (np.arange(float(N)), np.zeros(N), 2.0, 0.5, N)
    backend.launch(compiled, first, launch)
    fast = prepare(backend, compiled, launch, first, fixed=frozenset({4}),
                   keyed=frozenset({4}))
    taken = 0
    for args in _variations():
        try:
            backend.launch(compiled, args, launch)
            want: Any = args[1].copy()
        except KernforgeError as exc:
            want = type(exc).__name__
        out = np.full(N, -7.0)
        args = (args[0], out if args[1].flags.writeable else args[1], *args[2:])
        if fast(args):
            taken += 1
            assert not isinstance(want, str), f"{args[2:]}: the fast launch took what " \
                                              f"Backend.launch refuses ({want})"
            np.testing.assert_array_equal(out, want)
            assert np.signbit(out).tolist() == np.signbit(want).tolist()
    assert taken == 5  # Python floats (in range) and numpy scalars of the declared types


def test_repeated_launches_take_the_fast_path(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    full: list[int] = []
    real = CpuBackend.launch

    def counting(self: CpuBackend, compiled: Any, args: Any, launch: Any = None) -> None:
        full.append(int(dict(compiled.variant.defines).get("BIAS", 0)))
        real(self, compiled, args, launch)

    spec = _spec(tmp_path)
    monkeypatch.setattr(CpuBackend, "launch", counting)
    k = _kernel()
    x = np.arange(float(N))
    with deploy.use(spec):
        for i in range(5):
            y = np.zeros(N)
            k(x, y, float(i), 0.5, N, threads=1)
            np.testing.assert_array_equal(y, i * x + 100.5)
    assert full == [100]  # the first launch in full, the next four through the fast launch
    assert deploy.report().kernels["affine"].replaced == 5


def _run(dep: Deployment, launches: list[tuple[Any, ...]]) -> list[Any]:
    k = _kernel()
    out: list[Any] = []
    with dep.start(cupy=False):
        for args in launches:
            y = np.zeros(N) if args[1].flags.writeable else args[1]
            try:
                k(args[0], y, *args[2:], threads=1)
                out.append(y.tobytes())  # NaN equals NaN here
            except KernforgeError as exc:  # the original's own error, compared
                out.append(type(exc).__name__)
            out.append(dep.report().to_json()["kernels"])
    return out


@pytest.mark.parametrize("overrides", [{}, {"constants": {"a": 2.0}}])
def test_deployed_results_equal_with_and_without_the_cache(tmp_path: Path,
                                                           overrides: dict[str, Any]) -> None:
    spec = _spec(tmp_path, defines={"BIAS": 100}, **overrides)
    good = _variations()[:4] + _variations()[9:10]
    launches = good * 3 + _variations() + good * 2  # a refused launch disables the entry
    cached = _run(Deployment(spec), launches)
    uncached = _run(Deployment(spec, cache=False), launches)
    assert cached == uncached
    assert cached[1]["affine"]["replaced"] >= 1
