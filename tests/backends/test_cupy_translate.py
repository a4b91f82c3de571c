"""CuPy -> kernforge translation without CuPy: options, name expressions, scalar widths."""

from __future__ import annotations

import shlex

import numpy as np
import pytest

from kernforge.backends.cuda import KNOBS
from kernforge.backends.cupy_translate import (
    Unrecordable,
    convert_args,
    describe_kernel,
    launch_config,
    map_options,
    widen_scalar,
)
from kernforge.backends.cxx_names import (
    demangle_simple,
    instantiated_signature,
    parse_name_expression,
    template_parameters,
)
from kernforge.core import KernelSource, LaunchConfig, Param, SignatureError

TEMPLATE = r"""
typedef double acc_t;
namespace kf {
template <typename T, int BLOCK = 256, typename U = T, class V = acc_t>
__global__ void reduce_sum(const T* __restrict__ x, U *out, V scale, long long n) { }
}
extern "C" __global__ void plain(float *a, int n) { }
"""


def _p(name: str, dtype: str, ctype: str = "") -> Param:
    return Param(name, ctype or dtype, dtype)


# ---- options ----------------------------------------------------------------------------
def test_exact_options_become_knobs_and_defines() -> None:
    m = map_options(("--maxrregcount=64", "-ftz=true", "--prec-div=false", "--prec-sqrt=false",
                     "--fmad=false", "--extra-device-vectorization", "-dopt=on", "-DN=4",
                     "-D", "M=5", "-D K", "--define-macro=Q=7"), KNOBS)
    assert m.knobs == {"maxrregcount": 64, "ftz": True, "prec_div": False, "prec_sqrt": False,
                       "fmad": False, "extra_device_vectorization": True, "dopt": "on"}
    assert m.defines == {"N": "4", "M": "5", "K": "1", "Q": "7"} and m.extra == ()


def test_other_options_stay_verbatim_in_order() -> None:
    m = map_options(("-std=c++17", "--maxrregcount=100", "-DF(x)=x", "-I/a b", "-lineinfo",
                     "--dopt=off", "--use_fast_math"), KNOBS)
    assert m.extra == ("-std=c++17", "--maxrregcount=100", "-DF(x)=x", "-I/a b", "-lineinfo",
                       "--dopt=off")
    assert m.knobs == {"use_fast_math": True} and m.defines == {}
    assert shlex.split(shlex.join(m.extra)) == list(m.extra)  # extra_options round-trips


def test_fast_math_mixed_with_explicit_flags_stays_verbatim() -> None:
    m = map_options(("--ftz=false", "--use_fast_math", "-O3"), KNOBS)
    assert m.knobs == {} and m.extra == ("--ftz=false", "--use_fast_math", "-O3")


def test_undefine_keeps_defines_verbatim_and_later_options_win() -> None:
    assert map_options(("-DA=1", "-UA"), KNOBS).extra == ("-DA=1", "-UA")
    m = map_options(("--ftz=true", "--ftz=false", "-DA=1", "-DA=2"), KNOBS)
    assert m.knobs == {"ftz": False} and m.defines == {"A": "2"}


# ---- names and templates ------------------------------------------------------------------
def test_parse_name_expression() -> None:
    e = parse_name_expression(" kf::reduce_sum< float , 128 > ")
    assert (e.qualified, e.entry, e.args) == ("kf::reduce_sum", "reduce_sum", ("float", "128"))
    assert parse_name_expression("f<vec<float, 3>, (1 > 2)>").args == ("vec<float, 3>",
                                                                        "(1 > 2)")
    assert parse_name_expression("plain").args is None
    for bad in ("f<float", "f<float>>", "a-b<int>", "f<int,,int>", ""):
        with pytest.raises(SignatureError):
            parse_name_expression(bad)


def test_template_parameters_read_with_tree_sitter() -> None:
    params = template_parameters(KernelSource(TEMPLATE, "reduce_sum", "cuda"))
    assert params is not None
    assert [(p.kind, p.name, p.default) for p in params] == [
        ("type", "T", None), ("value", "BLOCK", "256"), ("type", "U", "T"),
        ("type", "V", "acc_t")]
    assert template_parameters(KernelSource(TEMPLATE, "plain", "cuda")) is None


