/* kernforge driver interposer: deferral of a time loop's launches (temporal fusion).
 *
 * A launch that matches a fused deployment entry (kf_deploy.c, field 14 "fuse:T:IN:OUT") is
 * held, its parameter bytes copied, when its chain holds nothing or when it continues the
 * chain: the same function, context, stream and launch call, its IN pointer equal to the last
 * held launch's OUT and its OUT to the last's IN, every other parameter byte equal to the
 * first held launch's. When T+1 are held, the first T run as ONE launch of the entry's fused
 * function with the first one's parameters, and the last stays held. T is odd, so the fused
 * launch writes the first launch's OUT, the buffer the T-th launch writes; IN keeps the level
 * before the first step instead of the (T-1)-th, until the held launch, which always runs as
 * the original, overwrites it. So every buffer equals the unfused run's whenever anyone can
 * look, provided everything that could look, or reorder memory, first flushes: runs what is
 * held, one by one, as the original launches (the real function, their own parameters and
 * geometry, in their own context). A launch is never lost nor run twice.
 *
 * What flushes: every other launch (kf_record.c), cooperative and graph launches, allocations
 * and frees (kf_hooks.c, kf_track.c), and every other driver function the program can reach
 * except harmless queries: those are flushing thunks (kf_thunk.c), exported under the
 * driver's names for programs linked against libcuda and handed out by dlsym and
 * cuGetProcAddress for any other function, known or not. Process exit flushes too, from an
 * exit handler registered at the first held launch (so it runs before the handlers the CUDA
 * runtime registered when it started, which destroy its contexts), and a context's
 * destruction, release or reset flushes through its thunk first.
 *
 * A launch on a stream being captured into a graph is never held (kf_defer_launch asks the
 * driver when a chain starts; cuStreamBeginCapture flushes first, as any other function).
 * Chains are kept per (context, stream, and thread for a per-thread default stream) under
 * kf_lock; a launch held on a default stream flushes every other chain, and one held on
 * another stream flushes the default streams' chains (the legacy default stream orders itself
 * with every blocking stream). Any flush runs every chain. KERNFORGE_FUSE=0 holds nothing; an
 * entry whose fused function cannot be loaded, or whose fused launch fails, runs its originals
 * from then on (one message); anything this file cannot handle disables deferral for the rest
 * of the process after flushing. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "kf_deploy.h"

#define MAX_HELD 64 /* T + 1, T <= 63 */
typedef struct { kf_launch_t l; uint8_t *p; } held_t;
typedef struct {
  CUcontext ctx;
  CUstream stream;
  pthread_t thread; /* for a per-thread default stream, else 0 */
  int dflt;
  kf_entry_t *e;
  kf_fn_t *fn;
  size_t n; /* parameter bytes */
  uint8_t *attrs;
  uint8_t *store; /* (T + 1) * n bytes: held launch i's parameters at i * n */
  int held;
  held_t h[MAX_HELD];
} chain_t;

static chain_t **chains;
static size_t nchains, cap;
static unsigned long nheld; /* read without the lock: nothing held, nothing to flush */
static int off, exiting;
unsigned long kf_defer_groups, kf_defer_unfused;
__thread int kf_locked;

int kf_defer_enabled(void) {
#if defined(__x86_64__)
  return !__atomic_load_n(&off, __ATOMIC_ACQUIRE) && kf_deploy_fusing();
#else
  static int said;
  if (kf_deploy_fusing()) kf_say_once(&said, "temporal fusion needs x86-64; launches run unfused");
  return 0;
#endif
}

int kf_guarding(void) { return kf_defer_enabled() || kf_seq_enabled(); }

/* ---- running what is held --------------------------------------------------------------- */
static int enter_ctx(CUcontext c) {
  CUcontext cur = NULL;
  if (!kf_drv.cuCtxGetCurrent || kf_drv.cuCtxGetCurrent(&cur) || cur == c ||
      !kf_drv.cuCtxPushCurrent || !kf_drv.cuCtxPopCurrent)
    return 0;
  return !kf_drv.cuCtxPushCurrent(c);
}

static void leave_ctx(int pushed) {
  CUcontext c;
  if (pushed) kf_drv.cuCtxPopCurrent(&c);
}

/* launch l (function, geometry already set) with the parameter bytes p of chain c */
static CUresult run_with(chain_t *c, kf_launch_t l, uint8_t *p) {
  kf_fn_t *fn = c->fn;
  void *small[32], **pv = small;
  size_t n = c->n;
  void *extra[] = {(void *)1, p, (void *)2, &n, NULL}; /* CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE */
  l.params = NULL, l.extra = NULL;
  if (fn->layout == 1) {
    if (fn->nparams > 32 && !(pv = malloc((size_t)fn->nparams * sizeof *pv))) return 2;
    for (int i = 0; i < fn->nparams; i++) pv[i] = p + fn->off[i];
    l.params = pv;
  } else {
    l.extra = extra;
  }
  CUresult rc = kf_launch_now(&l);
  if (pv != small) free(pv);
  return rc;
}

