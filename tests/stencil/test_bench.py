"""The bench loop, report and CLI on a numpy stand-in for the device (no GPU needed)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import numpy as np
import pytest

from kernforge.cli.main import main
from kernforge.core import BackendUnavailableError
from kernforge.forge import bench as bench_mod
from kernforge.forge import measure as measure_mod
from kernforge.forge import report
from kernforge.forge.bench import BenchConfig, bench
from kernforge.forge.check import check_cells
from kernforge.forge.measure import DeviceCell
from kernforge.harness.compare import ABResult, interleave
from kernforge.stencil.operator import Operator
from kernforge.stencil.oracle import reference
from kernforge.stencil.spec import Cell, matrix


class OracleRunner:
    """Writes the oracle's result (rounded to storage) into ``out``: a correct operator."""

    def __init__(self, name: str, dcell: DeviceCell, seconds: float, *, wrong: bool = False,
                 interior: bool = False) -> None:
        self.name, self.dcell, self.seconds = name, dcell, seconds
        self.wrong, self.interior = wrong, interior
        self.runs = 0

    def run(self) -> None:
        self.runs += 1
        f = self.dcell.fields
        res = reference(self.dcell.cell, f["in"], f.get("coef")).astype(f["out"].dtype)
        r = self.dcell.cell.radius
        if self.wrong:
            res[r, r, r:-r] += 1  # a wrong row on the first interior plane
        f["out"][r:-r, r:-r, r:-r] = res[r:-r, r:-r, r:-r]

    def output(self) -> Any:
        out = self.dcell.fields["out"]
        r = self.dcell.cell.radius
        return out[r:-r, r:-r, r:-r] if self.interior else out


class HostDevice:
    """The bench's Device protocol over numpy; runs take fixed, fake seconds."""

    xp = np

    def __init__(self, times: dict[str, float] | None = None, wrong: tuple[str, ...] = ()):
        self.times = times or {"ours": 1e-3, "naive": 2e-3}
        self.wrong = wrong
        self.released = 0

    def identity(self) -> dict[str, Any]:
        return {"device": "numpy stand-in"}

    def allocate(self, cell: Cell, seed: int) -> DeviceCell:
        return DeviceCell.allocate(cell, seed, xp=np)

    def operator_runner(self, op: Operator, dcell: DeviceCell, name: str = "") -> Any:
        assert isinstance(op, Operator) and op.cell_id == dcell.cell.id
        return OracleRunner(name, dcell, self.times[name], wrong=name in self.wrong,
                            interior=name == "naive")

    def synchronize(self) -> None:
        pass

    def once(self, runner: Any) -> float:
        return float(runner.seconds)

    def measure(self, runner: Any, *, warmup: int = 3, repeat: int = 10) -> list[float]:
        return [runner.seconds] * repeat

    def compare(self, a: Any, b: Any, *, passes: int = 7, per_pass: int = 3,
                seed: int = 0) -> ABResult:
        return interleave(lambda: a.seconds, lambda: b.seconds, passes=passes,
                          per_pass=per_pass, seed=seed)

    def copy_bandwidth(self, nbytes: int, *, repeat: int = 10) -> measure_mod.CopyBandwidth:
        return measure_mod.CopyBandwidth(1e12, nbytes, 2 * nbytes / 1e12, "memcpy",
                                     {"memcpy": 1e12})

    def copy_runner(self, nbytes: int, method: str) -> Any:
        return CopyStandIn(nbytes, 2 * nbytes / 1.25e12)  # a copy at 1.25 TB/s in the passes

    def release(self) -> None:
        self.released += 1


class CopyStandIn:
    def __init__(self, nbytes: int, seconds: float) -> None:
        self.name, self.nbytes, self.seconds = "copy-memcpy", nbytes, seconds

    def run(self) -> None:
        pass

    def output(self) -> Any:
        return None


