"""The element types of a kernel's pointer parameters from its mangled symbol
(backends/cxx_names.py ``pointer_dtypes``): template arguments and substitutions resolved,
checked against the symbols nvcc gives examples/heat3d_cupy.py's reduction kernels."""

from __future__ import annotations

import pytest

from kernforge.backends.cxx_names import pointer_dtypes


@pytest.mark.parametrize(("symbol", "want"), [
    # void sq_diff_partial<float, 256>(float const*, float const*, double*, long long)
    ("_Z15sq_diff_partialIfLi256EEvPKT_S2_Pdx", {0: "float32", 1: "float32", 2: "float64"}),
    ("_Z15sq_diff_partialIdLi256EEvPKT_S2_Pdx", {0: "float64", 1: "float64", 2: "float64"}),
    # void sum_partials<double, 256>(double const*, double*, int)
    ("_Z12sum_partialsIdLi256EEvPKT_PS0_i", {0: "float64", 1: "float64"}),
    ("_Z11jacobi_stepPfPKfS_", {0: "float32", 1: "float32", 2: "float32"}),  # S_ = float*
    ("_Z5solvejPd", {1: "float64"}),
    ("_Z4copyPK6__halfPS_", None),  # a class type: not read
])
def test_pointer_dtypes(symbol: str, want: dict[int, str] | None) -> None:
    assert pointer_dtypes(symbol) == want


def test_unreadable_symbols_have_none() -> None:
    assert pointer_dtypes("heat_stencil") is None  # extern "C": no types in the name
    assert pointer_dtypes("_ZN2ns4stepEPfi") is None  # a nested name
    assert pointer_dtypes("_Z4stepPfS3_") is None  # a substitution past what was read
