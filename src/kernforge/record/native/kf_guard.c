/* kernforge driver interposer: what a deployment entry's kernel assumed of the launch it stands
 * for, besides its parameters and geometry (kf_deploy.c has the line format).
 *
 * Launch attributes. A fused entry's operator was built for launches with the attributes they
 * were recorded with (cuLaunchKernelEx: cluster dimensions, cooperative, priority, ...): none
 * unless the line gives them ("attrs:R:HEX"). Every launch kf_defer.c holds, the first step's
 * included, has exactly those: the same ids in the same order, and the same bytes of each value
 * that its attribute uses (the rest of the 64-byte union is padding, whatever the caller left
 * there; an id this file does not know is compared whole).
 *
 * Guarded globals. An operator that baked in the value of a __constant__ or __device__ global
 * (lifting read it) computes with stale values when the program gives it another. A line's
 * "guard:IMAGE:SIZE:HASH:NAME" fields name each such global; before the entry's kernel first
 * runs (a fused launch, or a one-launch replacement) the interposer looks NAME up in the module
 * of the launched kernel (cuFuncGetModule and cuModuleGetGlobal; for a CUkernel launched as a
 * function, cuKernelGetLibrary and cuLibraryGetGlobal), waits for the context
 * (cuCtxSynchronize: a copy in flight lands first) and reads it; anything but SIZE bytes whose
 * FNV-1a 64 is HASH turns the entry off (its originals run, one message). A fused entry reads
 * them again at each chain's first fused launch (kf_defer.c: whatever ran between chains, a
 * kernel writing a __device__ global included, flushed the chain; nothing of the chain has been
 * enqueued yet, so the wait is short). A one-launch entry, once verified, is checked again only
 * after something may have written a guarded global: every driver
 * function a program reaches while guards exist is a flushing thunk (kf_thunk.c), which tells
 * kf_guard_write its arguments; a copy or memset whose destination range overlaps a guarded
 * range, any copy or memset whose destination cannot be read from its registers (2D, 3D,
 * batches, stream memory operations), and graph launches bump an epoch that invalidates every
 * verification. What it does not see: between two replaced launches of a one-launch entry, a
 * kernel that writes a guarded __device__ global (lifting reads __constant__ values only); host
 * code writing a __managed__ one.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kf_deploy.h"

/* ---- launch attributes ------------------------------------------------------------------------ */
/* the bytes of the value that attribute `id` uses (CUDA 13's CUlaunchAttributeValue members) */
static size_t value_bytes(unsigned id) {
  switch (id) {
    case 1: return 28; /* access policy window: base, bytes, hit ratio, hit and miss property */
    case 2: case 3: case 5: case 6: case 8: case 10: case 14: case 16: return 4;
    case 4: case 11: return 12; /* cluster dimensions, preferred cluster dimensions: x, y, z */
    case 7: return 16;          /* programmatic event: event, flags, trigger at block start */
    case 9: return 2;           /* memory synchronization domain map */
    case 12: return 12;         /* launch completion event: event, flags */
    default: return 64;         /* unknown (or device-updatable node): the whole union */
  }
}

int kf_attrs_match(const uint8_t *attrs, unsigned n, const kf_launch_t *l) {
  if (l->nattrs != n) return 0;
  const uint8_t *a = l->attrs;
  for (unsigned i = 0; i < n; i++, a += KF_ATTR_SIZE, attrs += KF_ATTR_SIZE) {
    uint32_t id;
    memcpy(&id, attrs, 4);
    if (memcmp(a, attrs, 4) || memcmp(a + 8, attrs + 8, value_bytes(id))) return 0;
  }
  return 1;
}

/* ---- guarded globals -------------------------------------------------------------------------- */
uint64_t kf_fnv64(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h ? h : 1;
}

#define MAX_RANGES 64
static struct { CUdeviceptr base; size_t size; } ranges[MAX_RANGES];
static unsigned nranges;     /* published with release: ranges[i < nranges] are whole */
static int ranges_full;      /* more guarded globals than ranges: every copy may write one */
static unsigned long epoch;  /* bumped by every write that may reach a guarded global */
extern void *kf_real_cuModuleGetGlobal_v2, *kf_real_cuLibraryGetGlobal;
void *kf_slot(void **slot, const char *name, void *self);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, CUmodule m, const char *name);
CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *n, CUlibrary lib, const char *name);

int kf_guard_armed(void) { return __atomic_load_n(&nranges, __ATOMIC_ACQUIRE) > 0; }

/* under kf_lock: a verified global's range, so that writes to it are seen */
static void watch(CUdeviceptr base, size_t size) {
  unsigned n = __atomic_load_n(&nranges, __ATOMIC_ACQUIRE);
  for (unsigned i = 0; i < n; i++)
    if (ranges[i].base == base && ranges[i].size == size) return;
  if (n == MAX_RANGES) {
    __atomic_store_n(&ranges_full, 1, __ATOMIC_RELEASE);
    return;
  }
  ranges[n].base = base, ranges[n].size = size;
  __atomic_store_n(&nranges, n + 1, __ATOMIC_RELEASE);
}

