"""``kernforge stencil check`` supervised (issue 29), on a host stand-in device: our operator
segfaulting in one cell, the naive baseline aborting in another, our operator never ending in a
third, and in a fourth failing as a GPU kernel with an illegal address does (the device unusable
after it, the worker alive). Each costs that runner only (RUNTIME_FAILED with the signal, TIMEOUT), the cell's other
runner is checked in a fresh worker, the other cells are checked, the command exits 6."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.forge import check_isolated
from kernforge.forge.check import check_cells
from kernforge.forge.check_isolated import IsolatedCheck
from kernforge.replay.isolate import Isolation, Limits
from kernforge.stencil.spec import Cell

from .faulty_device import FaultyDevice

ROOT = str(Path(__file__).resolve().parents[2])
DEVICE = "tests.stencil.faulty_device:FaultyDevice"
GOOD, SEGV, ABORT, HANG, STICKY = ("varcoeff_star_1/16x12x10/fp32", "star_1/16x12x10/fp32",
                                   "box_1/16x12x10/fp32", "star_2/18x12x10/fp64",
                                   "star_1/16x12x10/fp64")


@pytest.fixture
def worker_path(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Workers can import the stand-in device (``tests.stencil.faulty_device``)."""
    path = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    return {**os.environ, "PYTHONPATH": path}


def _by(results: list[dict]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for r in results:
        out.setdefault(r["cell"], {})[r["name"]] = r
    return out


@pytest.mark.slow
def test_faulty_runners_cost_only_themselves(worker_path: dict[str, str]) -> None:
    cells = [Cell.parse(c) for c in (GOOD, SEGV, ABORT, HANG, STICKY)]
    logs: list[str] = []
    limits = Limits(first_timeout_s=4, validate_timeout_s=120)
    with Isolation(limits=limits, env=worker_path) as iso:
        res = check_cells(cells, points=50, seed=5,
                          isolate=IsolatedCheck(iso, DEVICE, log=logs.append))
        assert iso.replaced == 4
    by = _by(res)
    assert all(r["status"] == "ok" for r in by[GOOD].values())
    segv = by[SEGV]["ours"]
    assert (segv["status"], segv["failure"], segv["cause"]) == ("error", "RUNTIME_FAILED",
                                                                "SIGSEGV")
    assert "killed by SIGSEGV" in segv["reason"] and "hint:" in segv["reason"]
    assert by[SEGV]["naive"]["status"] == "ok"  # checked again without ours
    abort = by[ABORT]["naive"]
    assert (abort["failure"], abort["cause"]) == ("RUNTIME_FAILED", "SIGABRT")
    assert by[ABORT]["ours"]["status"] == "ok"
    hang = by[HANG]["ours"]
    assert hang["failure"] == "TIMEOUT" and "did not finish" in hang["reason"]
    assert by[HANG]["naive"]["status"] == "ok"
    sticky = by[STICKY]["ours"]
    assert (sticky["failure"], sticky["cause"]) == ("RUNTIME_FAILED", "device context unusable")
    assert "illegal memory access" in sticky["reason"]
    assert by[STICKY]["naive"]["status"] == "ok"  # in a fresh worker: the device works again
    assert any("SIGSEGV" in m for m in logs) and any("TIMEOUT" in m for m in logs)


def test_the_same_seeds_as_in_process(worker_path: dict[str, str]) -> None:
    cell = Cell.parse(GOOD)
    inproc = check_cells([cell], device=FaultyDevice(), points=50, seed=9)
    with Isolation(env=worker_path) as iso:
        isolated = check_cells([cell], points=50, seed=9, isolate=IsolatedCheck(iso, DEVICE))
    assert isolated == inproc and {r["status"] for r in inproc} == {"ok"}


def test_cli_check_is_supervised_by_default(worker_path: dict[str, str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(check_isolated, "DEVICE", DEVICE)
    out = tmp_path / "checks.json"
    code = main(["stencil", "check", "--stencils", "star_1", "--shapes", "16x12x10",
                 "--precisions", "fp32", "--points", "50", "--seed", "1",
                 "--eval-timeout", "1", "--json", str(out)])
    said = capsys.readouterr()
    assert code == 6, said.out + said.err
    assert "RUNTIME_FAILED" in said.out + said.err and "Traceback" not in said.out + said.err
    rows = _by(json.loads(out.read_text())["checks"])[SEGV]
    assert rows["ours"]["cause"] == "SIGSEGV" and rows["naive"]["status"] == "ok"
    with pytest.raises(SystemExit):
        main(["stencil", "check", "--help"])
    assert "--in-process" in capsys.readouterr().out
