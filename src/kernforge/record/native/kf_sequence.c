/* kernforge driver interposer: a time loop's launches recorded as one unit (--sequence N).
 *
 * With KERNFORGE_SEQUENCE=N (N >= 2), the launch the instance selection would record starts a
 * sequence instead of a one-launch unit: that launch and the launches after it on the same
 * context and stream (of any kernel, each with its own function, geometry and parameter bytes)
 * until the kernel that started it has launched N times. A region (an allocation a launch's
 * parameters point into, found as for one launch) is copied when the first launch that
 * touches it comes: no earlier launch of the sequence pointed into it, so it still holds what
 * it held before the first launch. After the last launch every region is copied again, and the
 * whole sequence is written as one spool unit (version 2: the first launch's fields as in
 * version 1, plus "sequence" and "launches", p<j>.bin the j-th launch's parameters).
 *
 * Whatever could observe memory or reorder work ends the sequence early, before it runs: a
 * launch on another context or stream (or thread, for a per-thread default stream), a launch
 * whose parameter layout is unknown, and every driver function deferral flushes for (copies,
 * memsets, synchronizations, events, stream waits and queries, host functions, allocations,
 * frees, graph and cooperative launches, unknown functions: kf_thunk.c hands them out as
 * flushing thunks while sequences are recorded), process exit and the --max-mb budget. The
 * sequence is then written as far as it went, with the number of its steps and why it ended.
 * Only complete units appear in the spool (kf_spool_write), so a killed process leaves none
 * half-written. A launch that fails drops its sequence (counted as failed).
 *
 * The recorder's own driver calls (synchronizations, copies, events) go to the driver itself
 * (kf_drv), never through a thunk. Everything here runs under kf_lock. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kf.h"

typedef struct {
  kf_launch_t l; /* params and extra NULL; attrs point to `attrs` */
  kf_fn_t *fn;
  kf_image_ref_t img;
  uint8_t *p, *attrs;
  size_t n;
  float ms;
  unsigned long call;
} step_t;

static struct {
  int open;
  kf_fn_t *fn; /* the kernel whose launches are the sequence's steps */
  CUcontext ctx;
  CUstream stream;
  pthread_t thread; /* for a per-thread default stream, else 0 */
  unsigned long steps;
  step_t *st;
  size_t nst, capst;
  kf_alloc_t *r;
  kf_snap_t *s;
  size_t k, capr;
  unsigned long long bytes; /* pre and post of every region */
} S;
static int opened; /* read without the lock: whether a sequence may be open */
static int off;    /* the flushing thunks ran out: observations could go unseen */

int kf_seq_enabled(void) {
  return kf_recording() && kf_seq_want >= 2 && !__atomic_load_n(&off, __ATOMIC_ACQUIRE);
}

void kf_seq_disable(const char *why) {
  static int said;
  if (__atomic_exchange_n(&off, 1, __ATOMIC_ACQ_REL) || !kf_recording() || kf_seq_want < 2)
    return;
  kf_seq_flush();
  kf_say_once(&said, "sequences are recorded as one-launch units from now on: %s", why);
}
int kf_seq_open(void) { return S.open; }

static void clear(void) {
  for (size_t i = 0; i < S.nst; i++) free(S.st[i].p), free(S.st[i].attrs);
  for (size_t i = 0; i < S.k; i++) free(S.s[i].pre), free(S.s[i].post);
  free(S.st), free(S.r), free(S.s);
  memset(&S, 0, sizeof S);
  __atomic_store_n(&opened, 0, __ATOMIC_RELEASE);
}

/* ---- writing ------------------------------------------------------------------------------- */
static const char *ended_why;

