"""Lifting a step's boundary kernels to face rules by probing (apps/lift_companion.py): numpy
kernels as the probe targets (what a replayed launch is on the GPU), the rules they lift to,
the edge order, and every refusal with its reason."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kernforge.apps import lift_companion as lc
from kernforge.apps.adapter import Slot
from kernforge.stencil import faces as fc

from .stencil_kernels import target

NX, NY, NZ = 8, 7, 6
N = NX * NY * NZ
SLACK = 16


def _lift(body: Callable[[np.ndarray], None], *, with_in: bool = False,
          both: Callable[[np.ndarray, np.ndarray], None] | None = None
          ) -> tuple[fc.Face, ...] | lc.Refused:
    """``body`` rewrites OUT as a (nz, ny, nx) float32 grid in place (param 0); with
    ``both``: (out grid, in grid), IN being param 1."""
    def k(b: dict[int, np.ndarray]) -> None:
        g = b[0][:N].reshape(NZ, NY, NX)
        if both is not None:
            both(g, b[1][:N].reshape(NZ, NY, NX))
        else:
            body(g)
    layout = {0: ("float32", N + SLACK)}
    if with_in or both is not None:
        layout[1] = ("float32", N + SLACK)
    t = target(k, layout, (NX, NY, NZ), "float32")
    return lc.lift(t, 0, (1,) if 1 in layout else (), (NX, NY, NZ), "float32")


def _zero_flux(g: np.ndarray) -> None:
    g[:, :, 0], g[:, :, -1] = g[:, :, 1], g[:, :, -2]


def test_faces_lift_in_launch_order_with_their_edges() -> None:
    assert _lift(_zero_flux) == (fc.Face(2, 0, 1), fc.Face(2, 1, 1))

    def held(g: np.ndarray) -> None:  # y=0 then z=0: the z rule wins on the shared edge
        g[:, 0, :] = 2.0
        g[0, :, :] = 1.0
        g[-1, :, :] = g[-3, :, :]
    got = _lift(held)
    assert not isinstance(got, lc.Refused), got
    assert set(got) == {fc.Face(1, 0, 0, 2.0), fc.Face(0, 0, 0, 1.0), fc.Face(0, 1, 2)}
    assert got.index(fc.Face(1, 0, 0, 2.0)) < got.index(fc.Face(0, 0, 0, 1.0))
    x = np.random.default_rng(0).uniform(size=(NZ, NY, NX)).astype(np.float32)
    want = x.copy()
    held(want)
    assert np.array_equal(fc.apply(x, (got,)), want)

    def dirichlet(g: np.ndarray) -> None:  # every face 0 at once
        g[[0, -1], :, :], g[:, [0, -1], :], g[:, :, [0, -1]] = 0, 0, 0
    assert len(_lift(dirichlet)) == 6  # type: ignore[arg-type]
    assert _lift(lambda g: None) == ()


@pytest.mark.parametrize(("body", "reason"), [
    (lambda g: g.__setitem__((2, 3, 4), 0.0), "writes inside the grid (at z=2, y=3, x=4)"),
    (lambda g: g.__setitem__((0, slice(1, -1), slice(1, -1)), 1.0), "part of a face"),
    (lambda g: g.__setitem__((slice(None), slice(None), 0), np.maximum(g[:, :, 0], 0)),
     "depend on the values"),
    (lambda g: g.__setitem__((slice(None), slice(None), 0), 0.5 * (g[:, :, 1] + g[:, :, 2])),
     "neither a constant nor a copy"),
    (lambda g: g.__setitem__((slice(None), slice(None), 0), np.arange(NZ * NY).reshape(NZ, NY)),
     "different constants"),
])
def test_refused_with_the_reason(body: Callable[[np.ndarray], None], reason: str) -> None:
    got = _lift(body)
    assert isinstance(got, lc.Refused) and reason in got.reason, got


def test_a_rule_reading_what_its_launch_wrote_is_refused() -> None:
    def seq(g: np.ndarray) -> None:  # in place: x=0 copies the y=0 face just written
        g[:, 0, :] = g[:, 1, :]
        g[:, :, 0] = g[:, :, 1]
    got = _lift(seq)
    assert isinstance(got, lc.Refused) and "reads points the same launch writes" in got.reason

    def held_then_copied(g: np.ndarray) -> None:  # the same in effect as the copy first
        g[:, 0, :] = 3.0
        g[:, :, 0] = g[:, :, 1]
    assert _lift(held_then_copied) == (fc.Face(2, 0, 1), fc.Face(1, 0, 0, 3.0))

    def cycle(g: np.ndarray) -> None:  # y=0 wins over x=0, x=0 over z=0, z=0 over y=0
        g[:, 0, :], g[:, :, 0], g[0, :, :] = 1.0, 2.0, 3.0
        g[:, 0, 0], g[0, :, 0], g[0, 0, :] = 1.0, 2.0, 3.0
    got = _lift(cycle)
    assert isinstance(got, lc.Refused) and "no order" in got.reason, got


def test_other_buffers_in_and_beyond_the_grid() -> None:
    def from_in(g: np.ndarray, u: np.ndarray) -> None:
        g[:, :, 0] = u[:, :, 0]
    got = _lift(lambda g: None, both=from_in)
    assert isinstance(got, lc.Refused) and "depends on IN" in got.reason

    def writes_in(g: np.ndarray, u: np.ndarray) -> None:
        u[0, 0, 0] = 7.0
    got = _lift(lambda g: None, both=writes_in)
    assert isinstance(got, lc.Refused) and "writes parameter 1" in got.reason
    assert _lift(_zero_flux, both=lambda g, u: _zero_flux(g)) == (fc.Face(2, 0, 1),
                                                                   fc.Face(2, 1, 1))

    def past(b: dict[int, np.ndarray]) -> None:
        b[0][N + 3] = 0.0
    t = target(past, {0: ("float32", N + SLACK)}, (), "float32")
    got = lc.lift(t, 0, (), (NX, NY, NZ), "float32")
    assert isinstance(got, lc.Refused) and "beyond the grid" in got.reason


def test_a_companion_s_pointers_to_in_out_and_others() -> None:
    slots = [Slot(0, 8, True), Slot(8, 4), Slot(16, 8, True)]
    raw = (0x1000).to_bytes(8, "little") + (5).to_bytes(8, "little") \
        + (0x2000).to_bytes(8, "little")
    c = lc.companion("_Z5bound", raw, slots, in_ptr=0x2000, out_ptr=0x1000)
    assert c == lc.Companion("_Z5bound", raw, (16,), (0,))
    assert c.spec() == {"name": "_Z5bound", "params": raw.hex(), "in_slots": [16],
                        "out_slots": [0]}
    other = lc.companion("_Z5bound", raw, slots, in_ptr=0x3000, out_ptr=0x1000)
    assert isinstance(other, lc.Companion) and other.others == (16,)  # a candidate to elide
    assert other.role == "folded" and other.spec()["in_slots"] == []
    none = lc.companion("_Z5bound", raw, slots, in_ptr=0x1000, out_ptr=0x2000)
    assert isinstance(none, lc.Companion) and none.out_slots == (16,)
    twice = lc.companion("k", raw[:8] * 2 + raw[:8], slots, in_ptr=0x2000, out_ptr=0x1000)
    assert isinstance(twice, lc.Refused) and "2 parameters point to OUT" in twice.reason


@pytest.mark.parametrize("body", [
    lambda g: g.__setitem__((slice(None), slice(None), 0), np.minimum(g[:, :, 1], 100.0)),
    lambda g: g.__setitem__((slice(None), slice(None), 0),
                            np.where(np.isnan(g[:, :, 1]), 0.0, g[:, :, 1])),
    lambda g: g.__setitem__((slice(None), slice(None), 0),
                            np.where(g[:, :, 1] == 0, 1.0, g[:, :, 1])),
], ids=["clamped at 100", "NaN replaced", "zero replaced"])
def test_a_copy_that_tests_its_value_is_refused(body: Callable[[np.ndarray], None]) -> None:
    """Each is a copy from 1 inward for every value in the random trials; a fused kernel
    folding it as one would differ where the grid's values reach the test."""
    got = _lift(body)
    assert isinstance(got, lc.Refused) and "neither a constant nor a copy" in got.reason, got


def test_copies_and_constants_lift_where_the_grid_holds_nan_zeros_or_huge_values() -> None:
    def rules(g: np.ndarray) -> None:
        g[:, :, 0], g[:, :, -1] = g[:, :, 2], 0.0
    assert _lift(rules) == (fc.Face(2, 0, 2), fc.Face(2, 1, 0, 0.0))
    assert _lift(_zero_flux) == (fc.Face(2, 0, 1), fc.Face(2, 1, 1))
