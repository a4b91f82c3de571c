"""The scripts behind the verdict pages (docs/benchmarks/self-compare-cpu.md,
roofline-seed-cpu.md) still run on the CPU and still hold their claims on a few runs: the same
kernel against itself is never significant, the 1.2x variant is never called slower, and
apply_boundary's unmodified seed is never refused by the roofline gate. The pages' figures come
from 50-200 runs; these keep the scripts from rotting between those runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _run(script: str, *args: str, tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    fig = tmp_path / f"{script}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(fig)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                       check=False)
    assert fig.is_file(), p.stdout + p.stderr
    return p.returncode, p.stdout, json.loads(fig.read_text())


@pytest.mark.slow
def test_self_compare_runs_and_no_self_comparison_is_significant(tmp_path: Path) -> None:
    rc, out, data = _run("self_compare.py", "--runs", "4", "--max-load", "1",
                         tmp_path=tmp_path)
    runs = data["raw"]["runs"]
    assert len(runs) == 4 and {r["load"] for r in runs} == {0, 1}
    assert {r["verdict"] for r in runs} <= {"faster", "not faster", "inconclusive"}
    assert all(r["reason"].startswith(r["verdict"]) for r in runs)  # a reason, in words
    assert not any(r["verdict"] == "faster" or r["slower"] for r in runs), out
    assert rc == 0 and "significant verdicts: 0 of 4" in out and data["figure"]["ok"]
    assert data["provenance"]["command"][1].endswith("self_compare.py")


@pytest.mark.slow
def test_self_compare_never_calls_the_faster_variant_slower(tmp_path: Path) -> None:
    rc, out, data = _run("self_compare.py", "--mode", "faster", "--runs", "2", "--max-load",
                         "1", "--n", str(1 << 20), tmp_path=tmp_path)
    runs = data["raw"]["runs"]
    assert len(runs) == 2
    assert not any(r["slower"] for r in runs), out  # found faster or not, never slower
    assert "quiet runs found faster" in out and rc in (0, 1)


@pytest.mark.slow
def test_apply_boundarys_seed_is_not_refused_by_the_roofline_gate(tmp_path: Path) -> None:
    rc, out, data = _run("roofline_seed.py", "--runs", "2", "--max-load", "1",
                         tmp_path=tmp_path)
    runs = data["raw"]["runs"]
    assert len(runs) == 2 and data["figure"]["unit"].startswith("apply_boundary")
    assert not any(r["outcome"] == "roofline" for r in runs), out
    assert rc == 0 and "roofline refusals of the unmodified seed: 0 of 2" in out
