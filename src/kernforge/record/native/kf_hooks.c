/* kernforge driver interposer: launches, and handing the wrappers out.
 *
 * CUDA runtimes (static or shared), CuPy, PyTorch and Triton reach the driver through
 * dlopen + dlsym and, since CUDA 11.3, through cuGetProcAddress; plain symbol interposition sees
 * none of their calls. So dlsym itself is interposed, and so is cuGetProcAddress: a request for
 * a hooked entry point gets the wrapper, whose kf_real_<name> slot keeps the driver's function.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include "kf.h"

void *kf_slot(void **slot, const char *name, void *self);
extern unsigned long kf_n_cooperative, kf_n_graphs;

/* ---- launches ------------------------------------------------------------------------------- */
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **);
typedef CUresult (*graph_fn)(void *, CUstream);
void *kf_real_cuLaunchKernel, *kf_real_cuLaunchKernel_ptsz, *kf_real_cuLaunchKernelEx,
    *kf_real_cuLaunchKernelEx_ptsz, *kf_real_cuLaunchCooperativeKernel,
    *kf_real_cuLaunchCooperativeKernel_ptsz, *kf_real_cuGraphLaunch, *kf_real_cuGraphLaunch_ptsz,
    *kf_real_cuGetProcAddress, *kf_real_cuGetProcAddress_v2;

static CUresult call_launch(kf_launch_t *l, void *real) {
  return ((launch_fn)real)(l->f, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                           l->block[2], l->shmem, l->stream, l->params, l->extra);
}

struct ex_ctx { launch_ex_fn real; const CUlaunchConfig *cfg; };
static CUresult call_launch_ex(kf_launch_t *l, void *c) {
  struct ex_ctx *x = c;
  CUlaunchConfig cfg = *x->cfg;
  cfg.gridDimX = l->grid[0], cfg.gridDimY = l->grid[1], cfg.gridDimZ = l->grid[2];
  cfg.blockDimX = l->block[0], cfg.blockDimY = l->block[1], cfg.blockDimZ = l->block[2];
  cfg.sharedMemBytes = l->shmem;
  return x->real(&cfg, l->f, l->params, l->extra);
}

#define LAUNCH(name)                                                                        \
  CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {       \
    launch_fn real = (launch_fn)kf_slot(&kf_real_##name, #name, (void *)name);             \
    if (!real) return 999;                                                                  \
    kf_launch_t l = {f, {gx, gy, gz}, {bx, by, bz}, shmem, s, params, extra, #name, NULL, 0, \
                     (void *)real, 0};                                                      \
    return kf_launch(&l, call_launch, (void *)real);                                        \
  }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)

