"""The harness's two checkers beyond the conformance suite: what a result holds and says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernforge.core import Tolerance
from kernforge.harness.checkers import (
    Comparison,
    OracleChecker,
    Part,
    RecordedChecker,
    whole,
)
from kernforge.harness.verify import verify


def test_recorded_checker_is_verify_with_a_verdict() -> None:
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = ref.copy()
    out[1, 2] += 0.5
    policies = {"y": Tolerance("abs", atol=0.25)}
    res = RecordedChecker({"y": ref, "n": np.array([7], dtype=np.int32)}, policies).check(
        {"y": out, "n": np.array([7], dtype=np.int32)})
    assert res.checks == verify({"y": out, "n": np.array([7], dtype=np.int32)}, {"y": ref, "n": np.array([7], dtype=np.int32)},
                                policies)
    assert not res.ok and res.error == 0.5 and res.where == "y[1, 2]"
    assert res.failed_checks == res.checks[:1] and res.tolerance is None
    assert res.describe() == res.checks[0].describe()
    assert res.checked_points == 13 and res.detail["buffers"] == {"y": "abs", "n": "bitwise"}
    assert res.detail["failed"] == [res.checks[0].describe()]


def test_recorded_checker_missing_and_extra_buffers() -> None:
    res = RecordedChecker({"y": np.zeros(3)}).check({"z": np.zeros(3)})
    assert not res.ok and res.error == float("inf") and res.where == "y"
    assert [c.name for c in res.failed_checks] == ["y", "z"]
    assert "no output was read back" in res.describe()


def test_oracle_parts_scale_and_where() -> None:
    ref = {"a": np.array([1.0, -4.0, 2.0]), "b": np.array([[0.5, 0.25]])}

    def reference(outs: Mapping[str, Any], ins: Mapping[str, Any]) -> Comparison:
        return Comparison([Part("a", outs["a"], ref["a"]), Part("b", outs["b"], ref["b"])],
                          {"what": "two parts"})

    out = {"a": ref["a"].copy(), "b": ref["b"] + np.array([[0.0, 2.0 ** -7]])}
    res = OracleChecker(reference, 1e-2, seed=9).check(out, {})
    assert res.error == 2.0 ** -9 and res.ok and res.seed == 9  # max|out-ref| / max|ref|
    assert res.where == "b[0, 1]" and res.checked_points == 5
    assert list(res.detail) == ["what", "max_abs", "max_ref", "parts"]
    assert res.detail["parts"] == {"a": 0.0, "b": 2.0 ** -7} and res.detail["max_ref"] == 4.0
    assert OracleChecker(reference, 2.0 ** -9).check(out, {}).ok  # the bound itself passes
    tight = OracleChecker(reference, 1e-3).check(out, {})
    assert not tight.ok and tight.describe() == "error 0.00195 (tolerance 0.001) at b[0, 1]"


def test_oracle_exact_parts_add_up_by_name_and_none_is_not_checked() -> None:
    inp = np.arange(10, dtype=np.float32)
    out = inp.copy()
    out[[2, 7]] = -1

    def reference(outs: Mapping[str, Any], ins: Mapping[str, Any]) -> Comparison:
        return Comparison([Part("v", outs["o"][4:6], ins["i"][4:6]),
                           Part("edge", outs["o"][:4], ins["i"][:4], exact=True),
                           Part("edge", outs["o"][6:], ins["i"][6:], exact=True),
                           Part("other", None, None, exact=True)])

    res = OracleChecker(reference, 0.0).check({"o": out}, {"i": inp})
    assert not res.ok and res.error == 0.0
    assert res.detail["edge"] == 2 and res.detail["other"] is None
    assert res.where == "edge[2]"
    assert OracleChecker(reference, 0.0).check({"o": inp.copy()}, {"i": inp}).ok


def test_oracle_zero_reference_and_shapes() -> None:
    check = OracleChecker(lambda outs, ins: whole(outs, {"y": np.zeros(4)}), 1.0)
    assert check.check({"y": np.zeros(4)}).ok
    res = check.check({"y": np.array([0.0, 0.0, 1e-300, 0.0])})
    assert not res.ok and res.error == float("inf")  # a scale of zero excuses nothing
    res = check.check({"y": np.zeros(5)})
    assert not res.ok and res.where == "y" and "shape (5,)" in res.detail["mismatch"]
    res = check.check({})
    assert not res.ok and "shape None" in res.detail["mismatch"]