static int blind; /* the thunks ran out: a write may go unseen */
void kf_guard_dirty(void) { __atomic_add_fetch(&epoch, 1, __ATOMIC_ACQ_REL); }
void kf_guard_blind(void) { __atomic_store_n(&blind, 1, __ATOMIC_RELEASE); }

/* a driver function that may write device memory was called (kf_thunk.c): `kind` says which
 * registers (rdi, rsi, rdx, rcx, r8 in r[0..4]) hold its destination and size */
void kf_guard_write(int kind, const unsigned long *r) {
  unsigned n = __atomic_load_n(&nranges, __ATOMIC_ACQUIRE);
  if (!n || kind == KF_WRITES_NONE) return;
  CUdeviceptr dst = r[0], end;
  unsigned long long len = 0, rows = 0;
  int odd = 0; /* a size that overflows: read as "may write anything" */
  switch (kind) {
    case KF_WRITES_RDX: len = r[2]; break;
    case KF_WRITES_RCX: len = r[3]; break;
    case KF_WRITES_R8: len = r[4]; break;
    case KF_WRITES_SET8: case KF_WRITES_SET16: case KF_WRITES_SET32:
      odd = __builtin_mul_overflow(r[2], 1ULL << (kind - KF_WRITES_SET8), &len);
      break;
    case KF_WRITES_SET2D8: case KF_WRITES_SET2D16: case KF_WRITES_SET2D32:
      /* (dst, pitch, value, width, height): rows of `width` elements, `pitch` bytes apart */
      odd = r[4] && (__builtin_mul_overflow(r[1], r[4] - 1, &rows) ||
                     __builtin_mul_overflow(r[3], 1ULL << (kind - KF_WRITES_SET2D8), &len) ||
                     __builtin_add_overflow(rows, len, &len));
      if (!r[4]) len = 0;
      break;
    default: odd = 1; /* KF_WRITES_ANY */
  }
  if (odd || __builtin_add_overflow(dst, len, &end) ||
      __atomic_load_n(&ranges_full, __ATOMIC_ACQUIRE)) {
    kf_guard_dirty();
    return;
  }
  for (unsigned i = 0; i < n; i++)
    if (len && dst < ranges[i].base + ranges[i].size && ranges[i].base < end) {
      kf_guard_dirty();
      return;
    }
}

/* the global g in module m (or library lib: a CUkernel launched as a function, as the CUDA
 * runtime launches), read after the context's work: 0, or why not */
static const char *check(const kf_guard_t *g, CUmodule m, CUlibrary lib) {
  typedef CUresult (*get_t)(CUdeviceptr *, size_t *, void *, const char *);
  get_t get = m ? (get_t)kf_slot(&kf_real_cuModuleGetGlobal_v2, "cuModuleGetGlobal_v2",
                                 (void *)cuModuleGetGlobal_v2)
                : (get_t)kf_slot(&kf_real_cuLibraryGetGlobal, "cuLibraryGetGlobal",
                                 (void *)cuLibraryGetGlobal);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!get || get(&base, &size, m ? m : lib, g->name))
    return "is not in the launched kernel's module";
  if (size != g->size) return "has another size now";
  uint8_t *host = malloc(size);
  if (!host) return "cannot be read (no memory)";
  /* relaxed: a stream another thread captures into a graph is not invalidated by the wait */
  int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
  int swapped = kf_drv.cuThreadExchangeStreamCaptureMode &&
                !kf_drv.cuThreadExchangeStreamCaptureMode(&mode);
  CUresult rc = kf_drv.cuCtxSynchronize() || kf_drv.cuMemcpyDtoH(host, base, size);
  if (swapped) kf_drv.cuThreadExchangeStreamCaptureMode(&mode);
  uint64_t h = rc ? 0 : kf_fnv64(host, size);
  free(host);
  if (rc) return "cannot be read";
  watch(base, size);
  return h == g->hash ? NULL : "holds other values now";
}

int kf_guards_ok(kf_entry_t *e, const kf_launch_t *l, kf_fn_t *fn, int again,
                 const char **why) {
  CUcontext ctx = NULL;
  unsigned long now = __atomic_load_n(&epoch, __ATOMIC_ACQUIRE);
  if (kf_drv.cuCtxGetCurrent && kf_drv.cuCtxGetCurrent(&ctx)) ctx = NULL;
  if (!again && e->guard_ok && e->guard_epoch == now && e->guard_ctx == ctx) return 1;
  static __thread char text[200];
  e->guard_ok = 0, e->guard_checks++;
#if !defined(__x86_64__)
  (void)fn;
  *why = "guarded globals need x86-64 (writes to them are not seen elsewhere)";
  return 0;
#else
  CUmodule m = NULL;
  if (__atomic_load_n(&blind, __ATOMIC_ACQUIRE)) {
    *why = "writes to the globals it baked in are not seen (more than 4096 driver functions)";
    return 0;
  }
  CUlibrary lib = NULL;
  if (!kf_drv.cuFuncGetModule || kf_drv.cuFuncGetModule(&m, l->f)) m = NULL;
  if (!m && (!kf_drv.cuKernelGetLibrary || kf_drv.cuKernelGetLibrary(&lib, (CUkernel)l->f)))
    lib = NULL;
  if (!kf_drv.cuCtxSynchronize || !kf_drv.cuMemcpyDtoH || (!m && !lib)) {
    *why = "the module of the launched kernel, whose globals it baked in, is not known";
    return 0;
  }
  for (unsigned i = 0; i < e->nguard; i++) {
    const kf_guard_t *g = &e->guard[i];
    const char *bad = g->image && kf_launch_image(l, fn) != g->image
                          ? "is in another module image than the launched kernel's"
                          : check(g, m, lib);
    if (bad) {
      snprintf(text, sizeof text, "the global %.80s, whose value it baked in, %s", g->name, bad);
      *why = text;
      return 0;
    }
  }
  e->guard_ok = 1, e->guard_epoch = now, e->guard_ctx = ctx;
  return 1;
#endif
}

