# cupyx.scipy.signal on random data: sosfilt, upfirdn and lombscargle (CuPy's own kernels, built
# with NVRTC); its own check: each float32 result against the float64 computation of the same input
import sys

import cupy as cp
from cupyx.scipy import signal

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
rng = cp.random.default_rng(5)
x = rng.standard_normal((64, 1 << 15), dtype=cp.float32)
sos = cp.asarray([[0.02, 0.04, 0.02, 1.0, -1.56, 0.64],
                  [1.0, 2.0, 1.0, 1.0, -1.7, 0.78]], dtype=cp.float32)
h = cp.hanning(31).astype(cp.float32)
t = cp.sort(rng.random(1 << 14, dtype=cp.float64)).astype(cp.float32) * 100
w = cp.linspace(0.01, 10, 4096, dtype=cp.float32)
yt = cp.sin(2.0 * t).astype(cp.float32)
for _ in range(reps):
    a = signal.sosfilt(sos, x, axis=-1)
    b = signal.upfirdn(h, x[0], up=3, down=2)
    c = signal.lombscargle(t, yt, w)
cp.cuda.Device().synchronize()
ok = [
    float(cp.abs(a - signal.sosfilt(sos.astype(cp.float64), x.astype(cp.float64))).max()) < 1e-3,
    float(cp.abs(b - signal.upfirdn(h.astype(cp.float64), x[0].astype(cp.float64), 3, 2)).max())
    < 1e-4,
    float(cp.abs(c - signal.lombscargle(t.astype(cp.float64), yt.astype(cp.float64),
                                        w.astype(cp.float64))).max()) < 1e-1,
]
print(f"signal {'ok' if all(ok) else 'BAD'} {ok}")
