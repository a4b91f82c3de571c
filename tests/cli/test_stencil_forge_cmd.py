"""`kernforge stencil forge --emulate`: the forge loop from the command line, on the host."""

from __future__ import annotations

import json
from pathlib import Path

from kernforge.cli.main import main
from kernforge.stencil import matrix as mx


def test_forge_on_the_emulator_writes_its_outputs(tmp_path: Path, capsys) -> None:
    out = tmp_path / "forge"
    rc = main(["stencil", "forge", "--emulate", "--stencils", "varcoeff_star_1",
               "--shapes", "36x20x12", "--precisions", "fp32", "--rounds", "2",
               "--out", str(out), "--table", str(tmp_path / "none.json")])
    assert rc == 0
    table = mx.load_table(out / "matrix.json")
    assert list(table) == ["varcoeff_star_1/36x20x12/fp32"]
    lines = (out / "perf-log.jsonl").read_text().splitlines()
    assert lines and all(json.loads(x)["verdict"] in ("accepted", "rejected") for x in lines)
    summary = json.loads((out / "forge-summary.json").read_text())
    assert [r["change"] for r in summary["rounds"]] == ["design", "pf"]
    assert "zero-regression pass" in capsys.readouterr().out


def test_forge_refuses_big_grids_on_the_emulator(tmp_path: Path) -> None:
    assert main(["stencil", "forge", "--emulate", "--stencils", "star_1", "--shapes",
                 "512x512x512", "--precisions", "fp32", "--out", str(tmp_path)]) == 2
    assert main(["stencil", "forge", "--emulate", "--rounds", "0", "--out",
                 str(tmp_path)]) == 2


def test_forge_takes_an_explicit_round_list_and_a_seed_design(tmp_path: Path, capsys) -> None:
    out = tmp_path / "forge"
    rc = main(["stencil", "forge", "--emulate", "--cell-ids", "star_1/32x12x10/fp32",
               "--changes", "st,lz", "--seed-design", "ztile", "--out", str(out),
               "--table", str(tmp_path / "none.json")])
    assert rc == 0
    summary = json.loads((out / "forge-summary.json").read_text())
    assert [r["change"] for r in summary["rounds"]] == ["st", "lz"]
    # the seeded design is kept only if it beat the start (here: no entry, i.e. naive defaults)
    final = summary["final"][0]
    table = mx.load_table(out / "matrix.json")
    if final.get("reverted"):  # no entry before: the checked starting operator is written
        assert table["star_1/32x12x10/fp32"]["design"] == "naive"
        assert table["star_1/32x12x10/fp32"]["error"] == final["start_error"]
        assert "a regression) (1)" in (out / "ideas.md").read_text()
    else:
        entry = table["star_1/32x12x10/fp32"]
        assert entry["design"] == "ztile" and "seeded ztile (from naive)" in entry["history"]
        raw = json.loads((out / "matrix.json").read_text())["cells"]["star_1/32x12x10/fp32"]
        assert final["seeded"] == "kept" and "provisional" not in raw
    assert "2 rounds" in capsys.readouterr().out
    # bad names: a typed error (exit 2) before any work
    assert main(["stencil", "forge", "--emulate", "--cell-ids", "star_1/32x12x10/fp32",
                 "--changes", "design,bogus", "--out", str(tmp_path / "x")]) == 2
    assert main(["stencil", "forge", "--emulate", "--cell-ids", "star_1/32x12x10/fp32",
                 "--seed-design", "bogus", "--out", str(tmp_path / "y")]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
