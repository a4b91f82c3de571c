"""``kernforge stencil spread``: the run-to-run spread of the memory-bound median."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.forge import spread

DATA = Path(__file__).resolve().parents[1] / "data" / "stencil"  # earlier H200 runs
SNAPS = [DATA / f"stencil-snap-h200-2026-12-02-s17{s}.json" for s in ("c", "d", "e1")]


def test_each_runs_median_is_the_one_its_bench_summary_recorded() -> None:
    """The per-run figures come from the same rows the bench summarised (session 17's
    snapshots of the 60 memory-bound cells, H200)."""
    doc = spread.spread(SNAPS)
    assert [r["cells"] for r in doc["runs"]] == [60, 60, 60]
    for run, path in zip(doc["runs"], SNAPS, strict=True):
        s = json.loads(path.read_text())["summary"]["single_sweep"]
        assert run["median"] == pytest.approx(s["median_pct_copy"])
        assert run["median_paired"] == pytest.approx(s["median_pct_copy_paired"])
    lo, hi = doc["medians"]
    assert lo <= doc["median_of_medians"] <= hi
    assert all(c["low"] <= c["median"] <= c["high"] for c in doc["cells"])
    assert [c["median"] for c in doc["cells"]] == sorted(c["median"] for c in doc["cells"])
    assert doc["mixed_operators"] == [] and doc["dropped"] == []


def _row(cell: str, pct: float, key: str = "zmarch[lz=8]", **extra: Any) -> dict[str, Any]:
    ours = {"name": "ours", "kind": "ours", "status": "ok", "pct_copy": pct, "key": key}
    return {"cell": cell, "temporal": False, "runners": [ours],
            "roofline": {"bound": "memory"}, "copy_paired": {"pct_copy": pct + 1}, **extra}


def _write(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"date": name, "cells": rows}))
    return p


def test_spread_counts_only_passing_memory_bound_single_sweeps_in_every_run(
        tmp_path: Path) -> None:
    base = [_row("a/8x8x8/fp32", 84.0), _row("b/8x8x8/fp32", 86.0), _row("c/8x8x8/fp32", 90.0)]
    other = [_row("t/8x8x8/fp32", 10.0, temporal=True),
             _row("k/8x8x8/fp32", 30.0, roofline={"bound": "compute"})]
    failed = _row("f/8x8x8/fp32", 99.0)
    failed["runners"][0]["status"] = "wrong"
    one = _write(tmp_path, "1", base + other + [failed])
    second = copy.deepcopy(base)
    second[0]["runners"][0]["pct_copy"] = 85.5  # a straddles 85
    second[1]["runners"][0]["key"] = "ztile[st=2]"  # b: another operator
    two = _write(tmp_path, "2", second + [_row("only/8x8x8/fp32", 50.0)])
    doc = spread.spread([one, two], goal=85.0)
    assert [c["cell"] for c in doc["cells"]] == ["a/8x8x8/fp32", "b/8x8x8/fp32", "c/8x8x8/fp32"]
    assert [r["median"] for r in doc["runs"]] == [86.0, 86.0]
    assert [r["at_goal"] for r in doc["runs"]] == [2, 3]
    assert doc["straddling"] == ["a/8x8x8/fp32"]
    assert doc["mixed_operators"] == ["b/8x8x8/fp32"]
    assert doc["dropped"] == ["only/8x8x8/fp32"]  # the excluded kinds are not even candidates
    assert doc["paired_medians"] == [87.0, 87.0] and doc["paired_runs_at_goal"] == 2
    # a cell without a paired copy in one run leaves every run's paired median
    three = copy.deepcopy(second)
    three[2]["copy_paired"] = None
    doc = spread.spread([one, two, _write(tmp_path, "3", three)], goal=85.0)
    assert [r["paired_cells"] for r in doc["runs"]] == [2, 2, 2]
    lines = "\n".join(spread.report_lines(doc))
    assert "straddles 85%: a/8x8x8/fp32" in lines and "not noise): b/8x8x8/fp32" in lines


def test_spread_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    one = _write(tmp_path, "1", [_row("a/8x8x8/fp32", 84.0)])
    two = _write(tmp_path, "2", [_row("b/8x8x8/fp32", 84.0)])
    with pytest.raises(ConfigError, match="at least two"):
        spread.spread([one])
    with pytest.raises(ConfigError, match="percentage"):
        spread.spread([one, one], goal=float("nan"))
    with pytest.raises(ConfigError, match="in every run"):
        spread.spread([one, two])
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ConfigError, match="not a stencil bench JSON"):
        spread.spread([one, tmp_path / "bad.json"])


def test_spread_cli_prints_and_writes_the_figures_and_the_chart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    assert main(["stencil", "spread", *map(str, SNAPS[:2]), "--json", str(out),
                 "--png", str(png)]) == 0
    doc = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert f"median of the runs' medians {doc['median_of_medians']:.2f}%" in text
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    assert main(["stencil", "spread", str(SNAPS[0])]) == 2
    assert "at least two" in capsys.readouterr().err
