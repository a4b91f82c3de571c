# cupyx.scipy.ndimage.uniform_filter on a 3D volume: CuPy builds the 1D correlate kernels with NVRTC
import sys

import cupy as cp
from cupyx.scipy import ndimage as nd

n = int(sys.argv[1]) if len(sys.argv) > 1 else 192
x = cp.random.default_rng(1).random((n, n, n), dtype=cp.float32)
y = cp.empty_like(x)
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 40):
    nd.uniform_filter(x, size=5, output=y)
cp.cuda.Device().synchronize()
print(f"uniform ok {float(y.sum()):.6e}")
