/* kernforge driver interposer: one launch -> one spool unit.
 *
 * A recorded launch: synchronize, copy every allocation a parameter points into (prologue),
 * launch and time it with events, synchronize, copy again (epilogue), then write the unit into
 * <root>/.spool/.tmp-<pid>-<seq>/ and rename it to <root>/.spool/<pid>-<seq> when complete.
 * kernforge turns spool units into recording-format units (docs/recording-native.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kf.h"

__thread int kf_suppressed;
pthread_mutex_t kf_lock = PTHREAD_MUTEX_INITIALIZER;
const char *root;
static long max_instances = 4, skip_first;
static unsigned long long byte_budget = 1ULL << 34, bytes_used;
static int record_all;
static size_t scan_limit = 1 << 20;
static unsigned long seq;
unsigned long n_launches, n_recorded, n_budget, n_unknown, n_failed;
unsigned long kf_n_cooperative, kf_n_graphs;

/* called by kernforge's own Python capture around a launch it records itself */
void kf_record_suppress(int on) { kf_suppressed = on; }

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : dflt;
}

int kf_recording(void) {
  static int state = -1;
  if (state < 0) {
    root = getenv("KERNFORGE_RECORD_DIR");
    state = root && *root;
    max_instances = env_long("KERNFORGE_MAX_INSTANCES", 4);
    skip_first = env_long("KERNFORGE_SKIP", 0);
    long mb = env_long("KERNFORGE_MAX_MB", 16384);
    byte_budget = (unsigned long long)(mb < 0 ? 0 : mb) << 20;
    record_all = env_long("KERNFORGE_RECORD_ALL", 0) != 0;
    long scan = env_long("KERNFORGE_SCAN_KB", 1024);
    scan_limit = (size_t)(scan < 0 ? 0 : scan) << 10;
  }
  return state;
}

static int save_image(const char *spool, uint64_t id) {
  kf_image_t im;
  if (!kf_image_get(id, &im)) return -1;
  if (im.written) return 0;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/images/%016llx.bin", spool, (unsigned long long)id);
  if (access(path, F_OK)) {
    snprintf(tmp, sizeof tmp, "%s/images/.tmp-%d-%016llx", spool, getpid(),
             (unsigned long long)id);
    if (kf_write_file(tmp, im.data ? im.data : im.ptr, im.size) || rename(tmp, path)) return -1;
  }
  kf_image_written(id);
  return 0;
}

/* ---- parameters ---------------------------------------------------------------------------- */
static void layout(kf_fn_t *fn) {
  if (fn->layout) return;
  fn->layout = -1;
  size_t off, size, cap = 0;
  CUresult (*info)(void *, size_t, size_t *, size_t *) = NULL;
  if (kf_drv.cuFuncGetParamInfo && !kf_drv.cuFuncGetParamInfo((CUfunction)fn->fn, 0, &off, &size))
    info = (void *)kf_drv.cuFuncGetParamInfo;
  else if (kf_drv.cuKernelGetParamInfo &&
           !kf_drv.cuKernelGetParamInfo((CUkernel)fn->fn, 0, &off, &size))
    info = (void *)kf_drv.cuKernelGetParamInfo;
  else if (kf_drv.cuFuncGetParamInfo &&
           kf_drv.cuFuncGetParamInfo((CUfunction)fn->fn, 0, &off, &size) == 1) {
    fn->layout = 1; /* CUDA_ERROR_INVALID_VALUE at index 0: the kernel takes no parameters */
    return;
  }
  if (!info) return;
  for (size_t i = 0; !info((void *)fn->fn, i, &off, &size); i++) {
    if (i == cap) {
      cap = cap ? 2 * cap : 16;
      fn->off = realloc(fn->off, cap * sizeof *fn->off);
      fn->size = realloc(fn->size, cap * sizeof *fn->size);
      if (!fn->off || !fn->size) return;
    }
    fn->off[i] = off, fn->size[i] = size, fn->nparams = (int)i + 1;
  }
  fn->layout = 1;
}

