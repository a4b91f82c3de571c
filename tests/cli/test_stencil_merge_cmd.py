"""``kernforge stencil merge`` from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data" / "stencil"  # earlier H200 runs


def test_merge_writes_the_latest_rows_and_prints_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s8d, s9b = (DATA / f"stencil-bench-h200-2026-12-01-{s}.json" for s in ("s8d", "s9b"))
    out, png = tmp_path / "m.json", tmp_path / "m.png"
    assert main(["stencil", "merge", str(s8d), str(s9b), "--out", str(out),
                 "--png", str(png)]) == 0
    doc = json.loads(out.read_text())
    later = {r["cell"] for r in json.loads(s9b.read_text())["cells"]}
    assert later and all(c["from"] == s9b.name for c in doc["cells"] if c["cell"] in later)
    # s9b's Anderson2021 at star_1_t4 1024^3 fp64 ran 3.69x slower than in s8d: listed
    drifted = {(d["cell"], d["baseline"]): d for d in doc["baseline_drift"]}
    d = drifted[("star_1_t4/1024x1024x1024/fp64", "halide_auto")]
    assert d["fastest_from"] == s8d.name and d["ratio"] > 3
    text = capsys.readouterr().out
    assert "baseline drift: star_1_t4/1024x1024x1024/fp64 halide_auto" in text
    assert "speedup floor" in text and png.stat().st_size > 1000


def test_merge_refuses_bad_input_with_exit_2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{")
    out = tmp_path / "m.json"
    assert main(["stencil", "merge", str(tmp_path / "bad.json"), "--out", str(out)]) == 2
    assert main(["stencil", "merge", str(DATA / "stencil-bench-h200-2026-12-01-s9b.json"),
                 "--out", str(out), "--drift", "-0.5"]) == 2
    err = capsys.readouterr().err
    assert "not JSON" in err and "a fraction" in err and not out.exists()


def test_files_out_of_run_order_are_warned_about_and_by_date_sorts_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shell glob puts ``...-11-29.json`` (the first run) after ``...-11-29-s4.json``: its
    rows would replace newer ones. Warned about as given; ``--by-date`` orders by the runs."""
    first, s4 = DATA / "stencil-bench-h200-2026-11-29.json", DATA / "stencil-bench-h200-2026-11-29-s4.json"
    out = tmp_path / "m.json"
    assert main(["stencil", "merge", str(s4), str(first), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["order_warnings"]) == 1 and first.name in doc["order_warnings"][0]
    assert "warning: " + first.name in capsys.readouterr().out
    assert main(["stencil", "merge", "--by-date", str(s4), str(first), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["order_warnings"] == []
    s4_cells = {r["cell"] for r in json.loads(s4.read_text())["cells"]}
    assert all(c["from"] == s4.name for c in doc["cells"] if c["cell"] in s4_cells)
    undated = tmp_path / "undated.json"
    undated.write_text(json.dumps({"cells": []}))
    assert main(["stencil", "merge", "--by-date", str(undated), "--out", str(out)]) == 2