static int seq_files(int dir, unsigned long n, void *arg) {
  (void)arg;
  char *changed = NULL, name[64];
  int rc = kf_region_files(dir, S.r, S.k, S.s, &changed);
  const step_t *first = &S.st[0];
  if (!rc && first->img.image) rc = kf_nvrtc_write(dir, first->img.image);
  if (!rc) rc = kf_write_at(dir, "params.bin", first->p, first->n);
  for (size_t j = 0; j < S.nst && !rc; j++) {
    snprintf(name, sizeof name, "p%zu.bin", j);
    rc = kf_write_at(dir, name, S.st[j].p, S.st[j].n);
  }
  if (!rc) {
    float total = 0;
    for (size_t j = 0; j < S.nst; j++) total += S.st[j].ms < 0 ? 0 : S.st[j].ms;
    buf_t b = {malloc(4096), 0, 4096};
    kf_put(&b, "{\"format\": \"kernforge-spool\", \"version\": 2, \"pid\": %d, \"seq\": %lu, ",
           getpid(), n);
    kf_launch_json(&b, &first->l, first->fn, &first->img, first->n, total, first->call);
    kf_put(&b, ", ");
    kf_regions_json(&b, S.r, S.k, changed);
    kf_put(&b, ", ");
    kf_device_json(&b);
    kf_put(&b, ", \"sequence\": {\"requested\": %lld, \"steps\": %lu, \"ended\": \"%s\"}, "
           "\"launches\": [", kf_seq_want, S.steps, ended_why);
    for (size_t j = 0; j < S.nst; j++) {
      kf_put(&b, "%s{", j ? ", " : "");
      kf_launch_json(&b, &S.st[j].l, S.st[j].fn, &S.st[j].img, S.st[j].n, S.st[j].ms,
                     S.st[j].call);
      kf_put(&b, "}");
    }
    kf_put(&b, "]}\n");
    rc = !b.s ? (errno = ENOMEM, -1) : kf_write_at(dir, "unit.json", b.s, b.n);
    free(b.s);
  }
  free(changed);
  return rc;
}

/* the sequence as far as it went: the regions after its last launch, then the unit */
static void end(const char *why) {
  if (!S.open) return;
  if (!S.nst) { clear(); return; }
  kf_fn_t *fn = S.fn;
  CUcontext cur = NULL, popped; /* the sequence's context, current while its state is read */
  int pushed = S.ctx && kf_drv.cuCtxGetCurrent && !kf_drv.cuCtxGetCurrent(&cur) &&
               cur != S.ctx && kf_drv.cuCtxPushCurrent && kf_drv.cuCtxPopCurrent &&
               !kf_drv.cuCtxPushCurrent(S.ctx);
  int ok = !kf_drv.cuCtxSynchronize();
  for (size_t i = 0; ok && i < S.k; i++) {
    if (!(S.s[i].post = malloc(S.r[i].size ? S.r[i].size : 1)) ||
        kf_drv.cuMemcpyDtoH(S.s[i].post, S.r[i].base, S.r[i].size))
      ok = 0;
  }
  if (pushed) kf_drv.cuCtxPopCurrent(&popped);
  uint64_t *images = ok ? calloc(S.nst, sizeof *images) : NULL;
  for (size_t j = 0; images && j < S.nst; j++) images[j] = S.st[j].img.image;
  ended_why = why;
  if (!ok || !images) {
    n_failed++;
  } else if (kf_spool_write(seq_files, NULL, images, S.nst)) {
    n_failed++;
    kf_write_failed(fn, errno);
  } else {
    n_recorded++, fn->recorded++;
    kf_budget_use(S.bytes);
  }
  free(images);
  clear();
}

void kf_seq_flush(void) {
  if (!__atomic_load_n(&opened, __ATOMIC_ACQUIRE) || kf_locked) return;
  if (kf_lock_take()) return; /* a signal handler inside the interposer: left open */
  end("a driver call that could observe memory");
  kf_lock_give();
}

static void at_exit(void) {
  if (!__atomic_load_n(&opened, __ATOMIC_ACQUIRE) || kf_locked) return;
  if (kf_lock_take()) return; /* a signal handler inside the interposer: left open */
  end("the process exited");
  kf_lock_give();
}

/* ---- adding launches ----------------------------------------------------------------------- */
static int have(CUdeviceptr base) {
  for (size_t i = 0; i < S.k; i++)
    if (S.r[i].base == base) return 1;
  return 0;
}

/* the regions of this launch that no earlier launch of the sequence touched, copied now
 * (after a synchronization: their contents before the sequence); 1 ok, 0 over the budget,
 * -1 failed */
static int add_regions(const uint8_t *p, size_t n, uint64_t image) {
  if (kf_drv.cuCtxSynchronize()) return -1;
  kf_alloc_t *r = NULL;
  size_t k = kf_regions(p, n, image, &r);
  int rc = 1;
  for (size_t i = 0; i < k && rc == 1; i++) {
    if (have(r[i].base)) continue;
    unsigned long long more = 2ULL * r[i].size;
    if (!kf_budget_left(S.bytes + more)) { rc = 0; break; }
    if (S.k == S.capr) {
      size_t cap = S.capr ? 2 * S.capr : 8;
      kf_alloc_t *nr = realloc(S.r, cap * sizeof *nr);
      if (nr) S.r = nr;
      kf_snap_t *ns = nr ? realloc(S.s, cap * sizeof *ns) : NULL;
      if (ns) S.s = ns;
      if (!nr || !ns) { rc = -1; break; }
      S.capr = cap;
    }
    void *h = malloc(r[i].size ? r[i].size : 1);
    if (!h || kf_drv.cuMemcpyDtoH(h, r[i].base, r[i].size)) { free(h); rc = -1; break; }
    S.r[S.k] = r[i];
    S.s[S.k].pre = h, S.s[S.k].post = NULL;
    S.k++, S.bytes += more;
  }
  free(r);
  return rc;
}

