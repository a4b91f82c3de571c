# cupyx.scipy.ndimage.median_filter on a 2D image (rank-filter kernels CuPy builds with NVRTC);
# its own check: the float32 result equals the float64 filter of the same image
import sys

import cupy as cp
from cupyx.scipy import ndimage as nd

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
x = cp.random.default_rng(3).random((n, n), dtype=cp.float32)
y = cp.empty_like(x)
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    nd.median_filter(x, size=5, output=y)
ref = nd.median_filter(x.astype(cp.float64), size=5)
same = bool((ref.astype(cp.float32) == y).all())
print(f"median {'ok' if same else 'BAD'} {float(y.sum()):.6e}")
