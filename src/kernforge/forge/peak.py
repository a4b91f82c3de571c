"""The device's arithmetic peak, measured in the same run (FMA throughput per precision), and
the roofline classification of a cell: memory-bound when its arithmetic intensity (minimal
FLOPs per compulsory byte) is below the ridge point ``peak FLOP/s / copy bandwidth``.

The issue's bandwidth goal applies to memory-bound cells; compute-bound cells are reported as a
share of the measured FMA peak instead. fp16 cells may compute in fp32 or in ``__half2`` (two
FMAs per instruction, the ``h2`` kernels): their peak is the higher of the two measured rates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import cuda_modules
from ..harness.stats import median
from ..stencil.spec import Cell, Precision
from .measure import GpuDevice

_SOURCE = r"""
template <typename T> __device__ __forceinline__ T kf_fma(T a, T b, T c) { return a * b + c; }
template <typename T>
__global__ void kf_fma_peak(T* out, T a, T b, int iters) {
  T x0 = threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4, x5 = x0 + 5,
    x6 = x0 + 6, x7 = x0 + 7;
  for (int i = 0; i < iters; ++i) {  // eight independent chains hide the FMA latency
    x0 = kf_fma(x0, a, b); x1 = kf_fma(x1, a, b); x2 = kf_fma(x2, a, b);
    x3 = kf_fma(x3, a, b); x4 = kf_fma(x4, a, b); x5 = kf_fma(x5, a, b);
    x6 = kf_fma(x6, a, b); x7 = kf_fma(x7, a, b);
  }
  const T s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  if (s == (T)-1.2345) out[0] = s;  // never true: keeps the chains alive
}
extern "C" __global__ void kf_hfma2_peak(__half2* out, __half2 a, __half2 b, int iters) {
  const float t = threadIdx.x;
  __half2 x0 = __float2half2_rn(t), x1 = __float2half2_rn(t + 1), x2 = __float2half2_rn(t + 2),
    x3 = __float2half2_rn(t + 3), x4 = __float2half2_rn(t + 4), x5 = __float2half2_rn(t + 5),
    x6 = __float2half2_rn(t + 6), x7 = __float2half2_rn(t + 7);
  for (int i = 0; i < iters; ++i) {  // one HFMA2 is two FMAs
    x0 = __hfma2(x0, a, b); x1 = __hfma2(x1, a, b); x2 = __hfma2(x2, a, b);
    x3 = __hfma2(x3, a, b); x4 = __hfma2(x4, a, b); x5 = __hfma2(x5, a, b);
    x6 = __hfma2(x6, a, b); x7 = __hfma2(x7, a, b);
  }
  const __half2 s = __hadd2(__hadd2(__hadd2(x0, x1), __hadd2(x2, x3)),
                            __hadd2(__hadd2(x4, x5), __hadd2(x6, x7)));
  if (__low2float(s) == -1.2345f) out[0] = s;  // never true: keeps the chains alive
}
"""
HALF2 = "half2"
ITERS = 4096
THREADS = 256
CHAINS = 8


class _FmaRunner:
    def __init__(self, cp: Any, ctype: str, blocks: int) -> None:
        self.name = f"fma-peak-{ctype}"
        self.blocks = blocks
        self.ctype = ctype
        entry = "kf_hfma2_peak" if ctype == HALF2 else f"kf_fma_peak<{ctype}>"
        mod = cuda_modules.source_module(
            cp, "#include <cuda_fp16.h>\n" + _SOURCE, options=("--std=c++17", "--fmad=true"),
            name_expressions=(f"kf_fma_peak<{ctype}>",) if ctype != HALF2 else ())
        self.fn = mod.get_function(entry)
        if ctype == HALF2:  # a __half2 travels as its 32 bits: (0.999, 0.999) and (0.001, 0.001)
            self.args = tuple(np.array([v, v], dtype=np.float16).view(np.uint32)[0]
                              for v in (0.999, 0.001))
            self.out = cp.zeros(1, dtype=np.uint32)
        else:
            dtype = np.float64 if ctype == "double" else np.float32
            self.args = (dtype(0.999), dtype(0.001))
            self.out = cp.zeros(1, dtype=dtype)

    def run(self) -> None:
        self.fn((self.blocks,), (THREADS,), (self.out, *self.args, np.int32(ITERS)))

    def output(self) -> Any:
        return self.out

    @property
    def flops(self) -> int:
        lanes = 2 if self.ctype == HALF2 else 1
        return 2 * lanes * CHAINS * ITERS * THREADS * self.blocks


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    ctype: str

    def to_json(self) -> dict[str, Any]:
        return {"flops_per_s": self.flops_per_s, "ctype": self.ctype}


_CACHE: dict[tuple[int, str], Peak] = {}


def peak_flops(device: GpuDevice, precision: Precision) -> Peak:
    """FMA throughput (FLOP/s, an FMA counted as 2) in the precision's accumulation type, and
    for fp16 the higher of that and the ``__half2`` rate; the median of 5 timed runs, measured
    once per device object and type."""
    ctypes = (precision.acc_ctype, HALF2) if precision is Precision.FP16 else (precision.acc_ctype,)
    return max((_measured(device, c) for c in ctypes), key=lambda p: p.flops_per_s)


def _measured(device: GpuDevice, ctype: str) -> Peak:
    key = (id(device), ctype)
    if key not in _CACHE:
        sms = int(device.backend.identity().get("sms", 132) or 132)
        runner = _FmaRunner(device.cp, ctype, blocks=sms * 16)
        seconds = median(device.measure(runner, warmup=2, repeat=5))
        _CACHE[key] = Peak(runner.flops / seconds, ctype)
    return _CACHE[key]


def roofline(cell: Cell, peak: float, copy_bps: float) -> dict[str, Any]:
    """Intensity, ridge point and the bound that applies to ``cell``."""
    intensity = cell.flops / cell.compulsory_bytes
    ridge = peak / copy_bps
    return {"intensity": intensity, "ridge": ridge,
            "bound": "memory" if intensity < ridge else "compute"}
