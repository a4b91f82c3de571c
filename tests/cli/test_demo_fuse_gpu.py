"""GPU: ``kernforge demo --backend cuda`` with its fusion stage (pipeline/demo_fuse.py): the
example's time loop recorded as a sequence unit, fused, and when a fused spec passed in replay
the program run plain, with the one-launch deployment (when the demo made one) and fused, each
in a warm process, interleaved; what the stage did is one line of the output and
``summary.json``'s ``fusion``. With ``--diag-every 1`` (a reduction in every step) nothing is
fused, and the line says why.

Run on the GPU machine: ``pytest -m gpu tests/cli/test_demo_fuse_gpu.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernforge.core import BackendUnavailableError

pytestmark = pytest.mark.gpu

SMALL = ["--trials", "2", "--repeat", "3", "--iterations", "2", "--inner-trials", "1",
         "--confirm-rounds", "0"]


def _demo(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    from kernforge.backends import get_backend

    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "kernforge", "demo", "--backend", "cuda",
                        "--out", str(out), *SMALL, *extra], cwd=tmp_path, capture_output=True,
                       text=True, timeout=1800, check=False)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads((out / "summary.json").read_text())


def test_the_demo_fuses_its_time_loop_or_says_why(tmp_path: Path) -> None:
    r, summary = _demo(tmp_path, "--n", "128", "--e2e-steps", "500", "--diag-every", "0",
                       "--fuse-steps", "3,5,7")
    f = summary["fusion"]
    flat = " ".join(r.stdout.split())
    assert f is not None and f["unit"] is not None, f  # the loop was recorded
    if f["spec"] is None:  # fused in replay, but below the gate: the reason says so
        assert f["reason"].startswith("not fused: "), f
        assert f"7. fusion: nothing fused: {' '.join(f['reason'].split())}" in flat
        return
    assert f["steps"] in (3, 5, 7) and f["replay_speedup"] > 1.0, f
    plain = f["vs_plain"]
    assert plain is not None and len(plain["ratios"]) == 8, f
    assert f["fused_groups"] > 0 and f["output_check"], f  # the interposer fused launches
    assert (summary["end_to_end"] is None) == (f["vs_one_launch"] is None), f
    assert f"7. fused {f['steps']} steps per launch: " in flat
    if f["deployed"]:
        assert plain["speed"]["verdict"] == "faster" and f"deployed {f['spec']}" in flat
    else:
        assert " ".join(f["reason"].split()) in flat


def test_a_step_with_a_reduction_is_not_fused(tmp_path: Path) -> None:
    r, summary = _demo(tmp_path, "--n", "64", "--steps", "6", "--rounds", "1",
                       "--fuse-steps", "3")  # the example's default: a reduction every step
    f = summary["fusion"]
    assert f is not None and not f["deployed"] and f["spec"] is None, f
    assert "7. fusion: nothing fused: not fused: " in r.stdout, r.stdout
