"""Issue 43 item 5: a unit whose blob or manifest is damaged is skipped by every command with
its reason, the healthy units' results are reported, and the exit status is 7 (one status for
"finished, but damaged units were skipped"); one damaged unit named alone is exit 4."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import kernforge

from .cli_helpers import run

SCALE = r"""
void scale(const double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
"""
ADD = r"""
void add(const double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++) y[i] = 1.0 + x[i];
}
"""
TINY = """
evolve: {seed: 1, max_iterations: 1, eval_slots: 1, patience: 1}
proposers: [{kind: offline, weight: 1}]
tuner: {trials: 1, preset: quick, repeat: 2}
"""


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damaged") / "rec"
    with kernforge.record(root):
        kernforge.Kernel(SCALE, "scale", backend="cpu")(np.arange(64.0), np.zeros(64), 64)
        kernforge.Kernel(ADD, "add", backend="cpu")(np.arange(64.0), np.zeros(64), 64)
    return root


def _damage_blob(unit: Path) -> Path:
    """Flip a byte in the written buffer's epilogue blob (its size and header stay right)."""
    manifest = json.loads((unit / "manifest.json").read_text())
    blob = next(a["epilogue"] for a in manifest["args"] if a["epilogue"])
    path = unit / "blobs" / f"{blob}.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(params=["blob", "manifest"])
def damaged(request: pytest.FixtureRequest, healthy: Path, tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    shutil.copytree(healthy, rec)
    if request.param == "blob":
        _damage_blob(rec / "add-0")
    else:
        (rec / "add-0" / "manifest.json").write_text("{ damaged")
    return rec


def _reason(err: str) -> bool:
    return "skipped a damaged unit" in err and "add-0" in err and (
        "do not match their hash" in err or "not valid JSON" in err)


@pytest.mark.parametrize("command", [["inspect"], ["replay", "--in-process", "--repeat", "1"]])
def test_inspect_and_replay_report_the_healthy_unit_and_exit_7(
        damaged: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(command[0], str(damaged), *command[1:]) == 7
    out, err = capsys.readouterr()
    assert "scale-0" in out and _reason(err)
    assert "1 damaged unit(s) skipped" in err


# inspect and replay above meet both damages; tune and evolve load units the same way: the
# damaged blob (a tuning or evolve run more) runs with the slow tests
SLOW_BLOB = pytest.mark.parametrize(
    "damaged", [pytest.param("blob", marks=pytest.mark.slow), "manifest"], indirect=True)


@SLOW_BLOB
def test_tune_skips_the_damaged_unit(damaged: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "tune"
    assert run("tune", str(damaged), "--out", str(out_dir), "--trials", "1", "--repeat", "2",
               "--in-process") == 7
    out, err = capsys.readouterr()
    assert _reason(err) and "scale-0" in out
    assert (out_dir / "scale-0" / "result.json").is_file()
    assert not (out_dir / "add-0").exists()


@SLOW_BLOB
def test_evolve_skips_the_damaged_unit(damaged: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    status = run("evolve", str(damaged), "--config", str(config), "--out", str(tmp_path / "ev"),
                 "--kernels", "scale", "--in-process")
    err = capsys.readouterr().err
    assert status in (1, 7) and _reason(err)  # 1: no program beat the seed in one iteration
    assert (tmp_path / "ev" / "scale" / "evolve.db").is_file()


def test_export_skips_a_damaged_result(
        healthy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(healthy, rec)
    out_dir = tmp_path / "tune"
    assert run("tune", str(rec), "--out", str(out_dir), "--trials", "1", "--repeat", "2",
               "--in-process") == 0
    (out_dir / "scale-0" / "result.json").write_text("{ damaged")
    capsys.readouterr()
    assert run("export", str(out_dir), "-o", str(tmp_path / "deploy.json")) != 0
    err = capsys.readouterr().err
    assert "skipped a damaged unit" in err
    assert "scale-0/result.json: not a readable tuning result" in err
    assert "1 damaged unit(s) skipped" in err and "add-0/result.json" in err  # refused, named


def test_one_damaged_unit_named_alone_is_exit_4(healthy: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(healthy, rec)
    _damage_blob(rec / "add-0")
    assert run("integrity", "validate", str(rec / "add-0"), "--in-process") == 4
    assert "do not match their hash" in capsys.readouterr().err
    assert run("replay", str(rec / "add-0"), "--in-process") == 4
