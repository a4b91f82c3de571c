"""The C++ text of the host emulator (:mod:`.emulate`): prelude, runtime, source translation.

Two pieces are compiled by the host C++ compiler:

- the *runtime* (:data:`RUNTIME`), once per process and compiler: ``kf_emu_launch`` runs a grid
  block after block on ``blockDim.x*y*z`` host threads (std::thread-like pthreads, 1 MiB stacks)
  and owns every barrier (``__syncthreads``, ``__syncwarp``, the warp exchange under the
  shuffles and votes), the dynamic shared memory and the error state;
- one *module* per CUDA source: :func:`prelude` (the CUDA dialect on the host), the translated
  source (:func:`translate`) and one exported thunk per entry (:func:`thunks`), which sets the
  calling thread's ``thread_local`` ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` and calls
  the kernel with its arguments unpacked from ``void**`` (like ``cuLaunchKernel``).

The two share only :data:`ABI` (a context struct of indices and function pointers), so a module
does not link against the runtime and stays small to compile.
"""

from __future__ import annotations

import re

ABI = r"""
struct kf_idx3 { unsigned x, y, z; };
struct kf_ctx {
  kf_idx3 tid, bid, bdim, gdim;
  unsigned lane, warp, warp_lanes, pad_;
  unsigned char* dyn_smem;
  unsigned long long dyn_bytes;
  void* impl;
  int (*sync)(kf_ctx*, int op, int pred);
  void (*syncwarp)(kf_ctx*, unsigned mask);
  const unsigned long long* (*exchange)(kf_ctx*, unsigned long long value, unsigned mask);
  void (*trap)(kf_ctx*, const char* message);
};
"""

_VECTOR_BASES = (("char", "signed char"), ("uchar", "unsigned char"), ("short", "short"),
                 ("ushort", "unsigned short"), ("int", "int"), ("uint", "unsigned int"),
                 ("long", "long"), ("ulong", "unsigned long"), ("longlong", "long long"),
                 ("ulonglong", "unsigned long long"), ("float", "float"), ("double", "double"))
_SIZES = {"signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "int": 4,
          "unsigned int": 4, "long": 8, "unsigned long": 8, "long long": 8,
          "unsigned long long": 8, "float": 4, "double": 8}


def _vector_types() -> str:
    """CUDA's vector types (alignment as in vector_types.h: n=3 unaligned, at most 16)."""
    out = []
    for name, ctype in _VECTOR_BASES:
        for n in (1, 2, 3, 4):
            fields = "xyzw"[:n]
            align = _SIZES[ctype] * (1 if n == 3 else n)
            params = ", ".join(f"{ctype} {f}" for f in fields)
            init = ", ".join(fields)
            out.append(f"struct alignas({min(align, 16)}) {name}{n} {{ {ctype} {', '.join(fields)}; }};"
                       f" static inline {name}{n} make_{name}{n}({params}) "
                       f"{{ return {name}{n}{{{init}}}; }}")
    return "\n".join(out) + "\n"


_PRELUDE_HEAD = r"""// ---- kernforge host emulation prelude (kernforge/stencil/emulate_cxx.py) ----
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include <utility>
#define KF_EXPORT extern "C" __attribute__((visibility("default")))
#define KERNFORGE_EMULATION 1
#define __CUDA_ARCH__ 900
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __shared__ static
#define __forceinline__
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
"""