/* the launch's parameters as one buffer in the kernel's layout; NULL when unknown */
uint8_t *kf_param_bytes(kf_launch_t *l, kf_fn_t *fn, size_t *n) {
  layout(fn);
  if (fn->layout == 1) {
    size_t total = 0;
    for (int i = 0; i < fn->nparams; i++)
      if (fn->off[i] + fn->size[i] > total) total = fn->off[i] + fn->size[i];
    uint8_t *buf = calloc(total ? total : 1, 1);
    if (!buf) return NULL;
    for (int i = 0; i < fn->nparams && l->params; i++)
      memcpy(buf + fn->off[i], l->params[i], fn->size[i]);
    *n = total;
    return buf;
  }
  for (void **e = l->extra; e && *e; e += 2) /* CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE */
    if ((uintptr_t)e[0] == 1)
      for (void **s = l->extra; *s; s += 2)
        if ((uintptr_t)s[0] == 2) {
          *n = *(size_t *)s[1];
          uint8_t *buf = malloc(*n ? *n : 1);
          if (buf) memcpy(buf, e[1], *n);
          return buf;
        }
  return NULL;
}

static size_t add_region(kf_alloc_t *r, size_t k, const kf_alloc_t *a) {
  for (size_t j = 0; j < k; j++)
    if (r[j].base == a->base) return k;
  r[k] = *a;
  return k + 1;
}

static size_t add_pointed(kf_alloc_t *r, size_t k, const uint8_t *p, size_t n) {
  for (size_t o = 0; o + 8 <= n; o += 8) {
    CUdeviceptr v;
    memcpy(&v, p + o, 8);
    kf_alloc_t a;
    if (v && kf_alloc_find(v, &a)) k = add_region(r, k, &a);
  }
  return k;
}

/* allocations that an 8-byte-aligned word of the parameters points into, then those that
 * words of small captured allocations point into (pointers kept in device memory), and the
 * kernel's own module globals; every live allocation with KERNFORGE_RECORD_ALL=1 */
static size_t regions(const uint8_t *p, size_t n, uint64_t image, kf_alloc_t **out) {
  if (record_all) return kf_alloc_snapshot(out);
  kf_alloc_t *all;
  size_t nall = kf_alloc_snapshot(&all), k = 0;
  kf_alloc_t *r = malloc((n / 8 + nall + 1) * sizeof *r);
  if (!r) { free(all); return 0; }
  k = add_pointed(r, k, p, n);
  for (size_t i = 0; i < k; i++) { /* k grows while scanning: pointers to pointers too */
    if (r[i].size > scan_limit) continue;
    uint8_t *h = malloc(r[i].size ? r[i].size : 1);
    if (h && !kf_drv.cuMemcpyDtoH(h, r[i].base, r[i].size)) k = add_pointed(r, k, h, r[i].size);
    free(h);
  }
  for (size_t i = 0; i < nall; i++) /* the kernel's own module globals */
    if (all[i].kind == KF_ALLOC_GLOBAL && image && all[i].owner == image) k = add_region(r, k, &all[i]);
  free(all);
  *out = r;
  return k;
}

/* ---- one recorded launch ------------------------------------------------------------------- */
typedef struct { void *pre, *post; } snap_t;

static int copy_regions(kf_alloc_t *r, size_t k, snap_t *s, int post) {
  for (size_t i = 0; i < k; i++) {
    void *h = malloc(r[i].size ? r[i].size : 1);
    if (!h) return -1;
    if (kf_drv.cuMemcpyDtoH(h, r[i].base, r[i].size)) { free(h); return -1; }
    if (post) s[i].post = h; else s[i].pre = h;
  }
  return 0;
}

static void device_json(buf_t *b) {
  int ver = 0, dev = 0, major = 0, minor = 0;
  char name[256] = "unknown";
  if (kf_drv.cuDriverGetVersion) kf_drv.cuDriverGetVersion(&ver);
  if (kf_drv.cuCtxGetDevice && !kf_drv.cuCtxGetDevice(&dev)) {
    if (kf_drv.cuDeviceGetName) kf_drv.cuDeviceGetName(name, sizeof name, dev);
    if (kf_drv.cuDeviceGetAttribute) {
      kf_drv.cuDeviceGetAttribute(&major, 75, dev); /* COMPUTE_CAPABILITY_MAJOR */
      kf_drv.cuDeviceGetAttribute(&minor, 76, dev);
    }
  }
  kf_put(b, "\"driver_version\": %d, \"device_ordinal\": %d, \"device\": ", ver, dev);
  kf_put_str(b, name);
  kf_put(b, ", \"compute_capability\": [%d, %d]", major, minor);
}