@pytest.mark.parametrize("expr, dtypes, ctype_x", [
    ("reduce_sum<float>", ["float32", "float32", "float64", "int64"], "const float *"),
    ("kf::reduce_sum<double, 64>", ["float64", "float64", "float64", "int64"], "const double *"),
    ("reduce_sum<int, 32, unsigned int, float>", ["int32", "uint32", "float32", "int64"],
     "const int *"),
])
def test_instantiated_signature(expr: str, dtypes: list[str], ctype_x: str) -> None:
    sig = instantiated_signature(KernelSource(TEMPLATE, "reduce_sum", "cuda"), expr)
    assert [p.dtype for p in sig] == dtypes and [p.pointer for p in sig] == [1, 1, 0, 0]
    assert sig[0].ctype.startswith(ctype_x) and sig[0].const and "T" not in sig[1].ctype


@pytest.mark.parametrize("expr", ["reduce_sum", "reduce_sum<>", "reduce_sum<float2>",
                                  "reduce_sum<float, 1, int, int, int>", "other<float>"])
def test_unresolvable_instantiations_are_signature_errors(expr: str) -> None:
    with pytest.raises(SignatureError):
        instantiated_signature(KernelSource(TEMPLATE, "reduce_sum", "cuda"), expr)


def test_demangle_simple() -> None:
    assert demangle_simple("_Z6kernelPf") == "kernel"
    assert demangle_simple("_ZN2ns4stepEPfi") == "ns::step"
    assert demangle_simple("_ZN12_GLOBAL__N_16kernelEPf") == "kernel"
    assert demangle_simple("plain") == "plain"
    assert demangle_simple("_Z5scaleIfEvPT_S0_i") is None  # a template instantiation
    assert demangle_simple("_ZN2ns5scaleIfEEvPT_") is None


def test_describe_template_kernel() -> None:
    info = describe_kernel(TEMPLATE, "_ZN2kf10reduce_sumIfLi256EffEEvPKT_PT1_T2_x",
                           ("-std=c++17", "-DBLOCKS=4", "--fmad=false"), KNOBS,
                           name_expression="kf::reduce_sum<float>", origin="cupy.RawModule")
    assert info.source.entry == "reduce_sum" and info.source.language == "cuda"
    assert [p.dtype for p in info.signature] == ["float32", "float32", "float64", "int64"]
    opts = info.options.as_dict()
    assert opts["name_expression"] == "kf::reduce_sum<float>" and opts["fmad"] is False
    assert opts["extra_options"] == "-std=c++17" and info.defines == (("BLOCKS", "4"),)
    assert set(opts) == {k.name for k in KNOBS}  # resolved: every knob present
    assert info.capture["symbol"].startswith("_ZN2kf") and info.capture["options"][0] == \
        "-std=c++17"
    v = info.variant(LaunchConfig(grid=4, block=256))
    assert v.launch.block == (256, 1, 1) and v.defines == info.defines


def test_describe_plain_kernel_has_no_name_expression() -> None:
    info = describe_kernel(TEMPLATE, "plain", (), KNOBS)
    assert info.options.get("name_expression") == "" and info.source.entry == "plain"
    assert describe_kernel(TEMPLATE, "_ZN2kf5plainEPfi", (), KNOBS).options.get(
        "name_expression") == "kf::plain"


@pytest.mark.parametrize("kw, why", [
    ({"code": None}, "cubin"), ({"compiler": "nvcc"}, "nvcc"),
    ({"flags": {"jitify": True}}, "jitify"), ({"symbol": "_Z5scaleIfEvPT_"}, "demangle"),
    ({"name_expression": "reduce_sum<float2>"}, "float2"),
])
def test_unrecordable_kernels_say_why(kw: dict, why: str) -> None:
    args = {"code": TEMPLATE, "symbol": "plain", "name_expression": None,
            "compiler": "nvrtc", "flags": None} | kw
    if kw.get("name_expression"):
        args["symbol"] = "_Zxx"
    with pytest.raises(Unrecordable, match=why):
        describe_kernel(args.pop("code"), args.pop("symbol"), (), KNOBS, **args)


