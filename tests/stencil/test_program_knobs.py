"""The knob spaces the designs of lifted programs declare: their values hold the presets, and
a design's refusal (decided without generating) agrees with what it generates, at every
point of its space, for 1D, 2D and 3D programs with and without reductions."""

from __future__ import annotations

import itertools

import pytest

from kernforge.stencil.program import Reduction, StencilProgram, program, tap
from kernforge.stencil.program import designs as pd
from kernforge.stencil.program.binding import Binding, Placement
from kernforge.stencil.program.codegen import Refused


def star(dims: int, precision: str = "fp32", reductions: tuple[Reduction, ...] = (),
         radius: int = 1) -> StencilProgram:
    offsets = [o for a in range(3 - dims, 3) for d in range(-radius, radius + 1) if d
               for o in [tuple(d if i == a else 0 for i in range(3))]]
    e = tap("u")
    for o in offsets:
        e = e + tap("u", *o)
    return program(dims, precision, {"v": 0.2 * e}, reductions=list(reductions))


def binding(p: StencilProgram, shape: tuple[int, int, int]) -> Binding:
    return Binding(shape, {"u": Placement(0), "v": Placement(1)},
                   {r.name: 2 + i for i, r in enumerate(p.reductions)})


RES = (Reduction("q", "sumsq", tap("v") - tap("u"), accumulate=True),)
CASES = {
    "1d": (star(1), (300, 1, 1)),
    "2d-residual": (star(2, reductions=RES), (40, 24, 1)),
    "2d-fp16-residual": (star(2, "fp16", RES), (40, 24, 1)),
    "3d-r4-fp64": (star(3, "fp64", radius=4), (24, 20, 18)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_space_holds_every_preset(case: str) -> None:
    p, _ = CASES[case]
    spaces = pd.spaces(p)
    assert spaces, case
    for design, knobs in pd.presets(p):
        assert design in spaces
        for knob, value in knobs.items():
            if knob in spaces[design]:
                assert value in spaces[design][knob], (design, knob, value)
    assert ("tiled" in spaces) == (p.dims > 1)
    # atomics only where the reductions can use them (fp16: refused)
    for design, knobs in spaces.items():
        assert ("atomic" in knobs) == (bool(p.reductions) and p.precision != "fp16"), design


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "3d-r4-fp64"
                                  else c for c in sorted(CASES)])  # 3d-r4-fp64: 5 s
def test_refusal_agrees_with_generation_at_every_point(case: str) -> None:
    p, shape = CASES[case]
    b = binding(p, shape)
    refused = generated = 0
    for design, space in pd.spaces(p).items():
        names = sorted(space)
        for values in itertools.product(*(space[n] for n in names)):
            knobs = dict(zip(names, values, strict=True))
            why = pd.refusal(design, p, shape, knobs)
            try:
                k = pd.generate(design, p, b, knobs)
            except Refused as exc:
                assert why is not None and why.message == exc.message, (design, knobs)
                refused += 1
                continue
            assert why is None, (design, knobs, why)
            assert k.block[0] * k.block[1] * k.block[2] <= 1024
            generated += 1
    assert generated
    if p.dims > 1:
        assert refused  # blocks over 1024 threads, tiles past the shared memory


def test_the_refusals_say_why() -> None:
    p, shape = CASES["3d-r4-fp64"]
    big = pd.refusal("tiled", p, shape, {"tx": 128, "ty": 8, "py": 8, "lz": 4})
    assert big is not None and "shared memory" in big.message
    many = pd.refusal("plain", p, shape, {"bx": 256, "by": 8, "bz": 1})
    assert many is not None and "1024 threads" in many.message
    half = CASES["2d-fp16-residual"][0]
    atomic = pd.refusal("plain", half, (40, 24, 1), {"bx": 32, "by": 8, "atomic": 1})
    assert atomic is not None and "fp16" in atomic.message
    assert pd.refusal("tiled", star(1), (300, 1, 1), {}) is not None  # 1D: plain only
    with pytest.raises(Exception, match="no lifted-program design"):
        pd.refusal("zmarch", p, shape, {})
