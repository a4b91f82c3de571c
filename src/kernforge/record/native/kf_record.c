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
#include <limits.h>
#include <unistd.h>
#include "kf.h"

__thread int kf_suppressed;
pthread_mutex_t kf_lock = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;

int kf_lock_take(void) {
  int rc = pthread_mutex_lock(&kf_lock);
  if (!rc) kf_locked = 1;
  return rc;
}

void kf_lock_give(void) {
  kf_locked = 0;
  pthread_mutex_unlock(&kf_lock);
}

const char *root;
static long long max_instances = 4, skip_first;
long long kf_seq_want;
static unsigned long long byte_budget = 1ULL << 34, bytes_used;
static int record_all, recording;
static size_t scan_limit = 1 << 20;
unsigned long n_launches, n_recorded, n_budget, n_unknown, n_failed;
unsigned long kf_n_cooperative, kf_n_graphs;

/* called by kernforge's own Python capture around a launch it records itself */
void kf_record_suppress(int on) { kf_suppressed = on; }

/* the KERNFORGE_* record variables, read once: a value that is not understood is said once
 * and its default used (the Python launcher refuses such values before the program starts) */
#define KF_MAX_MB (1LL << 40) /* MiB: the byte budget fits in 64 bits */
#define KF_MAX_SCAN_KB (1LL << 30)
#define KF_MAX_SEQUENCE 65536
static void configure(void) {
  root = getenv("KERNFORGE_RECORD_DIR");
  recording = root && *root;
  if (recording && strlen(root) > 3800) {
    kf_log("KERNFORGE_RECORD_DIR is longer than 3800 bytes; recording is off");
    recording = 0;
  }
  if (!recording) return;
  max_instances = kf_env_ll("KERNFORGE_MAX_INSTANCES", 4, -1, LLONG_MAX);
  skip_first = kf_env_ll("KERNFORGE_SKIP", 0, 0, LLONG_MAX);
  byte_budget = (unsigned long long)kf_env_ll("KERNFORGE_MAX_MB", 16384, 0, KF_MAX_MB) << 20;
  record_all = (int)kf_env_ll("KERNFORGE_RECORD_ALL", 0, 0, 1);
  scan_limit = (size_t)kf_env_ll("KERNFORGE_SCAN_KB", 1024, 0, KF_MAX_SCAN_KB) << 10;
  kf_seq_want = kf_env_ll("KERNFORGE_SEQUENCE", 0, 0, KF_MAX_SEQUENCE);
}

int kf_recording(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, configure);
  return recording;
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

/* the launch's parameters as one buffer in the kernel's layout (the `extra` buffer as given
 * when the program passed one instead of kernelParams); NULL when unknown */