# ---- scalars and arguments ------------------------------------------------------------------
@pytest.mark.parametrize("dtype, value, expected", [
    ("int32", 5, np.int32(5)), ("int32", -7, np.int32(-7)),
    ("uint32", -1, np.uint32(0xFFFFFFFF)),          # low 4 bytes of int64 -1
    ("int32", 2**32 + 3, np.int32(3)),              # CuPy passes int64; the kernel reads 4 bytes
    ("int64", 2**40, np.int64(2**40)), ("int16", 70000, np.int16(70000 - 65536)),
    ("float64", 0.1, np.float64(0.1)), ("float32", np.float32(0.1), np.float32(0.1)),
    ("float32", np.array([2.5], np.float32), np.float32(2.5)),
    ("float64", np.float64(-3.0), np.float64(-3.0)), ("bool", True, np.bool_(True)),
    ("uint8", np.int32(258), np.uint8(2)),
])
def test_widen_scalar(dtype: str, value: object, expected: np.generic) -> None:
    got = widen_scalar(_p("v", dtype), value)
    assert got.dtype == np.dtype(dtype) and got == expected


def test_python_float_to_float_param_is_what_the_kernel_reads() -> None:
    got = widen_scalar(_p("a", "float32", "float"), 0.25)
    low = np.frombuffer(np.float64(0.25).tobytes()[:4], np.float32)[0]
    assert got.dtype == np.float32 and got.tobytes() == low.tobytes()


@pytest.mark.parametrize("dtype, value", [("int32", True), ("float64", np.float32(1.0)),
                                          ("int32", 2**70), ("int32", "3"), ("int32", None)])
def test_widen_scalar_refuses(dtype: str, value: object) -> None:
    with pytest.raises(Unrecordable):
        widen_scalar(_p("v", dtype), value)


def _is_buffer(a: object) -> bool:
    return isinstance(a, np.ndarray)


def test_convert_args_buffers() -> None:
    sig = (Param("x", "const float *", "float32", True, True),
           Param("y", "unsigned int *", "uint32", True), Param("n", "int", "int32"))
    x, y = np.ones(4, np.float32), np.zeros(4, np.int32)
    cx, cy, n = convert_args(sig, (x, y, 4), _is_buffer)
    assert cx is x and cy.dtype == np.uint32 and np.shares_memory(cy, y) and n == np.int32(4)
    with pytest.raises(Unrecordable, match="null pointer"):
        convert_args(sig, (None, y, 4), _is_buffer)
    with pytest.raises(Unrecordable, match="C-contiguous"):
        convert_args(sig, (np.ones(8, np.float32)[::2], y, 4), _is_buffer)
    with pytest.raises(Unrecordable, match="3 arguments passed"):
        convert_args(sig[:2], (x, y, 4), _is_buffer)
    with pytest.raises(Unrecordable, match="not a device array"):
        convert_args(sig, (x, 12345, 4), _is_buffer)


def test_overlapping_written_buffers_are_refused() -> None:
    sig = (Param("a", "float *", "float32", True), Param("b", "float *", "float32", True))
    u = np.zeros(8, np.float32)
    with pytest.raises(Unrecordable, match="overlap"):
        convert_args(sig, (u, u[2:]), _is_buffer)
    ro = tuple(Param(p.name, "const float *", "float32", True, True) for p in sig)
    assert len(convert_args(ro, (u, u), _is_buffer)) == 2  # read-only aliasing is fine


def test_launch_config() -> None:
    assert launch_config(4, (32, np.int64(2)), 128) == LaunchConfig((4,), (32, 2), 128)
    with pytest.raises(Unrecordable):
        launch_config((0,), 32)


def test_block_is_tunable_only_without_static_shared_arrays() -> None:
    from kernforge.backends.cuda import block_is_tunable

    assert not block_is_tunable("__global__ void r(double* p) { __shared__ double s[BLOCK]; }")
    assert not block_is_tunable("__shared__ float tile[32][33];")
    assert block_is_tunable("__global__ void k(float* a) { extern __shared__ float s[]; }")
    assert block_is_tunable("__global__ void k(float* a) { a[threadIdx.x] = 0; }")
    assert not block_is_tunable("extern __shared__ float s[]; __shared__ int c[4];")


def test_block_tunability_is_judged_per_entry() -> None:
    from kernforge.backends.cuda import block_is_tunable

    module = """
    template <int B> __device__ double tree(double* s) { return s[0]; }
    __device__ double reduce_helper(double x) { __shared__ double s[256]; s[0] = x; return s[0]; }
    extern "C" __global__ void boundary(float* u, int n) { u[threadIdx.x] = 0; }
    extern "C" __global__ void partial(double* p) { p[0] = reduce_helper(1.0); }
    """
    assert block_is_tunable(module, "boundary")
    assert not block_is_tunable(module, "partial")  # through the helper it calls
    assert not block_is_tunable(module)  # whole source