static int write_unit(const kf_launch_t *l, const kf_fn_t *fn, const kf_image_ref_t *img,
                      const uint8_t *params, size_t psize, const kf_alloc_t *r, size_t k,
                      const snap_t *s, float ms, unsigned long call) {
  char spool[4096], tmp[4200], dst[4200], path[4400];
  snprintf(spool, sizeof spool, "%s/.spool", root);
  mkdir(root, 0755);
  mkdir(spool, 0755);
  snprintf(path, sizeof path, "%s/images", spool);
  mkdir(path, 0755);
  unsigned long n = ++seq;
  snprintf(tmp, sizeof tmp, "%s/.tmp-%d-%06lu", spool, getpid(), n);
  snprintf(dst, sizeof dst, "%s/%d-%06lu", spool, getpid(), n);
  if (mkdir(tmp, 0755)) return -1;
  int bad = img->image && save_image(spool, img->image);
  kf_image_t im = {0};
  if (img->image) kf_image_get(img->image, &im);
  static const char *kinds[] = {"cubin", "fatbin", "ptx", "text"};
  buf_t b = {malloc(4096), 0, 4096};
  kf_put(&b, "{\"format\": \"kernforge-spool\", \"version\": 1, \"pid\": %d, \"seq\": %lu, \"function\": ",
      getpid(), n);
  kf_put_str(&b, fn->name);
  kf_put(&b, ", \"call\": %lu, \"api\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
      "\"shared_mem\": %u, \"stream\": %llu, \"app_time_ms\": %.6f, ", call, l->api,
      l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->shmem,
      (unsigned long long)(uintptr_t)l->stream, ms);
  if (img->image)
    kf_put(&b, "\"image\": \"%016llx\", \"image_kind\": \"%s\", \"loaded_via\": \"%s\", ",
        (unsigned long long)img->image, kinds[im.kind], img->how ? img->how : "");
  else kf_put(&b, "\"image\": null, ");
  kf_put(&b, "\"launch_attrs\": [");
  for (unsigned i = 0; i < l->nattrs; i++) {
    kf_put(&b, "%s\"", i ? ", " : "");
    for (unsigned j = 0; j < KF_ATTR_SIZE; j++)
      kf_put(&b, "%02x", ((const uint8_t *)l->attrs)[i * KF_ATTR_SIZE + j]);
    kf_put(&b, "\"");
  }
  kf_put(&b, "], \"param_bytes\": %zu, \"params\": [", psize);
  for (int i = 0; fn->layout == 1 && i < fn->nparams; i++)
    kf_put(&b, "%s{\"offset\": %zu, \"size\": %zu}", i ? ", " : "", fn->off[i], fn->size[i]);
  kf_put(&b, "], \"regions\": [");
  for (size_t i = 0; i < k; i++) {
    int changed = s[i].post && memcmp(s[i].pre, s[i].post, r[i].size);
    kf_put(&b, "%s{\"address\": %llu, \"size\": %zu, \"kind\": %d, \"changed\": %d}", i ? ", " : "",
        (unsigned long long)r[i].base, r[i].size, r[i].kind, changed);
    snprintf(path, sizeof path, "%s/r%zu.pre", tmp, i);
    bad |= kf_write_file(path, s[i].pre, r[i].size);
    if (changed) {
      snprintf(path, sizeof path, "%s/r%zu.post", tmp, i);
      bad |= kf_write_file(path, s[i].post, r[i].size);
    }
  }
  kf_put(&b, "], ");
  device_json(&b);
  kf_put(&b, "}\n");
  if (img->image) bad |= kf_nvrtc_write(tmp, img->image); /* the source, if NVRTC made it */
  snprintf(path, sizeof path, "%s/params.bin", tmp);
  bad |= kf_write_file(path, params, psize);
  snprintf(path, sizeof path, "%s/unit.json", tmp);
  bad |= !b.s || kf_write_file(path, b.s, b.n);
  free(b.s);
  kf_fsync_path(tmp);
  if (bad || rename(tmp, dst)) return -1;
  kf_fsync_path(spool);
  return 0;
}

