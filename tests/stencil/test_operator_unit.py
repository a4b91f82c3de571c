"""A matrix operator as a cuda variant through the product's paths, on the host emulator (no
GPU): recorded as a replay unit, validated by ``replay.validate`` (every gate), exported as a
deployment entry and deployed into a launch through ``kernforge.Kernel``. Timings on the
emulator mean nothing: the regression band is opened and significance is stated, not
measured, where a test needs it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kernforge import deploy
from kernforge.apps.operator_unit import (
    deploy_entry,
    operator_variant,
    record_operator,
    validate_operator,
)
from kernforge.backends import base
from kernforge.backends.kernel import Kernel
from kernforge.core import ConfigError, Status
from kernforge.core.verdict import Judgement, Verdict
from kernforge.deploy.spec import read_spec, write_spec
from kernforge.harness.compare import ABResult
from kernforge.replay.checks import Integrity
from kernforge.stencil import emulate
from kernforge.stencil import matrix as mx
from kernforge.stencil.kernels import naive
from kernforge.stencil.oracle import reference
from kernforge.stencil.spec import STENCILS, Cell, custom

from .emulated_cuda import EmulatedCuda

CELL = Cell.parse("star_1/40x20x16/fp32")
# the gates in full but fewer repetitions; timings mean nothing here, so no regression gate
FAST = {"integrity": Integrity(verify_runs=2, fresh_trials=1, roofline=False), "passes": 2,
        "per_pass": 1, "warmup": 0, "band": 1.0}


@pytest.fixture(scope="module")
def backend() -> EmulatedCuda:
    return EmulatedCuda()


@pytest.fixture(scope="module")
def recording(backend: EmulatedCuda, tmp_path_factory: pytest.TempPathFactory):
    return record_operator(naive.generate(CELL), tmp_path_factory.mktemp("rec"),
                           backend=backend, seed=5)


def test_the_unit_is_the_reference_launch_with_the_oracles_gate(recording) -> None:
    op = naive.generate(CELL)
    assert recording.backend == "cuda" and recording.source.code == op.source
    assert recording.source.entry == op.launches[0].entry
    assert recording.launch.grid == op.launches[0].grid
    src, dst = recording.args
    assert (src.name, src.written, dst.name, dst.written) == ("src", False, "dst", True)
    assert src.policy.exact and dst.policy.mode == "abs"
    before, after = recording.prologue("dst"), recording.expected("dst")
    assert np.isnan(before[1:-1, 1:-1, 1:-1]).all()  # a point left unwritten fails
    ref = reference(CELL, recording.prologue("src"))
    assert np.abs(after - ref).max() <= dst.policy.atol <= CELL.precision.tolerance


def test_a_matrix_operator_goes_through_validate_as_a_variant(backend, recording) -> None:
    op = mx.operator_for(CELL)
    assert op.design != "naive" and len(op.launches) == 1
    v = validate_operator(op, recording, backend=backend, **FAST)
    # every gate passed; the speed verdict on emulated timings may go either way
    assert v.status is Status.OK and v.verdict in ("accepted", "inconclusive"), v.message
    assert v.variant == operator_variant(op).key()
    for gate in ("static", "verify", "poison", "fresh"):
        assert gate in v.notes, v.notes
    assert v.ab is not None and v.ab.passes >= 2


def test_an_operator_with_other_weights_is_rejected(backend, recording) -> None:
    w = dict(zip(STENCILS["star_1"].offsets, [0.5] + [0.5 / 6] * 6, strict=True))
    other = naive.generate(Cell(custom("star", 1, w), CELL.shape, CELL.precision))
    v = validate_operator(replace(other, cell_id=CELL.id), recording, backend=backend, **FAST)
    assert not v.accepted and v.status is Status.WRONG_RESULT
    assert v.reason == "verify:recorded" and "dst" in v.message


def test_what_is_not_one_variant_of_this_unit_is_refused(recording) -> None:
    chained = naive.generate(Cell.parse("star_1_t4/40x20x16/fp32"))
    with pytest.raises(ConfigError, match="4 launches") as info:
        operator_variant(chained)
    assert "fused" in (info.value.hint or "")
    with pytest.raises(ConfigError, match="carveout"):  # a Variant would drop it
        operator_variant(mx.from_key(CELL, "zmarch[l1=1,lz=8,tx=32,ty=8,vx=4]"))
    elsewhere = mx.operator_for(Cell.parse("star_1/40x20x24/fp32"))
    with pytest.raises(ConfigError, match="shape"):
        validate_operator(elsewhere, recording)


def _significant(v, speedup: float = 1.5):
    """The validation with a significant interleaved result (the emulator's is noise)."""
    ab = v.ab
    ab = ABResult((speedup,) * 3, ab.samples_a, ab.samples_b, ab.first, speedup, speedup)
    speed = Judgement(Verdict.FASTER, "faster (set by the test)", speedup, (speedup, speedup))
    return replace(v, ab=ab, speedup=speedup, verdict="accepted", speed=speed)


def test_a_validated_operator_deploys_into_the_kernel_it_replaces(backend, tmp_path: Path,
                                                                  monkeypatch) -> None:
    ref = mx.build("zmarch", CELL, mx.defaults("zmarch", CELL))
    cand = mx.build("zmarch", CELL, {**mx.defaults("zmarch", CELL), "ty": 4, "lz": 16})
    rec = record_operator(ref, tmp_path / "rec", backend=backend, seed=9)
    v = validate_operator(cand, rec, backend=backend, **FAST)
    assert v.status is Status.OK and v.verdict in ("accepted", "inconclusive"), v.message
    with pytest.raises(ConfigError, match="not exported"):  # the emulator's timing: noise
        deploy_entry(rec, cand, replace(_significant(v), ab=replace(v.ab, ci_low=0.9)))
    with pytest.raises(ConfigError, match="same kernel"):  # another design: another kernel
        deploy_entry(rec, mx.build("ztile", CELL, mx.defaults("ztile", CELL)),
                     _significant(v))
    entry = deploy_entry(rec, cand, _significant(v))
    assert entry.kernel.entry == "zmarch" and entry.variant.code == cand.source
    assert entry.variant.launch.grid == cand.launches[0].grid
    spec = write_spec(tmp_path / "spec.json", [entry])
    assert read_spec(spec).entries[0].match_key() == entry.match_key()

    monkeypatch.setitem(base._instances, "cuda", backend)
    original = operator_variant(ref)  # as kernforge.apply_stencil launches it
    kernel = Kernel(original.source, backend="cuda", options=dict(original.options.values),
                    launch=original.launch)
    inp, out = rec.prologue("src").copy(), rec.prologue("dst").copy()
    with deploy.use(spec, cupy=False):
        kernel(inp, out)  # re-verified: the candidate on copies against this launch
        kernel(inp, out)  # the candidate
        counts = deploy.report().kernels["zmarch"]
    assert (counts.verified, counts.replaced, counts.fallback) == (1, 1, 0), counts
    want = {"in": rec.prologue("src").copy(), "out": rec.prologue("dst").copy()}
    emulate.emulate(cand, want)
    np.testing.assert_array_equal(out, want["out"])
