"""The checker conformance suite: every checker of :mod:`kernforge.harness.checkers` passes it.

Use it from a test module::

    from kernforge.testing.checkers import CheckerConformance

    class TestCheckerConformance(CheckerConformance):
        pass

The ``case`` fixture is parametrized over :data:`CASES`: a checker, inputs, the exact outputs
a correct candidate gives, and the one value of them the suite moves (``target``, at the flat
``index``), with ``limit``: the farthest value above the exact one that the checker's rule, as
documented, accepts there. The suite asks that the exact outputs pass with error 0; the limit
passes and the next representable value beyond it fails (one ulp past the tolerance); NaN,
+Inf and -Inf fail; a wrong last element fails; an output of the wrong shape fails or is
refused with a typed error. Where the values and bounds are dyadic the limit lies exactly on
the bound, so ``<=`` is told from ``<``. Each checker class needs at least one case (the suite fails until
a new one has). No GPU: numpy arrays, the stencil oracle on small grids.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ..core import KernforgeError, Tolerance
from ..forge import oracle_check
from ..harness import checkers
from ..harness.checkers import Checker, CheckResult, OracleChecker, RecordedChecker, whole
from ..stencil import oracle
from ..stencil.spec import Cell


@dataclass(frozen=True)
class CheckerCase:
    """A checker with the exact outputs of a correct candidate (see the module docstring)."""

    checker: Checker
    inputs: Mapping[str, Any]
    outputs: Mapping[str, np.ndarray]
    target: str
    index: int
    limit: Callable[[np.ndarray], float]  # the exact outputs' ``target`` -> the farthest value

    def run(self, value: Any = None, array: np.ndarray | None = None) -> CheckResult:
        """The checker on the exact outputs, ``target`` replaced by ``array`` or with
        ``value`` at ``index``."""
        outs = {k: np.array(v, copy=True) for k, v in self.outputs.items()}
        if array is not None:
            outs[self.target] = array
        elif value is not None:
            outs[self.target].reshape(-1)[self.index] = value
        return self.checker.check(outs, self.inputs)


def _farthest(ok: Callable[[Any], bool], start: Any) -> Any:
    """The largest value of ``start``'s dtype, near ``start``, that ``ok`` accepts."""
    t = type(start)
    v = start
    while not ok(v):
        v = np.nextafter(v, t(-np.inf))
    while ok(nxt := np.nextafter(v, t(np.inf))):
        v = nxt
    return v


def _rule_limit(ref: float, dtype: Any, within: Callable[[float], bool], gap: float) -> float:
    """The farthest value of ``dtype`` above ``ref`` whose float64 distance to ``ref``
    ``within`` accepts (``gap``: about the allowed distance, where the search starts)."""
    return float(_farthest(lambda v: within(abs(float(v) - ref)), dtype(ref + gap)))


def _recorded(mode: str, dtype: Any, atol: float = 0.0, rtol: float = 0.0) -> CheckerCase:
    rng = np.random.default_rng(3)  # dyadic values and bounds: the limit is on the bound
    ref = (rng.integers(-64, 64, (5, 7)) / 64).astype(dtype)
    flags = np.arange(9, dtype=np.int32)
    policy = Tolerance(mode, atol=atol, rtol=rtol)
    at = 17

    def limit(a: np.ndarray) -> float:
        r = float(a.reshape(-1)[at])
        if mode == "bitwise":
            return r
        allowed = policy.atol + policy.rtol * abs(r)
        return _rule_limit(r, dtype, lambda d: d <= allowed, allowed)

    return CheckerCase(RecordedChecker({"y": ref, "flags": flags}, {"y": policy}), {},
                       {"y": ref, "flags": flags}, "y", at, limit)


def _model(tolerance: float) -> CheckerCase:
    """A reference function given from above: ``y = 2x + 1`` in float64."""
    x = np.random.default_rng(4).integers(-64, 64, 40) / 64  # dyadic, as the bound
    check = OracleChecker(lambda outs, ins: whole(outs, {"y": 2 * ins["x"] + 1}), tolerance)
    y = 2 * x + 1
    at = 11

    def limit(a: np.ndarray) -> float:
        scale = float(np.max(np.abs(y)))
        r = float(y[at])
        return _rule_limit(r, np.float64, lambda d: d / scale <= tolerance, tolerance * scale)

    return CheckerCase(check, {"x": x}, {"y": y}, "y", at, limit)


