"""Every class of stencil program, refused where the kernel is no program of it: the same
CUDA kernel lifted from its source and probed on the host emulator, each refused with its
reason (coefficient arrays: a division by the coefficient field; several outputs: over
different boxes; residual reductions: a sum of absolute values; two time levels and in-place
updates: a neighbour of the field written in place; ``__constant__``: an element chosen by the
point; bilinear/polynomial terms: a degree past probing's 3, a quotient of fields). And a
residual summed by a warp-shuffle tree: refused from source, lifted by probing and checked
against the kernel."""

from __future__ import annotations

import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.lift_regions import Lifted, NotLifted
from kernforge.apps.lift_source import lift_source

from .lift_kernels import Case, EmulatedTarget
from .test_lift_source import oracle_matches_kernel

SOURCE = r"""__constant__ float cw[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
extern "C" __global__ void coef_div(const float* u, const float* sigma, float* un, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) un[i] = (u[i - 1] + u[i + 1]) / sigma[i];
}
extern "C" __global__ void two_boxes(const float* in, float* a, float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = 2.0f * in[i];
  if (i > 0 && i < n - 1) a[i] = in[i - 1] + in[i + 1];
}
extern "C" __global__ void abs_residual(const float* f_old, float* f, float* err, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) {
    f[i] = 0.5f * (f_old[i - 1] + f_old[i + 1]);
    atomicAdd(err, fabsf(f[i] - f_old[i]));
  }
}
extern "C" __global__ void wave_racy(const float* cur, float* prev, float c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1)
    prev[i] = 2.0f * cur[i] - prev[i] + c * (prev[i - 1] - 2.0f * cur[i] + prev[i + 1]);
}
extern "C" __global__ void inplace_racy(float* u, float dt, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n - 1) u[i] = u[i] + dt * (u[i + 1] - u[i]);
}
extern "C" __global__ void cmem_varying(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = cw[i % 8] * in[i];
}
extern "C" __global__ void quartic(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i] * in[i] * in[i] + in[i];
}
extern "C" __global__ void rational(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) out[i] = in[i] * in[i + 1] / (1.0f + in[i - 1] * in[i - 1]);
}

extern "C" __global__ void warp_residual(const float* f_old, float* f, float* err, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float e = 0.0f;
  if (i > 0 && i < n - 1) {
    f[i] = 0.5f * (f_old[i - 1] + f_old[i + 1]);
    float d = f[i] - f_old[i];
    e = d * d;
  }
  for (int off = 16; off > 0; off /= 2) e += __shfl_down_sync(0xffffffff, e, off);
  if (threadIdx.x == 0) atomicAdd(err, e);
}
"""
N = 40
F32 = ("buf", "float32")
NO_POLY = "no polynomial of degree <= 3"


def _case(entry: str, params: tuple[tuple[object, ...], ...], n: int = N, block: int = 16,
          small: dict[int, int] | None = None) -> Case:
    return Case(entry, params, (n,), (-(-n // block), 1, 1), (block, 1, 1), small or {})


# class, entry, parameters, words of the source refusal, words of the probing refusal (threads
# racing over a field written in place answer differently from one run to the next, or not
# as any grid shape would)
REFUSED = [
    ("coefficient arrays", "coef_div", (F32,) * 3 + (("int", N),), "a division by a field",
     NO_POLY),
    ("several outputs", "two_boxes", (F32,) * 3 + (("int", N),),
     "the outputs follow different rules at face x-: keep, main", "follow no per-face rule"),
    ("residual reductions", "abs_residual", (F32,) * 3 + (("int", N),), "a call to fabsf",
     "none of the residuals tried"),
    ("two time levels", "wave_racy", (F32,) * 2 + (("f32", 0.3), ("int", N)),
     "reads written field 'prev' at (0, 0, -1)", ("order of the threads", "not local")),
    ("in place", "inplace_racy", (F32, ("f32", 0.3), ("int", N)),
     "reads written field 'u' at (0, 0, 1)",
     ("order of the threads", "not local", "no candidate grid shape explains the response")),
    ("__constant__", "cmem_varying", (F32,) * 2 + (("int", N),),
     "__constant__ array cw read at a varying index", NO_POLY),
    ("polynomial", "quartic", (F32,) * 2 + (("int", N),), None, NO_POLY),
    ("bilinear", "rational", (F32,) * 2 + (("int", N),),
     "division by an expression that reads a field", NO_POLY),
]


@pytest.mark.parametrize(("cls", "entry", "params", "source_words", "probe_words"), REFUSED,
                         ids=[r[0] for r in REFUSED])
def test_refused_from_source_and_by_probing(cls: str, entry: str, params: tuple,
                                            source_words: str | None,
                                            probe_words: str | tuple[str, ...]) -> None:
    small = {2: 1} if entry == "abs_residual" else {}
    r = lift_source(SOURCE, entry)
    if source_words is None:  # the model holds any degree; probing fits up to 3
        assert isinstance(r, Lifted) and r.program.kind(r.program.outputs[0]) == "polynomial"
    else:
        assert isinstance(r, NotLifted) and source_words in r.reason, (cls, r)
    p = lift_probe(EmulatedTarget(_case(entry, params, small=small), SOURCE))
    words = (probe_words,) if isinstance(probe_words, str) else probe_words
    assert isinstance(p, NotLifted) and any(w in p.reason for w in words), (cls, p)


def test_a_warp_shuffle_residual_is_refused_from_source_and_lifted_by_probing() -> None:
    r = lift_source(SOURCE, "warp_residual")
    assert isinstance(r, NotLifted) and "tree reduction across threads" in r.reason, r
    case = _case("warp_residual", (F32,) * 3 + (("int", 70),), n=70, block=32, small={2: 1})
    p = lift_probe(EmulatedTarget(case, SOURCE))
    assert isinstance(p, Probed), p
    (red,) = p.program.reductions
    assert (red.op, red.accumulate, red.over) == ("sumsq", True, "computed")
    oracle_matches_kernel("warp_residual", p.program, dict(p.fields), dict(p.reductions),
                          seed=2, offsets=dict(p.offsets), case=case, source=SOURCE)
