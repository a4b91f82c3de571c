"""``kernforge stencil probe`` supervised (issue 29), on a host stand-in device: variants that
segfault or abort in their check, one that never ends and one that segfaults in the timed runs,
one that does not compile and one that leaves the device unusable (as an illegal address does
on the GPU), beside honest ones. Each costs that variant only (its Status and
cause printed), the others are timed, the probe exits 6. ``--in-process`` runs them here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.forge import probe, probe_run
from kernforge.replay.isolate import Isolation, Limits

ROOT = str(Path(__file__).resolve().parents[2])
DEVICE = "tests.stencil.faulty_device:FaultyDevice"
CELL = "star_1/16x12x10/fp32"  # dispatched: zmarch[lz=8,tx=32,ty=8,vx=4]
# the stand-in's faults (tests/stencil/faulty_device.py) by variant
VARIANTS = {"ty=2": "SIGSEGV", "ty=4": "SIGABRT", "vx=2": "timeout", "tx=8": "SIGSEGV",
            "lz=2": "CompileError", "tx=16": "KernelRuntimeError", "lz=4": None}


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    path = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    return {**os.environ, "PYTHONPATH": path}


def _lines(said: list[str]) -> dict[str, str]:
    """Each variant's line, by its override (the dispatched operator: "")."""
    out = {}
    for line in said:
        for v in VARIANTS:
            key = f"{v}," if not v.startswith("vx") else f"{v}]"
            if key in line:
                out[v] = line
        if "zmarch[lz=8,tx=32,ty=8,vx=4]" in line:
            out[""] = line
    return out


@pytest.mark.slow
def test_faulty_variants_cost_only_themselves(worker_env: dict[str, str]) -> None:
    said: list[str] = []
    with Isolation(limits=Limits(min_timeout_s=1.0, first_timeout_s=60), env=worker_env) as iso:
        code = probe.run(CELL, list(VARIANTS), passes=2, say=said.append, isolate=iso,
                         device=DEVICE)
        assert iso.replaced == 5
    assert code == 6, "\n".join(said)
    lines = _lines(said)
    assert " us " in lines[""] and "1.000x" in lines[""] and " us " in lines["lz=4"]
    for v, cause in VARIANTS.items():
        if cause is None:
            continue
        status = {"timeout": "TIMEOUT", "CompileError": "COMPILE_FAILED"}.get(cause,
                                                                            "RUNTIME_FAILED")
        assert f"{status} ({cause}" in lines[v], lines[v]
    assert "did not finish its run stage" in lines["vx=2"]
    assert "killed by SIGSEGV" in lines["tx=8"] and "hint:" in lines["tx=8"]
    assert "device context was unusable" in lines["tx=16"]
    assert "Traceback" not in "\n".join(said)


def test_in_process_reports_a_compile_failure_and_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)  # the stand-in device, imported here
    said: list[str] = []
    assert probe.run(CELL, ["lz=2", "lz=4"], passes=2, say=said.append, device=DEVICE) == 6
    lines = _lines(said)
    assert "COMPILE_FAILED (CompileError)" in lines["lz=2"] and " us " in lines["lz=4"]


def test_cli_probe_is_supervised_by_default(worker_env: dict[str, str],
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(probe_run, "DEVICE", DEVICE)
    code = main(["stencil", "probe", CELL, "ty=2", "lz=4", "--passes", "2",
                 "--eval-timeout", "1"])
    out = capsys.readouterr().out
    assert code == 6, out
    lines = _lines(out.splitlines())
    assert "RUNTIME_FAILED (SIGSEGV)" in lines["ty=2"] and " us " in lines["lz=4"]
    with pytest.raises(SystemExit):
        main(["stencil", "probe", "--help"])
    assert "--in-process" in capsys.readouterr().out