static int same_stream(const kf_launch_t *l, CUcontext *ctx, pthread_t *thread) {
  *ctx = NULL;
  if (kf_drv.cuCtxGetCurrent && kf_drv.cuCtxGetCurrent(ctx)) return 0;
  int ptds = (uintptr_t)l->stream == 2 || (!l->stream && strstr(l->api, "_ptsz"));
  *thread = ptds ? pthread_self() : 0;
  return !S.open || (S.ctx == *ctx && S.stream == l->stream && pthread_equal(S.thread, *thread));
}

/* run l as a launch of the sequence: 1 done (*rc), 0 not run (the sequence has ended) */
static int add(kf_launch_t *l, kf_fn_t *fn, unsigned long call, CUresult *rc,
               CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  size_t n = 0;
  uint8_t *p = kf_param_bytes(l, fn, &n);
  if (!p) { end("a launch whose parameter layout is unknown"); return 0; }
  step_t st = {*l, fn, {0, NULL}, p, NULL, n, -1, call};
  kf_fn_image(l->f, &st.img);
  size_t na = (size_t)l->nattrs * KF_ATTR_SIZE;
  if (S.nst == S.capst) {
    size_t cap = S.capst ? 2 * S.capst : 16;
    step_t *a = realloc(S.st, cap * sizeof *a);
    if (!a) { free(p); end("out of memory"); return 0; }
    S.st = a, S.capst = cap;
  }
  if (na && (!(st.attrs = malloc(na)) || !memcpy(st.attrs, l->attrs, na))) {
    free(p); end("out of memory"); return 0;
  }
  int got = add_regions(p, n, st.img.image);
  if (got <= 0) {
    free(p), free(st.attrs);
    end(got ? "a region could not be copied" : "the --max-mb budget");
    return 0;
  }
  void *e0 = NULL, *e1 = NULL;
  if (kf_drv.cuEventCreate && !kf_drv.cuEventCreate(&e0, 0) && !kf_drv.cuEventCreate(&e1, 0)) {
    kf_hold(l->stream);
    kf_drv.cuEventRecord(e0, l->stream);
  }
  *rc = real(l, ctx);
  if (e1 && !*rc && !kf_drv.cuEventRecord(e1, l->stream) && !kf_drv.cuEventSynchronize(e1))
    kf_drv.cuEventElapsedTime(&st.ms, e0, e1);
  if (e0) kf_drv.cuEventDestroy(e0);
  if (e1) kf_drv.cuEventDestroy(e1);
  st.l.params = NULL, st.l.extra = NULL, st.l.attrs = st.attrs;
  S.st[S.nst++] = st;
  if (*rc) { /* what the failed launch left is no state to replay */
    n_failed++;
    clear();
    return 1;
  }
  if (fn == S.fn && ++S.steps >= (unsigned long)kf_seq_want) end("complete");
  return 1;
}

int kf_seq_step(kf_launch_t *l, kf_fn_t *fn, unsigned long call, CUresult *rc,
                CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  CUcontext c;
  pthread_t t;
  if (!same_stream(l, &c, &t)) { end("a launch on another stream or context"); return 0; }
  return add(l, fn, call, rc, real, ctx);
}

int kf_seq_begin(kf_launch_t *l, kf_fn_t *fn, unsigned long call, CUresult *rc,
                 CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  static int registered;
  end("another sequence began");
  if (!registered) registered = !atexit(at_exit); /* runs before the CUDA runtime's teardown */
  CUcontext c;
  pthread_t t;
  same_stream(l, &c, &t);
  S.open = 1, S.fn = fn, S.ctx = c, S.stream = l->stream, S.thread = t;
  __atomic_store_n(&opened, 1, __ATOMIC_RELEASE);
  int done = add(l, fn, call, rc, real, ctx);
  if (!done) clear(); /* nothing of it was recorded: the caller records or runs the launch */
  return done;
}