static void failed_original(const kf_entry_t *e, CUresult rc) {
  static int said;
  kf_say_once(&said, "deploy: a held launch of %s failed when it ran (CUDA error %d)", e->name,
              rc);
}

/* the first k held launches as the originals, one by one */
static void run_originals(chain_t *c, int k) {
  for (int i = 0; i < k; i++) {
    CUresult rc = run_with(c, c->h[i].l, c->h[i].p);
    if (rc) failed_original(c->e, rc);
    c->e->unfused++, kf_defer_unfused++;
  }
  for (int i = k; i < c->held; i++) { /* what stays held moves to the front */
    memcpy(c->store + (size_t)(i - k) * c->n, c->h[i].p, c->n);
    c->h[i - k] = c->h[i], c->h[i - k].p = c->store + (size_t)(i - k) * c->n;
  }
  c->held -= k;
  __atomic_sub_fetch(&nheld, (unsigned long)k, __ATOMIC_RELEASE);
}

static void drop(size_t i) { /* chain i holds nothing: forget it */
  chain_t *c = chains[i];
  free(c->attrs);
  free(c->store);
  free(c);
  chains[i] = chains[--nchains];
}

static void flush_chain(size_t i) {
  chain_t *c = chains[i];
  int pushed = enter_ctx(c->ctx);
  run_originals(c, c->held);
  leave_ctx(pushed);
  drop(i);
}

void kf_defer_flush_locked(void) {
  while (nchains) flush_chain(nchains - 1);
}

void kf_defer_flush(void) {
  kf_seq_flush(); /* an observation ends a sequence being recorded (kf_sequence.c) */
  if (!__atomic_load_n(&nheld, __ATOMIC_ACQUIRE) || kf_locked) return;
  pthread_mutex_lock(&kf_lock);
  kf_locked = 1;
  kf_defer_flush_locked();
  kf_locked = 0;
  pthread_mutex_unlock(&kf_lock);
}

void kf_defer_disable(const char *why) {
  static int said;
  if (__atomic_exchange_n(&off, 1, __ATOMIC_ACQ_REL)) return;
  kf_defer_flush();
  kf_say_once(&said, "temporal fusion is off for the rest of this run: %s", why);
}

/* the first T held launches as one fused launch; the (T+1)-th stays held */
static void fire(chain_t *c) {
  kf_entry_t *e = c->e;
  int pushed = enter_ctx(c->ctx);
  const char *why = "it could not be loaded";
  CUfunction f = kf_entry_function(e, &why);
  CUresult rc = 999;
  if (f) {
    kf_launch_t l = c->h[0].l;
    l.f = f;
    memcpy(l.grid, e->ngrid, sizeof l.grid);
    memcpy(l.block, e->nblock, sizeof l.block);
    l.shmem = e->nshmem;
    rc = run_with(c, l, c->h[0].p);
  }
  if (!rc) {
    memcpy(c->store, c->h[e->fuse].p, c->n);
    c->h[0] = c->h[e->fuse], c->h[0].p = c->store;
    c->held = 1;
    __atomic_sub_fetch(&nheld, e->fuse, __ATOMIC_RELEASE);
    e->groups++, kf_defer_groups++;
  } else { /* the originals run, and go on running */
    if (!e->launch_failed++)
      kf_log("deploy: the fused launch of %s failed (CUDA error %d); it runs unfused", e->name,
             rc);
    e->disabled = 1;
    run_originals(c, c->held);
  }
  leave_ctx(pushed);
}

/* ---- holding ---------------------------------------------------------------------------------- */
static uint64_t word(const uint8_t *p, size_t off) {
  uint64_t v;
  memcpy(&v, p + off, 8);
  return v;
}

static int continues(const chain_t *c, const kf_launch_t *l, const uint8_t *p, size_t n) {
  const kf_entry_t *e = c->e;
  const held_t *first = &c->h[0], *last = &c->h[c->held - 1];
  if (l->f != first->l.f || l->drv != first->l.drv || l->ex != first->l.ex || n != c->n ||
      l->nattrs != first->l.nattrs ||
      (l->nattrs && memcmp(l->attrs, c->attrs, (size_t)l->nattrs * KF_ATTR_SIZE)))
    return 0;
  if (word(p, e->fuse_in) != word(last->p, e->fuse_out) ||
      word(p, e->fuse_out) != word(last->p, e->fuse_in))
    return 0;
  size_t a = e->fuse_in < e->fuse_out ? e->fuse_in : e->fuse_out;
  size_t b = e->fuse_in < e->fuse_out ? e->fuse_out : e->fuse_in;
  return !memcmp(p, first->p, a) && !memcmp(p + a + 8, first->p + a + 8, b - a - 8) &&
         !memcmp(p + b + 8, first->p + b + 8, n - b - 8);
}

