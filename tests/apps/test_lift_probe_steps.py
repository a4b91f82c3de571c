"""Several steps per launch told from an output's weights (kernforge.apps.lift_probe_steps)."""

from __future__ import annotations

import numpy as np

from kernforge.apps.lift_probe_steps import several_steps
from kernforge.stencil.program import expr as ex


def _expr(weights: dict[tuple[int, int, int], float], field: str = "u") -> ex.Expr:
    out: ex.Expr = ex.Const(0.5)  # a source term: not part of the weights
    for off, c in weights.items():
        out = out + ex.Const(c) * ex.Tap(field, off)
    return out


def _compose(s: dict[tuple[int, int, int], float], k: int) -> dict[tuple[int, int, int], float]:
    out = {(0, 0, 0): 1.0}
    for _ in range(k):
        nxt: dict[tuple[int, int, int], float] = {}
        for a, ca in out.items():
            for b, cb in s.items():
                o = (a[0] + b[0], a[1] + b[1], a[2] + b[2])
                nxt[o] = nxt.get(o, 0.0) + ca * cb
        out = nxt
    return out


STEP = {(0, 0, 0): 0.18, (0, 0, 1): 0.2, (0, 0, -1): 0.2, (0, 1, 0): 0.21, (0, -1, 0): 0.19}


def test_two_and_three_steps_of_a_star_are_found() -> None:
    for k in (2, 3):
        why = several_steps({"out": _expr(_compose(STEP, k))})
        assert why is not None and f"applied {k} times" in why and "reach 1" in why, why


def test_a_one_step_stencil_of_reach_two_is_no_composition() -> None:
    rng = np.random.default_rng(2)
    star = {(0, 0, d): float(rng.uniform(0.1, 1)) for d in (-2, -1, 1, 2)}
    star.update({(0, d, 0): float(rng.uniform(0.1, 1)) for d in (-2, -1, 1, 2)})
    star[(0, 0, 0)] = 0.3
    assert several_steps({"out": _expr(star)}) is None
    assert several_steps({"out": _expr(STEP)}) is None  # reach 1: one step
