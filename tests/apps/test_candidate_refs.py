"""Candidates of M3a's GPU halves are checked against references made once: the original's
outputs on each fresh input (one-launch matching) and its ``T`` launches from each state
(fusion) run once for all the candidates, on the fake CUDA driver with the recorded 1D heat
step; a wrong candidate is still refused. And the candidates' images are compiled in
parallel, in order, a failing one giving its own CompileError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from kernforge.apps import fused as fz
from kernforge.apps import fused_gpu, operator_gpu
from kernforge.apps.adapter import Adapter, layout
from kernforge.apps.fused_gpu import Steps
from kernforge.apps.operator_gpu import RECORDED, AdapterRun, ReplayTarget
from kernforge.apps.probe import Recognized
from kernforge.backends.cuda_image import compile_images, nvcc
from kernforge.backends.driver import Driver
from kernforge.core import CompileError
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.testing.fakedriver import FakeCuda


def _heat(fake: FakeCuda, unit: Path) -> tuple[NativeReplay, ReplayTarget, Recognized]:
    rec = read_native(unit)
    rp = NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1")))
    n = int.from_bytes(rec.param_bytes[16:20], "little")
    c = float(np.frombuffer(rec.param_bytes[24:32], dtype=np.float64)[0])
    w = {(0, 0, 0): 1 - 2 * c, (0, 0, 1): c, (0, 0, -1): c}
    return rp, ReplayTarget(rp), Recognized(0, 1, "float64", (n, 1, 1), "star", 1, 1, w,
                                            "copy")


class _Counted:
    """A run (AdapterRun's ``run``) that counts its calls."""

    def __init__(self, run: Callable[[], None]) -> None:
        self.fn, self.calls = run, 0

    def run(self) -> None:
        self.calls += 1
        self.fn()


def test_fresh_references_run_the_original_once_for_every_candidate(
        fake: FakeCuda, heat_unit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rp, t, r = _heat(fake, heat_unit)
    originals = []
    real_run = t.run
    monkeypatch.setattr(t, "run", lambda c: originals.append(1) or real_run(c))
    fresh: operator_gpu.Fresh = {}
    same = [_Counted(lambda: rp.run(RECORDED)) for _ in range(3)]  # the original's twins
    for cand in same:
        why, done = operator_gpu.validate(t, r, cast(Any, cand), fresh)
        assert why is None and len(done) == 3, why
    assert len(originals) == len(operator_gpu.FRESH_SEEDS)  # not once per candidate
    assert all(c.calls == 3 for c in same)  # from the recorded state and each seed

    def off() -> None:  # a wrong candidate: one output element is not the stencil's
        rp.run(RECORDED)
        rp.drv.htod(t.address(r.out_param) + 8 * (r.points // 2),
                    np.array([12345.0]).view(np.uint8))

    why, _ = operator_gpu.validate(t, r, cast(Any, _Counted(off)), fresh)
    assert why is not None and why.startswith("recorded outputs differ"), why


def _fused_twin(t: ReplayTarget, r: Recognized, steps: Steps) -> _Counted:
    """A "fused kernel" made of the original's launches: ``steps`` of them, IN put back
    (a fused kernel only reads IN)."""
    def run() -> None:
        was = t.read()[r.in_param]
        steps.run()
        t.rp.drv.htod(t.address(r.in_param), was)
    return _Counted(run)


def test_fused_references_run_the_t_launches_once_per_state(fake: FakeCuda,
                                                            heat_unit: Path) -> None:
    rp, t, r = _heat(fake, heat_unit)
    slots = layout(rp.rec)
    ref = _Counted(Steps(rp, fz.fuse_field(slots, r, 3)).run)
    refs = fused_gpu.References()
    same = [_fused_twin(t, r, Steps(rp, fz.fuse_field(slots, r, 3))) for _ in range(3)]
    for cand in same:
        why, done = fused_gpu.validate(t, r, 3, cast(Any, ref), cast(Any, cand), refs)
        assert why is None and len(done) == 3, why
    assert ref.calls == 1 + len(fused_gpu.FRESH_SEEDS)  # once per state, not per candidate
    five = _fused_twin(t, r, Steps(rp, fz.fuse_field(slots, r, 5)))  # 5 steps, not 3
    why, _ = fused_gpu.validate(t, r, 3, cast(Any, ref), cast(Any, five), refs)
    assert why is not None and "OUT differs from 3 original launches" in why, why
    assert ref.calls == 1 + len(fused_gpu.FRESH_SEEDS)


@pytest.mark.slow  # nvcc builds of every candidate
@pytest.mark.skipif(nvcc() is None, reason="nvcc is not installed")
def test_candidates_compile_in_parallel_in_order() -> None:
    ok = 'extern "C" __global__ void k{i}(float *x) {{ x[threadIdx.x] *= {i}.0f; }}\n'
    sources = [ok.format(i=1), "this is not CUDA", ok.format(i=2)]
    images = compile_images(sources, "sm_90")
    assert isinstance(images[1], CompileError) and "nvcc failed" in images[1].message
    assert all(isinstance(images[i], bytes) and images[i][:4] == b"\x7fELF" for i in (0, 2))
    assert b"k1" in cast(bytes, images[0]) and b"k2" in cast(bytes, images[2])


def test_the_fastest_screened_candidate_that_passes_fresh_inputs_is_kept() -> None:
    rows: list[dict[str, Any]] = [{"operator": k} for k in ("a", "b", "c", "d")]
    screened = [(1.0, rows[0], "a"), (3.0, rows[1], "b"), (2.0, rows[2], "c"),
                (0.5, rows[3], "d")]
    checked: list[str] = []

    def check(item: str) -> str | None:
        checked.append(item)
        return "fresh input (seed 11) differs" if item == "b" else None

    assert operator_gpu.fastest_passing(screened, check) == "c"
    assert checked == ["b", "c"]  # fastest first; the slower ones are not checked
    assert rows[1]["refused"] == "fresh input (seed 11) differs"
    assert rows[0]["unchecked"] == rows[3]["unchecked"] == operator_gpu.UNCHECKED
    assert "refused" not in rows[2] and "unchecked" not in rows[2]
    assert operator_gpu.fastest_passing(screened[1:2], check) is None


def test_a_candidate_wrong_only_on_fresh_inputs_is_refused_with_the_buffer(
        fake: FakeCuda, heat_unit: Path) -> None:
    rp, t, r = _heat(fake, heat_unit)
    calls = []

    def later_off() -> None:  # right from the recorded state, one element off after it
        rp.run(RECORDED)
        if calls:
            rp.drv.htod(t.address(r.out_param) + 8 * (r.points // 2),
                        np.array([12345.0]).view(np.uint8))
        calls.append(1)

    why, done = operator_gpu.validate(t, r, cast(Any, _Counted(later_off)))
    assert why is not None and why.startswith(
        f"fresh input (seed {operator_gpu.FRESH_SEEDS[0]}) differs from the original: "
        f"param{r.out_param}: 1/{r.points} elements differ"), why
    assert f"first at index ({r.points // 2},)" in why and len(done) == 1


def test_a_fused_kernel_that_writes_into_in_is_refused(fake: FakeCuda,
                                                       heat_unit: Path) -> None:
    rp, t, r = _heat(fake, heat_unit)
    slots = layout(rp.rec)
    ref = Steps(rp, fz.fuse_field(slots, r, 3))
    writes_in = _Counted(Steps(rp, fz.fuse_field(slots, r, 3)).run)  # IN not put back
    why, _ = fused_gpu.validate(t, r, 3, ref, cast(Any, writes_in))
    assert why == ("from the recorded state: the fused kernel wrote into IN's buffer "
                   "(it must only read it)"), why


def test_a_timed_fused_launch_restores_the_memory_once(fake: FakeCuda,
                                                       heat_unit: Path) -> None:
    """All of it (a reference run may have changed IN), not its written part again."""
    rp, _, _ = _heat(fake, heat_unit)
    op = SimpleNamespace(key="x3")
    run = AdapterRun(rp, Adapter("// x3\n", "heat_x3", (4, 1, 1), (256, 1, 1), 0, -1,
                                 cast(Any, op)), fake.image())
    restores: list[bool] = []
    real = rp.restore

    def restore(only_written: bool = False) -> None:
        restores.append(only_written)
        real(only_written)

    rp.restore = restore  # type: ignore[method-assign]
    assert fused_gpu.fused_time(run) >= 0 and restores == [False]
    assert run.time() >= 0 and restores == [False, True]  # the one-launch timing's own


def test_the_replay_decides_as_its_verification_without_the_figures(
        fake: FakeCuda, heat_unit: Path) -> None:
    rp, t, r = _heat(fake, heat_unit)
    pol = operator_gpu.policy(r, 1.0)
    rp.restore()
    rp.run(RECORDED)
    assert rp.passes(pol, r.dtype) and all(c.passed for c in rp.verify(pol, r.dtype))
    rp.drv.htod(t.address(r.out_param) + 8 * (r.points // 2),
                np.array([12345.0]).view(np.uint8))
    assert not rp.passes(pol, r.dtype)
    assert [c.passed for c in rp.verify(pol, r.dtype)].count(False) == 1
    rp.restore()  # the recorded inputs, no launch: OUT is not what the kernel wrote
    assert rp.passes() == all(c.passed for c in rp.verify())
