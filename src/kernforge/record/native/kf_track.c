/* kernforge driver interposer: module, library and allocation hooks.
 *
 * Each wrapper is exported under the driver's own (versioned) symbol name, so a program linked
 * against libcuda binds to it directly, and kf_hooks.c hands it out through dlsym and
 * cuGetProcAddress. kf_real_<name> holds the driver's function; kf_slot() fills it lazily.
 */
#define _GNU_SOURCE
#include "kf.h"

void *kf_slot(void **slot, const char *name, void *self) {
  void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!p) { /* the next definition (a later preload library's wrapper), else the driver's */
    p = kf_driver_sym(name, self);
    if (p) __atomic_store_n(slot, p, __ATOMIC_RELEASE);
  }
  return p;
}

#define CALL(name, type, ...) \
  __typeof__(type) real = (__typeof__(type))kf_slot(&kf_real_##name, #name, (void *)name); \
  if (!real) return 999; /* CUDA_ERROR_UNKNOWN: no driver */ \
  CUresult rc = real(__VA_ARGS__)

/* allocations and frees first run the launches deferral holds (kf_defer.c) */
#define FLUSH_CALL(name, type, ...) kf_defer_flush(); CALL(name, type, __VA_ARGS__)

#define TRACKING (kf_recording())
/* which image each function comes from is also kept while deploying (a deployment entry
 * replaces only launches of the image it was tuned on), by its id alone: nothing is copied */
#define LINKING (kf_recording() || kf_deploy_active())
static uint64_t image_of(const void *image, const char *how) {
  return TRACKING ? kf_image_add(image, how) : kf_image_id(image);
}

/* ---- modules and libraries ------------------------------------------------------------------ */
void *kf_real_cuModuleLoadData, *kf_real_cuModuleLoadDataEx, *kf_real_cuModuleLoadFatBinary,
    *kf_real_cuModuleGetFunction, *kf_real_cuModuleGetGlobal_v2, *kf_real_cuLibraryLoadData,
    *kf_real_cuLibraryGetKernel, *kf_real_cuLibraryGetModule, *kf_real_cuKernelGetFunction,
    *kf_real_cuLibraryGetGlobal;

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  CALL(cuModuleLoadData, CUresult (*)(CUmodule *, const void *), m, image);
  if (!rc && LINKING) kf_handle_image(*m, image_of(image, "cuModuleLoadData"), "cuModuleLoadData");
  return rc;
}

CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *o, void **v) {
  CALL(cuModuleLoadDataEx, CUresult (*)(CUmodule *, const void *, unsigned, CUjit_option *, void **),
       m, image, n, o, v);
  if (!rc && LINKING)
    kf_handle_image(*m, image_of(image, "cuModuleLoadDataEx"), "cuModuleLoadDataEx");
  return rc;
}

CUresult cuModuleLoadFatBinary(CUmodule *m, const void *image) {
  CALL(cuModuleLoadFatBinary, CUresult (*)(CUmodule *, const void *), m, image);
  if (!rc && LINKING)
    kf_handle_image(*m, image_of(image, "cuModuleLoadFatBinary"), "cuModuleLoadFatBinary");
  return rc;
}

CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv,
                           unsigned nj, CUlibraryOption *lo, void **lv, unsigned nl) {
  CALL(cuLibraryLoadData, CUresult (*)(CUlibrary *, const void *, CUjit_option *, void **,
                                       unsigned, CUlibraryOption *, void **, unsigned),
       lib, code, jo, jv, nj, lo, lv, nl);
  if (!rc && LINKING)
    kf_handle_image(*lib, image_of(code, "cuLibraryLoadData"), "cuLibraryLoadData");
  return rc;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  CALL(cuModuleGetFunction, CUresult (*)(CUfunction *, CUmodule, const char *), f, m, name);
  if (!rc && LINKING) kf_handle_link(*f, m);
  return rc;
}

CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name) {
  CALL(cuLibraryGetKernel, CUresult (*)(CUkernel *, CUlibrary, const char *), k, lib, name);
  if (!rc && LINKING) kf_handle_link(*k, lib);
  return rc;
}

CUresult cuLibraryGetModule(CUmodule *m, CUlibrary lib) {
  CALL(cuLibraryGetModule, CUresult (*)(CUmodule *, CUlibrary), m, lib);
  if (!rc && LINKING) kf_handle_link(*m, lib);
  return rc;
}

CUresult cuKernelGetFunction(CUfunction *f, CUkernel k) {
  CALL(cuKernelGetFunction, CUresult (*)(CUfunction *, CUkernel), f, k);
  if (!rc && LINKING) kf_handle_link(*f, k);
  if (!rc) kf_fattr_alias(*f, k);
  return rc;
}