static void at_exit(void) {
  __atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
  kf_defer_flush();
}

static void register_exit(void) {
  if (atexit(at_exit)) kf_defer_disable("no exit handler could be registered");
}

/* a stream being captured into a graph records launches instead of running them: a launch held
 * there would run after the capture ended, outside the graph (when in doubt: capturing) */
static int capturing(const kf_launch_t *l) {
  int status = 1;
  CUstream s = !l->stream && strstr(l->api, "_ptsz") ? (CUstream)2 : l->stream;
  return !kf_drv.cuStreamIsCapturing || kf_drv.cuStreamIsCapturing(s, &status) || status;
}

static chain_t *new_chain(kf_entry_t *e, kf_fn_t *fn, const kf_launch_t *l, CUcontext ctx,
                          pthread_t thread, size_t n) {
  if (nchains == cap) {
    chain_t **a = realloc(chains, (cap ? 2 * cap : 8) * sizeof *a);
    if (!a) return NULL;
    chains = a, cap = cap ? 2 * cap : 8;
  }
  chain_t *c = calloc(1, sizeof *c);
  size_t na = (size_t)l->nattrs * KF_ATTR_SIZE;
  if (!c || (na && !(c->attrs = malloc(na))) ||
      !(c->store = malloc((size_t)(e->fuse + 1) * n))) {
    if (c) free(c->attrs);
    free(c);
    return NULL;
  }
  if (na) memcpy(c->attrs, l->attrs, na);
  c->ctx = ctx, c->stream = l->stream, c->thread = thread, c->e = e, c->fn = fn, c->n = n;
  c->dflt = (uintptr_t)l->stream <= 2; /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
  chains[nchains++] = c;
  return c;
}

int kf_defer_launch(kf_entry_t *e, kf_launch_t *l, kf_fn_t *fn, const uint8_t *p, size_t n,
                    CUresult *rc) {
  static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
  if (!kf_defer_enabled() || __atomic_load_n(&exiting, __ATOMIC_ACQUIRE) || !l->drv ||
      n != e->keylen || word(p, e->fuse_in) == word(p, e->fuse_out))
    return 0;
  CUcontext ctx = NULL;
  if (kf_drv.cuCtxGetCurrent && kf_drv.cuCtxGetCurrent(&ctx)) return 0;
  int ptds = (uintptr_t)l->stream == 2 || (!l->stream && strstr(l->api, "_ptsz"));
  pthread_t thread = ptds ? pthread_self() : 0;
  int dflt = (uintptr_t)l->stream <= 2;
  chain_t *c = NULL;
  for (size_t i = nchains; i-- > 0;) {
    chain_t *x = chains[i];
    if (x->ctx == ctx && x->stream == l->stream && x->thread == thread) c = x;
    else if (dflt || x->dflt) flush_chain(i); /* the default stream orders itself with all */
  }
  if (c && c->e == e && continues(c, l, p, n)) {
    /* held below */
  } else {
    if (c) {
      for (size_t i = 0; i < nchains; i++)
        if (chains[i] == c) { flush_chain(i); break; }
    }
    const char *why = NULL;
    if (capturing(l)) return 0;
    if (!kf_entry_function(e, &why)) { /* once: its launches run unfused from now on */
      e->failed++, e->disabled = 1;
      kf_log("deploy: cannot load the fused %s from %s: it %s; %s runs unfused", e->entry,
             e->image, why, e->name);
      return 0;
    }
    pthread_once(&exit_once, register_exit);
    if (__atomic_load_n(&off, __ATOMIC_ACQUIRE) || !(c = new_chain(e, fn, l, ctx, thread, n)))
      return 0;
  }
  held_t *h = &c->h[c->held];
  h->p = c->store + (size_t)c->held * n;
  memcpy(h->p, p, n);
  h->l = *l;
  h->l.params = NULL, h->l.extra = NULL, h->l.attrs = c->attrs;
  c->held++;
  __atomic_add_fetch(&nheld, 1, __ATOMIC_RELEASE);
  if ((unsigned)c->held == e->fuse + 1) fire(c);
  if (!c->held)
    for (size_t i = 0; i < nchains; i++)
      if (chains[i] == c) { drop(i); break; }
  *rc = 0;
  return 1;
}