uint8_t *kf_param_bytes(kf_launch_t *l, kf_fn_t *fn, size_t *n) {
  layout(fn);
  if (fn->layout == 1 && (l->params || !l->extra)) {
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

/* ---- the work of a launch: which launches the in-program time may be taken of ------------ */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h;
}

uint64_t kf_work_key(const kf_launch_t *l, const uint8_t *params, size_t psize) {
  uint64_t h = fnv(0xcbf29ce484222325ULL, &l->f, sizeof l->f);
  h = fnv(h, l->grid, sizeof l->grid);
  h = fnv(h, l->block, sizeof l->block);
  h = fnv(h, &l->shmem, sizeof l->shmem);
  if (l->nattrs && l->attrs) h = fnv(h, l->attrs, (size_t)l->nattrs * KF_ATTR_SIZE);
  h = fnv(h, &psize, sizeof psize);
  for (size_t o = 0; o < psize; o += 8) { /* a buffer elsewhere (a ping-pong's other half) */
    CUdeviceptr v = 0;
    size_t w = psize - o < 8 ? psize - o : 8;
    kf_alloc_t a;
    memcpy(&v, params + o, w);
    if (w == 8 && v && kf_alloc_find(v, &a)) v = 0;
    h = fnv(h, &v, sizeof v);
  }
  return h ? h : 1;
}

static int does_work(const kf_fn_t *fn, uint64_t key) {
  for (int i = 0; i < fn->nwork; i++)
    if (fn->work[i] == key) return 1;
  return 0;
}

/* a recorded launch's work: from now on only launches doing it are timed, and times already
 * taken of other work are dropped (a unit's in-program time is of the work it replays) */
static void add_work(kf_fn_t *fn, uint64_t key) {
  if (does_work(fn, key) || fn->nwork == KF_WORK_KEYS) return;
  fn->work[fn->nwork++] = key;
  int n = 0;
  for (int i = 0; i < fn->napp; i++)
    if (does_work(fn, fn->app_key[i])) {
      fn->app_ms[n] = fn->app_ms[i];
      fn->app_key[n++] = fn->app_key[i];
    }
  fn->napp = n;
}

/* whether to time this launch the recorder leaves alone: any, while none of the function's
 * launches was recorded; then only those doing a recorded launch's work. *key: its work. */
static int to_time(kf_launch_t *l, kf_fn_t *fn, uint8_t **params, size_t *psize,
                   uint64_t *key) {
  if (!*params) *params = kf_param_bytes(l, fn, psize);
  *key = *params ? kf_work_key(l, *params, *psize) : 0;
  return !fn->nwork || (*key && does_work(fn, *key));
}

/* The regions of one launch come from one snapshot of the allocation table (sorted by base):
 * an allocation made or freed meanwhile by another thread changes nothing here, and the table
 * of regions holds at most every allocation of the snapshot once. */
typedef struct {
  const kf_alloc_t *all;
  size_t nall, k;
  kf_alloc_t *r; /* nall entries */
  unsigned char *taken;
} found_t;

static void take(found_t *f, size_t i) {
  if (f->taken[i] || f->k >= f->nall) return;
  f->taken[i] = 1;
  f->r[f->k++] = f->all[i];
}

static void add_pointed(found_t *f, const uint8_t *p, size_t n) {
  for (size_t o = 0; o + 8 <= n; o += 8) {
    CUdeviceptr v;
    memcpy(&v, p + o, 8);
    size_t lo = 0, hi = f->nall; /* the first allocation with base > v */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (f->all[mid].base <= v) lo = mid + 1; else hi = mid;
    }
    if (v && lo && v - f->all[lo - 1].base < f->all[lo - 1].size) take(f, lo - 1);
  }
}

/* allocations that an 8-byte-aligned word of the parameters points into, then those that
 * words of small captured allocations point into (pointers kept in device memory), and the
 * kernel's own module globals; every live allocation with KERNFORGE_RECORD_ALL=1 */
size_t kf_regions(const uint8_t *p, size_t n, uint64_t image, kf_alloc_t **out) {
  if (record_all) return kf_alloc_snapshot(out);
  kf_alloc_t *all;
  size_t nall = kf_alloc_snapshot(&all);
  found_t f = {all, nall, 0, malloc((nall ? nall : 1) * sizeof *f.r), calloc(nall ? nall : 1, 1)};
  if (!all || !f.r || !f.taken) {
    free(all), free(f.r), free(f.taken);
    *out = NULL;
    return 0;
  }
  add_pointed(&f, p, n);
  for (size_t i = 0; i < f.k; i++) { /* k grows while scanning: pointers to pointers too */
    if (f.r[i].size > scan_limit) continue;
    uint8_t *h = malloc(f.r[i].size ? f.r[i].size : 1);
    if (h && !kf_drv.cuMemcpyDtoH(h, f.r[i].base, f.r[i].size)) add_pointed(&f, h, f.r[i].size);
    free(h);
  }
  for (size_t i = 0; i < nall; i++) /* the kernel's own module globals */
    if (all[i].kind == KF_ALLOC_GLOBAL && image && all[i].owner == image) take(&f, i);
  free(all);
  free(f.taken);
  *out = f.r;
  return f.k;
}

/* ---- one recorded launch ------------------------------------------------------------------- */
static int copy_regions(kf_alloc_t *r, size_t k, kf_snap_t *s, int post) {
  for (size_t i = 0; i < k; i++) {
    void *h = malloc(r[i].size ? r[i].size : 1);
    if (!h) return -1;
    if (kf_drv.cuMemcpyDtoH(h, r[i].base, r[i].size)) { free(h); return -1; }
    if (post) s[i].post = h; else s[i].pre = h;
  }
  return 0;
}

int kf_budget_left(unsigned long long bytes) {
  return bytes <= byte_budget && bytes_used <= byte_budget - bytes;
}

void kf_budget_use(unsigned long long bytes) { bytes_used += bytes; }

