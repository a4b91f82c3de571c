"""GPU: ``kernforge demo`` with no ``--backend`` picks the CuPy example and runs every step on
the cuda backend (record, replay, tune, the wrong variant, evolve with the offline proposer,
validate, the deployment overhead measured, export of the winners worth it, the deployed
application run and end-to-end speedup, or "nothing deployed"), with small settings.

Run on the GPU machine: ``pytest -m gpu tests/cli/test_demo_gpu.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernforge.core import BackendUnavailableError

pytestmark = pytest.mark.gpu

KERNELS = {"heat_stencil", "apply_boundary", "sq_diff_partial", "sum_partials"}
FINAL = {"OK", "REJECTED", "UNCHANGED", "NO_VALID_PROGRAM"}


def test_demo_picks_the_cupy_example_and_runs_end_to_end(tmp_path: Path) -> None:
    from kernforge.backends import get_backend

    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "kernforge", "demo", "--n", "64", "--steps", "6",
                        "--trials", "3", "--repeat", "3", "--iterations", "3",
                        "--inner-trials", "1", "--rounds", "1", "--out", str(out)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    said = r.stdout + r.stderr
    print(r.stdout)
    assert r.returncode == 0, said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "cuda" and summary["app"] == "heat3d_cupy.py", summary
    assert summary["app_status"] == 0
    base = summary["baseline"]
    assert {b["unit"].rsplit("-", 1)[0] for b in base} == KERNELS
    assert all(b["status"] == "OK" for b in base), base
    assert summary["wrong"]["status"] == "WRONG_RESULT"  # fmad=false on heat_stencil
    assert summary["tuned"]["speedup_interleaved"] > 0
    assert (Path(summary["tuned"]["result"]).parent / "history.png").is_file()
    evolved = summary["evolve"]
    assert {e["kernel"] for e in evolved} == KERNELS
    for e in evolved:
        assert e["status"] in FINAL, e
        assert Path(e["report"]).is_file() and Path(e["result"]).is_file()
    e2e = summary["end_to_end"]
    status = summary["end_to_end_status"]
    if status == "no verified speedup above 1":  # the demo says so, and deploys nothing
        assert e2e is None and "no verified speedup above 1 to deploy" in r.stdout, said
        return
    overhead = summary["overhead"]  # measured on the GPU through the CuPy hooks
    assert overhead["backend"] == "cuda" and summary["overhead_s"] is not None, summary
    said_flat = " ".join(r.stdout.split())
    for skipped in summary["not_deployed"]:
        assert " ".join(skipped["reason"].split()) in said_flat, said
    if status == "nothing deployed":  # every winner saves less than a replaced launch costs
        assert e2e is None and summary["not_deployed"], summary
        assert "end to end: nothing deployed" in said_flat, said
        assert not (out / "deploy.json").exists()
        return
    assert e2e["outputs_identical"], e2e  # the CuPy example prints checksum=...
    assert e2e["launches_replaced"] > 0 and e2e["speedup"] > 0, e2e
    assert (out / "deploy.json").is_file()
    assert "end-to-end speedup" in r.stdout, said
