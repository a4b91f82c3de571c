"""Every stencil design, run by the host emulator on small grids, matches the float64 oracle.

Shapes are chosen so tiles, vectors and z-chunks do not divide the interior evenly (tails in
every dimension), and parameters differ from the defaults so the tests cover more than one
code path per design.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from kernforge.stencil import matrix as mx
from kernforge.stencil import oracle
from kernforge.stencil.emulate import emulate
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

from .design_cases import CASES

SHAPE = Shape(48, 22, 17)


def _run(cell: Cell, design: str, params: dict) -> tuple[np.ndarray, np.ndarray, dict]:
    op = mx.build(design, cell, params)
    assert op is not None, (design, params)
    fields = oracle.random_fields(cell, seed=7)
    inp = fields["in"]
    arrays = {"in": inp, "out": inp.copy()}
    if "coef" in fields:
        arrays["coef"] = fields["coef"]
    if op.needs_tmp:
        arrays["tmp"] = inp.copy()
    emulate(op, arrays)
    ref = oracle.reference(cell, inp, fields.get("coef"))
    return arrays["out"], ref, arrays


@pytest.mark.parametrize(("stencil", "design", "params", "prec"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_design_matches_oracle(stencil: str, design: str, params: dict, prec: str) -> None:
    cell = Cell(STENCILS[stencil], SHAPE, Precision(prec))
    out, ref, arrays = _run(cell, design, params)
    r = cell.radius
    err = np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err <= cell.precision.tolerance, f"{cell.id} {design}{params}: error {err:.3e}"
    # the boundary ring of ``out`` is exactly the input's (Dirichlet; never written)
    mask = np.ones(out.shape, bool)
    mask[r:-r, r:-r, r:-r] = False
    np.testing.assert_array_equal(out[mask], arrays["in"][mask])


def test_a_wrong_weight_is_caught() -> None:
    """The check is not vacuous: a design with one weight changed fails the oracle."""
    cell = Cell(STENCILS["star_1"], SHAPE, Precision.FP32)
    op = mx.build("zmarch", cell, {"tx": 8, "ty": 4, "vx": 4, "lz": 4})
    assert op is not None
    bad = type(op)(op.cell_id, op.design, op.params,
                   op.source.replace("constexpr float W3 =", "constexpr float W3 = 0.01f +"),
                   op.launches)
    fields = oracle.random_fields(cell, seed=3)
    arrays = {"in": fields["in"], "out": fields["in"].copy()}
    emulate(bad, arrays)
    ref = oracle.reference(cell, fields["in"])
    err = np.abs(arrays["out"].astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err > cell.precision.tolerance


def test_every_cell_has_an_operator_and_bad_params_are_refused() -> None:
    from kernforge.stencil.spec import matrix

    for cell in matrix():
        op = mx.operator_for(cell, table={})
        assert op.cell_id == cell.id and op.design != "naive"
    cell = Cell(STENCILS["box_2"], Shape(256, 256, 256), Precision.FP64)
    assert mx.build("planesweep", cell, {"tx": 64, "ty": 8, "vx": 2, "ry": 8, "lz": 64}) is None
    assert mx.build("zmarch", cell, mx.defaults("zmarch", Cell(STENCILS["star_1"], cell.shape,
                                                                  cell.precision))) is None


def test_later_parameters_default_to_the_first_kernels() -> None:
    """A parameter's old value rebuilds the operator it was added to: same key, same source
    (the dispatch table's operators and their source hashes do not move). The temporal design
    defaults to the pipelined rewrite (no table entry used the first kernel: it lost every cell
    on the H200), so its old kernel is asked for with pipe=0."""
    for stencil, design, extra in (("star_1", "zmarch", {"pf": 1, "smem": 0, "xs": 0, "pn": 0, "cw": 0,
                                                         "ry": 1, "sc": 0, "minb": 1, "l1": 0,
                                                         "zo": 0}),
                                   ("box_1", "planesweep", {"h2": 0, "cw": 0, "minb": 1, "l1": 0,
                                                            "zo": 0, "st": 0, "ca": 0}),
                                   ("box_2", "zbox", {"pw": 0, "h2": 0, "minb": 1, "l1": 0,
                                                      "zo": 0}),
                                   ("star_1", "ztile", {"ca": 0, "zo": 0, "l1": 0}),
                                   ("star_1_t4", "temporal", {"pipe": 0, "fs": 0, "minb": 1,
                                                              "pf": 1, "cx": 1, "cy": 1,
                                                              "zo": 0})):
        cell = Cell(STENCILS[stencil], Shape(512, 512, 512), Precision.FP32)
        base = {**mx.defaults(design, cell), **extra}
        first = mx.build(design, cell, {k: v for k, v in base.items() if k not in extra})
        again = mx.build(design, cell, base)
        assert first is not None and again is not None
        assert (first.key, first.source) == (again.key, again.source)
        assert not set(extra) & set(first.params)
    for stencil, design in (("star_2", "zmarch"), ("box_1", "planesweep"),  # fp16-only h2
                            ("star_1_t4", "temporal"), ("star_2", "ztile")):
        cell = Cell(STENCILS[stencil], Shape(512, 512, 512), Precision.FP16)
        first = mx.build(design, cell, {**mx.defaults(design, cell), "h2": 0})
        again = mx.build(design, cell, {k: v for k, v in mx.defaults(design, cell).items()
                                        if k != "h2"})
        assert first is not None and again is not None
        assert (first.key, first.source) == (again.key, again.source) and "h2" not in first.params
    cell = Cell(STENCILS["star_1_t4"], Shape(512, 512, 512), Precision.FP32)
    # pf/cx/cy need the pipelined kernel; fs must divide the steps; 2 blocks of 1024 at most
    assert mx.build("temporal", cell, {"pf": 2}) is None
    assert mx.build("temporal", cell, {"pipe": 1, "fs": 3}) is None
    assert mx.build("temporal", cell, {"pipe": 1, "minb": 3}) is None
    # box designs: minb blocks of the block's threads must fit 2048 threads per SM
    box2 = Cell(STENCILS["box_2"], cell.shape, cell.precision)
    assert mx.build("zbox", box2, {"tx": 32, "ty": 8, "minb": 8}) is not None
    assert mx.build("zbox", box2, {"tx": 32, "ty": 8, "minb": 12}) is None
    assert mx.build("planesweep", box2, {"tx": 32, "ty": 4, "minb": 0}) is None
    # h2 needs fp16 and vertical pairs
    assert mx.build("planesweep", Cell(STENCILS["box_1"], cell.shape, Precision.FP32),
                    {"h2": 1}) is None
    assert mx.build("planesweep", Cell(STENCILS["box_1"], cell.shape, Precision.FP16),
                    {"ry": 1, "h2": 1}) is None
    assert mx.build("zmarch", Cell(STENCILS["star_1"], cell.shape, Precision.FP32),
                    {"h2": 1}) is None
    assert mx.build("zmarch", Cell(STENCILS["star_1"], cell.shape, Precision.FP16),
                    {"vx": 1, "h2": 1}) is None
    assert mx.build("zmarch", Cell(STENCILS["star_1"], cell.shape, Precision.FP16),
                    {"xs": 1, "h2": 1}) is None
    assert mx.build("zmarch", Cell(STENCILS["star_1"], cell.shape, Precision.FP32),
                    {"smem": 1, "pn": 1}) is None
    assert mx.build("zbox", Cell(STENCILS["box_1"], cell.shape, Precision.FP32),
                    {"h2": 1}) is None
    assert mx.build("zbox", Cell(STENCILS["box_1"], cell.shape, Precision.FP16),
                    {"vx": 1, "h2": 1}) is None  # lane pairs need an even vx
    assert mx.build("planesweep", Cell(STENCILS["box_1"], cell.shape, Precision.FP32),
                    {"cw": 1}) is None
    assert mx.build("zbox", Cell(STENCILS["box_2"], cell.shape, Precision.FP16),
                    {"vx": 1}) is None  # the x halo of radius 2 needs 2 lanes
    assert mx.build("zbox", Cell(STENCILS["star_1"], cell.shape, Precision.FP32), {}) is None
    # ztile: star only, 16-byte aligned tiles, a ring that fits in shared memory
    assert mx.build("ztile", Cell(STENCILS["box_1"], cell.shape, cell.precision), {}) is None
    assert mx.build("ztile", Cell(STENCILS["varcoeff_star_1"], cell.shape, cell.precision),
                    {}) is None
    assert mx.build("ztile", cell, {"tx": 1, "vx": 2}) is None  # 8 bytes wide: not 16
    fp64 = Cell(STENCILS["star_2"], cell.shape, Precision.FP64)
    assert mx.build("ztile", fp64, {"tx": 128, "ty": 8, "vx": 2, "st": 6}) is None  # > 227 KiB
    assert mx.build("ztile", fp64, {"tx": 64, "ty": 8, "vx": 2, "st": 6}) is not None
    assert mx.build("ztile", cell, {"st": 5}) is None
    split = mx.build("temporal", cell, {"pipe": 1, "fs": 2})
    assert split is not None and split.needs_tmp and len(split.launches) == 2


@pytest.mark.parametrize(("stencil", "design", "params"), [
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "h2": 1}),
    ("box_2", "zbox", {"tx": 8, "ty": 2, "vx": 8, "lz": 0, "h2": 1}),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "h2": 1}),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "h2": 1}),
    ("star_1", "ztile", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "st": 2, "h2": 1}),
    ("star_2", "ztile", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "st": 3, "h2": 1}),
])
def test_half2_kernels_apply_each_weight_to_its_offset(stencil: str, design: str,
                                                       params: dict) -> None:
    """fp16's gate (1e-2) lets two similar weights trade places unseen on random inputs; on an
    impulse every output near it is one weight times one input, so each weight must land on
    its own offset to fp16 rounding (relative 2^-11)."""
    cell = Cell(STENCILS[stencil], SHAPE, Precision.FP16)
    op = mx.build(design, cell, params)
    assert op is not None
    inp = np.zeros(SHAPE.array_shape, np.float16)
    inp[8, 11, 21] = 1.0
    arrays = {"in": inp, "out": inp.copy()}
    coef = np.full(SHAPE.array_shape, 0.5, np.float16) if cell.stencil.kind == "varcoeff" else None
    if coef is not None:
        arrays["coef"] = coef
    emulate(op, arrays)
    ref = oracle.reference(cell, inp, coef)
    r = cell.radius
    core = (slice(r, -r),) * 3
    got, want = arrays["out"][core].astype(np.float64), ref[core]
    assert np.count_nonzero(want) == cell.stencil.points
    np.testing.assert_allclose(got, want, rtol=2.0 ** -10, atol=0)


@pytest.mark.parametrize(("stencil", "design"), [("star_1", "zmarch"), ("varcoeff_star_1", "zmarch"),
                                                 ("star_1_t4", "zmarch"), ("box_2", "zbox"),
                                                 ("box_1", "planesweep"), ("star_2", "ztile")])
def test_l1_sets_the_carveout_and_marks_the_source(stencil: str, design: str) -> None:
    """``l1=1``: every launch asks for a 0% shared-memory carveout, and the source differs (a
    comment), so a module cache keyed by source never hands one function to both variants."""
    cell = Cell(STENCILS[stencil], Shape(256, 256, 256), Precision.FP32)
    base = mx.build(design, cell, mx.defaults(design, cell))
    big = mx.build(design, cell, {**mx.defaults(design, cell), "l1": 1})
    assert base is not None and big is not None
    assert all(launch.carveout == -1 for launch in base.launches)
    assert len(big.launches) == len(base.launches)
    assert all(launch.carveout == 0 for launch in big.launches)
    assert big.source != base.source and big.source.endswith(base.source)
    assert "l1=1" in big.key and "l1" not in base.key
    assert mx.build(design, cell, {**mx.defaults(design, cell), "l1": 2}) is None


@pytest.mark.parametrize(("stencil", "design"), [("star_1", "zmarch"), ("star_1_t4", "temporal"),
                                                 ("box_2", "zbox"), ("box_1", "planesweep"),
                                                 ("star_2", "ztile")])
def test_zo_puts_the_z_chunks_first(stencil: str, design: str) -> None:
    """``zo=1``: the grid (x, y, z) becomes (z, x, y) and every ``blockIdx`` axis is renamed to
    match, so each block computes the tile it computed before; nothing else changes."""
    cell = Cell(STENCILS[stencil], Shape(256, 256, 256), Precision.FP32)
    params = {**mx.defaults(design, cell), "lz": 16}
    base = mx.build(design, cell, params)
    zo = mx.build(design, cell, {**params, "zo": 1})
    assert base is not None and zo is not None
    assert [launch.grid for launch in zo.launches] == [
        (gz, gx, gy) for gx, gy, gz in (launch.grid for launch in base.launches)]
    assert base.launches[0].grid[2] > 1  # a real permutation
    rename = {"blockIdx.x": "blockIdx.y", "blockIdx.y": "blockIdx.z", "blockIdx.z": "blockIdx.x"}
    want = re.sub(r"blockIdx\.[xyz]", lambda m: rename[m.group(0)], base.source)
    assert zo.source.endswith(want) and zo.source != base.source
    assert "zo=1" in zo.key and "zo" not in base.key
    assert mx.build(design, cell, {**params, "zo": 2}) is None


@pytest.mark.parametrize("extra", [{}, {"pf": 2}, {"h2": 1}, {"ry": 2}, {"smem": 1}])
def test_zmarch_minb_caps_registers_through_launch_bounds(extra: dict) -> None:
    """``minb`` reaches every z-marching kernel's ``__launch_bounds__`` (and the key); a
    count of blocks that cannot fit one SM is refused."""
    cell = Cell(STENCILS["star_1"], Shape(256, 256, 256), Precision.FP16)
    params = {**mx.defaults("zmarch", cell), **extra}
    base = mx.build("zmarch", cell, params)
    capped = mx.build("zmarch", cell, {**params, "minb": 6})
    assert base is not None and capped is not None
    threads = params["tx"] * params["ty"]
    assert f"__launch_bounds__({threads})" in base.source
    assert f"__launch_bounds__({threads}, 6)" in capped.source
    assert "minb=6" in capped.key and "minb" not in base.key
    assert mx.build("zmarch", cell, {**params, "minb": 16}) is None  # 16 x 256 > 2048 threads


def test_launch_refuses_a_bad_carveout() -> None:
    from kernforge.stencil.operator import Launch

    assert Launch("k", (1, 1, 1), (1, 1, 1), ("in", "out"), carveout=100).carveout == 100
    for bad in (-2, 101):
        with pytest.raises(ValueError, match="carveout"):
            Launch("k", (1, 1, 1), (1, 1, 1), ("in", "out"), carveout=bad)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
def test_minb_caps_the_registers(tmp_path) -> None:
    """``minb`` blocks of 256 threads per SM leave ptxas 65536 / (256 * minb) registers per
    thread: box_2 fp32 by z-marching uses more than 64 without the cap (sm_90)."""
    import re
    import subprocess

    cell = Cell(STENCILS["box_2"], Shape(512, 512, 512), Precision.FP32)
    used = {}
    for minb in (1, 4, 8):
        op = mx.build("zbox", cell, {"tx": 32, "ty": 8, "vx": 4, "lz": 128, "minb": minb})
        assert op is not None and (f"__launch_bounds__(256, {minb})" in op.source) == (minb > 1)
        src = tmp_path / f"minb{minb}.cu"
        src.write_text(op.source)
        proc = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o",
                               str(tmp_path / f"minb{minb}.cubin"), str(src)],
                              capture_output=True, text=True, check=True)
        found = re.search(r"Used (\d+) registers", proc.stdout + proc.stderr)
        assert found, proc.stderr[-500:]
        used[minb] = int(found.group(1))
    assert used[1] > 64 >= used[4] and used[8] <= 32, used


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
def test_later_options_compile_with_nvcc(tmp_path) -> None:
    """The emulator compiles CUDA as host C++, which accepts things nvcc does not: every
    session-6/7 kernel variant (zbox with and without h2/pn, zmarch h2/pn/ry/sc) at a matrix shape in
    every precision it supports builds a cubin for sm_90."""
    from kernforge.forge.compile import compile_all

    ops = []
    for stencil, design, variants in (
            ("box_1", "zbox", ({}, {"pn": 0}, {"h2": 1})),
            ("box_2", "zbox", ({}, {"h2": 1}, {"pw": 1, "h2": 1})),
            ("box_1", "zbox", ({"pw": 1}, {"pw": 1, "pn": 0})),
            ("box_2", "planesweep", ({"cw": 1},)),
            ("star_2", "zmarch", ({"cw": 1},)),
            ("star_2", "zmarch", ({"pn": 1}, {"h2": 1, "pf": 2}, {"pn": 1, "xs": 1})),
            ("varcoeff_star_1", "zmarch", ({"h2": 1}, {"pn": 1}, {"ry": 2, "sc": 1})),
            ("star_1", "zmarch", ({"ry": 2}, {"ry": 4, "vx": 2}, {"sc": 1}, {"ry": 2, "sc": 1},
                                  {"sc": 1, "vx": 1}, {"sc": 1, "vx": 2})),  # every store piece
            ("star_2", "zmarch", ({"ry": 2, "sc": 1},)),
            ("star_2", "ztile", ({"h2": 1, "ca": 1}, {"h2": 1, "vx": 4, "st": 3})),
            ("box_1", "planesweep", ({"st": 2, "ca": 1, "h2": 1}, {"st": 2, "ca": 1, "vx": 2},
                                     {"st": 3, "cw": 1})),
            ("star_1", "ztile", ({"h2": 1, "vx": 2},)),
            ("box_1", "planesweep", ({"l2p": 256}, {"l2p": 128, "h2": 1},
                                     {"st": 2, "ca": 1, "l2p": 256})),
            ("star_2", "ztile", ({"ca": 1, "l2p": 128},)),
            ("box_1", "zbox", ({"l2p": 256}, {"l2p": 128, "h2": 1, "pn": 0})),
            ("box_1", "planesweep", ({"sc": 1}, {"sc": 1, "st": 2, "ca": 1, "h2": 1})),
            ("star_2", "ztile", ({"sc": 1}, {"sc": 1, "h2": 1, "vx": 4})),
            ("varcoeff_star_1", "zmarch", ({"l2p": 256, "vx": 1}, {"l2p": 128, "pf": 2, "pn": 1},
                                           {"l2p": 256, "h2": 1}, {"l2p": 256, "ry": 2})),
            ("star_1_t4", "temporal", ({"pipe": 1, "fi": 1}, {"pipe": 1, "fi": 1, "cx": 2,
                                                              "cy": 2, "fs": 2}))):
        for prec in Precision:
            cell = Cell(STENCILS[stencil], Shape(256, 256, 256), prec)
            for extra in variants:
                op = mx.build(design, cell, {**mx.defaults(design, cell), **extra})
                if op is None:
                    assert (("h2" in extra and prec is not Precision.FP16)
                            or ("cw" in extra and prec is not Precision.FP64)
                            or ("st" in extra and design == "planesweep"  # fp16: h2 only
                                and prec is Precision.FP16 and "h2" not in extra)), (cell.id,
                                                                                     extra)
                    continue
                ops.append(op)
    assert len(ops) >= 20
    built = compile_all(ops, tmp_path)
    failed = [(b.op.cell_id, b.op.key, b.log[-300:]) for b in built if not b.ok]
    assert not failed, failed


@pytest.mark.parametrize("design", ["zbox", "zmarch", "planesweep", "ztile", "temporal"])
def test_distinct_kernels_have_distinct_keys(design: str) -> None:
    """The forge caches compiled runners by ``op.key``: a parameter changed from the defaults
    either leaves the source alone or changes the key (a parameter left out of the key would
    have one key name two kernels)."""
    for stencil in ("star_1", "box_1", "box_2", "varcoeff_star_1", "star_1_t4"):
        for prec in Precision:
            cell = Cell(STENCILS[stencil], Shape(512, 512, 512), prec)
            if design not in mx.applicable(cell):
                continue
            base = mx.defaults(design, cell)
            seen: dict[str, str] = {}
            for name, values in mx.space(design, cell).items():
                for value in values:
                    op = mx.build(design, cell, {**base, name: value})
                    if op is not None:
                        assert seen.setdefault(op.key, op.source) == op.source, \
                            (cell.id, name, value)


@pytest.mark.parametrize(("prec", "params"), [
    ("fp32", {"tx": 16, "ty": 12, "lz": 6}),
    ("fp64", {"tx": 8, "ty": 12, "lz": 8, "cx": 2, "pf": 2}),
    ("fp16", {"tx": 8, "ty": 8, "lz": 6, "cx": 2, "cy": 2, "pf": 3}),
    ("fp32", {"tx": 16, "ty": 8, "lz": 5, "cy": 2, "fs": 2}),
])
@pytest.mark.slow
def test_temporal_fast_interior_body_changes_no_bit(prec: str, params: dict) -> None:
    """``fi=1`` runs a copy of the body without the boundary selects where no point of an
    iteration group is a boundary point: bit for bit the same results as ``fi=0`` (the same
    sums in the same order), on a grid where both bodies run (edge and inner blocks, edge and
    inner iteration groups)."""
    from kernforge.stencil.kernels import temporal_pipe

    cell = Cell(STENCILS["star_1_t4"], Shape(64, 40, 40), Precision(prec))
    params = {**params, "pipe": 1}
    fast = mx.build("temporal", cell, {**params, "fi": 1})
    plain = mx.build("temporal", cell, params)
    assert fast is not None and plain is not None and fast.key != plain.key
    assert fast.launches == plain.launches and "fast_xy &&" in fast.source
    assert "fast_xy" not in plain.source
    # the fast body runs somewhere here: a block with its tile inside the grid, and an
    # iteration group with all its stage planes inside
    steps = params.get("fs") or cell.stencil.steps
    w, h, m, bw, bh = temporal_pipe.geometry(cell, steps, params["tx"], params["ty"],
                                             params.get("cx", 1), params.get("cy", 1))
    gx, gy, gz = fast.launches[0].grid
    inner = [(bx, by) for bx in range(gx) for by in range(gy)
             if 1 - steps - m + bx * bw >= 1 and 1 - steps - m + bx * bw + w - 1 <= 62
             and 1 - steps + by * bh >= 1 and 1 - steps + by * bh + h - 1 <= 38]
    u = int(re.search(r"k \+= (\d+)\)", fast.source).group(1))  # type: ignore[union-attr]
    groups = [k for bz in range(gz)
              for k in range(max(1 + bz * params["lz"] - steps, 0) + 1,
                             min(1 + (bz + 1) * params["lz"], 39) + 2 * steps, u)
              if k - 2 * steps >= 1 and k + u - 3 <= 38]
    assert inner and groups and len(inner) < gx * gy
    out_fast, ref, _ = _run(cell, "temporal", {**params, "fi": 1})
    out_plain, _, _ = _run(cell, "temporal", params)
    np.testing.assert_array_equal(out_fast, out_plain)
    err = np.abs(out_fast.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err <= cell.precision.tolerance


@pytest.mark.slow
def test_temporal_fast_interior_body_with_the_z_chunks_first() -> None:
    """``zo`` renames every blockIdx axis of the source, the fast body's tile test included."""
    cell = Cell(STENCILS["star_1_t4"], Shape(64, 40, 40), Precision.FP32)
    params = {"tx": 16, "ty": 12, "lz": 6, "pipe": 1}
    both = mx.build("temporal", cell, {**params, "fi": 1, "zo": 1})
    assert both is not None and "fast_xy = -3 + (int)blockIdx.y * 8 >= 1" in both.source  # x: y
    out, ref, _ = _run(cell, "temporal", {**params, "fi": 1, "zo": 1})
    plain, _, _ = _run(cell, "temporal", params)
    np.testing.assert_array_equal(out, plain)
    assert np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max() <= 1e-4


H2_LAYOUTS = [
    {"tx": 8, "ty": 12, "lz": 6, "cx": 2},
    {"tx": 8, "ty": 8, "lz": 5, "cx": 2, "cy": 2, "pf": 3},
    {"tx": 4, "ty": 16, "lz": 0, "cx": 4, "pf": 2},
    {"tx": 8, "ty": 8, "lz": 6, "cx": 2, "cy": 2, "fi": 1, "fs": 2},
    {"tx": 8, "ty": 12, "lz": 7, "cx": 4, "pf": 4, "fi": 1, "zo": 1},
]


@pytest.mark.slow
def test_temporal_half2_arithmetic_matches_the_oracle_in_every_layout() -> None:
    """``h2=1``: the fused kernel in ``__half2`` arithmetic. Every layout (pairs per thread,
    rows per thread, planes in flight, the boundary-free body, split launches, chunk order)
    computes the same fp16 sums in the same order, so all give the same bits; the result is
    inside the fp16 gate and is not the fp32-accumulating kernel's (the arithmetic did change)."""
    cell = Cell(STENCILS["star_1_t4"], Shape(64, 40, 40), Precision.FP16)
    outs = []
    for params in H2_LAYOUTS:
        op = mx.build("temporal", cell, {**params, "pipe": 1, "h2": 1})
        assert op is not None and op.params["h2"] == 1 and "__hfma2(" in op.source, params
        out, ref, arrays = _run(cell, "temporal", {**params, "pipe": 1, "h2": 1})
        err = np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max()
        assert err <= cell.precision.tolerance, (params, err)
        mask = np.ones(out.shape, bool)
        mask[1:-1, 1:-1, 1:-1] = False
        np.testing.assert_array_equal(out[mask], arrays["in"][mask])
        outs.append(out)
    for params, out in zip(H2_LAYOUTS[1:], outs[1:], strict=True):
        np.testing.assert_array_equal(out, outs[0], err_msg=str(params))
    acc32, _, _ = _run(cell, "temporal", {**H2_LAYOUTS[0], "pipe": 1})
    assert not np.array_equal(acc32, outs[0])


def test_temporal_half2_refuses_what_it_cannot_pair() -> None:
    fp16 = Cell(STENCILS["star_1_t4"], Shape(512, 512, 512), Precision.FP16)
    fp32 = Cell(STENCILS["star_1_t4"], Shape(512, 512, 512), Precision.FP32)
    base = {"tx": 32, "ty": 16, "lz": 64, "pipe": 1, "h2": 1}
    assert mx.build("temporal", fp16, {**base, "cx": 2}) is not None
    assert mx.build("temporal", fp16, base) is None  # cx=1: no pairs
    assert mx.build("temporal", fp16, {**base, "cx": 2, "pipe": 0}) is None
    assert mx.build("temporal", fp32, {**base, "cx": 2}) is None  # fp16 storage only
    assert "h2" in mx.space("temporal", fp16) and "h2" not in mx.space("temporal", fp32)
    # half the shared memory of the fp32-accumulating kernel
    h2 = mx.build("temporal", fp16, {**base, "cx": 2})
    f32 = mx.build("temporal", fp16, {**base, "cx": 2, "h2": 0})
    assert h2 is not None and f32 is not None
    assert 2 * h2.launches[0].shared_bytes == f32.launches[0].shared_bytes


@pytest.mark.slow
@pytest.mark.parametrize("design,cell_id,params", [
    ("planesweep", "box_1/256x256x256/fp64", {"ry": 4, "tx": 32, "ty": 4, "vx": 1, "lz": 32}),
    ("planesweep", "box_1/256x256x256/fp16", {"ry": 4, "tx": 32, "ty": 4, "vx": 1, "lz": 32,
                                              "h2": 1}),
    ("planesweep", "box_1/256x256x256/fp32", {"ry": 4, "tx": 64, "ty": 2, "vx": 1, "lz": 16,
                                              "st": 3, "ca": 1}),
    ("ztile", "star_2/256x256x256/fp64", {"tx": 64, "ty": 8, "vx": 2, "lz": 64, "st": 2,
                                          "ca": 1}),
    ("zmarch", "star_2/256x256x256/fp32", {"tx": 32, "ty": 8, "vx": 4, "lz": 8, "pn": 1}),
    ("zmarch", "varcoeff_star_1/256x256x256/fp64", {"tx": 32, "ty": 8, "vx": 4, "lz": 8}),
    ("zmarch", "star_1/256x256x256/fp16", {"tx": 32, "ty": 8, "vx": 8, "lz": 8, "h2": 1,
                                           "pf": 2}),
    ("zbox", "box_1/256x256x256/fp16", {"tx": 32, "ty": 4, "vx": 8, "lz": 32, "h2": 1}),
])
def test_l2p_puts_the_prefetch_size_on_every_plane_load(tmp_path, design, cell_id,
                                                         params) -> None:
    """``l2p=0`` is the kernel without the option (same source, same key; session 17 compared
    the sources of 390 table and default operators with the code before it); 128 and 256 put
    ``.L2::<n>B`` on the plane loads or copies (in the PTX nvcc emits, when nvcc is here; for
    z-marching and zbox their vector loads, not the scalar x halo; for ztile its copies, not the
    queue's warm-up loads), under their own key; other sizes do not build."""
    cell = Cell.parse(cell_id)
    base = mx.build(design, cell, params)
    assert base is not None and "l2p" not in base.key and "L2::" not in base.source
    assert mx.build(design, cell, {**params, "l2p": 0}).source == base.source
    assert all(mx.build(design, cell, {**params, "l2p": bad}) is None
               for bad in (64, -1, 128.0, "128", None))
    for n in (128, 256):
        op = mx.build(design, cell, {**params, "l2p": n})
        assert op is not None and f"l2p={n}" in op.key and f".L2::{n}B" in op.source
        if shutil.which("nvcc") is None:
            continue
        cu = tmp_path / f"k{n}.cu"
        cu.write_text(op.source)
        subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", str(tmp_path / "k.ptx"), str(cu)],
                       check=True, capture_output=True)
        ptx = (tmp_path / "k.ptx").read_text()
        loads = re.findall(r"\b(?:ld\.global|cp\.async\.c[ag])\S*", ptx)
        if design in ("zmarch", "zbox"):  # the vector loads (the x halo's scalars stay plain)
            loads = [x for x in loads if ".v" in x]
        if design == "ztile":  # the staged copies (the queue's warm-up loads stay plain)
            loads = [x for x in loads if x.startswith("cp.async")]
        assert loads and all(f".L2::{n}B" in x for x in loads), sorted(set(loads))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
