"""The straight-line route key and one-pass conversion (deploy/straight.py) against the loops
they replace, on random kernels and arguments: same key (or None), same converted arguments
(the very objects), or None where the loop says None."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kernforge.deploy import straight
from kernforge.deploy.fastpath import KEYABLE, Plan
from kernforge.deploy.launcher import KINDS
from kernforge.deploy.match import overlap_bits, overlaps

IN, OUT, CONST, TYPED = KINDS
ENV = {"KEYABLE": KEYABLE, "overlaps": overlaps, "overlap_bits": overlap_bits}


def _loop_conversion(steps: tuple[tuple[int, Any], ...], args: Any) -> list[Any] | None:
    """The reference: the steps of launcher.direct_steps as a loop."""
    if len(args) != len(steps):
        return None
    out: list[Any] = []
    for (kind, x), a in zip(steps, args):
        if kind == CONST:
            out.append(x)
        elif kind == TYPED:
            if type(a) is not x:
                return None
            out.append(a)
        else:
            flags = a.flags
            if not flags.c_contiguous or (kind == OUT and not getattr(flags, "writeable", True)):
                return None
            out.append(a)
    return out


def _array(rng: random.Random, pool: list[np.ndarray]) -> Any:
    roll = rng.random()
    if roll < 0.25 and pool:
        return rng.choice(pool)  # the same array again: overlaps
    if roll < 0.3 and pool:
        base = rng.choice(pool)
        return base[1:] if base.size > 1 else base  # a view into another one
    if roll < 0.35:
        return None
    if roll < 0.4:
        return [1.0, 2.0]
    dtype = rng.choice([np.float32, np.float32, np.int32, np.float64])
    a = np.arange(rng.choice([0, 4, 8]), dtype=dtype)
    if rng.random() < 0.1:
        a = np.arange(16, dtype=dtype)[::2]  # not contiguous
    if rng.random() < 0.1:
        a.flags.writeable = False
    pool.append(a)
    return a


def _scalar(rng: random.Random) -> Any:
    return rng.choice([3, 0, -1, 1 << 40, 1 << 70, True, 2.0, -0.0, np.float32(2),
                       np.int32(3), np.int64(3), np.uint8(3), np.float64(2), 1 + 2j,
                       np.array(3), "3", None])


def _geometry(rng: random.Random) -> Any:
    return rng.choice([1, 4, (1,), (4, 2), (2, 1, 1), (np.int64(2),), (2.0,), [2], (True,),
                       np.int32(4), ()])


@pytest.mark.parametrize("seed", range(40))
def test_the_straight_route_key_is_the_loop(seed: int) -> None:
    rng = random.Random(seed)
    arity = rng.randrange(0, 6)
    pointers = tuple(j for j in range(arity) if rng.random() < 0.5)
    scalars = [j for j in range(arity) if j not in pointers]
    values = tuple(j for j in scalars if rng.random() < 0.6)
    aliasing = rng.random() < 0.7
    plan = SimpleNamespace(pointers=pointers, values=values, aliasing=aliasing)

    def loop(*a: Any) -> Any:
        return Plan.route_key_loop(plan, *a)  # type: ignore[arg-type]

    key = straight.route_key(arity, pointers, values, aliasing, ENV, loop)
    keyed = 0
    for _ in range(150):
        pool: list[np.ndarray] = []
        n = arity + rng.choice([0, 0, 0, 0, -1, 1]) if arity else rng.choice([0, 0, 1])
        args: Any = [_array(rng, pool) if j in pointers else _scalar(rng)
                     for j in range(max(n, 0))]
        if rng.random() < 0.5:
            args = tuple(args)
        grid, block = _geometry(rng), _geometry(rng)
        shared = rng.choice([0, 0, 16, np.int64(0), 0.0])
        want = loop(grid, block, shared, args, np.ndarray)
        got = key(grid, block, shared, args, np.ndarray)
        assert got == want, (arity, pointers, values, aliasing, args)
        keyed += want is not None
    assert keyed > 5  # launches with a key, not only refusals


def test_a_long_signature_keeps_the_loop() -> None:
    def loop(*a: Any) -> Any:
        return "loop"

    assert straight.route_key(100, (), (), False, ENV, loop) is loop


@pytest.mark.parametrize("seed", range(40))
def test_the_one_pass_conversion_is_the_loop(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(0, 6)
    steps = tuple(rng.choice([(IN, None), (OUT, None), (CONST, np.int32(7)),
                              (TYPED, np.float32), (TYPED, np.int64)]) for _ in range(n))
    convert = straight.conversion(steps, KINDS)
    converted = 0
    for _ in range(150):
        pool: list[np.ndarray] = []
        args = []
        for kind, x in steps:
            if kind in (IN, OUT):
                a = _array(rng, pool)
                args.append(a if isinstance(a, np.ndarray) else np.zeros(2, np.float32))
            elif kind == TYPED and rng.random() < 0.7:
                args.append(x(2))  # of the step's type
            else:
                args.append(_scalar(rng))
        if rng.random() < 0.1:
            args.append(1)  # one argument too many
        want = _loop_conversion(steps, args)
        got = convert(args)
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert len(got) == len(want) and all(g is w for g, w in zip(got, want))
            converted += 1
    assert converted > 0


def test_an_unknown_step_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown step kind"):
        straight.conversion(((9, None),), KINDS)
