"""A run whose units are of both kinds (one ``kernforge record`` of a Python program can
write recordings and native units; ``kernforge tune`` tunes both in one run) exports each
kind's wins into the spec of its kind: the recordings' tuned variants into the spec named,
the native units' images beside it (``deploy.native.json``). Before, the native units'
results made export leave the recordings' wins out without a word."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from deploy_helpers import record_axpy, write_result

from kernforge.cli.main import main
from kernforge.core.jsonio import sign, write_json_atomic
from kernforge.deploy.native import read_spec

NATIVE = Path(__file__).parents[1] / "data" / "native_v2" / "heat-0"


def _native_result(run: Path, unit: Path, speedup: float) -> None:
    """A native unit's signed result.json, as tuning writes it, won by a block shape."""
    native = {"unit": str(unit), "kernel": "heat", "name": "heat",
              "best": {"block": [64, 1, 1], "jit": {}, "carveout": None},
              "best_label": "block=64x1x1", "speedup": speedup,
              "ci": [speedup * 0.95, speedup * 1.05], "medians": [2.0e-6, 2.0e-6 / speedup],
              "win": True, "refused": None, "notes": []}
    write_json_atomic(run / unit.name / "result.json",
                      sign({"format": "kernforge-tune-result", "schema_version": 1,
                            "unit": unit.name, "backend": "driver", "status": "OK",
                            "speedup": speedup, "native": native}))


def test_a_run_of_both_kinds_exports_a_spec_of_each(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rec = record_axpy(tmp_path / "rec")
    unit = tmp_path / "rec" / "heat-0"
    shutil.copytree(NATIVE, unit)
    run = tmp_path / "run"
    write_result(run / rec.name, rec, {"defines": {"BIAS": 0}}, speedup=2.0, ci=(1.8, 2.2))
    _native_result(run, unit, 1.4)
    assert main(["export", str(run), "-o", str(tmp_path / "deploy.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 tuned kernel launch(es) exported" in out
    assert "1 native deployment entry (1 recorded launch(es)) exported" in out
    (entry,) = json.loads((tmp_path / "deploy.json").read_text())["entries"]
    assert entry["evidence"]["speedup"] == 2.0
    (native,) = read_spec(tmp_path / "deploy.native.json").entries
    assert native["evidence"]["speedup"] == 1.4


def test_a_run_of_one_kind_writes_the_spec_named(tmp_path: Path) -> None:
    unit = tmp_path / "rec" / "heat-0"
    shutil.copytree(NATIVE, unit)
    run = tmp_path / "run"
    _native_result(run, unit, 1.4)
    assert main(["export", str(run), "-o", str(tmp_path / "spec.json")]) == 0
    assert read_spec(tmp_path / "spec.json").entries
    assert not (tmp_path / "spec.native.json").exists()


def test_a_native_result_exports_from_any_directory(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuning keeps a native unit's path as it was given (relative to where it ran) and its
    resolved path as ``recording``; export, run from elsewhere, finds the unit by the latter
    (a native.json of an earlier kernforge, by the run directory's parents)."""
    from kernforge.replay.native_tune import RESULT, RESULT_FORMAT

    unit = tmp_path / "rec" / "heat-0"
    shutil.copytree(NATIVE, unit)
    run = tmp_path / "run"
    _native_result(run, Path("rec") / "heat-0", 1.4)
    path = run / "heat-0" / "result.json"
    doc = json.loads(path.read_text())
    doc.pop("checksum")
    write_json_atomic(path, sign({**doc, "recording": str(unit)}))
    legacy = tmp_path / "old"
    legacy.mkdir()
    (legacy / RESULT).write_text(json.dumps(sign({"format": RESULT_FORMAT, "version": 1,
                                                  "units": [doc["native"]]})))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for r in (run, legacy):
        assert main(["export", str(r), "-o", str(tmp_path / f"{r.name}.json")]) == 0
        (entry,) = read_spec(tmp_path / f"{r.name}.json").entries
        assert entry["evidence"]["unit"] == str(unit)
