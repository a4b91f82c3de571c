"""Recording an unmodified CuPy application (examples/heat3d_cupy.py) and replaying its kernels'
units bitwise on the GPU."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from kernforge import Status, record, replay
from kernforge.backends import cupy_hooks, get_backend
from kernforge.core import BackendUnavailableError
from kernforge.record import find_recordings, install_cupy_hooks, load_recording
from kernforge.record.native_format import is_native_unit

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "heat3d_cupy.py"
KERNELS = ("apply_boundary", "heat_stencil", "sq_diff_partial", "sum_partials")


@pytest.fixture(autouse=True)
def _gpu() -> None:
    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:  # pragma: no cover - only without a GPU
        pytest.skip(f"no cuda backend here: {exc}")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _checksum(stdout: str) -> str:
    m = re.search(r"change=\S+ mean=\S+ checksum=\w+", stdout)
    assert m, stdout
    return m.group(0)


def test_record_heat3d_cupy_and_replay_every_unit_bitwise(tmp_path: Path) -> None:
    args = [str(EXAMPLE), "--n", "64", "--steps", "4"]
    plain = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                           env=_env(), cwd=ROOT, check=True)
    out = tmp_path / "recs"
    recorded = subprocess.run([sys.executable, "-m", "kernforge", "record", "-o", str(out),
                               "--", "python", *args], capture_output=True, text=True,
                              check=False,
                              env=_env(), cwd=ROOT)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert _checksum(plain.stdout) == _checksum(recorded.stdout)
    units = find_recordings(out)
    names = sorted(p.name for p in units)
    # the example's own kernels, each launch once (by the CuPy hooks, with their source) ...
    ours = [p for p in units if p.name.rsplit("-", 1)[0] in KERNELS]
    assert sorted(p.name for p in ours) == sorted(f"{k}-{i}" for k in KERNELS
                                                  for i in range(4)), names
    # ... and CuPy's own (its CUB reductions, elementwise kernels) by the driver interposer
    assert all(is_native_unit(p) for p in units if p not in ours), names
    for p in ours:
        rec = load_recording(p, verify=True)
        m = replay(rec, warmup=1, repeat=3)
        assert m.status is Status.OK, f"{p.name}: {m.status} {m.message}"
        assert all(c.passed and c.mode == "bitwise" for c in m.checks)
        print(f"{p.name}: OK, median {m.median * 1e6:.1f} us")


def test_record_context_in_process(tmp_path: Path) -> None:
    app = runpy.run_path(str(EXAMPLE), run_name="heat3d_cupy")
    plain, change = app["run"](48, 3)
    expected = (app["checksum"](plain), change)
    install_cupy_hooks()  # kernels created before `with record` are captured too
    try:
        heat = app["Heat3D"]("float64")
        with record(tmp_path, kernels="heat_*", max_instances=None) as rec:
            u, un = app["initial_field"](32, "float64"), app["initial_field"](32, "float64")
            for _ in range(3):
                heat.step(u, un, 0.1, 1.0)
                u, un = un, u
        again, change2 = app["run"](48, 3)
    finally:
        cupy_hooks.uninstall()
    assert (app["checksum"](again), change2) == expected
    assert [p.name for p in rec.paths] == [f"heat_stencil-{i}" for i in range(3)]
    r = load_recording(rec.paths[0])
    assert [a.dtype for a in r.args] == ["float64", "float64", "float64", "int32"]
    for p in rec.paths:
        assert replay(load_recording(p), verify_only=True).status is Status.OK
