"""GPU: record examples/heat3d_cupy.py, tune two kernels by hand (a RawKernel re-blocked, a
RawModule template with a register limit), export, and run the unchanged application with the
spec: identical checksum, and the report shows the replacements.

Run on the GPU machine: ``pytest -m gpu tests/deploy``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import resign, write_result

from kernforge.core import BackendUnavailableError

# the deploying process re-verifies each tuned variant on its first launch (deploy/reverify.py)
pytestmark = [pytest.mark.gpu, pytest.mark.reverify]

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "heat3d_cupy.py"
APP_ARGS = ["--n", "64", "--steps", "4"]
SQ = "sq_diff_partial<float, 256>"


def kf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def checksum(stdout: str) -> str:
    lines = [ln.split("checksum=")[1] for ln in stdout.splitlines() if "checksum=" in ln]
    assert len(lines) == 1, stdout
    return lines[0]


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kernforge.backends import get_backend
    from kernforge.core import LaunchConfig
    from kernforge.record import load_recording
    from kernforge.replay import compare

    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    tmp = tmp_path_factory.mktemp("deploy-gpu")
    r = kf("record", "-o", str(tmp / "rec"), "--max-instances", "1", "--", "python",
           str(APP), *APP_ARGS, cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    stencil = load_recording(tmp / "rec" / "heat_stencil-0")
    sq = load_recording(tmp / "rec" / "sq_diff_partial-0")
    assert sq.options.get("name_expression") == SQ
    reblocked = stencil.launch.reblocked((64, 4, 1))
    tuned = {stencil.name: (stencil, {"launch": reblocked.to_json()}),
             sq.name: (sq, {"options": {"maxrregcount": 64}})}
    for unit, (rec, variant) in tuned.items():
        launch = variant.get("launch")
        overrides = {**variant, "launch": LaunchConfig.from_json(launch)} if launch else variant
        ab = compare(rec, {}, overrides, passes=3, per_pass=3)
        # speedup and interval stated (significant), so that export takes the entry whatever
        # the measured ratio of these hand-made variants; the medians are measured
        path = write_result(tmp / "run" / unit, rec, variant, speedup=2.0)
        resign(path, baseline_median_s=ab.median_a, best_median_s=ab.median_b)
    out = tmp / "deploy.json"
    r = kf("export", str(tmp / "run"), "-o", str(out), "--min-speedup", "0", cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 tuned kernel launch(es) exported" in r.stdout
    return out


@pytest.fixture
def hooked_cupy() -> Iterator[Any]:
    """CuPy on a GPU with kernforge's CuPy hooks installed (skips without one)."""
    from kernforge.backends import cupy_hooks, get_backend

    cp = pytest.importorskip("cupy")
    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    installed = cupy_hooks.install()
    try:
        yield cp
    finally:
        if installed:
            cupy_hooks.uninstall()


