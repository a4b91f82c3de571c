"""benchmarks/stencil_protocol_check.py on the CPU: the cells, the dry run, the plan and the
report (the runs themselves need a GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "stencil_protocol_check.py"


@pytest.fixture(scope="module")
def pc() -> Any:
    spec = importlib.util.spec_from_file_location("stencil_protocol_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sixty_cells_and_their_operators_are_the_merged_ones(pc) -> None:
    data = json.loads(pc.DATA.read_text())
    rows = pc.cells_of(data)
    assert len(rows) == 60 and round(data["summary"]["single_sweep"]["median_pct_copy"], 1) \
        == 85.2
    assert pc.preflight(rows) == []  # the table still dispatches every merged operator


def test_dry_run_and_plan(pc, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert pc.main(["--dry-run", "--runs", "2", "--before", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "60 memory-bound single-sweep cells; committed median 85.2%" in out
    steps = pc.plan(["a/1x1x1/fp32", "b"], tmp_path, 2, tmp_path / "src", False)
    assert [(side, p.name) for side, p, _, _ in steps] == [
        ("before", "before-1.json"), ("after", "after-1.json"),
        ("after", "after-2.json"), ("before", "before-2.json")]
    _, _, cmd, env = steps[0]
    assert env == {"PYTHONPATH": str((tmp_path / "src").resolve())}
    assert cmd[-6:] == ["--cell-ids", "a/1x1x1/fp32,b", "--baselines", "", "--json",
                        str(tmp_path / "before-1.json")]
    # the other tree goes first; where the dependencies are stays on the path
    monkeypatch.setenv("PYTHONPATH", "/deps")
    assert pc.before_env(tmp_path / "src") == {
        "PYTHONPATH": f"{(tmp_path / 'src').resolve()}{os.pathsep}/deps"}
    variant = pc.plan(["a"], tmp_path, 1, tmp_path, True)
    assert "--_variant-run" in variant[1][2] and "--_variant-run" not in variant[0][2]


def _bench(path: Path, pct: float, times: dict[str, float]) -> None:
    rows = [{"cell": c, "runners": [{"name": "ours", "status": "ok", "time_s": t}]}
            for c, t in times.items()]
    summary = {"single_sweep": {"median_pct_copy": pct, "median_pct_copy_paired": pct + 0.1,
                                "memory_bound_cells": len(rows)}}
    path.write_text(json.dumps({"cells": rows, "summary": summary}))


def test_report_within_and_outside_noise(pc, tmp_path: Path, capsys) -> None:
    for i, (b, a) in enumerate([(85.0, 85.1), (84.6, 85.3), (85.2, 84.9)]):
        _bench(tmp_path / f"before-{i}.json", b, {"x": 1.0, "y": 2.0})
        _bench(tmp_path / f"after-{i}.json", a, {"x": 1.002, "y": 1.999})
    r = pc.report(sorted(tmp_path.glob("*.json")), 85.2)
    assert r["sides"]["before"]["median"] == 85.0 and r["sides"]["after"]["median"] == 85.1
    assert r["within_noise"] and r["median_time_ratio"] == pytest.approx(1.00075)
    assert pc.main(["--report", str(tmp_path)]) == 0
    assert "within noise" in capsys.readouterr().out
    _bench(tmp_path / "after-0.json", 80.0, {"x": 1.1, "y": 2.2})
    _bench(tmp_path / "after-1.json", 80.2, {"x": 1.1, "y": 2.2})
    assert pc.main(["--report", str(tmp_path)]) == 1
    assert "NOT within noise" in capsys.readouterr().out


def test_the_variant_runner_applies_the_operator(pc) -> None:
    import numpy as np

    from kernforge.forge.measure import DeviceCell
    from kernforge.stencil import matrix as mx
    from kernforge.stencil.spec import Cell

    from .emulated_cuda import EmulatedCuda

    for cell_id in ("star_1/40x20x16/fp32", "star_1_t4/40x20x16/fp32"):  # one launch; four
        cell = Cell.parse(cell_id)
        dcell = DeviceCell.allocate(cell, 3, xp=np)
        runner = pc.VariantRunner(EmulatedCuda(), mx.operator_for(cell), dcell, "ours")
        runner.run()
        assert dcell.check(runner.output()).ok
        assert set(runner.loaded.info) == {lv.entry for lv in mx.operator_for(cell).launches}