/* said once per process: the program runs on, each launch that cannot be written unrecorded */
void kf_write_failed(const kf_fn_t *fn, int err) {
  static int said;
  const char *why = err == EFBIG ? " (the file-size limit, ulimit -f, is too small)"
                    : err == ELOOP || err == ENOTDIR || err == EEXIST
                        ? " (a name in the spool is taken by a symbolic link, file or FIFO: "
                          "record into a directory of your own)" : "";
  kf_say_once(&said, "could not write the recording of %.200s under %s/.spool: %s%s; such "
              "launches run unrecorded (counted as failed)", fn->name, root, strerror(err), why);
}

static CUresult record_one(kf_launch_t *l, kf_fn_t *fn, const uint8_t *params, size_t psize,
                           unsigned long call, CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  kf_image_ref_t img;
  kf_fn_image(l->f, &img);
  kf_alloc_t *r = NULL;
  if (kf_drv.cuCtxSynchronize()) { n_failed++; return real(l, ctx); }
  size_t k = kf_regions(params, psize, img.image, &r), total = 0;
  for (size_t i = 0; i < k; i++) total += 2 * r[i].size;
  if (!kf_budget_left(total)) {
    n_budget++;
    free(r);
    return real(l, ctx);
  }
  kf_snap_t *s = calloc(k ? k : 1, sizeof *s);
  uint64_t work = kf_work_key(l, params, psize);
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
  if (kf_write_unit(l, fn, &img, params, psize, r, k, s, ms, call, work)) {
    n_failed++;
    kf_write_failed(fn, errno);
  } else {
    n_recorded++, fn->recorded++;
    kf_budget_use(total);
    add_work(fn, work);
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
static CUresult timed(kf_launch_t *l, kf_fn_t *fn, uint64_t key,
                      CUresult (*real)(kf_launch_t *, void *), void *ctx) {
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
    fn->app_key[fn->napp] = key, fn->app_ms[fn->napp++] = ms;
  kf_drv.cuEventDestroy(e0);
  kf_drv.cuEventDestroy(e1);
  return rc;
}

CUresult kf_launch(kf_launch_t *l, CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  static __thread int inside; /* a launch made while handling one runs unchanged */
  int rec = kf_recording(), dep = kf_deploy_active();
  if ((!rec && !dep) || kf_suppressed || inside) {
    if (!inside) kf_defer_flush(); /* a launch not looked at is still another launch */
    return real(l, ctx);
  }
  inside = 1;
  kf_resolve_driver();
  kf_fn_t *fn = kf_fn_get(l->f);
  if (!fn) {
    kf_defer_flush();
    inside = 0;
    return real(l, ctx);
  }
  if (kf_lock_take()) { /* a signal handler's launch, inside a flush: nothing to look at */
    static int said;
    kf_say_once(&said, "a kernel was launched from a signal handler that interrupted the "
                "interposer; it runs as it is, before what the interposer was running");
    inside = 0;
    return real(l, ctx);
  }
  n_launches++;
  unsigned long call = fn->seen++;
  CUresult rc;
  if (kf_seq_open() && kf_seq_step(l, fn, call, &rc, real, ctx)) goto out; /* in a sequence */
  int take = rec && fn->matches && (long long)call >= skip_first &&
             (max_instances < 0 || (long long)fn->recorded < max_instances);
  dep = dep && kf_deploy_covers(fn); /* other kernels pay no parameter copy */
  size_t psize = 0;
  uint64_t key = 0;
  uint8_t *params = (take || dep) ? kf_param_bytes(l, fn, &psize) : NULL;
  if (dep && params && kf_deploy_try(l, fn, params, psize, &rc, real, ctx)) {
  } else if (kf_defer_flush_locked(), take && params) { /* any other launch: a flush first */
    if (!(kf_seq_enabled() && !dep && kf_seq_begin(l, fn, call, &rc, real, ctx)))
      rc = record_one(l, fn, params, psize, call, real, ctx);
  } else if (rec && fn->matches && call > 0 && fn->napp < KF_APP_TIMED && !take &&
             to_time(l, fn, &params, &psize, &key)) {
    rc = timed(l, fn, key, real, ctx);
  } else {
    if (take) n_unknown++;
    rc = real(l, ctx);
  }
  free(params);
out:
  kf_lock_give();
  inside = 0;
  return rc;
}
