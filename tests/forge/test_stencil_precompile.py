"""``kernforge stencil precompile``: it compiles the incumbent and the first round's candidates of
each cell into the forge's cache (the keys the forge then looks up), and refuses bad input."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernforge.forge.compile import ARCH, _key
from kernforge.forge.loop import Incumbent, _candidates
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell, matrix

CELL = ("star_1", "2048x64x64", "fp32")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", "stencil", "precompile", *args], capture_output=True, text=True,
                          timeout=600, check=False)


def _precompiled(change: str, cache: Path) -> tuple[Cell, dict]:
    """Run the script for CELL into ``cache``; the cell and its committed table entry."""
    st, sh, pr = CELL
    proc = _run("--changes", change, "--stencils", st, "--shapes", sh, "--precisions", pr,
                "--cache", str(cache))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cell,) = matrix([st], [sh], [pr])
    return cell, mx.load_table(mx.TABLE_PATH)[cell.id]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_first_rounds_candidates_land_in_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cubins"
    cell, entry = _precompiled("vx,lz", cache)
    inc = Incumbent(entry["design"], dict(entry["params"]))
    own = mx.build(inc.design, cell, inc.params)
    assert own is not None
    ops = [own, *_candidates(cell, inc, "vx")]  # only the first round: lz's depend on it
    assert len(ops) > 1
    assert {p.stem for p in cache.glob("*.cubin")} == {_key(op, ARCH) for op in ops}
    again = _run("--changes", "vx", "--stencils", CELL[0], "--shapes", CELL[1],
                 "--precisions", CELL[2], "--cache", str(cache))
    assert again.returncode == 0 and f"{len(ops)} compiled, 0 failed" in again.stdout


def test_an_unknown_change_is_refused(tmp_path: Path) -> None:
    proc = _run("--changes", "nope", "--cache", str(tmp_path / "c"))
    assert proc.returncode == 2 and "unknown forge change 'nope'" in proc.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_tpe_precompiles_the_rounds_first_batch(tmp_path: Path) -> None:
    from kernforge.forge.bo import first_batch

    cache = tmp_path / "cubins"
    cell, entry = _precompiled("tpe", cache)
    ops = first_batch(cell, entry["design"], entry["params"])
    assert len(ops) > 8
    assert {p.stem for p in cache.glob("*.cubin")} == {_key(op, ARCH) for op in ops}
