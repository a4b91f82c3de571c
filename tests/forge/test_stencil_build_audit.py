"""``kernforge stencil audit``: nvcc against NVRTC builds of table operators, on the host
(NVRTC from the nvidia-cuda-nvrtc wheel of the dev extras, nvcc and ptxas of the toolkit)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CELL = "star_1_t4/1024x1024x32/fp32"


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", "stencil", "audit", *map(str, args)], check=False,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_temporal_operator_differs_between_the_builds(tmp_path: Path) -> None:
    """An operator the bench refuted: 64 registers from nvcc, 76 from NVRTC,
    so two 512-thread blocks per multiprocessor against one."""
    if not (shutil.which("nvcc") and shutil.which("ptxas")):
        pytest.skip("needs the CUDA toolkit's nvcc and ptxas")
    table = json.loads((ROOT / "src/kernforge/stencil/data/matrix.json").read_text())
    table["cells"][CELL] = {**table["cells"][CELL], "design": "temporal", "params": {
        "cx": 2, "cy": 2, "fs": 2, "lz": 30, "pipe": 1, "steps": 4, "tx": 32, "ty": 16}}
    (tmp_path / "m.json").write_text(json.dumps(table))
    res = _run("--table", tmp_path / "m.json", "--cell-ids",
               f"{CELL},star_1/256x256x256/fp32", "--json", tmp_path / "a.json")
    if "libnvrtc not found" in res.stderr:
        pytest.skip("libnvrtc missing: pip install -e '.[dev]'")
    assert res.returncode == 0, res.stderr
    rows = {r["cell"]: r for r in json.loads((tmp_path / "a.json").read_text())["rows"]}
    t = rows[CELL]
    assert t["threads"] == 512 and t["nvcc_registers"] == 64 and t["nvrtc_registers"] == 76
    assert (t["nvcc_blocks_per_sm"], t["nvrtc_blocks_per_sm"]) == (2, 1)
    assert "blocks/SM differ" in res.stdout and "2 entries of 2 operators" in res.stdout


def test_a_missing_nvrtc_is_one_clear_line(tmp_path: Path) -> None:
    if not (shutil.which("nvcc") and shutil.which("ptxas")):
        pytest.skip("needs the CUDA toolkit's nvcc and ptxas")
    res = _run("--nvrtc", tmp_path / "nope.so", "--cell-ids", CELL)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "nope.so: no such file" in res.stderr