@pytest.mark.parametrize("design,cell_id,params", [
    ("planesweep", "box_1/256x256x256/fp64", {"ry": 4, "tx": 32, "ty": 4, "vx": 1, "lz": 32}),
    pytest.param("planesweep", "box_1/256x256x256/fp16",
                 {"ry": 4, "tx": 64, "ty": 2, "vx": 2, "lz": 16, "st": 3, "ca": 1, "h2": 1},
                 marks=pytest.mark.slow),
    ("ztile", "star_2/256x256x256/fp32", {"tx": 64, "ty": 8, "vx": 4, "lz": 64, "st": 2}),
])
def test_sc_makes_the_output_stores_streaming(tmp_path, design, cell_id, params) -> None:
    """``sc=1``: the interior output stores are ``st.global.cs`` in the PTX (the plane sweep:
    every store; ztile: its whole-vector stores), ``sc=0`` has none."""
    cell = Cell.parse(cell_id)
    assert mx.build(design, cell, {**params, "sc": 2}) is None
    for sc in (0, 1):
        op = mx.build(design, cell, {**params, "sc": sc})
        assert op is not None and ("sc=1" in op.key) == bool(sc)
        cu = tmp_path / f"k{sc}.cu"
        cu.write_text(op.source)
        subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", str(tmp_path / "k.ptx"), str(cu)],
                       check=True, capture_output=True)
        stores = re.findall(r"\bst\.global\S*", (tmp_path / "k.ptx").read_text())
        streaming = [x for x in stores if ".cs" in x]
        if not sc:
            assert stores and not streaming, sorted(set(stores))
        elif design == "planesweep":
            assert stores == streaming, sorted(set(stores))
        else:
            assert streaming and any(".v" in x for x in streaming), sorted(set(stores))
