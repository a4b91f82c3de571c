"""M4's one-launch arm put together (apps/one_launch.py, endtoend.one_launch_arm) from M3a rows
that keep every path's spec (``alternatives``): real signed specs of the fake driver's heat
unit (a fused one as fused_gpu would give it, a one-launch one), merged as M4 merges them;
rows written before ``alternatives`` existed still load and resume, and get no arm."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernforge.apps import endtoend
from kernforge.apps import one_launch as ol
from kernforge.apps.operator_match import fused_spec
from kernforge.apps.strategies import Context, Outcome, unit_rows
from kernforge.apps.strategies import operator as strat
from kernforge.core.jsonio import write_json_atomic
from kernforge.deploy import native as nd
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import fused_heat_result


@dataclass
class _Found:  # OperatorMatch's and FusedMatch's interface
    spec_path: Path
    speedup: float
    ci: tuple[float, float] = (1.0, 2.0)
    cell: str = "c"
    note: str = "n"
    steps: int = 3
    gcells_s: float | None = None


def _specs(fake: FakeCuda, heat_unit: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(fused, one-launch): signed specs of the heat unit, as M3a's paths write them."""
    rec = read_native(heat_unit)
    fused = fused_spec(rec, fused_heat_result(rec, tmp_path, []), tmp_path / "fused")
    image = fake.image(tuned=True)
    e = nd.entry(rec, {"block": [64, 1, 1], "carveout": 0}, "tuned.bin", image,
                 {"speedup": 1.3, "ci": [1.2, 1.4]})
    return fused, nd.write_spec(tmp_path / "one" / "spec.json", [e], {"tuned.bin": image})


def _row(unit: Path, spec: Path, alternatives: dict[str, Any] | None) -> dict[str, Any]:
    row = {"kernel": "heat", "unit": str(unit), "matched": True, "path": "fused 3 steps alone",
           "cell": "c", "speedup": 1.5, "ci": [1.4, 1.6], "spec": str(spec), "refused": {}}
    return row if alternatives is None else {**row, "alternatives": alternatives}


def test_a_fused_winner_gets_its_one_launch_spec_in_the_arm(
        fake: FakeCuda, heat_unit: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fused, one = _specs(fake, heat_unit, tmp_path)
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    row = strat._paths(SimpleNamespace(fuse_unit=lambda *a, **k: _Found(fused, 1.5)),
                       heat_unit, tmp_path, 3, _Found(one, 1.3), None)
    fused = fused.with_name(f"{fused.stem}-one-launch.json")  # its unfused steps: the operator
    assert row["spec"] == str(fused) and row["path"] == "fused 3 steps alone"
    assert row["alternatives"] == {"one-launch": {"spec": str(one), "speedup": 1.3,
                                                  "ci": [1.0, 2.0]},
                                   "fused": {"spec": str(fused), "speedup": 1.5,
                                             "ci": [1.0, 2.0]}}
    o = Outcome("DONE", "1 kernel(s) matched",
                {"kernels": [{"kernel": "heat", "unit": str(heat_unit), **row}]},
                native_specs=(str(fused),))
    src = tmp_path / "src"
    src.mkdir()
    setup, info = endtoend.integrate([o], tmp_path, src)
    assert info["fused"] == ["heat"] and setup.label == "deployed"
    arm = endtoend.one_launch_arm([o], tmp_path, src, info)
    assert arm.setup is not None and arm.setup.label == ol.ARM
    (swap,) = arm.info["swapped"]
    assert swap == {"kernel": "heat", "unit": str(heat_unit), "path": "fused",
                    "fused": str(fused), "one_launch": str(one),
                    "replay": {"fused": 1.5, "one_launch": 1.3}}
    merged = arm.info["integration"]
    assert merged["fused"] == [] and merged["native_specs"] == [str(one)]
    assert Path(merged["spec"]).parent == tmp_path / "m4" / "one-launch"
    (entry,) = nd.read_spec(Path(merged["spec"])).entries  # signed; replaces each launch
    assert entry["name"] == "heat" and entry.get("fuse") is None
    assert arm.setup.env["KERNFORGE_DEPLOY"] != setup.env["KERNFORGE_DEPLOY"]
    assert arm.setup.env["KERNFORGE_DEPLOY_LOG"] != setup.env["KERNFORGE_DEPLOY_LOG"]
    assert endtoend.one_launch_arm([o], tmp_path, src, info, enabled=False) == ol.Arm(
        None, {"skipped": "[integrate] compare_one_launch = false"})
    # a one-launch winner deploys no fused entry: no arm, nothing said
    won = Outcome("DONE", "x", {"kernels": [_row(heat_unit, one, row["alternatives"])]},
                  native_specs=(str(one),))
    _, plain = endtoend.integrate([won], tmp_path / "b", src)
    assert plain["fused"] == [] and ol.swaps([won]) == []
    assert endtoend.one_launch_arm([won], tmp_path / "b", src, plain) == ol.Arm(None, {})


def test_an_old_row_resumes_and_its_fused_integration_has_no_arm(
        fake: FakeCuda, heat_unit: Path, tmp_path: Path) -> None:
    """A unit matched by a kernforge that kept only the winner's spec: a resumed M3a keeps
    its row as it is, and M4 says why the fused integration has no one-launch arm."""
    fused, _ = _specs(fake, heat_unit, tmp_path)
    out = tmp_path / "run"
    unit_dir = out / "m3a" / heat_unit.parent.name / heat_unit.name
    write_json_atomic(unit_dir / unit_rows.ROW, _row(heat_unit, fused, None))
    m: Any = SimpleNamespace(name="app", env={}, measure=SimpleNamespace(min_share=0.0))
    kernels = [{"name": "heat", "kind": "native", "units": [str(heat_unit)], "seen": 1,
                "total_ms": 1.0, "share": 0.5}]
    said: list[str] = []
    o = strat.OperatorStrategy().apply(Context(m, None, out, kernels, 1.0, {},  # type: ignore[arg-type]
                                               said.append))
    assert o.status == "DONE" and o.native_specs == (str(fused),), o.reason
    assert o.figures["kept_units"] == 1 and "matched before the run was stopped" in said[0]
    assert "alternatives" not in o.figures["kernels"][0]
    src = tmp_path / "src"
    src.mkdir()
    _, info = endtoend.integrate([o], out, src)
    assert info["fused"] == ["heat"] and ol.swaps([o]) == []
    arm = endtoend.one_launch_arm([o], out, src, info)
    assert arm.setup is None and "predate" in arm.info["skipped"]