void kf_guard_refused(kf_entry_t *e, const char *why, const char *what) {
  static uint64_t told[16]; /* entries of one name refused for one reason: told once */
  static unsigned ntold;
  if (e->guard_refused++) return;
  uint64_t h = kf_fnv64(e->name, strlen(e->name)) ^ kf_fnv64(why, strlen(why));
  for (unsigned i = 0; i < ntold; i++)
    if (told[i] == h) return;
  if (ntold < 16) told[ntold++] = h;
  kf_log("deploy: %s runs %s from now on (its %s kernel is not used): %s", e->name, what,
           e->fuse ? "fused" : "tuned", why);
}

/* ---- which driver functions write device memory, and where ------------------------------------ */
static const struct { const char *base; int kind, v1; } writers[] = {
    /* v1: its name without _v2 is the 32-bit-pointer ABI (read as "may write anything") */
    {"cuMemcpy", KF_WRITES_RDX, 0}, {"cuMemcpyAsync", KF_WRITES_RDX, 0},
    {"cuMemcpyHtoD", KF_WRITES_RDX, 1}, {"cuMemcpyHtoDAsync", KF_WRITES_RDX, 1},
    {"cuMemcpyDtoD", KF_WRITES_RDX, 1}, {"cuMemcpyDtoDAsync", KF_WRITES_RDX, 1},
    {"cuMemcpyAtoD", KF_WRITES_RCX, 1}, {"cuMemcpyPeer", KF_WRITES_R8, 0},
    {"cuMemcpyPeerAsync", KF_WRITES_R8, 0},
    {"cuMemsetD8", KF_WRITES_SET8, 1}, {"cuMemsetD16", KF_WRITES_SET16, 1},
    {"cuMemsetD32", KF_WRITES_SET32, 1}, {"cuMemsetD8Async", KF_WRITES_SET8, 0},
    {"cuMemsetD16Async", KF_WRITES_SET16, 0}, {"cuMemsetD32Async", KF_WRITES_SET32, 0},
    {"cuMemsetD2D8", KF_WRITES_SET2D8, 1}, {"cuMemsetD2D16", KF_WRITES_SET2D16, 1},
    {"cuMemsetD2D32", KF_WRITES_SET2D32, 1}, {"cuMemsetD2D8Async", KF_WRITES_SET2D8, 0},
    {"cuMemsetD2D16Async", KF_WRITES_SET2D16, 0}, {"cuMemsetD2D32Async", KF_WRITES_SET2D32, 0},
    /* to host memory or arrays (an array is never a module's global) */
    {"cuMemcpyDtoH", KF_WRITES_NONE, 0}, {"cuMemcpyDtoHAsync", KF_WRITES_NONE, 0},
    {"cuMemcpyAtoH", KF_WRITES_NONE, 0}, {"cuMemcpyAtoHAsync", KF_WRITES_NONE, 0},
    {"cuMemcpyHtoA", KF_WRITES_NONE, 0}, {"cuMemcpyHtoAAsync", KF_WRITES_NONE, 0},
    {"cuMemcpyDtoA", KF_WRITES_NONE, 0}, {"cuMemcpyAtoA", KF_WRITES_NONE, 0},
};

static int strip(char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  if (n <= k || strcmp(s + n - k, suffix)) return 0;
  s[n - k] = '\0';
  return 1;
}

int kf_writes_kind(const char *name, int exact) {
  char base[64];
  if (!name || strlen(name) >= sizeof base) return KF_WRITES_ANY;
  strcpy(base, name);
  if (!strip(base, "_ptds")) strip(base, "_ptsz");
  int v2 = strip(base, "_v2") || strip(base, "_v3");
  for (size_t i = 0; i < sizeof writers / sizeof *writers; i++)
    if (!strcmp(base, writers[i].base))
      return exact && writers[i].v1 && !v2 ? KF_WRITES_ANY : writers[i].kind;
  return strstr(name, "Memcpy") || strstr(name, "Memset") || strstr(name, "WriteValue") ||
                 strstr(name, "BatchMemOp")
             ? KF_WRITES_ANY
             : KF_WRITES_NONE;
}
