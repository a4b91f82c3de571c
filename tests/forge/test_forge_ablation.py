"""benchmarks/forge_ablation.py on the host emulator: two tiny cells, two seeds, a small
budget; the table, the figure file with its provenance, the Markdown page."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "forge_ablation.py"
CELLS = ["star_1/16x16x8/fp32", "box_1/16x16x8/fp32"]


@pytest.fixture(scope="module")
def ablation() -> Any:
    spec = importlib.util.spec_from_file_location("forge_ablation", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_ablation_runs_every_arm_on_the_same_cells_and_budget(ablation, tmp_path,
                                                                    capsys) -> None:
    fig, md = tmp_path / "ablation.json", tmp_path / "ablation.md"
    rc = ablation.main(["--backend", "cpu-emulator", "--budget", "3", "--seeds", "2",
                        "--cells", *CELLS, "--json", str(fig), "--md", str(md)])
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    for cell in CELLS:
        assert [line.split()[1] for line in out if line.startswith(cell)] == \
            ["rounds", "tpe", "random"]
    assert [line.split()[3] for line in out if line.startswith("geomean")] == \
        ["rounds", "tpe", "random"]
    data = json.loads(fig.read_text())
    assert data["format"] == "kernforge-figure"
    prov = data["provenance"]
    assert prov["command"][1:3] == ["benchmarks/forge_ablation.py", "--backend"]
    assert prov["date"] and prov["backend"] == "cpu"
    runs = data["raw"]["runs"]
    assert len(runs) == len(CELLS) * 3 * 2
    assert all(r["evaluations"] == 3 and len(r["trials"]) == 3 for r in runs)
    assert all(r["trials"][0][1].startswith("naive[") for r in runs)  # trial 0: naive
    rows = data["figure"]["rows"]
    assert {(r["cell"], r["arm"]) for r in rows} == {(c, a) for c in CELLS
                                                    for a in ("rounds", "tpe", "random")}
    for row in rows:
        assert row["speedup"] == pytest.approx(row["naive_s"] / row["best_s"])
        assert row["reached"] <= row["seeds"] == 2
    page = md.read_text()
    assert "Command: `python benchmarks/forge_ablation.py" in page and "geomean" in page


def test_reached_counts_evaluations_until_within_the_target(ablation) -> None:
    run = {"trials": [[4.0, "a", "OK"], [None, "b", "WRONG_RESULT"], [2.0, "c", "OK"],
                      [1.0, "d", "OK"]]}
    assert ablation.reached(run, 2.1) == 3
    assert ablation.reached(run, 0.5) is None
    result = ablation.summarize([
        {"cell": "x", "arm": "rounds", "naive_s": 4.0, "best_s": 1.0, "best_op": "d", **run},
        {"cell": "x", "arm": "random", "naive_s": 4.0, "best_s": 2.0, "best_op": "c", **run}],
        ["rounds", "random"])
    speedups = {r["arm"]: r["speedup"] for r in result["rows"]}
    assert speedups == {"rounds": 4.0, "random": 2.0}
    assert [s["geomean_speedup"] for s in result["summary"]] == [4.0, 2.0]
