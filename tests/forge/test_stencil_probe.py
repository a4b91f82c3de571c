"""``kernforge stencil probe`` (kernforge.forge.probe): its source probes keep the operator's results (host emulator
against the float64 oracle), build for sm_90 with nvcc, and refuse kernels they cannot rewrite."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from kernforge.forge import probe
from kernforge.stencil import matrix as mx
from kernforge.stencil import oracle
from kernforge.stencil.emulate import emulate
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape


def _max_rel_error(op, cell: Cell) -> float:
    fields = oracle.random_fields(cell, seed=3)
    arrays = {"in": fields["in"], "out": fields["in"].copy()}
    if "coef" in fields:
        arrays["coef"] = fields["coef"]
    emulate(op, arrays)
    ref = oracle.reference(cell, fields["in"], fields.get("coef"))
    return float(np.abs(arrays["out"] - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize(("cell_id", "params"), [
    ("star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 2, "lz": 5}),     # 7 chunks, last short
    ("star_2/104x48x36/fp32", {"tx": 32, "ty": 4, "vx": 4, "lz": 7}),
    ("star_2/104x48x36/fp64", {"tx": 16, "ty": 8, "vx": 2, "lz": 4, "cw": 1}),
    ("varcoeff_star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 2, "lz": 8}),
    ("star_1/104x48x36/fp64", {"tx": 32, "ty": 8, "vx": 2, "lz": 0}),     # one chunk: never reversed
    pytest.param("star_2/104x48x36/fp64", {"tx": 16, "ty": 8, "vx": 2, "lz": 4, "xs": 1},
                 marks=pytest.mark.slow),  # x halo shuffled (the quick run: the varcoeff one)
    ("star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 2, "lz": 5, "pf": 2}),
    # the staged varcoeff kernels load the next coefficient plane at ``base + pf * NY * NX``
    ("varcoeff_star_1/104x48x36/fp32", {"tx": 32, "ty": 8, "vx": 2, "lz": 8, "pf": 2}),
    ("varcoeff_star_1/104x48x36/fp64", {"tx": 32, "ty": 4, "vx": 2, "lz": 7, "xs": 1}),
])
@pytest.mark.parametrize("remap", [True, False], ids=["zo", "zr"])
def test_z_order_keeps_the_results(cell_id: str, params: dict, remap: bool) -> None:
    cell = Cell.parse(cell_id)
    op = mx.build("zmarch", cell, {**mx.defaults("zmarch", cell), **params})
    assert op is not None
    zo = probe.z_order(op, remap=remap)
    # odd chunks really are reversed (a probe that did nothing would keep the results too)
    rev = re.search(r"const bool kf_rev = (.*);", zo.source)
    assert rev is not None and rev.group(1) == ("kf_ck & 1" if remap else "blockIdx.z & 1")
    assert zo.source.count("PZ(") >= 3 and ("kf_lin" in zo.source) == remap
    gate = 1e-5 if cell.precision is Precision.FP32 else 1e-12
    assert _max_rel_error(zo, cell) < gate


def test_the_probes_refuse_what_they_cannot_rewrite() -> None:
    cell = Cell.parse("star_2/512x512x512/fp32")
    plain = mx.build("zmarch", cell, mx.defaults("zmarch", cell))
    assert plain is not None
    for extra, probes in (({"pn": 1}, ("zo",)), ({"ry": 2}, ("zo", "l2", "bl2")),
                          ({"sc": 1}, ("zo", "l2")), ({"pf": 2}, ("l2", "bl2"))):
        op = mx.build("zmarch", cell, {**plain.params, **extra})
        assert op is not None
        for name in probes:
            hint = f"{next(iter(extra))}={1 if next(iter(extra)) in ('pf', 'ry') else 0}"
            with pytest.raises(probe.ProbeError, match=hint):
                {"zo": lambda o: probe.z_order(o), "l2": lambda o: probe.l2_prefetch(o, 2),
                 "bl2": lambda o: probe.bulk_prefetch(o, 2, 4)}[name](op)
    assert "prefetch.global.L2" in probe.l2_prefetch(
        mx.build("zmarch", cell, {**plain.params, "pn": 1}), 2).source
    box = Cell.parse("box_1/512x512x512/fp32")
    with pytest.raises(probe.ProbeError, match="z-marching"):
        probe.z_order(mx.build("zbox", box, mx.defaults("zbox", box)))
    with pytest.raises(probe.ProbeError, match="l2=D"):
        probe.variant(cell, "+l3=2")


def test_clusters_attach_to_every_kernel_and_refuse_what_does_not_divide() -> None:
    cell = Cell.parse("star_2/512x512x512/fp32")  # zmarch lz=8, tx=32, vx=4, ty=8: (4, 64, 64)
    op = mx.build("zmarch", cell, {**mx.defaults("zmarch", cell), "lz": 8})
    assert op is not None and op.launches[0].grid == (4, 64, 64)
    for axes, dims in (("y4", "1, 4, 1"), ("z2", "1, 1, 2"), ("x2y2", "2, 2, 1")):
        cl = probe.clustered(op, axes)
        assert cl.source.count(f"__cluster_dims__({dims})") == 1 and cl.notes == f"cl={axes}"
        assert cl.launches == op.launches and cl.params == op.params
    t4 = Cell.parse("star_1_t4/512x512x512/fp32")  # chained sweeps: one kernel, four launches
    chained = mx.build("zmarch", t4, {**mx.defaults("zmarch", t4), "lz": 8})
    assert chained is not None and len(chained.launches) == 4
    assert probe.clustered(chained, "y2").source.count("__cluster_dims__(1, 2, 1)") == 1
    for axes, match in (("x8", "does not divide"), ("y4z4", "at most 8"), ("w2", "x<N>y<N>z<N>"),
                        ("", "x<N>y<N>z<N>"), ("y2x2", "x<N>y<N>z<N>")):
        with pytest.raises(probe.ProbeError, match=match):
            probe.clustered(op, axes)
    assert probe.variant(cell, "+cl=y2").notes == "cl=y2"


@pytest.mark.parametrize(("cell_id", "design", "params"), [
    # another design than the table's (the A/B of star_2 fp32 1024x1024x32 queued in session 16)
    ("star_2/104x48x36/fp32", "planesweep", {"tx": 32, "ty": 2, "vx": 2, "ry": 8, "lz": 7,
                                             "st": 1, "ca": 1, "minb": 2}),
    ("box_1/104x48x36/fp64", "zbox", {"tx": 16, "ty": 8, "vx": 2, "lz": 5, "pw": 1}),
    ("star_1/104x48x36/fp16", "ztile", {"tx": 32, "ty": 4, "vx": 8, "lz": 6, "st": 2, "h2": 1}),
])
def test_a_variant_names_any_operator_by_its_key(cell_id: str, design: str, params: dict) -> None:
    cell = Cell.parse(cell_id)
    built = mx.build(design, cell, {**mx.defaults(design, cell), **params})
    assert built is not None
    op = probe.variant(cell, built.key)  # the key as the forge and the bench print it
    assert (op.design, op.params, op.source) == (built.design, built.params, built.source)
    assert probe.variant(cell, built.key + "+cl=x1").notes == "cl=x1"  # a source probe after it
    gate = {Precision.FP16: 1e-2, Precision.FP32: 1e-5, Precision.FP64: 1e-12}[cell.precision]
    assert _max_rel_error(op, cell) < gate


def test_a_named_operator_must_build_with_exactly_its_key() -> None:
    cell = Cell.parse("star_2/1024x1024x32/fp32")
    full = "planesweep[ca=1,lz=28,minb=2,ry=8,st=1,tx=64,ty=4,vx=2]"
    assert probe.variant(cell, full).key == full
    for spec, match in (("planesweep[lz=28]", r"builds planesweep\[lz=28,ry=4"),  # defaults shown
                        ("nosuch[lz=8]", "unknown stencil design"),
                        ("planesweep[lz=x]", "integer"),
                        ("planesweep[ca=1,lz=28,ry=8,tx=64,ty=4,vx=2]",  # ca needs st:
                         r"builds planesweep\[ca=1,lz=28,ry=8,st=2,"),  # only with one it builds
                        ("zbox[lz=8,tx=32,ty=8,vx=4]", "does not build")):   # zbox: box only
        with pytest.raises(probe.ProbeError, match=match):
            probe.variant(cell, spec)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the host nvcc")
def test_the_probes_compile_with_nvcc(tmp_path) -> None:
    from kernforge.forge.compile import compile_all

    ops = []
    for stencil in ("star_1", "star_2", "varcoeff_star_1"):
        for prec in Precision:
            cell = Cell(STENCILS[stencil], Shape(512, 512, 512), prec)
            op = mx.build("zmarch", cell, {**mx.defaults("zmarch", cell), "lz": 8})
            assert op is not None
            ops += [probe.z_order(op), probe.z_order(op, remap=False), probe.l2_prefetch(op, 4),
                    probe.bulk_prefetch(op, 4, prec.itemsize), probe.clustered(op, "y2")]
    box = Cell.parse("box_1/512x512x512/fp64")
    ops += [probe.clustered(mx.build(d, box, mx.defaults(d, box)), "y2")  # type: ignore[arg-type]
            for d in ("planesweep", "zbox")]
    built = compile_all(ops, tmp_path)
    failed = [(b.op.cell_id, b.op.notes, b.log[-300:]) for b in built if not b.ok]
    assert not failed, failed
