"""Tolerance, RecordedArg, Recording and Measurement (in-memory model, no files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernforge.core import (
    BufferCheck,
    CompileOptions,
    ConfigError,
    KernelSource,
    LaunchConfig,
    Measurement,
    RecordedArg,
    Recording,
    Status,
    Tolerance,
)


@pytest.mark.parametrize("text, expected", [
    ("bitwise", Tolerance()),
    ("abs:1e-6", Tolerance("abs", atol=1e-6)),
    ("rel:1e-5", Tolerance("rel", rtol=1e-5)),
    ("rel:1e-5,1e-8", Tolerance("rel", rtol=1e-5, atol=1e-8)),
    ("norm:1e-4", Tolerance("norm", tol=1e-4)),
    ("abs:0.5,nan=match", Tolerance("abs", atol=0.5, nan="match")),
    ("bitwise:,nan=match", Tolerance(nan="match")),
    ("abs:0.123456789123", Tolerance("abs", atol=0.123456789123)),
    (" bitwise ", Tolerance()),
])
def test_tolerance_parse(text: str, expected: Tolerance) -> None:
    tol = Tolerance.parse(text)
    assert tol == expected
    assert Tolerance.from_json(tol.to_json()) == tol
    assert Tolerance.parse(tol.spec()) == tol  # what a native unit's child reads back
    assert tol.exact == (tol.mode == "bitwise")


@pytest.mark.parametrize("text", ["", "abs", "abs:x", "rel:1,2,3", "norm:", "bitwise:1",
                                  "fuzzy:1", "abs:-1", "rel:inf"])
def test_tolerance_parse_errors(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        Tolerance.parse(text)
    assert "tolerance" in err.value.message


@pytest.mark.parametrize("kwargs", [{"mode": "close"}, {"nan": "ignore"}, {"atol": -1.0},
                                    {"rtol": float("nan")}, {"tol": float("inf")}])
def test_tolerance_validation(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        Tolerance(**kwargs)


def _recording() -> Recording:
    blobs = {"x0": np.arange(4.0), "y0": np.zeros(4), "y1": np.arange(4.0) * 2}
    args = (RecordedArg("x", "array", "float64", (4,), prologue="x0"),
            RecordedArg("y", "array", "float64", (4,), prologue="y0", epilogue="y1",
                        policy=Tolerance.parse("rel:1e-6")),
            RecordedArg("n", "scalar", "int32", value=4))
    src = KernelSource("void k(const double *x, double *y, int n) {}", "k")
    return Recording(Path("/tmp/rec/k-0"), src, CompileOptions.of(opt_level="O2"),
                     LaunchConfig(threads=2), (("B", "8"),), "cpu", args,
                     loader=blobs.__getitem__)


def test_recording_accessors() -> None:
    rec = _recording()
    assert rec.name == "k-0" and rec.nbytes == 64
    assert rec.variant.launch.threads == 2 and rec.variant.defines == (("B", "8"),)
    assert rec.expected("x").tolist() == [0, 1, 2, 3], "unchanged: expected is the prologue"
    assert rec.expected("y").tolist() == [0, 2, 4, 6]
    assert rec.prologue("y").tolist() == [0, 0, 0, 0]
    assert rec.arg("y").written and not rec.arg("x").written and rec.arg("x").is_array
    assert not rec.arg("n").is_array and rec.arg("n").value == 4


def test_recording_errors() -> None:
    rec = _recording()
    with pytest.raises(ConfigError, match="no argument 'z'") as err:
        rec.arg("z")
    assert err.value.hint == "arguments are: x, y, n"
    bare = Recording(rec.path, rec.source, rec.options, rec.launch, (), "cpu", rec.args)
    with pytest.raises(ConfigError, match="blob loader"):
        bare.prologue("x")


def test_measurement_statistics_and_json() -> None:
    bad = BufferCheck("y", False, "rel", 4, mismatches=1, max_abs=0.5, first_bad=(2,))
    m = Measurement(Status.WRONG_RESULT, "y differs", samples=(3.0, 1.0, 2.0),
                    checks=(BufferCheck("x", True, "bitwise", 4), bad))
    assert (m.median, m.min, m.max, m.ok) == (2.0, 1.0, 3.0, False)
    assert m.failed_checks == (bad,) and "1/4 elements differ" in bad.describe()
    d = m.to_json()
    assert d["status"] == "WRONG_RESULT" and d["checks"][1]["first_bad"] == [2]
    empty = Measurement(Status.TIMEOUT)
    assert empty.median == float("inf") and empty.to_json()["median"] is None