#define LAUNCH_EX(name)                                                                     \
  CUresult name(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {       \
    launch_ex_fn real = (launch_ex_fn)kf_slot(&kf_real_##name, #name, (void *)name);       \
    if (!real) return 999;                                                                  \
    if (!c) return real(c, f, params, extra);                                               \
    kf_launch_t l = {f, {c->gridDimX, c->gridDimY, c->gridDimZ},                            \
                     {c->blockDimX, c->blockDimY, c->blockDimZ}, c->sharedMemBytes,         \
                     c->hStream, params, extra, #name, c->attrs, c->numAttrs, (void *)real, 1}; \
    struct ex_ctx x = {real, c};                                                            \
    return kf_launch(&l, call_launch_ex, &x);                                               \
  }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

/* a launch as it is, through the driver function it was made with (held launches, kf_defer.c) */
CUresult kf_launch_now(kf_launch_t *l) {
  if (!l->ex) return call_launch(l, l->drv);
  CUlaunchConfig cfg = {0};
  cfg.hStream = l->stream, cfg.attrs = (void *)l->attrs, cfg.numAttrs = l->nattrs;
  struct ex_ctx x = {(launch_ex_fn)l->drv, &cfg};
  return call_launch_ex(l, &x);
}

/* cooperative launches and graph launches run unchanged and are only counted (after a flush of
 * held launches, as any other launch) */
#define COOP(name)                                                                          \
  CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                unsigned bz, unsigned shmem, CUstream s, void **params) {                    \
    coop_fn real = (coop_fn)kf_slot(&kf_real_##name, #name, (void *)name);                 \
    if (!real) return 999;                                                                  \
    __atomic_add_fetch(&kf_n_cooperative, 1, __ATOMIC_RELAXED);                             \
    kf_defer_flush();                                                                       \
    return real(f, gx, gy, gz, bx, by, bz, shmem, s, params);                              \
  }
COOP(cuLaunchCooperativeKernel)
COOP(cuLaunchCooperativeKernel_ptsz)

#define GRAPH(name)                                                                         \
  CUresult name(void *exec, CUstream s) {                                                   \
    graph_fn real = (graph_fn)kf_slot(&kf_real_##name, #name, (void *)name);               \
    if (!real) return 999;                                                                  \
    __atomic_add_fetch(&kf_n_graphs, 1, __ATOMIC_RELAXED);                                  \
    if (kf_guard_armed()) kf_guard_dirty(); /* its copies and memsets are not seen */       \
    kf_defer_flush();                                                                       \
    return real(exec, s);                                                                   \
  }
GRAPH(cuGraphLaunch)
GRAPH(cuGraphLaunch_ptsz)

/* ---- the hook table ------------------------------------------------------------------------- */
#define EXTERN(name) extern void *kf_real_##name; CUresult name();
EXTERN(cuModuleLoadData) EXTERN(cuModuleLoadDataEx) EXTERN(cuModuleLoadFatBinary)
EXTERN(cuModuleGetFunction) EXTERN(cuModuleGetGlobal_v2) EXTERN(cuLibraryLoadData)
EXTERN(cuLibraryGetKernel) EXTERN(cuLibraryGetModule) EXTERN(cuKernelGetFunction)
EXTERN(cuLibraryGetGlobal) EXTERN(cuMemAlloc_v2) EXTERN(cuMemAllocPitch_v2)
EXTERN(cuMemAllocManaged) EXTERN(cuMemAllocAsync) EXTERN(cuMemAllocAsync_ptsz)
EXTERN(cuMemAllocFromPoolAsync) EXTERN(cuMemAllocFromPoolAsync_ptsz) EXTERN(cuMemFree_v2)
EXTERN(cuMemFreeAsync) EXTERN(cuMemFreeAsync_ptsz) EXTERN(cuMemMap) EXTERN(cuMemUnmap)
EXTERN(cuCtxDestroy) EXTERN(cuCtxDestroy_v2) EXTERN(cuDevicePrimaryCtxReset)
EXTERN(cuDevicePrimaryCtxReset_v2) EXTERN(cuDevicePrimaryCtxRelease)
EXTERN(cuDevicePrimaryCtxRelease_v2) EXTERN(cuGreenCtxDestroy) EXTERN(cuFuncSetAttribute) EXTERN(cuFuncSetCacheConfig)
EXTERN(cuFuncSetSharedMemConfig) EXTERN(cuKernelSetAttribute) EXTERN(cuKernelSetCacheConfig)
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, void *);

typedef struct { const char *name, *base; int ptds; void **slot; void *wrapper; } hook_t;
#define H(name, base, ptds) {#name, base, ptds, &kf_real_##name, (void *)name}
static const hook_t hooks[] = {
    H(cuLaunchKernel, "cuLaunchKernel", 0), H(cuLaunchKernel_ptsz, "cuLaunchKernel", 1),
    H(cuLaunchKernelEx, "cuLaunchKernelEx", 0), H(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 1),
    H(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0),
    H(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 1),
    H(cuGraphLaunch, "cuGraphLaunch", 0), H(cuGraphLaunch_ptsz, "cuGraphLaunch", 1),
    H(cuGetProcAddress, "cuGetProcAddress", -1), H(cuGetProcAddress_v2, "cuGetProcAddress", -1),
    H(cuModuleLoadData, "cuModuleLoadData", -1), H(cuModuleLoadDataEx, "cuModuleLoadDataEx", -1),
    H(cuModuleLoadFatBinary, "cuModuleLoadFatBinary", -1),
    H(cuModuleGetFunction, "cuModuleGetFunction", -1),
    H(cuModuleGetGlobal_v2, "cuModuleGetGlobal", -1),
    H(cuLibraryLoadData, "cuLibraryLoadData", -1), H(cuLibraryGetKernel, "cuLibraryGetKernel", -1),
    H(cuLibraryGetModule, "cuLibraryGetModule", -1),
    H(cuKernelGetFunction, "cuKernelGetFunction", -1),
    H(cuLibraryGetGlobal, "cuLibraryGetGlobal", -1), H(cuMemAlloc_v2, "cuMemAlloc", -1),
    H(cuMemAllocPitch_v2, "cuMemAllocPitch", -1), H(cuMemAllocManaged, "cuMemAllocManaged", -1),
    H(cuMemAllocAsync, "cuMemAllocAsync", 0), H(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 1),
    H(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0),
    H(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 1),
    H(cuMemFree_v2, "cuMemFree", -1), H(cuMemFreeAsync, "cuMemFreeAsync", 0),
    H(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 1), H(cuMemMap, "cuMemMap", -1),
    H(cuMemUnmap, "cuMemUnmap", -1), H(cuCtxDestroy, "cuCtxDestroy", -1),
    H(cuCtxDestroy_v2, "cuCtxDestroy", -1),
    H(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", -1),
    H(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", -1),
    H(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", -1),
    H(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", -1),
    H(cuGreenCtxDestroy, "cuGreenCtxDestroy", -1),
    H(cuFuncSetAttribute, "cuFuncSetAttribute", -1),
    H(cuFuncSetCacheConfig, "cuFuncSetCacheConfig", -1),
    H(cuFuncSetSharedMemConfig, "cuFuncSetSharedMemConfig", -1),
    H(cuKernelSetAttribute, "cuKernelSetAttribute", -1),
    H(cuKernelSetCacheConfig, "cuKernelSetCacheConfig", -1),
};
#define NHOOKS (sizeof hooks / sizeof *hooks)

static int active(void) { return kf_recording() || kf_deploy_active(); }

/* the interposer's own export of a hooked name (or dlsym), without asking the loader */
KF_RAW void *kf_own_symbol(const char *name) {
  if (kf_same(name, "dlsym")) return (void *)dlsym;
  for (size_t i = 0; i < NHOOKS; i++)
    if (kf_same(hooks[i].name, name)) return hooks[i].wrapper;
  return NULL;
}

/* the wrapper for `real`, a driver function the program asked for; the interposer's own
 * export (a lookup in the global scope found it) finds what it calls itself (kf_slot) */
static void *hand_out(const hook_t *h, void *real) {
  if (real == h->wrapper) return kf_slot(h->slot, h->name, h->wrapper) ? real : NULL;
  __atomic_store_n(h->slot, real, __ATOMIC_RELEASE);
  return h->wrapper;
}

/* any other driver function, while launches may be held, a sequence recorded or globals
 * guarded: a flushing thunk (kf_thunk.c); `exact`: name is a symbol (dlsym's), not a base name
 * (cuGetProcAddress's, whose answer has the current ABI: _v2 pointers) */
static void *guard(const char *name, void *real, int exact) {
  return kf_guarding() && !kf_harmless(name) ? kf_thunk_for(real, name, exact) : real;
}

/* dlsym(handle, "cuLaunchKernel") and the like: the wrapper, with the real function kept.
 * dlsym(RTLD_NEXT) is answered for the caller, unwrapped: a preload library wrapping a driver
 * function chains to the next definition (the interposer's, or the driver's after it), in
 * either order. So is a lookup in the global scope that finds a definition before ours. */
KF_RAW void *dlsym(void *handle, const char *name) {
  void *real = handle == RTLD_NEXT ? kf_next_dlsym(__builtin_return_address(0), name)
                                   : kf_real_dlsym(handle, name);
  if (!real || handle == RTLD_NEXT) return real;
  if (kf_prefix(name, "nvrtc")) return kf_nvrtc_dlsym(name, real);
  if (name[0] != 'c' || name[1] != 'u') return real;
  if (!(real = kf_thunk_named(name, real)) || !active()) return real;
  for (size_t i = 0; i < NHOOKS; i++)
    if (kf_same(hooks[i].name, name))
      return handle == RTLD_DEFAULT && real != hooks[i].wrapper ? real
                                                                  : hand_out(&hooks[i], real);
  return guard(name, real, 1);
}

/* which hook the driver's answer to cuGetProcAddress(base, ...) is: by address, else by flags */
static void *proc_address(const char *symbol, void *fn, unsigned long long flags) {
  const hook_t *by_flags = NULL;
  int candidates = 0;
  void *lib = kf_libcuda();
  for (size_t i = 0; i < NHOOKS; i++) {
    if (strcmp(hooks[i].base, symbol)) continue;
    if (fn == hooks[i].wrapper) return fn; /* the driver answered through our dlsym */
    candidates++;
    if (lib && kf_real_dlsym(lib, hooks[i].name) == fn) return hand_out(&hooks[i], fn);
    if (hooks[i].ptds < 0 || hooks[i].ptds == ((flags & KF_PTDS_FLAG) != 0)) by_flags = &hooks[i];
  }
  if (!candidates) return guard(symbol, fn, 0);
  if (by_flags && (candidates == 1 || flags)) return hand_out(by_flags, fn);
  kf_log("cuGetProcAddress(%s): the driver's function is not one kernforge knows; "
         "its calls are not seen", symbol);
  return kf_guarding() ? kf_thunk_for(fn, symbol, 0) : fn;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
  typedef CUresult (*fn_t)(const char *, void **, int, unsigned long long);
  fn_t real = (fn_t)kf_slot(&kf_real_cuGetProcAddress, "cuGetProcAddress", (void *)cuGetProcAddress);
  if (!real) return 999;
  CUresult rc = real(symbol, pfn, version, flags);
  if (!rc && pfn && *pfn && symbol && active()) *pfn = proc_address(symbol, *pfn, flags);
  return rc;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, void *status) {
  typedef CUresult (*fn_t)(const char *, void **, int, unsigned long long, void *);
  fn_t real = (fn_t)kf_slot(&kf_real_cuGetProcAddress_v2, "cuGetProcAddress_v2",
                            (void *)cuGetProcAddress_v2);
  if (!real) return 999;
  CUresult rc = real(symbol, pfn, version, flags, status);
  if (!rc && pfn && *pfn && symbol && active()) *pfn = proc_address(symbol, *pfn, flags);
  return rc;
}
