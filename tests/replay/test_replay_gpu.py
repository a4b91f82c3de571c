"""GPU replay: record kernforge.Kernel(backend="cuda") launches, replay, verify on the device."""

from __future__ import annotations

import numpy as np
import pytest

import kernforge
from kernforge.backends.fingerprint import host_fingerprint
from kernforge.core import BackendUnavailableError, Status, Tolerance
from kernforge.record import find_recordings, load_recording
from kernforge.replay import compare, prepare, replay

pytestmark = pytest.mark.gpu

STENCIL = r"""
extern "C" __global__ void smooth(const float* __restrict__ u, float* __restrict__ v,
                                  int n, float alpha)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= 0 || i >= n - 1) return;
    float s = u[i - 1] - 2.0f * u[i] + u[i + 1];
    v[i] = u[i] + alpha * s / WEIGHT + sqrtf(fabsf(u[i])) * 1e-3f;
}
"""


@pytest.fixture(scope="module")
def cuda():
    try:
        return kernforge.get_backend("cuda")
    except BackendUnavailableError as exc:  # pragma: no cover - only without a GPU
        pytest.skip(f"no GPU: {exc}")


@pytest.fixture(scope="module")
def recorded(cuda, tmp_path_factory):
    cp = cuda.cp
    n = 1 << 20
    k = kernforge.Kernel(STENCIL, "smooth", backend="cuda", defines={"WEIGHT": "3.0f"})
    u = cp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    v = cp.zeros_like(u)
    root = tmp_path_factory.mktemp("gpu-rec")
    with kernforge.record(root):
        k(u, v, n, 0.25, grid=((n + 255) // 256,), block=(256,))
    return load_recording(find_recordings(root)[0])


def test_device_fingerprint_equals_host(cuda) -> None:
    rng = np.random.default_rng(3)
    for arr in (rng.random(12345).astype(np.float32), rng.random(7).astype(np.float16),
                rng.integers(0, 255, 13, dtype=np.uint8), rng.random((8, 9, 10))):
        assert cuda.fingerprint(cuda.to_device(arr)) == host_fingerprint(arr)


def test_recorded_kernel_replays_bitwise(recorded) -> None:
    m = replay(recorded, repeat=5)
    assert m.status is Status.OK, m.message
    assert len(m.samples) == 5 and 0 < m.median < 0.01
    assert all(c.passed and c.mismatches == 0 for c in m.checks)


def test_fast_math_refused_bitwise_accepted_with_tolerance(recorded) -> None:
    m = replay(recorded, options={"use_fast_math": True}, repeat=2)
    assert m.status is Status.INVALID_CONFIG and "tolerance" in m.message
    m = replay(recorded, options={"use_fast_math": True}, tolerance=Tolerance("norm", tol=1e-5),
               repeat=2)
    assert m.status is Status.OK, m.message
    v = next(c for c in m.checks if c.name == "v")
    assert v.norm_ratio < 1e-5  # the measured error is reported
    print(f"fast-math error on v: {v.describe()}")


def test_wrong_variant_measured_on_host(recorded) -> None:
    m = replay(recorded, defines={"WEIGHT": "2.0f"}, repeat=1)
    assert m.status is Status.WRONG_RESULT
    (bad,) = m.failed_checks
    assert bad.name == "v" and bad.mismatches > 0 and bad.max_abs > 0


def test_device_restore_and_fingerprints_used(recorded) -> None:
    p = prepare(recorded)
    assert p.expected_fp is not None and set(p.expected_fp) == {"u", "v"}
    assert p.written == ("v",)
    p.restore()
    p.run_once()
    assert all(c.passed for c in p.verify())
    p.restore_written()  # v back to its prologue: verification must now fail on v only
    p.backend.synchronize()
    failed = [c.name for c in p.verify() if not c.passed]
    assert failed == ["v"]


def test_launch_knobs_verify(recorded) -> None:
    for opts in ({"launch_bounds_max": 256}, {"specialize_block": True}, {"maxrregcount": 32}):
        m = replay(recorded, options=opts, repeat=2)
        assert m.ok, (opts, m.message)
    consts = {"n": recorded.arg("n").value, "alpha": recorded.arg("alpha").value}
    m = replay(recorded, constants=consts, repeat=2)
    assert m.ok, m.message
    res = compare(recorded, {}, {"options": {"launch_bounds_max": 256}}, passes=3)
    assert 0.5 < res.speedup < 2.0
