"""parse_signature on C and CUDA sources (tree-sitter, no compiler needed)."""

from __future__ import annotations

import pytest

from kernforge.backends.signature import parse_signature
from kernforge.core import KernelSource, Param, SignatureError


def sig(code: str, entry: str = "k", language: str = "c") -> tuple[Param, ...]:
    return parse_signature(KernelSource(code, entry, language))


def test_scalars_pointers_const_restrict() -> None:
    params = sig("void k(const double *restrict x, float *y, double * const z, unsigned int n,"
                 " long long m, size_t s, _Bool b) {}")
    assert [(p.name, p.dtype, p.pointer, p.const) for p in params] == [
        ("x", "float64", True, True), ("y", "float32", True, False),
        ("z", "float64", True, False), ("n", "uint32", False, False),
        ("m", "int64", False, False), ("s", "uint64", False, False),
        ("b", "bool", False, False)]
    assert params[0].ctype == "const double * restrict"


def test_typedefs_and_define_types_are_resolved() -> None:
    code = ("typedef float real;\ntypedef real real2;\n#define INDEX long\n"
            "void k(const real *a, real2 *b, INDEX n) {}")
    assert [(p.name, p.dtype) for p in sig(code)] == [
        ("a", "float32"), ("b", "float32"), ("n", "int64")]


def test_void_and_empty_parameter_lists() -> None:
    assert sig("void k(void) {}") == ()
    assert sig("void k() {}") == ()


def test_array_parameter_is_a_pointer() -> None:
    (p,) = sig("void k(int a[]) {}")
    assert p.pointer and p.dtype == "int32"


def test_entry_is_chosen_among_several_functions() -> None:
    code = "static int helper(int v) { return v; }\nvoid k(float *o) { o[0] = helper(1); }"
    assert [p.name for p in sig(code)] == ["o"]
    assert [p.name for p in sig(code, "helper")] == ["v"]


def test_cuda_kernel() -> None:
    code = ('extern "C" __global__ void __launch_bounds__(256) '
            "k(const float* __restrict__ a, __half *h, float *out, int n) { }")
    params = sig(code, language="cuda")
    assert [(p.name, p.dtype, p.pointer, p.const) for p in params] == [
        ("a", "float32", True, True), ("h", "float16", True, False),
        ("out", "float32", True, False), ("n", "int32", False, False)]


def test_cuda_template_kernel() -> None:
    params = sig("template <int B> __global__ void k(double *a, int n) {}", language="cuda")
    assert [p.name for p in params] == ["a", "n"]


@pytest.mark.parametrize("code, entry, match", [
    ("void other(int a) {}", "k", "entry point 'k' not found"),
    ("void k(mytype a) {}", "k", "mytype"),
    ("void k(struct foo *a) {}", "k", "struct foo"),
    ("void k(float **a) {}", "k", "pointer to pointer"),
    ("void k(int) {}", "k", "cannot read parameter"),
])
def test_errors_name_the_problem(code: str, entry: str, match: str) -> None:
    with pytest.raises(SignatureError, match=match) as err:
        sig(code, entry)
    assert err.value.hint
