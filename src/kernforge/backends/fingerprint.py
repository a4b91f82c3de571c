"""A 64-bit content fingerprint of a buffer, computed where the buffer lives.

Used to verify on the device without giving the candidate kernel the expected outputs: the
replay engine keeps only the fingerprint of each expected buffer; after the candidate ran, the
output's fingerprint is computed on the device and compared on the host. Equal fingerprints
mean bit-identical contents (a collision needs ~2^64 tries); a difference sends the buffer to
the full host-side check, which measures the error.

Definition (identical on host and device): view the bytes as words ``w_i`` of 8 bytes (4, 2 or
1 when the size is not a multiple of 8), ``z_i = splitmix64(w_i + (i + 1) * φ)`` with
``φ = 0x9E3779B97F4A7C15``, fingerprint = ``(Σ z_i mod 2^64, nbytes)``. 8-byte words halve the
mixing work: on the H200 a 512 MiB buffer takes 0.16 ms (3.3 TB/s; 0.30 ms with 4-byte words).
"""

from __future__ import annotations

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
M1, M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB

CUDA_SOURCE = r"""
__device__ __forceinline__ unsigned long long kf_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
template <typename W>
__device__ void kf_fp(const W* __restrict__ d, unsigned long long n, unsigned long long* out) {
    unsigned long long acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride)
        acc += kf_mix((unsigned long long)d[i] + (i + 1ULL) * 0x9E3779B97F4A7C15ULL);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
extern "C" __global__ void kf_fp8(const unsigned long long* d, unsigned long long n,
                                  unsigned long long* out) { kf_fp(d, n, out); }
extern "C" __global__ void kf_fp4(const unsigned int* d, unsigned long long n,
                                  unsigned long long* out) { kf_fp(d, n, out); }
extern "C" __global__ void kf_fp2(const unsigned short* d, unsigned long long n,
                                  unsigned long long* out) { kf_fp(d, n, out); }
extern "C" __global__ void kf_fp1(const unsigned char* d, unsigned long long n,
                                  unsigned long long* out) { kf_fp(d, n, out); }
"""


WORD_DTYPES = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


def word_size(nbytes: int) -> int:
    return next(w for w in (8, 4, 2, 1) if nbytes % w == 0)


def host_fingerprint(array: np.ndarray, chunk: int = 1 << 22) -> tuple[int, int]:
    """The fingerprint computed with numpy (the reference the device version must equal)."""
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    w = word_size(raw.size)
    words = raw.view(WORD_DTYPES[w])
    total = np.uint64(0)
    with np.errstate(over="ignore"):
        for start in range(0, words.size, chunk):
            z = words[start:start + chunk].astype(np.uint64)
            z += (np.arange(start + 1, start + 1 + z.size, dtype=np.uint64)
                  * np.uint64(GOLDEN))
            z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
            z ^= z >> np.uint64(31)
            total += z.sum(dtype=np.uint64)
    return int(total), int(raw.size)
