"""lift_source on shared-memory tiles of our own writing, modelled on HeCBench's tiled
stencils (jacobi's 2D tile with one-sided halo loads, stencil1d's 1D window with a
zero-padded halo), and the tiles that stay refused, with the reason; macro parentheses that C
would read as casts."""

from __future__ import annotations

import pytest

from kernforge.apps.lift_regions import Lifted, NotLifted
from kernforge.apps.lift_source import lift_source

TILES = """
#define IDX(i, j) ((i) + (j) * n)
__global__ void jac(float *__restrict__ f, const float *__restrict__ f_old, int n) {
  __shared__ float t[18][18];
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  int j = threadIdx.y + blockIdx.y * blockDim.y;
  t[threadIdx.y + 1][threadIdx.x + 1] = f_old[IDX(i, j)];
  if (threadIdx.x == 0 && i >= 1) t[threadIdx.y + 1][threadIdx.x] = f_old[IDX(i - 1, j)];
  if (threadIdx.x == 15 && i <= n - 2) t[threadIdx.y + 1][threadIdx.x + 2] = f_old[IDX(i + 1, j)];
  if (threadIdx.y == 0 && j >= 1) t[threadIdx.y][threadIdx.x + 1] = f_old[IDX(i, j - 1)];
  if (threadIdx.y == 15 && j <= n - 2) t[threadIdx.y + 2][threadIdx.x + 1] = f_old[IDX(i, j + 1)];
  __syncthreads();
  if (j >= 1 && j <= n - 2) {
    if (i >= 1 && i <= n - 2) {
      f[IDX(i, j)] = 0.25f * (t[threadIdx.y + 1][threadIdx.x + 2] + t[threadIdx.y + 1][threadIdx.x]
                              + t[threadIdx.y + 2][threadIdx.x + 1] + t[threadIdx.y][threadIdx.x + 1]);
    }
  }
}
#define R 2
#define B 128
__global__ void win(const double *__restrict__ in, double *__restrict__ out, int n) {
  __shared__ double w[B + 2 * R];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  int l = threadIdx.x + R;
  w[l] = in[g];
  if (threadIdx.x < R) {
    w[l - R] = (g < R) ? 0 : in[g - R];
    w[l + B] = in[g + B];
  }
  __syncthreads();
  double s = 0;
  #pragma unroll
  for (int o = -R; o <= R; o++) s += w[l + o];
  if (g >= R && g < n - R) out[g] = s;
}
__global__ void cleared(const float *__restrict__ in, float *__restrict__ out, int n) {
  __shared__ float w[B + 2];
  w[threadIdx.x] = 0.f;
  if (threadIdx.x < 2) w[B + threadIdx.x] = 0.f;
  __syncthreads();
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  w[threadIdx.x + 1] = in[g];
  if (threadIdx.x == 0) w[threadIdx.x] = in[g - 1];
  if (threadIdx.x == B - 1) w[threadIdx.x + 2] = in[g + 1];
  __syncthreads();
  if (g > 0 && g < n - 1) out[g] = w[threadIdx.x + 2] - w[threadIdx.x];
}
__global__ void periodic(const float *in, float *out, int n) {
  __shared__ float w[B + 2];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  w[threadIdx.x + 1] = in[g];
  if (threadIdx.x == 0 && g == 0) w[threadIdx.x] = in[g + n - 1];
  if (threadIdx.x == 0 && g > 0) w[threadIdx.x] = in[g - 1];
  __syncthreads();
  if (g < n) out[g] = w[threadIdx.x] - w[threadIdx.x + 1];
}
__global__ void fixed(const float *in, float *out, int n) {
  __shared__ float w[B + 2];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  w[threadIdx.x + 1] = in[g];
  if (threadIdx.x == 0) w[0] = in[g - 1];
  __syncthreads();
  if (g > 0 && g < n) out[g] = w[threadIdx.x] - w[threadIdx.x + 1];
}
__global__ void flat(const float *in, float *out, int n, int m) {
  extern __shared__ float s[];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  s[threadIdx.y * m + threadIdx.x] = in[g];
  __syncthreads();
  if (g < n) out[g] = s[threadIdx.y * m + threadIdx.x];
}
__global__ void early(const float *in, float *out, int n) {
  __shared__ float w[B + 2];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  w[threadIdx.x + 1] = in[g];
  if (threadIdx.x == 0) w[0] = in[g - 1];
  if (g < n) out[g] = w[threadIdx.x];
}
__global__ void summed(const float *in, float *out, int n) {
  __shared__ float w[B];
  int g = threadIdx.x + blockIdx.x * blockDim.x;
  w[threadIdx.x] = in[g];
  w[threadIdx.x] += 1.0f;
  if (g < n) out[g] = w[threadIdx.x];
}
"""


def test_a_2d_tile_with_halo_loads_is_the_window_of_its_buffer() -> None:
    r = lift_source(TILES, "jac")
    assert isinstance(r, Lifted), r
    d = r.program.describe()
    assert r.program.dims == 2 and r.program.precision == "fp32"
    assert "f = 0.25 * (f_old[0,0,1] + f_old[0,0,-1] + f_old[0,1,0] + f_old[0,-1,0])" in d, d


def test_a_1d_window_with_a_zero_padded_halo() -> None:
    r = lift_source(TILES, "win")
    assert isinstance(r, Lifted), r
    d = r.program.describe()
    assert "in[0,0,-2] + in[0,0,-1] + in[0,0,0] + in[0,0,1] + in[0,0,2]" in d, d


def test_a_tile_cleared_then_loaded_holds_the_loads() -> None:
    r = lift_source(TILES, "cleared")
    assert isinstance(r, Lifted), r
    assert "out = in[0,0,1] - in[0,0,-1]" in r.program.describe(), r.program.describe()


@pytest.mark.parametrize(("entry", "words"), [
    ("periodic", "holds other values than a window"),
    ("fixed", "at a fixed element"),
    ("flat", "flattened tile"),
    ("early", "before a barrier"),
    ("summed", "updated in place"),
])
def test_tiles_the_model_cannot_follow_are_refused(entry: str, words: str) -> None:
    r = lift_source(TILES, entry)
    assert isinstance(r, NotLifted) and words in r.reason, r


def test_macro_parentheses_are_no_casts() -> None:
    code = """#define IDX(i, j) ((i) + (j) * n)
    __global__ void k(const float *a, float *b, int n) {
      int i = threadIdx.x + blockIdx.x * blockDim.x, j = threadIdx.y + blockIdx.y * blockDim.y;
      if (i >= 1 && i < n - 1 && j < n) b[IDX(i, j)] = a[IDX((i) - 1, j)] + (float)(2) * a[IDX(i, j)];
    }"""
    r = lift_source(code, "k")
    assert isinstance(r, Lifted), r
    assert "b = a[0,0,-1] + 2 * a[0,0,0]" in r.program.describe(), r.program.describe()