CELLS = ["star_1/16x12x10/fp32", "star_1_t4/16x12x10/fp64", "varcoeff_star_1/16x12x10/fp16"]


def test_device_cell_on_numpy():
    cell = Cell.parse("varcoeff_star_1/16x12x10/fp32")
    dc = DeviceCell.allocate(cell, seed=3, xp=np)
    assert sorted(dc.fields) == ["coef", "in", "out"] and dc.seed == 3
    inp, out = dc.fields["in"], dc.fields["out"]
    assert np.isnan(out[1:-1, 1:-1, 1:-1]).all()  # interior poisoned
    edge = np.ones(out.shape, bool)
    edge[1:-1, 1:-1, 1:-1] = False
    assert (out[edge] == inp[edge]).all()  # boundary preset to the input's
    dc.refresh(4)
    assert dc.fields["in"] is inp and dc.seed == 4  # refreshed in place
    assert not np.array_equal(inp, DeviceCell.allocate(cell, seed=3, xp=np).fields["in"])
    tmp = dc.field("tmp")
    assert tmp.shape == inp.shape and np.isnan(tmp[5, 5, 5]) and tmp[0, 0, 0] == inp[0, 0, 0]
    res = dc.check(out)
    assert not res.ok and res.seed == 4  # nothing written yet: NaN interior
    with pytest.raises(Exception, match="no 'nope' field"):
        dc.field("nope")


def test_load_needs_cupy():
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cupy is installed: the GPU tests cover load()")
    op = bench_mod.operator_for(Cell.parse("star_1/16x16x16/fp32"))
    with pytest.raises(BackendUnavailableError):
        measure_mod.load(op)


def test_bench_on_host_device():
    dev = HostDevice()
    logs: list[str] = []
    seen: list[tuple[str, int, int]] = []
    cells = [Cell.parse(c) for c in CELLS]
    res = bench(cells, BenchConfig(baselines=("naive", "torch"), repeat=3, passes=3),
                device=dev, log=logs.append, progress=lambda *a: seen.append(a))
    assert res["schema"] == bench_mod.SCHEMA and len(res["cells"]) == 3
    assert seen[0] == (CELLS[0], 0, 3) and seen[-1] == ("done", 3, 3)
    assert dev.released == 3
    for row in res["cells"]:
        names = [r["name"] for r in row["runners"]]
        assert names == ["ours", "naive", "torch"]
        ours, naive = row["runners"][0], row["runners"][1]
        assert ours["status"] == "ok" and naive["status"] == "ok", row
        assert naive["check"]["detail"]["output"] == "interior"
        assert ours["check"]["seed"] != naive["check"]["seed"]  # fresh inputs per check
        assert row["best_baseline"] == "naive" and row["speedup"] == pytest.approx(2.0)
        assert "gpu_before" in row and "gpu_after" in row  # nvidia-smi's state, or None
        cell = Cell.parse(row["cell"])
        assert ours["gcells_per_s"] == pytest.approx(cell.updates / 1e-3 / 1e9)
        assert ours["pct_copy"] == pytest.approx(100 * cell.compulsory_bytes / 1e-3 / 1e12)
        # the copy timed in the operator's passes (1.25 TB/s here, 1 TB/s up front)
        paired = row["copy_paired"]
        assert paired["method"] == "memcpy" and paired["ours_s"] == pytest.approx(1e-3)
        assert paired["copy_s"] == pytest.approx(2 * paired["nbytes"] / 1.25e12)
        assert paired["pct_copy"] == pytest.approx(ours["pct_copy"] / 1.25)
    torch = res["cells"][0]["runners"][2]
    if torch["status"] == "skipped":
        assert any("baseline torch skipped" in m for m in logs)
    s = res["summary"]
    assert s["single_sweep"]["cells"] == 2 and s["temporal"]["cells"] == 1
    by = s["single_sweep"]["speedup_by_precision"]
    assert sorted(by) == ["fp16", "fp32"] and by["fp32"]["geomean"] == pytest.approx(2.0)
    assert s["temporal"]["geomean_speedup"] == pytest.approx(2.0)
    assert s["single_sweep"]["paired_cells"] == s["single_sweep"]["memory_bound_cells"] == 2
    assert s["single_sweep"]["median_pct_copy_paired"] == pytest.approx(
        s["single_sweep"]["median_pct_copy"] / 1.25)
    json.dumps(res, allow_nan=False)  # strict JSON