def test_app_with_spec_identical_and_replaced(spec: Path, tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, str(APP), *APP_ARGS], capture_output=True,
                           text=True, timeout=600, check=False)
    assert plain.returncode == 0, plain.stderr
    report = tmp_path / "report.json"
    r = kf("run", "--deploy", str(spec), "--report", str(report), "--", "python", str(APP),
           *APP_ARGS, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert checksum(r.stdout) == checksum(plain.stdout), r.stderr
    kernels = json.loads(report.read_text())["kernels"]
    # the first launch ran the original, compared with the tuned variant: the re-verification
    # run, counted apart from replacements and fallbacks
    first = {"replaced": 3, "verified": 1, "fallback": 0, "reasons": {}}
    assert kernels["heat_stencil"] == first, r.stderr
    assert kernels[SQ] == first, r.stderr
    assert kernels["apply_boundary"]["replaced"] == 0
    assert kernels["apply_boundary"]["reasons"] == {"not in the spec": 12}
    assert "'block': [64, 4, 1]" in r.stderr  # the tuned geometry, logged once
    assert r.stderr.count("tuned variant re-verified against the original kernel") == 2
    print(r.stderr)


SCALE = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def test_overhead_per_launch(tmp_path: Path, hooked_cupy: Any) -> None:
    """Host time per launch of a tiny RawKernel: hooks without a deployment, a deployment that
    does not list the kernel, and one that replaces it (printed; run with -s to see)."""
    import time

    import numpy as np

    from kernforge import deploy
    from kernforge.deploy import DeploySpec, entry_from_recording
    from kernforge.record import load_recording, record

    cp = hooked_cupy
    k = cp.RawKernel(SCALE, "scale")
    x = cp.arange(256, dtype=cp.float32)
    y = cp.zeros_like(x)
    args = (x, y, np.float32(2), 256)
    with record(tmp_path) as rec:
        k((1,), (256,), args)
    r = load_recording(rec.paths[0])
    entry = entry_from_recording(r, r.variant.with_(options={"maxrregcount": 32}),
                                 baseline_s=1.0, tuned_s=1.0, speedup=1.0,
                                 speedup_ci=None)

    def per_call(n: int = 3000) -> float:
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            k((1,), (256,), args)
        cp.cuda.runtime.deviceSynchronize()
        return (time.perf_counter() - t0) / n

    per_call(200)
    plain = min(per_call() for _ in range(3))
    with deploy.use(DeploySpec(()), cupy=False):
        per_call(200)
        missing = min(per_call() for _ in range(3))
    with deploy.use(DeploySpec((entry,)), cupy=False):
        per_call(200)
        replaced = min(per_call() for _ in range(3))
    counts = deploy.report().kernels["scale"]
    print(f"\ncounts of the replaced mode: {counts}")
    # the first launch re-verified the entry (the original ran, compared): not a fallback
    assert counts.replaced > 0 and counts.verified == 1 and counts.fallback == 0, counts
    np.testing.assert_array_equal(cp.asnumpy(y), 2 * np.arange(256, dtype=np.float32))
    print(f"\nper launch: no deployment {plain * 1e6:.2f} us, kernel not in the spec "
          f"{missing * 1e6:.2f} us, replaced {replaced * 1e6:.2f} us")


def test_routed_launches_agree_with_the_event_path_on_the_gpu(tmp_path: Path,
                                                              hooked_cupy: Any) -> None:
    """route_check.run_both on CuPy: a deployment with routes and the same one seen only
    through events give the same outputs and report on launches like the recorded one and
    differing in one property (the stand-in version: tests/deploy/test_cupy_fastpath.py)."""
    from route_check import run_both

    cp = hooked_cupy
    routed, plain, dep = run_both(cp, tmp_path, cp.cuda.runtime.deviceSynchronize, cp.asnumpy)
    counts = routed[-1]["scale"]
    print(f"\nrouted {dep.routed} launch(es), {dep.direct} in one pass; with routes {counts}; "
          f"events only {plain[-1]}")
    differ = [i for i, (a, b) in enumerate(zip(routed, plain)) if a != b]
    first = differ[0] if differ else -1
    assert routed == plain, (f"{len(routed)} vs {len(plain)} outcomes; launches {differ[:10]} "
                             f"differ, first: routed {str(routed[first])[:300]}, events "
                             f"{str(plain[first])[:300]}")
    assert dep.routed > 10 and counts.replaced > 10 and counts.fallback > 10, counts
    assert dep.direct > 5, dep.direct  # the one-pass conversion took CuPy's arrays
    assert "re-verification" not in counts.reasons, counts  # run_both turns it off


# a "tuned" heat_stencil with a bug: every cell whose Laplacian is not zero changes, on the
# first step already. (fmad=false, the variant this test used first, is no such bug on this
# application: the first step's field is 0 and 1 only, where fused and unfused u + alpha * lap
# round alike in float32, so that launch agrees bit for bit and the re-verification, made on
# the first launch only, passes; the later steps then differ. docs/deploy.md states this.)
CORRECT = "un[c] = u[c] + alpha * lap;"
WRONG = "un[c] = u[c] + alpha * lap * (real_t)1.001;"


def test_a_wrong_variant_is_refused_on_its_first_launch(tmp_path: Path) -> None:
    """A signed, exported entry whose variant changes the arithmetic (code with a bug): the
    deploying process compares it with the original kernel on a copy of the first launch's
    CuPy arrays, refuses it, and the application prints its plain checksum."""
    from kernforge.backends import get_backend
    from kernforge.record import load_recording

    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    r = kf("record", "-o", "rec", "--max-instances", "1", "--", "python", str(APP), *APP_ARGS,
           cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    stencil = load_recording(tmp_path / "rec" / "heat_stencil-0")
    assert CORRECT in stencil.source.code, stencil.source.code
    write_result(tmp_path / "run" / stencil.name, stencil,
                 {"code": stencil.source.code.replace(CORRECT, WRONG)}, speedup=2.0)
    r = kf("export", "run", "-o", "spec.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    entries = json.loads((tmp_path / "spec.json").read_text())["entries"]
    assert [e["variant"]["code"] is not None for e in entries] == [True], r.stdout
    plain = subprocess.run([sys.executable, str(APP), *APP_ARGS], capture_output=True,
                           text=True, timeout=600, check=True)
    r = kf("run", "--deploy", "spec.json", "--report", "report.json", "--", "python", str(APP),
           *APP_ARGS, cwd=tmp_path)
    print(r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs differ from the original kernel's" in r.stderr, r.stderr
    assert checksum(r.stdout) == checksum(plain.stdout), r.stderr
    stencil_counts = json.loads((tmp_path / "report.json").read_text())["kernels"]["heat_stencil"]
    assert stencil_counts == {"replaced": 0, "verified": 0, "fallback": 4,
                              "reasons": {"re-verification": 4}}, stencil_counts
