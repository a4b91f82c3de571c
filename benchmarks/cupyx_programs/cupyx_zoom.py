# cupyx.scipy.ndimage.zoom with cubic splines (interpolation kernels CuPy builds with NVRTC);
# its own check: the last result against affine_transform with the same mapping (another kernel)
import sys

import cupy as cp
from cupyx.scipy import ndimage as nd

x = cp.random.default_rng(2).random((128, 128, 128), dtype=cp.float32)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    y = nd.zoom(x, 1.7, order=3)
s = (x.shape[0] - 1) / (y.shape[0] - 1)
ref = nd.affine_transform(x, cp.diag(cp.array([s, s, s])), output_shape=y.shape, order=3)
err = float(cp.abs(y - ref).max())
print(f"zoom {'ok' if err < 1e-4 else 'BAD'} {y.shape} max|err| vs affine_transform {err:.2e}")
