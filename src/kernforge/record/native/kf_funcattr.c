/* kernforge driver interposer: the function attributes a program sets, recorded with its units.
 *
 * A kernel launched with more than 48 KiB of dynamic shared memory runs only after the program
 * raised CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on its function; a preferred
 * shared-memory carveout or cache configuration changes how it runs. Replay loads the kernel
 * afresh, so what the program set must travel with each unit recorded from the function:
 *   cuFuncSetAttribute, cuKernelSetAttribute          attribute id -> value (the last set)
 *   cuFuncSetCacheConfig, cuKernelSetCacheConfig      the cache configuration
 *   cuFuncSetSharedMemConfig                          the shared-memory bank configuration
 * (cudaFuncSetAttribute and cudaFuncSetCacheConfig reach one of these). Each wrapper first runs
 * what is held (kf_defer.c: a held launch was made before the change and runs as it was), then
 * calls the driver, and, while recording, remembers what a successful call set, per handle (a
 * CUfunction, or a CUkernel: launched as a CUfunction itself, or through the CUfunction
 * cuKernelGetFunction gave, kf_fattr_alias). kf_fattr_json writes them into a unit's JSON as
 *   "func_attrs": {"set": [[id, value], ...], "cache_config": C|null, "shared_config": S|null}
 * and nothing when the program set none. A context's end forgets the functions' (their handles
 * may be given to other kernels); a CUkernel's outlives contexts and is kept.
 */
#define _GNU_SOURCE
#include "kf.h"

void *kf_slot(void **slot, const char *name, void *self);
void *kf_real_cuFuncSetAttribute, *kf_real_cuFuncSetCacheConfig, *kf_real_cuFuncSetSharedMemConfig,
    *kf_real_cuKernelSetAttribute, *kf_real_cuKernelSetCacheConfig;

#define MAX_FNS 4096
#define MAX_SET 16
typedef struct {
  const void *h;     /* the handle the program set them on */
  const void *alias; /* a CUkernel's: the CUfunction cuKernelGetFunction gave (or NULL) */
  int kernel;        /* set through cuKernel*: outlives a context */
  int nset, id[MAX_SET], val[MAX_SET];
  int cache, shared; /* -1: not set */
} fattr_t;
static fattr_t fns[MAX_FNS];
static int nfns;
static pthread_mutex_t fattr_lock = PTHREAD_MUTEX_INITIALIZER;

/* under fattr_lock: the record of handle h (made when `make`), NULL if none (or no room) */
static fattr_t *find(const void *h, int make) {
  for (int i = nfns - 1; i >= 0; i--)
    if (fns[i].h == h) return &fns[i];
  if (!make || nfns == MAX_FNS) return NULL;
  fattr_t *a = &fns[nfns++];
  *a = (fattr_t){h, NULL, 0, 0, {0}, {0}, -1, -1};
  return a;
}

static void remember(const void *h, int kernel, int what, int id, int v) {
  static int said;
  pthread_mutex_lock(&fattr_lock);
  fattr_t *a = find(h, 1);
  if (a) {
    a->kernel |= kernel;
    if (what == 1) a->cache = v;
    else if (what == 2) a->shared = v;
    else {
      int i = 0;
      while (i < a->nset && a->id[i] != id) i++;
      if (i < MAX_SET) a->id[i] = id, a->val[i] = v, a->nset += i == a->nset;
    }
  }
  pthread_mutex_unlock(&fattr_lock);
  if (!a)
    kf_say_once(&said, "more than %d kernels had function attributes set; the attributes of "
                "the others are not recorded (their replay may fail)", MAX_FNS);
}

void kf_fattr_alias(const void *function, const void *kernel) {
  if (!kf_recording()) return;
  pthread_mutex_lock(&fattr_lock);
  fattr_t *a = find(kernel, 1);
  if (a) a->alias = function, a->kernel = 1;
  pthread_mutex_unlock(&fattr_lock);
}

void kf_fattr_forget(void) {
  pthread_mutex_lock(&fattr_lock);
  int kept = 0;
  for (int i = 0; i < nfns; i++)
    if (fns[i].kernel) fns[kept] = fns[i], fns[kept++].alias = NULL;
  nfns = kept;
  pthread_mutex_unlock(&fattr_lock);
}

void kf_fattr_json(buf_t *b, const void *f) {
  fattr_t a;
  int found = 0;
  pthread_mutex_lock(&fattr_lock);
  for (int i = nfns - 1; i >= 0 && !found; i--)
    if (fns[i].h == f) a = fns[i], found = 1;
  for (int i = nfns - 1; i >= 0 && !found; i--)
    if (fns[i].alias == f) a = fns[i], found = 1;
  pthread_mutex_unlock(&fattr_lock);
  if (!found) return;
  kf_put(b, "\"func_attrs\": {\"set\": [");
  for (int i = 0; i < a.nset; i++) kf_put(b, "%s[%d, %d]", i ? ", " : "", a.id[i], a.val[i]);
  if (a.cache < 0) kf_put(b, "], \"cache_config\": null");
  else kf_put(b, "], \"cache_config\": %d", a.cache);
  if (a.shared < 0) kf_put(b, ", \"shared_config\": null}, ");
  else kf_put(b, ", \"shared_config\": %d}, ", a.shared);
}

#define REAL(name, type)                                                                   \
  __typeof__(type) real = (__typeof__(type))kf_slot(&kf_real_##name, #name, (void *)name); \
  if (!real) return 999; /* CUDA_ERROR_UNKNOWN: no driver */                              \
  kf_defer_flush()

CUresult cuFuncSetAttribute(CUfunction f, int attr, int v) {
  REAL(cuFuncSetAttribute, CUresult (*)(CUfunction, int, int));
  CUresult rc = real(f, attr, v);
  if (!rc && kf_recording()) remember(f, 0, 0, attr, v);
  return rc;
}

CUresult cuFuncSetCacheConfig(CUfunction f, int config) {
  REAL(cuFuncSetCacheConfig, CUresult (*)(CUfunction, int));
  CUresult rc = real(f, config);
  if (!rc && kf_recording()) remember(f, 0, 1, 0, config);
  return rc;
}

CUresult cuFuncSetSharedMemConfig(CUfunction f, int config) {
  REAL(cuFuncSetSharedMemConfig, CUresult (*)(CUfunction, int));
  CUresult rc = real(f, config);
  if (!rc && kf_recording()) remember(f, 0, 2, 0, config);
  return rc;
}

/* per device: a program that sets another value per device records the last one */
CUresult cuKernelSetAttribute(int attr, int v, CUkernel k, CUdevice dev) {
  REAL(cuKernelSetAttribute, CUresult (*)(int, int, CUkernel, CUdevice));
  CUresult rc = real(attr, v, k, dev);
  if (!rc && kf_recording()) remember(k, 1, 0, attr, v);
  return rc;
}

CUresult cuKernelSetCacheConfig(CUkernel k, int config, CUdevice dev) {
  REAL(cuKernelSetCacheConfig, CUresult (*)(CUkernel, int, CUdevice));
  CUresult rc = real(k, config, dev);
  if (!rc && kf_recording()) remember(k, 1, 1, 0, config);
  return rc;
}