def test_seeds_random_by_default_recorded_and_reproducible():
    cells = [Cell.parse(CELLS[0])]
    cfg = BenchConfig(baselines=(), repeat=1)
    a = bench(cells, cfg, device=HostDevice())
    b = bench(cells, cfg, device=HostDevice())
    assert isinstance(a["config"]["seed"], int) and a["config"]["seed"] != b["config"]["seed"]
    seeded = BenchConfig(baselines=(), repeat=1, seed=a["config"]["seed"])
    again = bench(cells, seeded, device=HostDevice())
    check = a["cells"][0]["runners"][0]["check"]
    assert again["cells"][0]["runners"][0]["check"] == check  # same inputs, same verdict


def test_failing_baseline_is_reported_not_counted():
    dev = HostDevice(wrong=("naive",))
    res = bench([Cell.parse(CELLS[0])], BenchConfig(baselines=("naive",), repeat=2),
                device=dev)
    row = res["cells"][0]
    naive = row["runners"][1]
    assert naive["status"] == "failed-oracle" and "time_s" not in naive
    assert naive["check"]["error"] > 1e-4
    assert row["best_baseline"] is None and row["speedup"] is None
    assert res["summary"]["single_sweep"]["geomean_speedup"] is None


def test_failing_operator_is_reported():
    dev = HostDevice(wrong=("ours",))
    res = bench([Cell.parse(CELLS[0])], BenchConfig(baselines=("naive",), repeat=2),
                device=dev)
    row = res["cells"][0]
    assert row["runners"][0]["status"] == "failed-oracle"
    assert row["best_baseline"] == "naive" and row["speedup"] is None
    checks = check_cells([Cell.parse(CELLS[0])], device=dev, points=10)
    assert [(c["name"], c["status"]) for c in checks] == [("ours", "failed-oracle"),
                                                          ("naive", "ok")]


