"""Fixtures for the recording tests (null backend: they run anywhere)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from record_helpers import AXPY, HEAT

from kernforge.backends import Kernel
from kernforge.record import record


@pytest.fixture
def axpy() -> Kernel:
    return Kernel(AXPY, "axpy", backend="null", options={"opt_level": "O2"},
                  tolerance={"y": "rel:1e-12"})


@pytest.fixture
def heat() -> Kernel:
    return Kernel(HEAT, "heat_step", backend="null", defines={"UNUSED": 3})


@pytest.fixture
def one_unit(tmp_path: Path, axpy: Kernel) -> Path:
    """One recorded axpy launch; returns the unit directory."""
    x, y = np.arange(8.0), np.ones(8)
    with record(tmp_path / "rec") as rec:
        axpy(x, y, 2.0, 8, threads=2)
    return rec.paths[0]


@pytest.fixture(scope="session")
def lib(interposer_lib: Path) -> Path:
    """The interposer library, built once for the tests that run programs under it."""
    return interposer_lib
