"""``kernforge stencil merge``: bench files merge into the latest row per cell, summarized."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "stencil"  # bench files of earlier H200 runs


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", "stencil", "merge",
                           *map(str, args)], check=False, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_later_files_replace_earlier_rows(tmp_path: Path) -> None:
    s5 = DATA / "stencil-bench-h200-2026-12-01-s5.json"
    s6 = DATA / "stencil-bench-h200-2026-12-01-s6b.json"
    out, png = tmp_path / "latest.json", tmp_path / "latest.png"
    res = _run(s5, s6, "--out", out, "--png", png)
    assert res.returncode == 0, res.stderr
    merged = json.loads(out.read_text())
    by_cell = {c["cell"]: c for c in merged["cells"]}
    s5_cells = {r["cell"] for r in json.loads(s5.read_text())["cells"]}
    s6_rows = {r["cell"]: r for r in json.loads(s6.read_text())["cells"]}
    assert set(by_cell) == s5_cells | set(s6_rows)
    for cid, row in s6_rows.items():  # the later file wins, its figures copied unchanged
        ours = next(r for r in row["runners"] if r["name"] == "ours")
        assert by_cell[cid]["from"] == s6.name
        assert by_cell[cid]["time_s"] == ours["time_s"]
        assert by_cell[cid]["speedup"] == row["speedup"]
    assert all(c["from"] == s5.name for cid, c in by_cell.items() if cid not in s6_rows)
    single = merged["summary"]["single_sweep"]
    assert single["cells"] == sum(1 for c in merged["cells"] if not c["temporal"])
    assert "single_sweep" in res.stdout and png.stat().st_size > 1000


@pytest.mark.slow
def test_bad_inputs_are_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    res = _run(DATA / "stencil-matrix-h200-latest-2026-12-01.json", "--out", out)
    assert res.returncode != 0 and "no runners" in res.stderr
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    for path, words in ((tmp_path / "missing.json", "cannot read"),
                        (tmp_path / "bad.json", "not JSON"),
                        (tmp_path / "list.json", "not a stencil bench JSON")):
        res = _run(path, "--out", out)
        assert res.returncode != 0 and words in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    assert not out.exists()


@pytest.mark.slow
def test_roofline_ceilings_bound_the_measured_speedups(tmp_path: Path) -> None:
    """A single-sweep row's ceiling is its best baseline's time over the roofline bound of that
    run (the copy term for a memory-bound row, the FMA term for a compute-bound one); temporal
    and (fp32-peak) fp16 rows get none; our measured speedup never exceeds it."""
    files = [DATA / f"stencil-bench-h200-2026-12-01-{s}.json" for s in ("s7b", "s8b", "s8d")]
    out = tmp_path / "latest.json"
    res = _run(*files, "--out", out)
    assert res.returncode == 0, res.stderr
    merged = json.loads(out.read_text())
    rows = {r["cell"]: r for f in files for r in json.loads(f.read_text())["cells"]}
    by_hand = {"box_2/1024x1024x1024/fp32": ("compute", 250),  # 125 taps, FMA = 2 FLOPs
               "star_1/512x512x512/fp32": ("memory", 14)}
    for cell in merged["cells"]:
        if cell["temporal"] or cell["cell"].endswith("/fp16"):
            assert cell["roofline_speedup"] is None, cell["cell"]
            continue
        assert cell["roofline_speedup"] > 0.97 * cell["speedup"]  # interleaved ~ time ratio
        if cell["cell"] in by_hand:
            row, (bound, flops_per_point) = rows[cell["cell"]], by_hand[cell["cell"]]
            base = next(r for r in row["runners"] if r["name"] == row["best_baseline"])
            mem = row["compulsory_bytes"] / row["copy"]["bytes_per_s"]
            fma = row["updates"] * flops_per_point / row["roofline"]["peak"]
            assert (mem > fma) == (bound == "memory") == (row["roofline"]["bound"] == "memory")
            assert cell["roofline_speedup"] == pytest.approx(base["time_s"] / max(mem, fma),
                                                             rel=1e-9)
    assert sum(c["temporal"] for c in merged["cells"]) == 5
    roof = merged["summary"]["single_sweep"]["roofline_geomean_by_precision"]
    assert set(roof) == {"fp32", "fp64"}
    measured = merged["summary"]["single_sweep"]["speedup_by_precision"]
    assert all(roof[p] > measured[p]["geomean"] for p in roof)
    assert "roofline ceiling" in res.stdout


@pytest.mark.slow
def test_fp16_rows_get_a_ceiling_only_against_the_half2_peak(tmp_path: Path) -> None:
    """Older bench files measured fp16 against the fp32 FMA rate (the half2 kernels exceed it):
    no ceiling; a row whose run measured the half2 rate gets one."""
    data = json.loads((DATA / "stencil-bench-h200-2026-12-01-s8a.json").read_text())
    src = tmp_path / "s8a.json"
    src.write_text(json.dumps(data))
    for row in data["cells"]:
        row["roofline"] = {**row["roofline"], "peak": 2 * row["roofline"]["peak"],
                           "peak_ctype": "half2"}
    half2 = tmp_path / "half2.json"
    half2.write_text(json.dumps(data))
    for path, has in ((src, False), (half2, True)):
        out = tmp_path / f"latest-{has}.json"
        assert _run(path, "--out", out).returncode == 0
        merged = json.loads(out.read_text())
        assert all((c["roofline_speedup"] is not None) == has for c in merged["cells"])
        assert ("fp16" in merged["summary"]["single_sweep"]["roofline_geomean_by_precision"]) == has


@pytest.mark.slow
def test_a_baseline_slower_than_before_is_flagged_and_floors_the_speedup(tmp_path: Path) -> None:
    """An earlier file in which the cell's best baseline ran 30% faster than in the kept row:
    the drift is listed and printed, and the row's speedup floor is scaled by that ratio; a
    baseline that failed in the kept row after passing before is listed too."""
    later = json.loads((DATA / "stencil-bench-h200-2026-12-01-s9g.json").read_text())
    row = later["cells"][0]
    best = next(r for r in row["runners"] if r["name"] == row["best_baseline"])
    other = next(r for r in row["runners"] if r["kind"] == "baseline" and r is not best)
    earlier = json.loads(json.dumps(later))
    erow = earlier["cells"][0]
    next(r for r in erow["runners"] if r["name"] == best["name"])["time_s"] = 0.7 * best["time_s"]
    other.update(status="error", time_s=None)  # the kept row: that baseline no longer builds
    gone = next(r for r in row["runners"] if r["kind"] == "baseline"
                and r is not best and r is not other and r.get("status") == "ok")
    row["runners"].remove(gone)  # and one was not run at all
    paths = []
    for name, doc in (("earlier.json", earlier), ("later.json", later)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(tmp_path / name)
    out = tmp_path / "latest.json"
    res = _run(*paths, "--out", out)
    assert res.returncode == 0, res.stderr
    merged = json.loads(out.read_text())
    found = {(d["cell"], d["baseline"]): d for d in merged["baseline_drift"]}
    d = found[(row["cell"], best["name"])]
    assert d["fastest_from"] == "earlier.json" and abs(d["ratio"] - 1 / 0.7) < 1e-6
    assert found[(row["cell"], other["name"])]["status"] == "error"
    assert found[(row["cell"], gone["name"])]["status"] == "absent"
    cell = merged["cells"][0]
    assert cell["from"] == "later.json"
    assert abs(cell["speedup_floor"] - 0.7 * row["speedup"]) < 1e-9
    assert f"baseline drift: {row['cell']} {best['name']}" in res.stdout
    # the same file twice: nothing drifted, the floor is the speedup
    res = _run(paths[1], paths[1], "--out", out)
    merged = json.loads(out.read_text())
    assert merged["baseline_drift"] == [] and "baseline drift" not in res.stdout
    assert merged["cells"][0]["speedup_floor"] == row["speedup"]
    assert _run(paths[1], "--out", out, "--drift", "-1").returncode != 0


def test_the_paired_copy_reference_is_carried_and_summarized(tmp_path: Path) -> None:
    """Rows with ``copy_paired`` (bench files from session 9 on) give the merged cell its
    paired % of copy and the summary its median; rows without one count in neither."""
    doc = json.loads((DATA / "stencil-bench-h200-2026-12-01-s9f.json").read_text())
    rows = [r for r in doc["cells"] if r["cell"].startswith("star_1/")]
    assert rows and all((r.get("roofline") or {}).get("bound") == "memory" for r in rows)
    for k, row in enumerate(rows[:3]):
        row["copy_paired"] = {"method": "memcpy", "nbytes": 1, "copy_s": 1.0, "ours_s": 1.0,
                              "pct_copy": 80.0 + k}
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({"cells": rows}))
    out = tmp_path / "latest.json"
    res = _run(path, "--out", out)
    assert res.returncode == 0, res.stderr
    merged = json.loads(out.read_text())
    got = {c["cell"]: c["pct_copy_paired"] for c in merged["cells"]}
    assert [got[r["cell"]] for r in rows] == [80.0, 81.0, 82.0] + [None] * (len(rows) - 3)
    single = merged["summary"]["single_sweep"]
    assert single["paired_cells"] == 3 and single["median_pct_copy_paired"] == 81.0
    assert "over the 3 memory-bound cells measured so: 81.0" in res.stdout


@pytest.mark.slow
def test_a_table_keeps_the_rows_of_its_own_operators(tmp_path: Path) -> None:
    """--table: a cell keeps its latest row of the table's operator, not a later row of an
    operator the table no longer holds; a cell with no such row is listed as a mismatch."""
    s10, s11 = DATA / "stencil-bench-h200-2026-12-01-s10d.json", \
        DATA / "stencil-bench-h200-2026-12-01-s11c.json"
    cid = "star_1/1024x1024x32/fp32"

    def ours(path: Path, cell: str) -> str:
        row = next(r for r in json.loads(path.read_text())["cells"] if r["cell"] == cell)
        return str(next(r["key"] for r in row["runners"] if r["name"] == "ours"))

    old, new = ours(s10, cid), ours(s11, cid)
    assert old != new
    # the committed table moves on (later sessions replace operators these files measured):
    # its own mismatches against the two files, and two cells it still takes from s11c (one
    # kept, one changed below), are the reference
    committed = ROOT / "src/kernforge/stencil/data/matrix.json"
    out = tmp_path / "latest.json"
    res = _run(s10, s11, "--out", out, "--table", committed)
    assert res.returncode == 0, res.stderr
    merged = json.loads(out.read_text())
    before = {m["cell"] for m in merged["table_mismatch"]}
    from_s11 = [c["cell"] for c in merged["cells"]
                if c["from"] == s11.name and c["cell"] not in before | {cid}]
    assert len(from_s11) >= 2, "the committed table holds too few of s11c's operators"
    kept, other = from_s11[0], from_s11[1]
    table = json.loads(committed.read_text())
    design, rest = old.rstrip("]").split("[")
    table["cells"][cid] = {**table["cells"][cid], "design": design,
                           "params": {k: int(v) for k, v in (p.split("=")
                                                             for p in rest.split(","))}}
    entry = table["cells"][other]  # another tile height: the table then holds neither file's
    cell = Cell.parse(other)
    ty = next(t for t in (2, 4, 8, 16) if t != entry["params"].get("ty")
              and mx.build(entry["design"], cell, {**entry["params"], "ty": t}) is not None)
    table["cells"][other] = {**entry, "params": {**entry["params"], "ty": ty}}
    (tmp_path / "matrix.json").write_text(json.dumps(table))
    res = _run(s10, s11, "--out", out, "--table", tmp_path / "matrix.json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    by_cell = {c["cell"]: c for c in doc["cells"]}
    assert by_cell[cid]["from"] == s10.name and by_cell[cid]["operator"] == old
    assert by_cell[kept]["from"] == s11.name  # the table's, as before
    assert {m["cell"] for m in doc["table_mismatch"]} == (before - {cid}) | {other}
    assert by_cell[other]["from"] == s11.name and "table mismatch: " + other in res.stdout
    res = _run(s10, s11, "--out", out)  # without a table: the latest row, whatever it measured
    assert json.loads(out.read_text())["cells"] and "table_mismatch" not in json.loads(
        out.read_text())
    assert {c["cell"]: c for c in json.loads(out.read_text())["cells"]}[cid]["from"] == s11.name
    res = _run(s10, "--out", out, "--table", tmp_path / "none.json")
    assert res.returncode != 0 and "no such dispatch table" in res.stderr