def _stencil(cell_id: str, full: bool) -> CheckerCase:
    """The stencil oracle as the forge plugs it in, in full or sampled (a slab point)."""
    cell = Cell.parse(cell_id)  # fp64: the oracle's values are the exact outputs
    fields = oracle.random_fields(cell, seed=5)
    ref = oracle.reference(cell, fields["in"], fields.get("coef"))
    out = ref.astype(cell.precision.dtype)
    dtype = np.dtype(cell.precision.dtype).type
    r = cell.radius
    nz, ny, nx = cell.shape.array_shape
    at = int(np.ravel_multi_index((r, ny // 2, nx // 2), (nz, ny, nx)))  # first interior z
    inner = ref[r:-r, r:-r, r:-r]
    tol = cell.precision.tolerance
    check = oracle_check.checker(cell, seed=5, full=full, points=0 if not full else 64)

    def limit(a: np.ndarray) -> float:
        scale = float(np.max(np.abs(inner)))  # in full: the whole interior
        if not full:  # sampled: the interior of the slabs (no random points)
            planes = oracle.slab_positions(cell)
            scale = max([float(np.max(np.abs(inner[p - r]))) for p in planes["z"]]
                        + [float(np.max(np.abs(inner[:, p - r]))) for p in planes["y"]]
                        + [float(np.max(np.abs(inner[:, :, p - r]))) for p in planes["x"]])
        v = float(ref.reshape(-1)[at])
        return _rule_limit(v, dtype, lambda d: d / scale <= tol, tol * scale)

    return CheckerCase(check, fields, {"out": out}, "out", at, limit)


CASES: dict[str, Callable[[], CheckerCase]] = {
    "recorded-bitwise": lambda: _recorded("bitwise", np.float32),
    "recorded-abs": lambda: _recorded("abs", np.float64, atol=2.0 ** -12),
    "recorded-rel": lambda: _recorded("rel", np.float32, rtol=2.0 ** -8, atol=2.0 ** -20),
    "oracle-model": lambda: _model(2.0 ** -20),
    "oracle-stencil-full": lambda: _stencil("star_1/12x10x8/fp64", True),
    "oracle-stencil-sampled": lambda: _stencil("box_1/12x10x8/fp64", False),
}


def checker_classes() -> set[type]:
    """The checkers :mod:`kernforge.harness.checkers` defines (classes with ``check``)."""
    return {c for _, c in inspect.getmembers(checkers, inspect.isclass)
            if c.__module__ == checkers.__name__ and callable(getattr(c, "check", None))
            and c is not Checker}


def _refused_or_failed(case: CheckerCase, array: np.ndarray) -> None:
    try:
        res = case.run(array=array)
    except KernforgeError as exc:
        assert exc.hint, f"{type(exc).__name__} without a hint: {exc}"
        return
    assert not res.ok, res
    assert res.where, "a failed check says where"


class CheckerConformance:
    """Subclass in a test module to run the suite over every case of :data:`CASES`."""

    @pytest.fixture(params=sorted(CASES))
    def case(self, request: pytest.FixtureRequest) -> CheckerCase:
        return CASES[str(request.param)]()

    def test_every_checker_has_a_case(self) -> None:
        covered = {type(CASES[name]().checker) for name in CASES}
        missing = checker_classes() - covered
        assert not missing, f"no conformance case for {sorted(c.__name__ for c in missing)}"

    def test_an_exact_copy_passes(self, case: CheckerCase) -> None:
        res = case.run()
        assert res.ok and res.error == 0.0, res
        assert res.checked_points > 0

    def test_the_limit_passes_and_one_ulp_beyond_fails(self, case: CheckerCase) -> None:
        exact = np.asarray(case.outputs[case.target])
        lim = case.limit(exact)
        at = case.run(value=lim)
        assert at.ok, (lim, at)
        beyond = np.nextafter(exact.dtype.type(lim), exact.dtype.type(np.inf))
        res = case.run(value=beyond)
        assert not res.ok and res.where, (float(beyond), res)

    @pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
    def test_non_finite_values_fail(self, case: CheckerCase, value: float) -> None:
        res = case.run(value=value)
        assert not res.ok and res.where and res.error == float("inf"), res

    def test_a_wrong_last_element_fails(self, case: CheckerCase) -> None:
        exact = np.array(case.outputs[case.target], copy=True)
        flat = exact.reshape(-1)
        flat[-1] = flat[-1] + max(1.0, 2 * abs(float(flat[-1])))
        res = case.run(array=exact)
        assert not res.ok and res.where, res

    def test_a_wrong_shape_fails(self, case: CheckerCase) -> None:
        exact = np.asarray(case.outputs[case.target])
        _refused_or_failed(case, np.array(exact[:-1], copy=True))
        _refused_or_failed(case, np.array(exact.reshape(1, -1), copy=True))
