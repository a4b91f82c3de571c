# cupyx.scipy.spatial.KDTree: build once, query k nearest neighbours many times (CuPy's kernels);
# its own check: the distances equal a brute-force float64 search on a sample of the queries
import sys

import cupy as cp
from cupyx.scipy.spatial import KDTree

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
rng = cp.random.default_rng(7)
pts = rng.random((1 << 16, 3), dtype=cp.float32)
q = rng.random((1 << 15, 3), dtype=cp.float32)
tree = KDTree(pts)
for _ in range(reps):
    d, i = tree.query(q, k=4)
cp.cuda.Device().synchronize()
s = q[:256].astype(cp.float64)
brute = cp.sort(cp.sqrt(((s[:, None, :] - pts[None].astype(cp.float64)) ** 2).sum(-1)), axis=1)
ok = float(cp.abs(brute[:, :4] - d[:256]).max()) < 1e-4
print(f"kdtree {'ok' if ok else 'BAD'} {float(d.sum()):.6e}")