_PRELUDE_BODY = r"""
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
static thread_local uint3 threadIdx, blockIdx;
static thread_local dim3 blockDim, gridDim;
static thread_local kf_ctx* kf_self;
static constexpr int warpSize = 32;
[[noreturn]] static inline void kf_trap(const char* m) { kf_self->trap(kf_self, m); __builtin_unreachable(); }
static inline void __trap() { kf_trap("__trap() called"); }
#define KF_STR2(x) #x
#define KF_STR(x) KF_STR2(x)
#undef assert
#define assert(e) ((e) ? (void)0 : kf_trap("assertion failed: " #e " (line " KF_STR(__LINE__) ")"))
static inline unsigned char* kf_dyn_smem() { return kf_self->dyn_smem; }
// ---- barriers, warp exchange, votes, shuffles
static inline void __syncthreads() { kf_self->sync(kf_self, 0, 0); }
static inline int __syncthreads_count(int p) { return kf_self->sync(kf_self, 1, p); }
static inline int __syncthreads_and(int p) { return kf_self->sync(kf_self, 2, p); }
static inline int __syncthreads_or(int p) { return kf_self->sync(kf_self, 3, p); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { kf_self->syncwarp(kf_self, mask); }
static inline unsigned kf_lanes_mask() {
  return kf_self->warp_lanes >= 32 ? 0xffffffffu : (1u << kf_self->warp_lanes) - 1u;
}
static inline unsigned __activemask() { return kf_lanes_mask(); }
static inline unsigned __ballot_sync(unsigned mask, int p) {
  const unsigned long long* s = kf_self->exchange(kf_self, p != 0, mask);
  unsigned r = 0;
  for (unsigned i = 0; i < kf_self->warp_lanes; ++i) r |= (s[i] ? 1u : 0u) << i;
  return r & mask;
}
static inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p) {
  return __ballot_sync(mask, p) == (mask & kf_lanes_mask());
}
template <class T> static inline T kf_shfl(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move <= 8 bytes");
  unsigned long long w = 0;
  memcpy(&w, &v, sizeof(T));
  const unsigned long long* s = kf_self->exchange(kf_self, w, mask);
  if (src >= 0 && (unsigned)src < kf_self->warp_lanes) memcpy(&v, &s[src], sizeof(T));
  return v;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = (int)kf_self->lane;
  return kf_shfl(mask, v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const int lane = (int)kf_self->lane;
  return kf_shfl(mask, v, (lane & (width - 1)) >= (int)d ? lane - (int)d : -1);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const int lane = (int)kf_self->lane;
  return kf_shfl(mask, v, (lane & (width - 1)) + (int)d < width ? lane + (int)d : -1);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
  const int lane = (int)kf_self->lane, src = lane ^ m;
  return kf_shfl(mask, v, src < (lane & ~(width - 1)) + width ? src : -1);
}
// ---- memory: read-only/cache-hinted loads and stores, fences, atomics
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned) {}
template <class T, class F> static inline T kf_rmw(T* p, F f) {
  T old, nv;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  do { nv = f(old); } while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST,
                                                        __ATOMIC_SEQ_CST));
  return old;
}
template <class T, class U> static inline T atomicAdd(T* p, U v) { return kf_rmw(p, [&](T o) { return (T)(o + (T)v); }); }
template <class T, class U> static inline T atomicSub(T* p, U v) { return kf_rmw(p, [&](T o) { return (T)(o - (T)v); }); }
template <class T, class U> static inline T atomicExch(T* p, U v) { return kf_rmw(p, [&](T) { return (T)v; }); }
template <class T, class U> static inline T atomicMin(T* p, U v) { return kf_rmw(p, [&](T o) { return (T)v < o ? (T)v : o; }); }
template <class T, class U> static inline T atomicMax(T* p, U v) { return kf_rmw(p, [&](T o) { return o < (T)v ? (T)v : o; }); }
template <class T, class U> static inline T atomicAnd(T* p, U v) { return kf_rmw(p, [&](T o) { return (T)(o & (T)v); }); }
template <class T, class U> static inline T atomicOr(T* p, U v) { return kf_rmw(p, [&](T o) { return (T)(o | (T)v); }); }
template <class T, class U> static inline T atomicXor(T* p, U v) { return kf_rmw(p, [&](T o) { return (T)(o ^ (T)v); }); }
template <class T, class U, class V> static inline T atomicCAS(T* p, U cmp, V v) {
  return kf_rmw(p, [&](T o) { return o == (T)cmp ? (T)v : o; });
}
static inline unsigned atomicInc(unsigned* p, unsigned m) { return kf_rmw(p, [&](unsigned o) { return o >= m ? 0u : o + 1u; }); }
static inline unsigned atomicDec(unsigned* p, unsigned m) { return kf_rmw(p, [&](unsigned o) { return (o == 0u || o > m) ? m : o - 1u; }); }
// ---- arithmetic: min/max, fast-math and rounding intrinsics, bit tricks
template <class A, class B> static inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) return fmin((C)a, (C)b); else return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B> static inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) return fmax((C)a, (C)b); else return (C)a < (C)b ? (C)b : (C)a;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float __fdividef(float a, float b) { return a / b; }
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __powf(a, b) powf(a, b)
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline float __int2float_rn(int x) { return (float)x; }
template <class D, class S> static inline D kf_bits(S s) { D d; memcpy(&d, &s, sizeof d); return d; }
static inline float __int_as_float(int x) { return kf_bits<float>(x); }
static inline int __float_as_int(float x) { return kf_bits<int>(x); }
static inline float __uint_as_float(unsigned x) { return kf_bits<float>(x); }
static inline unsigned __float_as_uint(float x) { return kf_bits<unsigned>(x); }
static inline double __longlong_as_double(long long x) { return kf_bits<double>(x); }
static inline long long __double_as_longlong(double x) { return kf_bits<long long>(x); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
// ---- __half: _Float16 when the compiler has it, else a 16-bit struct with exact conversions
#if defined(__FLT16_MAX__) && !defined(KF_NO_FLOAT16)
typedef _Float16 __half;
static inline __half kf_d2h(double d) { return (__half)d; }
#else
static inline unsigned short kf_d2h_bits(double d) {
  unsigned long long b; memcpy(&b, &d, 8);
  const unsigned short sign = (unsigned short)((b >> 48) & 0x8000u);
  const unsigned long long mag = b & 0x7fffffffffffffffull;
  if (mag >= 0x7ff0000000000000ull) return sign | (mag > 0x7ff0000000000000ull ? 0x7e00 : 0x7c00);
  const double a = fabs(d);
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < 0x1p-14) return sign | (unsigned short)nearbyint(a * 0x1p24);  // subnormal (1024: min normal)
  int e; frexp(a, &e);
  unsigned q = (unsigned)nearbyint(ldexp(a, 11 - e)), E = (unsigned)(e + 14);
  if (q == 2048u) { q = 1024u; ++E; }
  return E >= 31u ? (unsigned short)(sign | 0x7c00) : (unsigned short)(sign | (E << 10) | (q - 1024u));
}
static inline float kf_h2f_bits(unsigned short h) {
  const unsigned e = (h >> 10) & 31u, m = h & 1023u;
  const double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                            : ldexp((double)(m | 1024u), (int)e - 25);
  return (float)((h & 0x8000u) ? -v : v);
}
struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(kf_d2h_bits(f)) {}
  __half(double d) : __x(kf_d2h_bits(d)) {}
  __half(int i) : __x(kf_d2h_bits(i)) {}
  operator float() const { return kf_h2f_bits(__x); }
};
static inline __half kf_d2h(double d) { return __half(d); }
#endif
static inline float __half2float(__half h) { return (float)h; }
static inline __half __float2half(float f) { return kf_d2h(f); }
static inline __half __float2half_rn(float f) { return kf_d2h(f); }
static inline __half __double2half(double d) { return kf_d2h(d); }
static inline __half __int2half_rn(int i) { return kf_d2h(i); }
static inline __half __hadd(__half a, __half b) { return kf_d2h((double)(float)a + (float)b); }
static inline __half __hsub(__half a, __half b) { return kf_d2h((double)(float)a - (float)b); }
static inline __half __hmul(__half a, __half b) { return kf_d2h((double)(float)a * (float)b); }
static inline __half __hfma(__half a, __half b, __half c) { return kf_d2h(fma((float)a, (double)(float)b, (float)c)); }
static inline __half __hneg(__half a) { return kf_d2h(-(double)(float)a); }
static inline __half __hmax(__half a, __half b) { return (float)a < (float)b ? b : a; }
static inline __half __hmin(__half a, __half b) { return (float)b < (float)a ? b : a; }
struct alignas(4) __half2 { __half x, y; };
static inline __half2 make_half2(__half x, __half y) { return __half2{x, y}; }
static inline __half2 __halves2half2(__half x, __half y) { return __half2{x, y}; }
static inline __half2 __floats2half2_rn(float x, float y) { return __half2{kf_d2h(x), kf_d2h(y)}; }
static inline __half2 __float2half2_rn(float x) { return __half2{kf_d2h(x), kf_d2h(x)}; }
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __hadd2(__half2 a, __half2 b) { return __half2{__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
static inline __half2 __hmul2(__half2 a, __half2 b) { return __half2{__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }
// ---- launch plumbing used by the thunks
static inline void kf_enter(kf_ctx* c) {
  kf_self = c;
  threadIdx = uint3{c->tid.x, c->tid.y, c->tid.z};
  blockIdx = uint3{c->bid.x, c->bid.y, c->bid.z};
  blockDim = dim3(c->bdim.x, c->bdim.y, c->bdim.z);
  gridDim = dim3(c->gdim.x, c->gdim.y, c->gdim.z);
}
template <class... P, size_t... I>
static inline void kf_call_impl(void (*fn)(P...), void** a, std::index_sequence<I...>) {
  fn(*static_cast<std::remove_cv_t<P>*>(a[I])...);
}
template <class... P> static inline void kf_call(void (*fn)(P...), void** a) {
  kf_call_impl(fn, a, std::index_sequence_for<P...>{});
}
template <class P> constexpr int kf_param_size() {
  if constexpr (std::is_pointer_v<P>) {
    using T = std::remove_cv_t<std::remove_pointer_t<P>>;
    if constexpr (std::is_void_v<T>) return 0; else return (int)sizeof(T);
  } else {
    return -1;
  }
}
template <class... P> static inline int kf_params(void (*)(P...), int* out, int cap) {
  const int sizes[] = {kf_param_size<P>()..., 0};
  for (int i = 0; i < (int)sizeof...(P) && i < cap; ++i) out[i] = sizes[i];
  return (int)sizeof...(P);
}
// ---- end of prelude
"""