static CUresult record_one(kf_launch_t *l, kf_fn_t *fn, const uint8_t *params, size_t psize,
                           unsigned long call, CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  kf_image_ref_t img;
  kf_fn_image(l->f, &img);
  kf_alloc_t *r = NULL;
  if (kf_drv.cuCtxSynchronize()) { n_failed++; return real(l, ctx); }
  size_t k = regions(params, psize, img.image, &r), total = 0;
  for (size_t i = 0; i < k; i++) total += 2 * r[i].size;
  if (bytes_used + total > byte_budget) {
    n_budget++;
    free(r);
    return real(l, ctx);
  }
  snap_t *s = calloc(k ? k : 1, sizeof *s);
  void *e0 = NULL, *e1 = NULL;
  float ms = -1;
  CUresult rc;
  if (!s || copy_regions(r, k, s, 0)) {
    n_failed++;
    rc = real(l, ctx);
    goto done;
  }
  if (kf_drv.cuEventCreate && !kf_drv.cuEventCreate(&e0, 0) && !kf_drv.cuEventCreate(&e1, 0)) {
    kf_hold(l->stream);
    kf_drv.cuEventRecord(e0, l->stream);
  }
  rc = real(l, ctx);
  if (e1) kf_drv.cuEventRecord(e1, l->stream);
  if (rc || kf_drv.cuCtxSynchronize() || copy_regions(r, k, s, 1)) { n_failed++; goto done; }
  if (e1 && !kf_drv.cuEventSynchronize(e1)) kf_drv.cuEventElapsedTime(&ms, e0, e1);
  if (write_unit(l, fn, &img, params, psize, r, k, s, ms, call)) {
    n_failed++;
    kf_log("could not write the recording of %s under %s", fn->name, root);
  } else {
    n_recorded++, fn->recorded++;
    bytes_used += total;
  }
done:
  if (e0) kf_drv.cuEventDestroy(e0);
  if (e1) kf_drv.cuEventDestroy(e1);
  for (size_t i = 0; s && i < k; i++) free(s[i].pre), free(s[i].post);
  free(s);
  free(r);
  return rc;
}

/* a launch the recorder leaves alone, timed with events: the kernel's time in the application */
static CUresult timed(kf_launch_t *l, kf_fn_t *fn, CUresult (*real)(kf_launch_t *, void *),
                      void *ctx) {
  void *e0 = NULL, *e1 = NULL;
  if (!kf_drv.cuEventCreate || kf_drv.cuEventCreate(&e0, 0) || kf_drv.cuEventCreate(&e1, 0)) {
    if (e0) kf_drv.cuEventDestroy(e0);
    return real(l, ctx);
  }
  kf_hold(l->stream);
  kf_drv.cuEventRecord(e0, l->stream);
  CUresult rc = real(l, ctx);
  float ms;
  if (!rc && !kf_drv.cuEventRecord(e1, l->stream) && !kf_drv.cuEventSynchronize(e1) &&
      !kf_drv.cuEventElapsedTime(&ms, e0, e1))
    fn->app_ms[fn->napp++] = ms;
  kf_drv.cuEventDestroy(e0);
  kf_drv.cuEventDestroy(e1);
  return rc;
}

CUresult kf_launch(kf_launch_t *l, CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  static __thread int inside; /* a launch made while handling one runs unchanged */
  int rec = kf_recording(), dep = kf_deploy_active();
  if ((!rec && !dep) || kf_suppressed || inside) return real(l, ctx);
  inside = 1;
  kf_resolve_driver();
  kf_fn_t *fn = kf_fn_get(l->f);
  if (!fn) { inside = 0; return real(l, ctx); }
  pthread_mutex_lock(&kf_lock);
  n_launches++;
  unsigned long call = fn->seen++;
  int take = rec && fn->matches && (long)call >= skip_first &&
             (max_instances < 0 || (long)fn->recorded < max_instances);
  dep = dep && kf_deploy_covers(fn); /* other kernels pay no parameter copy */
  size_t psize = 0;
  uint8_t *params = (take || dep) ? kf_param_bytes(l, fn, &psize) : NULL;
  CUresult rc;
  if (dep && params && kf_deploy_try(l, fn, params, psize, &rc, real, ctx)) {
  } else if (take && params) {
    rc = record_one(l, fn, params, psize, call, real, ctx);
  } else if (rec && fn->matches && call > 0 && fn->napp < KF_APP_TIMED && !take) {
    rc = timed(l, fn, real, ctx);
  } else {
    if (take) n_unknown++;
    rc = real(l, ctx);
  }
  pthread_mutex_unlock(&kf_lock);
  free(params);
  inside = 0;
  return rc;
}
