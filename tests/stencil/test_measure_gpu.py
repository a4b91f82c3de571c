"""Stencil measurement on a real GPU: load, check (full and sampled, on the device), time, bench.

Run on the device machine with ``pytest -m gpu tests/stencil``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernforge.cli.main import main
from kernforge.core import CompileError
from kernforge.forge.measure import DeviceCell, GpuDevice, OperatorRunner, load
from kernforge.stencil.kernels import naive
from kernforge.stencil.operator import Launch, Operator
from kernforge.stencil.spec import Cell

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device():
    pytest.importorskip("cupy")
    return GpuDevice()


def test_naive_star_1_fp32_checked_and_timed(device):
    cell = Cell.parse("star_1/64x64x64/fp32")
    dc = device.allocate(cell, seed=1)
    runner = OperatorRunner(load(naive.generate(cell)), dc, "naive")
    runner.run()
    device.synchronize()
    res = dc.check(runner.output())
    assert res.ok and res.detail["mode"] == "full" and res.error < 1e-6, res
    assert res.detail["boundary_touched"] == 0 and res.seed == 1
    sampled = dc.check(runner.output(), points=500)
    assert sampled.ok
    times = device.measure(runner, warmup=2, repeat=5)
    assert len(times) == 5 and all(0 < t < 0.1 for t in times)
    ab = device.compare(runner, runner, passes=3, per_pass=2)
    assert 0.5 < ab.speedup < 2.0
    copy = device.copy_bandwidth(cell.shape.points * 4)
    assert copy.bytes_per_s > 1e11 and set(copy.by_method) == {"memcpy", "kernel"}


def test_sampled_check_on_the_device_catches_planted_errors(device):
    cell = Cell.parse("star_1_t4/192x96x80/fp32")  # above the full-check limit: sampled
    dc = device.allocate(cell, seed=2)
    runner = OperatorRunner(load(naive.generate(cell)), dc)
    assert "tmp" in dc.fields  # allocated before any timed run
    runner.run()
    device.synchronize()
    out = dc.fields["out"]
    good = dc.check(out, points=2000)
    assert good.ok and good.detail["mode"] == "sampled", good
    out[1, 40, 50] += 1  # first interior z-plane
    assert not dc.check(out, points=0).ok
    out[1, 40, 50] -= 1
    saved = float(out[0, 3, 3])
    out[0, 3, 3] = np.float32(saved + 1)  # the boundary
    bad = dc.check(out, points=10)
    assert not bad.ok and bad.detail["boundary_touched"] == 1
    assert bad.where == "boundary_touched[0, 3, 3]"  # counted on the device, the z- face


def test_compile_error_is_mapped(device):
    cell = Cell.parse("star_1/64x64x64/fp32")
    op = Operator(cell.id, "broken", {}, 'extern "C" __global__ void k(float* o) { o[0] = ; }',
                  (Launch("k", (1, 1, 1), (1, 1, 1), ("out",)),))
    with pytest.raises(CompileError):
        load(op)


def test_device_cell_is_on_the_device(device):
    dc = DeviceCell.allocate(Cell.parse("varcoeff_star_1/64x64x64/fp16"), seed=3)
    assert type(dc.fields["in"]).__module__.startswith("cupy")
    assert sorted(dc.fields) == ["coef", "in", "out"]


def test_stencil_bench_two_small_cells(device, tmp_path):
    j, png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["stencil", "bench", "--stencils", "star_1,varcoeff_star_1", "--shapes",
               "128x64x64", "--precisions", "fp32", "--baselines", "naive,torch,halide",
               "--repeat", "5", "--passes", "3", "--json", str(j), "--png", str(png)])
    assert rc == 0
    data = json.loads(j.read_text())
    assert len(data["cells"]) == 2
    for row in data["cells"]:
        ours = row["runners"][0]
        assert ours["name"] == "ours" and ours["status"] == "ok", ours
        assert ours["time_s"] > 0 and ours["pct_copy"] > 0
        assert row["best_baseline"] is not None and row["speedup"] > 0
        kernels = ours["built"]["kernels"]  # registers and spills of our kernels, recorded
        assert kernels and all(k["num_regs"] > 0 for k in kernels.values())
        paired = row["copy_paired"]  # the copy timed in the operator's passes
        assert paired["method"] == row["copy"]["method"] and paired["copy_s"] > 0
        assert 0.5 < paired["pct_copy"] / ours["pct_copy"] < 2.0, (paired, ours["pct_copy"])
        halide = next(r for r in row["runners"] if r["name"] == "halide")
        if halide["status"] != "skipped":  # how the Halide baseline was built is recorded
            assert "cuda" in halide["built"]["target"]
            assert halide["built"]["run_time_extents"] is False
    assert data["summary"]["single_sweep"]["paired_cells"] >= 1
    assert png.stat().st_size > 1000


@pytest.mark.parametrize(("design", "cell_id", "params"), [
    ("ztile", "star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 16, "st": 1}),
    ("ztile", "star_1/104x48x36/fp16", {"tx": 16, "ty": 4, "vx": 8, "lz": 7, "st": 2}),
    ("ztile", "star_2/104x48x36/fp64", {"tx": 32, "ty": 8, "vx": 2, "lz": 0, "st": 4}),
    ("ztile", "star_2/104x48x36/fp16", {"tx": 32, "ty": 16, "vx": 4, "lz": 9, "st": 3}),
    ("ztile", "star_1_t4/104x48x36/fp32", {"tx": 32, "ty": 4, "vx": 2, "lz": 5, "st": 2}),
    # the x halo by warp shuffles: narrow rows (tx 8), two warps per row (tx 64), radius 2
    ("zmarch", "star_1/104x48x36/fp32", {"tx": 8, "ty": 8, "vx": 4, "lz": 6, "xs": 1}),
    ("zmarch", "star_2/104x48x36/fp16", {"tx": 64, "ty": 2, "vx": 2, "lz": 5, "pf": 2, "xs": 1}),
    ("zmarch", "varcoeff_star_1/104x48x36/fp64", {"tx": 16, "ty": 4, "vx": 2, "lz": 7, "xs": 1}),
    # neighbours loaded a plane ahead: alone, with the ring, with shuffles, radius 2
    ("zmarch", "star_1/104x48x36/fp16", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "pn": 1}),
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 16, "ty": 4, "vx": 2, "lz": 0, "pf": 2, "pn": 1}),
    ("zmarch", "varcoeff_star_1/104x48x36/fp16",
     {"tx": 32, "ty": 4, "vx": 8, "lz": 5, "xs": 1, "pn": 1}),
    # half2 arithmetic (fp16 z-marching): radius 1 and 2, the ring, varcoeff
    ("zmarch", "star_1/104x48x36/fp16", {"tx": 16, "ty": 8, "vx": 2, "lz": 9, "h2": 1}),
    ("zmarch", "star_2/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 8, "lz": 0, "pf": 2, "h2": 1}),
    ("zmarch", "varcoeff_star_1/104x48x36/fp16", {"tx": 32, "ty": 8, "vx": 4, "lz": 7, "h2": 1}),
    # box stencils by z-marching: rows loaded ahead or on use, both radii, every precision
    ("zbox", "box_1/104x48x36/fp32", {"tx": 16, "ty": 8, "vx": 2, "lz": 9}),
    ("zbox", "box_1/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 8, "lz": 0, "pn": 0}),
    ("zbox", "box_2/104x48x36/fp64", {"tx": 16, "ty": 4, "vx": 2, "lz": 5}),
    ("zbox", "box_2/104x48x36/fp16", {"tx": 8, "ty": 8, "vx": 4, "lz": 7, "pn": 0}),
    ("zbox", "box_1/104x48x36/fp16", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "h2": 1}),
    ("zbox", "box_2/104x48x36/fp16", {"tx": 16, "ty": 4, "vx": 8, "lz": 0, "h2": 1}),
    # fp64 weights in constant memory
    ("planesweep", "box_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 9, "cw": 1}),
    ("zmarch", "star_2/104x48x36/fp64", {"tx": 32, "ty": 8, "vx": 2, "lz": 7, "cw": 1}),
    # rows per thread (the last block of rows shifted: 46 and 44 interior rows) and streaming
    # stores
    ("zmarch", "star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 2, "lz": 7, "ry": 4}),
    ("zmarch", "star_2/104x48x36/fp64", {"tx": 16, "ty": 8, "vx": 2, "lz": 0, "ry": 2, "sc": 1,
                                         "cw": 1}),
    ("zmarch", "varcoeff_star_1/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 8, "lz": 9, "ry": 2,
                                                  "sc": 1}),
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 5, "sc": 1}),
    # zbox with the warm-up planes peeled
    ("zbox", "box_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "pw": 1}),
    ("zbox", "box_2/104x48x36/fp16", {"tx": 16, "ty": 4, "vx": 8, "lz": 0, "h2": 1, "pw": 1}),
    ("zbox", "box_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 2, "lz": 5, "pn": 0, "pw": 1}),
    # the largest L1 (a function attribute set at load)
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "l1": 1}),
    ("planesweep", "box_1/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 7,
                                            "l1": 1}),
    # a register cap for z-marching that spills (minb)
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "pn": 1, "minb": 8}),
    # z-chunks first in the launch order
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 5, "zo": 1}),
    ("zbox", "box_1/104x48x36/fp16", {"tx": 16, "ty": 4, "vx": 8, "lz": 7, "zo": 1}),
    ("temporal", "star_1_t4/104x48x36/fp32", {"tx": 32, "ty": 16, "lz": 8, "steps": 4,
                                               "pipe": 1, "zo": 1}),
    # a register cap that spills (minb): zbox and the plane sweep
    ("zbox", "box_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "minb": 8}),
    ("planesweep", "box_2/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 7,
                                            "minb": 12}),
    # the temporal kernel's boundary-free body for inner blocks and iteration groups (fi)
    ("temporal", "star_1_t4/104x48x36/fp32", {"tx": 32, "ty": 16, "lz": 8, "pipe": 1, "fi": 1}),
    ("temporal", "star_1_t4/104x48x36/fp64", {"tx": 16, "ty": 16, "lz": 7, "pipe": 1, "cx": 2,
                                               "pf": 2, "fi": 1}),
    ("temporal", "star_1_t4/104x48x36/fp16", {"tx": 16, "ty": 8, "lz": 9, "pipe": 1, "cy": 2,
                                               "fs": 2, "fi": 1}),
    # the temporal kernel in half2 arithmetic (h2): pairs, rows, the boundary-free body
    ("temporal", "star_1_t4/104x48x36/fp16", {"tx": 16, "ty": 16, "lz": 9, "pipe": 1, "cx": 2,
                                               "h2": 1}),
    ("temporal", "star_1_t4/104x48x36/fp16", {"tx": 16, "ty": 8, "lz": 7, "pipe": 1, "cx": 2,
                                               "cy": 2, "pf": 3, "fi": 1, "h2": 1}),
    ("temporal", "star_1_t4/104x48x36/fp16", {"tx": 8, "ty": 16, "lz": 0, "pipe": 1, "cx": 4,
                                               "pf": 2, "fs": 2, "fi": 1, "h2": 1}),
    # ztile's copies cached in L1 too (cp.async.ca)
    ("ztile", "star_2/104x48x36/fp32", {"tx": 16, "ty": 8, "vx": 4, "lz": 9, "st": 2, "ca": 1}),
    ("ztile", "star_1/104x48x36/fp16", {"tx": 8, "ty": 8, "vx": 8, "lz": 7, "st": 3, "ca": 1}),
    # the plane sweep staged by asynchronous copies (st, ca; session 15, queued for the GPU)
    ("planesweep", "box_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 9,
                                            "st": 2, "ca": 1}),
    ("planesweep", "box_2/104x48x36/fp32", {"tx": 16, "ty": 4, "vx": 2, "ry": 2, "lz": 7,
                                            "st": 3}),
    ("planesweep", "box_1/104x48x36/fp16", {"tx": 32, "ty": 2, "vx": 1, "ry": 4, "lz": 0,
                                            "st": 1, "ca": 1, "h2": 1}),
    # ztile in half2 arithmetic (h2, session 15)
    ("ztile", "star_2/104x48x36/fp16", {"tx": 16, "ty": 8, "vx": 8, "lz": 9, "st": 2, "ca": 1,
                                         "h2": 1}),
    ("ztile", "star_1/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 2, "lz": 7, "st": 3, "h2": 1}),
    ("ztile", "star_1_t4/104x48x36/fp16", {"tx": 8, "ty": 8, "vx": 4, "lz": 0, "st": 4, "ca": 1,
                                            "h2": 1}),
    # an L2 prefetch size on the loads (ld.global.nc.L2::256B) or the copies (session 17)
    ("planesweep", "box_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 9,
                                            "l2p": 256}),
    ("planesweep", "box_1/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 7,
                                            "h2": 1, "l2p": 128}),
    ("planesweep", "box_1/104x48x36/fp32", {"tx": 16, "ty": 4, "vx": 2, "ry": 2, "lz": 7,
                                            "st": 3, "ca": 1, "l2p": 256}),
    ("ztile", "star_2/104x48x36/fp64", {"tx": 16, "ty": 8, "vx": 2, "lz": 9, "st": 2, "ca": 1,
                                         "l2p": 128}),
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 9, "l2p": 256}),
    ("zmarch", "varcoeff_star_1/104x48x36/fp64", {"tx": 16, "ty": 8, "vx": 4, "lz": 7,
                                                   "pn": 1, "l2p": 128}),
    ("zmarch", "star_2/104x48x36/fp16", {"tx": 16, "ty": 8, "vx": 8, "lz": 7, "pf": 2, "h2": 1,
                                         "l2p": 256}),
    ("zbox", "box_1/104x48x36/fp16", {"tx": 16, "ty": 4, "vx": 8, "lz": 7, "h2": 1,
                                       "l2p": 256}),
    ("zbox", "box_1/104x48x36/fp32", {"tx": 16, "ty": 4, "vx": 4, "lz": 9, "pn": 0,
                                       "l2p": 128}),
    # streaming stores for the plane sweep and ztile (sc, session 17)
    ("planesweep", "box_1/104x48x36/fp16", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 7,
                                            "sc": 1}),
    ("planesweep", "box_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 9,
                                            "st": 2, "ca": 1, "sc": 1}),
    ("ztile", "star_2/104x48x36/fp64", {"tx": 16, "ty": 8, "vx": 2, "lz": 9, "st": 2, "ca": 1,
                                         "sc": 1}),
    ("ztile", "star_1/104x48x36/fp16", {"tx": 8, "ty": 8, "vx": 8, "lz": 7, "st": 3, "h2": 1,
                                         "sc": 1}),
    # whole-column z-chunks (lz 1024, clamped to the interior by the generators)
    ("zmarch", "star_2/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 1024}),
    ("ztile", "star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 1024, "st": 2}),
    ("zbox", "box_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 2, "lz": 1024}),
    ("planesweep", "box_1/104x48x36/fp32", {"tx": 32, "ty": 4, "vx": 1, "ry": 4, "lz": 1024}),
])
def test_later_kernels_match_the_oracle_on_the_gpu(device, design, cell_id, params):
    """The host emulator runs ztile's and the plane sweep's copies synchronously, models the
    shuffles and cannot see the real memory system; here the real cp.async rings (stage reuse,
    waits, barriers), warp
    shuffles, half2 arithmetic and the loads of zmarch's and zbox's later options are checked
    against the float64 oracle on every output point."""
    from kernforge.stencil import matrix as mx

    cell = Cell.parse(cell_id)
    op = mx.build(design, cell, params)
    assert op is not None
    dc = device.allocate(cell, seed=5)
    runner = OperatorRunner(load(op), dc, design)
    runner.run()
    device.synchronize()
    res = dc.check(runner.output())
    assert res.ok and res.detail["mode"] == "full", res
    assert res.detail["boundary_touched"] == 0
    if params.get("l1"):  # the carveout reached the loaded function
        fn = runner.loaded.functions[op.launches[0].entry]
        assert int(fn.preferred_shared_memory_carveout) == 0