def test_report_tables_markdown_and_chart(tmp_path):
    res = bench([Cell.parse(c) for c in CELLS], BenchConfig(baselines=("naive",), repeat=2),
                device=HostDevice())
    headers, rows = report.matrix_rows(res)
    assert "% copy" in headers and len(rows) == 2 and rows[0][headers.index("speedup")] == "2.00x"
    t_headers, t_rows = report.temporal_rows(res)
    assert "eff. GUpdates/s" in t_headers and t_rows[0][1] == "4"
    assert len(report.summary_rows(res)[1]) == 3  # fp16, fp32 single sweep; fp64 temporal
    assert len(report.runner_rows(res)[1]) == 6
    assert len(report.rich_tables(res)) == 4
    md = report.markdown(res)
    assert "| cell | design | time |" in md and "temporal blocking" in md
    png = report.chart(res, tmp_path / "chart.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_list_and_bench_on_host_device(tmp_path, monkeypatch, capsys):
    assert main(["stencil", "list", "--stencils", "star_1,box_2", "--shapes",
                 "64x64x64", "--precisions", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "star_1/64x64x64/fp32" in out and "box_2/64x64x64/fp32" in out
    monkeypatch.setattr(measure_mod, "GpuDevice", HostDevice)
    j, png, md = tmp_path / "b.json", tmp_path / "b.png", tmp_path / "b.md"
    rc = main(["stencil", "bench", "--in-process", "--stencils", "star_1,star_1_t4",
               "--shapes", "16x12x10", "--precisions", "fp32", "--baselines", "naive", "--repeat", "2", "--json",
               str(j), "--png", str(png), "--md", str(md)])
    assert rc == 0
    data = json.loads(j.read_text())
    assert [c["cell"] for c in data["cells"]] == ["star_1/16x12x10/fp32",
                                                  "star_1_t4/16x12x10/fp32"]
    assert png.stat().st_size > 1000 and "operator matrix" in md.read_text()
    assert main(["stencil", "bench", "--baselines", "nope"]) == 2


def test_a_bench_resumes_where_an_earlier_call_stopped(tmp_path, monkeypatch):
    """--resume: a run cut after its first cell goes on in a later call: the first cell's row
    is kept as it was, the others get the inputs (seeds) of one uninterrupted run; a resume
    with other settings or from a file that is not a bench's is refused."""
    monkeypatch.setattr(measure_mod, "GpuDevice", HostDevice)
    j = tmp_path / "b.json"
    args = ["stencil", "bench", "--in-process", "--stencils", "star_1,varcoeff_star_1",
            "--shapes", "16x12x10",
            "--precisions", "fp32", "--baselines", "naive", "--repeat", "2", "--json", str(j)]
    assert main(args + ["--seed", "7"]) == 0
    whole = json.loads(j.read_text())
    cut = dict(whole, cells=whole["cells"][:1], seconds=5.0)  # as a call stopped after one cell
    cut["cells"][0]["marker"] = "kept"
    j.write_text(json.dumps(cut))
    assert main(args + ["--resume"]) == 0
    again = json.loads(j.read_text())
    assert [c["cell"] for c in again["cells"]] == [c["cell"] for c in whole["cells"]]
    assert again["cells"][0]["marker"] == "kept" and again["config"]["seed"] == 7
    seeds = [[r["check"]["seed"] for r in c["runners"]] for c in again["cells"]]
    assert seeds == [[r["check"]["seed"] for r in c["runners"]] for c in whole["cells"]]
    assert again["date"] == whole["date"] and len(again["resumed"]) == 1
    assert again["seconds"] >= 5.0
    assert main(args + ["--resume", "--repeat", "3"]) == 2  # other settings
    assert main(args + ["--resume", "--seed", "8"]) == 2
    (tmp_path / "x.json").write_text("[]")
    assert main(args[:-1] + [str(tmp_path / "x.json"), "--resume"]) == 2
    fresh = tmp_path / "new.json"
    assert main(args[:-1] + [str(fresh), "--resume"]) == 0  # nothing to resume: a new run
    assert "resumed" not in json.loads(fresh.read_text())
    assert main(["stencil", "bench", "--resume"]) == 2  # needs --json


def test_cli_bench_dispatches_through_a_given_table(tmp_path, monkeypatch):
    """--table: the operator a forge run accepted (here: naive with a chosen block) is benched,
    not the committed table's; a missing or malformed table is bad input."""
    from kernforge.core.jsonio import write_json_atomic
    from kernforge.stencil import matrix as mx

    monkeypatch.setattr(measure_mod, "GpuDevice", HostDevice)
    table = tmp_path / "matrix.json"
    write_json_atomic(table, {"version": mx.TABLE_VERSION, "cells": {
        "star_1/16x12x10/fp32": {"design": "naive", "params": {"block": [8, 4, 2]},
                                 "seconds": 1e-3}}})
    j = tmp_path / "b.json"
    assert main(["stencil", "bench", "--in-process", "--stencils", "star_1", "--shapes",
                 "16x12x10", "--precisions", "fp32", "--baselines", "", "--table", str(table),
                 "--json", str(j)]) == 0
    ours = json.loads(j.read_text())["cells"][0]["runners"][0]
    assert ours["design"] == "naive" and "block=(8, 4, 2)" in ours["key"]
    assert main(["stencil", "bench", "--table", str(tmp_path / "none.json")]) == 2
    (tmp_path / "bad.json").write_text("{")
    assert main(["stencil", "bench", "--table", str(tmp_path / "bad.json")]) == 2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
def test_cli_compile_only_one_shape(tmp_path, capsys):
    """Every stencil x precision at one shape, ours and naive, with nvcc -arch=sm_90 -cubin."""
    j = tmp_path / "cc.json"
    assert main(["stencil", "check", "--compile-only", "--shapes", "64x64x64",
                 "--json", str(j)]) == 0
    results = json.loads(j.read_text())["compile_only"]
    cells = {c.id for c in matrix(shapes=["64x64x64"])}
    assert {r["cell"] for r in results} == cells and len(results) == 2 * len(cells)
    assert all(r["ok"] for r in results)
    assert "36/36 compiled" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
def test_every_cell_of_the_matrix_compiles(tmp_path, capsys):
    """The CPU path of the issue: every cell's dispatched operator (through the committed
    table) and its naive baseline compile for sm_90 (about 40 s on 2 cores)."""
    j = tmp_path / "all.json"
    assert main(["stencil", "check", "--compile-only", "--json", str(j)]) == 0
    results = json.loads(j.read_text())["compile_only"]
    assert {r["cell"] for r in results} == {c.id for c in matrix()}
    assert len(results) == 180 and all(r["ok"] for r in results)


def test_a_slow_runner_is_timed_three_times() -> None:
    """A baseline slower than bench.SLOW_S per application gets 3 timed runs, not `repeat`."""
    cell = Cell.parse("star_1/16x12x10/fp32")
    device = HostDevice({"ours": 1e-3, "naive": 0.2})
    row = bench_mod.bench_cell(device, cell, 0, bench_mod.BenchConfig(baselines=("naive",),
                                                                        repeat=10, seed=1),
                               lambda _m: None)
    by = {r["name"]: r for r in row["runners"]}
    assert len(by["naive"]["samples"]) == 3 and by["naive"]["reduced_repeat"]
    assert len(by["ours"]["samples"]) == 10 and "reduced_repeat" not in by["ours"]


class SnapshotRunner(OracleRunner):
    """Computes from a copy of the inputs taken at construction (like Halide's runners)."""

    reload_inputs = True

    def __init__(self, name: str, dcell: DeviceCell, seconds: float) -> None:
        super().__init__(name, dcell, seconds, interior=True)
        self.snapshot = {k: v.copy() for k, v in dcell.fields.items()}
        self.reloads = 0

    def reload(self) -> None:
        self.reloads += 1
        self.snapshot = {k: v.copy() for k, v in self.dcell.fields.items()}

    def run(self) -> None:
        self.runs += 1
        s = self.snapshot
        res = reference(self.dcell.cell, s["in"], s.get("coef")).astype(s["out"].dtype)
        r = self.dcell.cell.radius
        self._out = res[r:-r, r:-r, r:-r]

    def output(self) -> Any:
        return self._out


def test_a_snapshot_runner_is_reloaded_after_fresh_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh inputs are drawn before each runner's check; a runner computing from its own copy
    (reload_inputs) must be given them, else it would fail the oracle on stale inputs."""
    made: list[SnapshotRunner] = []

    def factory(name: str, cell: Cell, dcell: DeviceCell, device: Any) -> SnapshotRunner:
        made.append(SnapshotRunner(name, dcell, 2e-3))
        return made[-1]

    monkeypatch.setattr(bench_mod, "baseline_runner", factory)
    cell = Cell.parse("star_1/16x12x10/fp32")
    row = bench_mod.bench_cell(HostDevice(), cell, 0,
                               BenchConfig(baselines=("halide",), seed=3), lambda _m: None)
    by = {r["name"]: r for r in row["runners"]}
    assert by["halide"]["status"] == "ok" and made[0].reloads == 1


def test_a_multi_step_cell_reports_temporal_blocking_beside_chained_sweeps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When chained sweeps won the forge, the fused temporal design is still measured and
    reported (steps per launch), and never counted as a baseline."""
    from kernforge.stencil import matrix as mx

    cell = Cell.parse("star_1_t4/16x12x10/fp32")
    monkeypatch.setattr(bench_mod, "operator_for",
                        lambda c: mx.build("zmarch", c, mx.defaults("zmarch", c)))
    device = HostDevice({"ours": 1e-3, "naive": 2e-3, "fused": 0.5e-3})
    row = bench_mod.bench_cell(device, cell, 0, BenchConfig(baselines=("naive",), seed=5),
                               lambda _m: None)
    by = {r["name"]: r for r in row["runners"]}
    assert by["ours"]["design"] == "zmarch" and by["fused"]["design"] == "temporal"
    assert by["fused"]["kind"] == "ours-fused" and by["fused"]["fused_steps"] == 4
    assert row["best_baseline"] == "naive"  # the faster fused runner is not a baseline
    headers, rows = report.temporal_rows({"cells": [row]})
    assert rows[0][headers.index("fused (steps/launch)")].endswith("(4)")


def test_a_split_temporal_operator_reports_its_steps_per_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Our temporal operator with fs=2 (two launches of two fused steps) is reported as 2
    steps per launch, not as the cell's 4 steps."""
    from kernforge.stencil import matrix as mx

    cell = Cell.parse("star_1_t4/16x12x10/fp32")
    op = mx.build("temporal", cell, {**mx.defaults("temporal", cell), "fs": 2})
    assert op is not None and len(op.launches) == 2
    monkeypatch.setattr(bench_mod, "operator_for", lambda c: op)
    row = bench_mod.bench_cell(HostDevice({"ours": 1e-3, "naive": 2e-3}), cell, 0,
                               BenchConfig(baselines=("naive",), seed=5), lambda _m: None)
    headers, rows = report.temporal_rows({"cells": [row]})
    assert rows[0][headers.index("fused (steps/launch)")].endswith("(2)")


def test_cli_bench_takes_cell_ids_and_only_the_cells_a_forge_run_changed(tmp_path, monkeypatch):
    """--cell-ids picks cells of any shape; --changed-from keeps those whose table entry
    differs between the given table (before a forge run) and the dispatch table (after it);
    none changed, or a missing table, is bad input (exit 2)."""
    from kernforge.core.jsonio import write_json_atomic
    from kernforge.stencil import matrix as mx

    monkeypatch.setattr(measure_mod, "GpuDevice", HostDevice)
    ids = ["star_1/16x12x10/fp32", "varcoeff_star_1/16x12x10/fp32", "star_2/18x12x10/fp64"]
    entry = {"design": "naive", "params": {"block": [32, 8, 1]}, "seconds": 1e-3}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    write_json_atomic(before, {"version": mx.TABLE_VERSION, "cells": {i: entry for i in ids}})
    write_json_atomic(after, {"version": mx.TABLE_VERSION, "cells": {
        **{i: entry for i in ids},
        ids[1]: {**entry, "params": {"block": [8, 4, 2]}}}})
    j = tmp_path / "b.json"
    base = ["stencil", "bench", "--in-process", "--baselines", "", "--repeat", "2", "--json",
            str(j)]
    assert main(base + ["--cell-ids", ",".join(ids)]) == 0
    assert [c["cell"] for c in json.loads(j.read_text())["cells"]] == ids
    assert main(base + ["--cell-ids", ",".join(ids), "--table", str(after),
                        "--changed-from", str(before)]) == 0
    (row,) = json.loads(j.read_text())["cells"]
    assert row["cell"] == ids[1] and "block=(8, 4, 2)" in row["runners"][0]["key"]
    assert main(base + ["--cell-ids", ids[0], "--table", str(after),
                        "--changed-from", str(before)]) == 2  # nothing changed there
    assert main(base + ["--cell-ids", ids[0], "--changed-from", str(tmp_path / "no.json")]) == 2
    assert main(base + ["--cell-ids", "star_1/16x12"]) == 2  # a bad cell id