def prelude() -> str:
    return _PRELUDE_HEAD + ABI + _vector_types() + _PRELUDE_BODY


# ---- source translation ------------------------------------------------------------------
_IGNORED_INCLUDES = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"](?:cuda_fp16\.h|cuda_runtime\.h|cuda_runtime_api\.h|cuda\.h|'
    r'device_launch_parameters\.h|device_functions\.h|vector_types\.h|assert\.h|cassert)[>"]'
    r'[^\n]*$', re.MULTILINE)
_EXTERN_SHARED = re.compile(
    r"\bextern\s+__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*)*)"
    r"([A-Za-z_][\w\s:<>,*]*?)\s*\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|' r"'(?:\\.|[^'\\\n])*'", re.DOTALL)
_IDENT = re.compile(r"^[A-Za-z_]\w*$")


def _blank(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def translate(source: str) -> str:
    """The CUDA source as the host compiler sees it (line numbers kept).

    CUDA headers (and ``assert.h``: the prelude's ``assert`` reports instead of aborting) are
    dropped; each ``extern __shared__ T name[];`` becomes a pointer to the launch's dynamic
    shared memory: a ``T* const`` local inside a function, a macro at namespace scope.
    """
    text = _IGNORED_INCLUDES.sub("", source)
    plain = _NOISE.sub(_blank, text)  # comments and literals blanked: same offsets
    out, pos = [], 0
    for m in _EXTERN_SHARED.finditer(plain):
        ctype, name = " ".join(m.group(2).split()), m.group(3)
        depth = plain.count("{", 0, m.start()) - plain.count("}", 0, m.start())
        out.append(text[pos:m.start()])
        if depth > 0:
            out.append(f"{ctype}* const {name} = reinterpret_cast<{ctype}*>(kf_dyn_smem());")
        else:
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"\n#define {name} (reinterpret_cast<{ctype}*>(kf_dyn_smem()))\n"
                       f'#line {line} "operator.cu"\n')
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def thunks(entries: tuple[str, ...]) -> str:
    """One exported launcher and one parameter-size query per entry."""
    bad = [e for e in entries if not _IDENT.match(e)]
    if bad:
        raise ValueError(f"entries must be plain (extern \"C\") identifiers, not {bad}")
    parts = ['\n#line 1 "kernforge-emulate-thunks"\n']
    for e in entries:
        parts.append(f"KF_EXPORT void kf_thunk_{e}(void** a, kf_ctx* c) "
                     f"{{ kf_enter(c); kf_call({e}, a); }}\n"
                     f"KF_EXPORT int kf_params_{e}(int* out, int cap) "
                     f"{{ return kf_params({e}, out, cap); }}\n")
    return "".join(parts)


def module_source(source: str, entries: tuple[str, ...],
                  defines: tuple[tuple[str, str], ...] = ()) -> str:
    """The whole translation unit of one module (``defines`` precede the prelude)."""
    bad = [name for name, _ in defines if not _IDENT.match(name)]
    if bad:
        raise ValueError(f"macro names must be identifiers, not {bad}")
    head = "".join(f"#define {name} {value}\n" for name, value in defines)
    return head + prelude() + '#line 1 "operator.cu"\n' + translate(source) + thunks(entries)