static void global(CUdeviceptr *p, size_t *n, const void *owner) {
  kf_image_ref_t img = {0, NULL};
  kf_handle_lookup(owner, &img);
  if (p && n) kf_alloc_add(*p, *n, KF_ALLOC_GLOBAL, img.image);
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, CUmodule m, const char *name) {
  size_t size = 0;
  CALL(cuModuleGetGlobal_v2, CUresult (*)(CUdeviceptr *, size_t *, CUmodule, const char *),
       p, n ? n : &size, m, name);
  if (!rc && TRACKING) global(p, n ? n : &size, m);
  return rc;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *n, CUlibrary lib, const char *name) {
  size_t size = 0;
  CALL(cuLibraryGetGlobal, CUresult (*)(CUdeviceptr *, size_t *, CUlibrary, const char *),
       p, n ? n : &size, lib, name);
  if (!rc && TRACKING) global(p, n ? n : &size, lib);
  return rc;
}

/* ---- allocations ---------------------------------------------------------------------------- */
void *kf_real_cuMemAlloc_v2, *kf_real_cuMemAllocPitch_v2, *kf_real_cuMemAllocManaged,
    *kf_real_cuMemAllocAsync, *kf_real_cuMemAllocAsync_ptsz, *kf_real_cuMemAllocFromPoolAsync,
    *kf_real_cuMemAllocFromPoolAsync_ptsz, *kf_real_cuMemFree_v2, *kf_real_cuMemFreeAsync,
    *kf_real_cuMemFreeAsync_ptsz, *kf_real_cuMemMap, *kf_real_cuMemUnmap;

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  FLUSH_CALL(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t), p, n);
  if (!rc && TRACKING) kf_alloc_add(*p, n, KF_ALLOC_MEM, 0);
  return rc;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e) {
  FLUSH_CALL(cuMemAllocPitch_v2, CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned),
       p, pitch, w, h, e);
  if (!rc && TRACKING) kf_alloc_add(*p, *pitch * h, KF_ALLOC_MEM, 0);
  return rc;
}

CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) {
  FLUSH_CALL(cuMemAllocManaged, CUresult (*)(CUdeviceptr *, size_t, unsigned), p, n, flags);
  if (!rc && TRACKING) kf_alloc_add(*p, n, KF_ALLOC_MANAGED, 0);
  return rc;
}

#define ALLOC_ASYNC(name)                                                              \
  CUresult name(CUdeviceptr *p, size_t n, CUstream s) {                                \
    FLUSH_CALL(name, CUresult (*)(CUdeviceptr *, size_t, CUstream), p, n, s);                \
    if (!rc && TRACKING) kf_alloc_add(*p, n, KF_ALLOC_ASYNC, 0);                        \
    return rc;                                                                         \
  }
ALLOC_ASYNC(cuMemAllocAsync)
ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define ALLOC_POOL(name)                                                               \
  CUresult name(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {             \
    FLUSH_CALL(name, CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream), p, n, pool, s); \
    if (!rc && TRACKING) kf_alloc_add(*p, n, KF_ALLOC_ASYNC, 0);                        \
    return rc;                                                                         \
  }
ALLOC_POOL(cuMemAllocFromPoolAsync)
ALLOC_POOL(cuMemAllocFromPoolAsync_ptsz)

CUresult cuMemFree_v2(CUdeviceptr p) {
  FLUSH_CALL(cuMemFree_v2, CUresult (*)(CUdeviceptr), p);
  if (!rc && TRACKING) kf_alloc_remove(p);
  return rc;
}

#define FREE_ASYNC(name)                                                               \
  CUresult name(CUdeviceptr p, CUstream s) {                                           \
    FLUSH_CALL(name, CUresult (*)(CUdeviceptr, CUstream), p, s);                             \
    if (!rc && TRACKING) kf_alloc_remove(p);                                            \
    return rc;                                                                         \
  }
FREE_ASYNC(cuMemFreeAsync)
FREE_ASYNC(cuMemFreeAsync_ptsz)

CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,
                  unsigned long long flags) {
  FLUSH_CALL(cuMemMap, CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                              unsigned long long), p, n, off, h, flags);
  if (!rc && TRACKING) kf_alloc_add(p, n, KF_ALLOC_VMM, 0);
  return rc;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
  FLUSH_CALL(cuMemUnmap, CUresult (*)(CUdeviceptr, size_t), p, n);
  if (!rc && TRACKING) kf_alloc_unmap(p, n);
  return rc;
}
