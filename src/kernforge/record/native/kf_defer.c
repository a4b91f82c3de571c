/* kernforge driver interposer: deferral of a time loop's launches (temporal fusion).
 *
 * A step of the loop is a launch that matches a fused deployment entry (kf_deploy.c, field 14
 * "fuse:T:IN:OUT[:C]"), the stencil, followed by the entry's C companions (0 to 8) in order.
 * A stencil launch is held, its parameter bytes copied, when its chain holds nothing or when it
 * continues the chain: the last held step is whole, and the launch has the same function,
 * context, stream and launch call, its IN pointer equal to the last held stencil's OUT and its
 * OUT to the last's IN, every other parameter byte equal to the first held stencil's. A
 * companion launch is held when a chain on its stream waits for it: the companion the entry
 * lists next (its name, and its image and geometry when the entry gives them), with the
 * parameter bytes the entry gives except at its slots, which hold this step's IN and OUT, and
 * at its "xx" bytes, which hold the first held step's (a pointer to a per-step diagnostic's
 * buffer: wherever the program put it, the same in every step); in later steps also the same
 * function, launch call and geometry as the first held step's. Every held launch, the first
 * step's included, has the launch attributes its line records for it (none unless it gives
 * them; kf_guard.c compares them). When T+1 whole
 * steps are held, the first T run as ONE launch of the entry's fused function with the first
 * stencil's parameters, and the last step stays held. T is odd, so the fused launch writes the
 * first stencil's OUT, the buffer the T-th step writes; IN keeps the level before the first
 * step instead of the (T-1)-th, until the held step, which always runs unfused, overwrites it
 * (a step held in part is never the one after a fused launch). So every buffer equals the
 * unfused run's whenever anyone can look, provided everything that could look, or reorder
 * memory, first flushes: runs what is held, one by one, in their order, as the original
 * launches (the real functions, their own parameters and geometry, in their own context), a
 * stencil as the entry's one-launch replacement instead where the line names one
 * ("unfused:next": the next line's entry, where it would replace that launch; kf_unfused.c).
 * A launch is never lost nor run twice.
 *
 * What flushes: every other launch (kf_record.c; a companion that is not the one due, or
 * differs), cooperative and graph launches, allocations and frees (kf_hooks.c, kf_track.c),
 * and every other driver function the program can reach except harmless queries: those are
 * flushing thunks (kf_thunk.c), exported under the driver's names for programs linked against
 * libcuda and handed out by dlsym and cuGetProcAddress for any other function, known or not.
 * Process exit flushes too, from an exit handler registered at the first held launch (so it
 * runs before the handlers the CUDA runtime registered when it started, which destroy its
 * contexts), and a context's destruction, release or reset flushes through its thunk first.
 * A fork flushes before it (a fork handler registered with the exit handler), so that the
 * child never holds, nor runs, the parent's launches.
 *
 * Before each chain's first fused launch the globals the entry guards are read (kf_guard.c):
 * a value other than the one the fused function baked in runs what is held as the originals,
 * and the entry's originals from then on (its one-launch entry is off too: kf_fused_off).
 *
 * A launch on a stream being captured into a graph is never held (kf_defer_launch asks the
 * driver when a chain starts; cuStreamBeginCapture flushes first, as any other function).
 * Chains are kept per (context, stream, and thread for a per-thread default stream) under
 * kf_lock; a launch held on a default stream flushes every other chain, and one held on
 * another stream flushes the default streams' chains (the legacy default stream orders itself
 * with every blocking stream). Any flush runs every chain. KERNFORGE_FUSE=0 holds nothing (a
 * one-launch line of the kernel after the fused one then replaces its launches as any line
 * does); an entry whose fused function cannot be loaded, or whose fused launch fails, runs its
 * originals from then on, as the guards' refusal does (one message); anything this file
 * cannot handle disables deferral for the rest of the process after flushing. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "kf_deploy.h"

typedef struct { kf_launch_t l; uint8_t *p; } held_t;
typedef struct {
  CUcontext ctx;
  CUstream stream;
  pthread_t thread; /* for a per-thread default stream, else 0 */
  int dflt;
  kf_entry_t *e;
  int per;                   /* launches a step: the stencil (role 0) and the companions */
  kf_fn_t *fn[1 + MAX_COMP]; /* per role (a companion's from the first held step) */
  size_t n[1 + MAX_COMP], at[1 + MAX_COMP], step; /* parameter bytes, offset in a step, total */
  uint8_t *attrs[1 + MAX_COMP]; /* per role: the first held step's launch attributes */
  uint8_t *store; /* (T + 1) steps: held launch i's parameters at (i / per) * step + at[i % per] */
  int held;
  held_t *h;      /* (T + 1) * per */
  unsigned long groups; /* fused launches made: the entry's guards are read before the first */
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

int kf_guarding(void) { return kf_defer_enabled() || kf_seq_enabled() || kf_deploy_guarded(); }

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

/* launch l (function, geometry already set) with the parameter bytes p of role r of chain c */
static CUresult run_with(chain_t *c, int r, kf_launch_t l, uint8_t *p) {
  return kf_run_params(c->fn[r], c->n[r], l, p);
}

static void failed_original(const kf_entry_t *e, CUresult rc) {
  static int said;
  kf_say_once(&said, "deploy: a held launch of %s failed when it ran (CUDA error %d)", e->name,
              rc);
}

/* what is held, one by one, in their order: as the original launches, the stencils as the
 * entry's one-launch replacement where it applies (`one`, kf_unfused.c) */
static void run_unfused(chain_t *c, int one) {
  for (int i = 0; i < c->held; i++) {
    held_t *h = &c->h[i];
    CUresult rc = one && !(i % c->per) ? kf_run_unfused(c->e, c->fn[0], c->n[0], &h->l, h->p)
                                       : run_with(c, i % c->per, h->l, h->p);
    if (rc) failed_original(c->e, rc);
    c->e->unfused++, kf_defer_unfused++;
  }
  __atomic_sub_fetch(&nheld, (unsigned long)c->held, __ATOMIC_RELEASE);
  c->held = 0;
}

static void drop(size_t i) { /* chain i holds nothing: forget it */
  chain_t *c = chains[i];
  for (int r = 0; r < c->per; r++) free(c->attrs[r]);
  free(c->store);
  free(c->h);
  free(c);
  chains[i] = chains[--nchains];
}

static void flush_chain(size_t i) {
  chain_t *c = chains[i];
  int pushed = enter_ctx(c->ctx);
  run_unfused(c, 1);
  leave_ctx(pushed);
  drop(i);
}

void kf_defer_flush_locked(void) {
  while (nchains) flush_chain(nchains - 1);
}

void kf_defer_flush(void) {
  kf_seq_flush(); /* an observation ends a sequence being recorded (kf_sequence.c) */
  if (!__atomic_load_n(&nheld, __ATOMIC_ACQUIRE) || kf_locked) return; /* its holder runs it */
  if (kf_lock_take()) { /* taken by this thread, not yet said: a signal handler came between */
    static int said;
    kf_say_once(&said, "a driver function was called from a signal handler that interrupted "
                "the interposer: %lu held launches had not run when it returned",
                __atomic_load_n(&nheld, __ATOMIC_ACQUIRE));
    return;
  }
  kf_defer_flush_locked();
  kf_lock_give();
}

void kf_defer_disable(const char *why) {
  static int said;
  if (__atomic_exchange_n(&off, 1, __ATOMIC_ACQ_REL)) return;
  kf_defer_flush();
  kf_say_once(&said, "temporal fusion is off for the rest of this run: %s", why);
}

/* the first T held steps as one fused launch; the (T+1)-th stays held */
static void fire(chain_t *c) {
  kf_entry_t *e = c->e;
  int pushed = enter_ctx(c->ctx);
  const char *why = "it could not be loaded";
  if (e->nguard && !kf_guards_ok(e, &c->h[0].l, c->fn[0], !c->groups, &why)) { /* baked in */
    kf_guard_refused(e, why, "unfused");
    kf_fused_off(e);
    run_unfused(c, 0);
    leave_ctx(pushed);
    return;
  }
  CUfunction f = kf_entry_function(e, &why);
  CUresult rc = 999;
  if (f) rc = run_with(c, 0, kf_swapped(&c->h[0].l, e, f), c->h[0].p);
  if (!rc) {
    size_t last = (size_t)e->fuse * (size_t)c->per; /* the last step's first launch */
    memcpy(c->store, c->store + e->fuse * c->step, c->step);
    for (int r = 0; r < c->per; r++)
      c->h[r] = c->h[last + (size_t)r], c->h[r].p = c->store + c->at[r];
    c->held = c->per;
    __atomic_sub_fetch(&nheld, (unsigned long)last, __ATOMIC_RELEASE);
    e->groups++, kf_defer_groups++, c->groups++;
  } else { /* the originals run, and go on running */
    if (!e->launch_failed++)
      kf_log("deploy: the fused launch of %s failed (CUDA error %d); it runs unfused", e->name,
             rc);
    kf_fused_off(e);
    run_unfused(c, 0);
  }
  leave_ctx(pushed);
}

/* ---- holding ---------------------------------------------------------------------------------- */
static uint64_t word(const uint8_t *p, size_t off) {
  uint64_t v;
  memcpy(&v, p + off, 8);
  return v;
}

/* the same function through the same driver call (the attributes: as recorded, kf_guard.c) */
static int same_call(const kf_launch_t *l, const kf_launch_t *h) {
  return l->f == h->f && l->drv == h->drv && l->ex == h->ex;
}

static int continues(const chain_t *c, const kf_launch_t *l, const uint8_t *p, size_t n) {
  const kf_entry_t *e = c->e;
  if (c->held % c->per) return 0; /* a companion is due */
  const held_t *first = &c->h[0], *last = &c->h[c->held - c->per];
  if (!same_call(l, &first->l) || n != c->n[0]) return 0;
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
  unsigned long n = __atomic_load_n(&nheld, __ATOMIC_ACQUIRE);
  if (kf_locked && n) /* exit() from a signal handler that interrupted the interposer */
    kf_log("the process exits from inside the interposer (a signal handler?): %lu held "
           "launches do not run", n);
  kf_defer_flush();
}

/* fork: the child is a copy of the process, held launches included, and its exit handler
 * would run them (a second time, after the parent does; on host-mapped or shared memory that
 * shows). So what is held runs before the fork, and kf_lock is held across it, so that no
 * thread holds a launch, or the lock, in the copy. */
static __thread int fork_locked;
static void fork_prepare(void) {
  kf_seq_flush();
  if (kf_locked || kf_lock_take()) return; /* a fork from a signal handler inside it */
  fork_locked = 1;
  kf_defer_flush_locked();
}

static void fork_parent(void) {
  if (fork_locked) fork_locked = 0, kf_lock_give();
}

static void fork_child(void) { /* the lock's owner was the parent's thread: a fresh lock */
  static const pthread_mutex_t fresh = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  if (fork_locked) fork_locked = 0, kf_locked = 0, memcpy(&kf_lock, &fresh, sizeof fresh);
}

static void register_exit(void) {
  if (atexit(at_exit)) kf_defer_disable("no exit handler could be registered");
  else if (pthread_atfork(fork_prepare, fork_parent, fork_child))
    kf_defer_disable("no fork handler could be registered");
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
  if (!c) return NULL;
  c->per = 1 + (int)e->ncomp, c->n[0] = n, c->step = n;
  for (int r = 1; r < c->per; r++) {
    c->at[r] = c->step, c->n[r] = e->comp[r - 1].len;
    c->step += c->n[r];
  }
  size_t na = (size_t)l->nattrs * KF_ATTR_SIZE, steps = (size_t)e->fuse + 1;
  if ((na && !(c->attrs[0] = malloc(na))) || !(c->store = malloc(steps * c->step + 1)) ||
      !(c->h = malloc(steps * (size_t)c->per * sizeof *c->h))) {
    free(c->attrs[0]), free(c->store), free(c);
    return NULL;
  }
  if (na) memcpy(c->attrs[0], l->attrs, na);
  c->ctx = ctx, c->stream = l->stream, c->thread = thread, c->e = e, c->fn[0] = fn;
  c->dflt = (uintptr_t)l->stream <= 2; /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
  chains[nchains++] = c;
  return c;
}

/* launch l (parameters p, n bytes) joins chain c as its next launch; fires a whole group */
static void hold(chain_t *c, const kf_launch_t *l, const uint8_t *p, size_t n) {
  int r = c->held % c->per;
  held_t *h = &c->h[c->held];
  h->p = c->store + (size_t)(c->held / c->per) * c->step + c->at[r];
  memcpy(h->p, p, n);
  h->l = *l;
  h->l.params = NULL, h->l.extra = NULL, h->l.attrs = c->attrs[r];
  c->held++;
  __atomic_add_fetch(&nheld, 1, __ATOMIC_RELEASE);
  if (c->held == ((int)c->e->fuse + 1) * c->per) fire(c);
  if (!c->held)
    for (size_t i = 0; i < nchains; i++)
      if (chains[i] == c) { drop(i); break; }
}

/* the context and the thread (of a per-thread default stream, else 0) a launch's chain has;
 * 0 when the context cannot be known */
static int where(const kf_launch_t *l, CUcontext *ctx, pthread_t *thread) {
  int ptds = (uintptr_t)l->stream == 2 || (!l->stream && strstr(l->api, "_ptsz"));
  *thread = ptds ? pthread_self() : 0;
  *ctx = NULL;
  return !kf_drv.cuCtxGetCurrent || !kf_drv.cuCtxGetCurrent(ctx);
}

int kf_defer_launch(kf_entry_t *e, kf_launch_t *l, kf_fn_t *fn, const uint8_t *p, size_t n,
                    CUresult *rc) {
  static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
  if (!kf_defer_enabled() || __atomic_load_n(&exiting, __ATOMIC_ACQUIRE) || !l->drv ||
      n != e->keylen || word(p, e->fuse_in) == word(p, e->fuse_out) ||
      ((l->nattrs || e->nattrs) && !kf_attrs_match(e->attrs, e->nattrs, l)))
    return 0;
  CUcontext ctx;
  pthread_t thread;
  if (!where(l, &ctx, &thread)) return 0;
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
      e->failed++, kf_fused_off(e);
      kf_log("deploy: cannot load the fused %s from %s: it %s; %s runs unfused", e->entry,
             e->image, why, e->name);
      return 0;
    }
    pthread_once(&exit_once, register_exit);
    if (__atomic_load_n(&off, __ATOMIC_ACQUIRE) || !(c = new_chain(e, fn, l, ctx, thread, n)))
      return 0;
  }
  hold(c, l, p, n);
  *rc = 0;
  return 1;
}

static int same3(const unsigned *a, const unsigned *b) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
}

/* whether launch l of fn (parameters p, n bytes) is the companion chain c waits for */
static int companion_fits(const chain_t *c, const kf_launch_t *l, kf_fn_t *fn,
                          const uint8_t *p, size_t n) {
  int r = c->held % c->per;
  if (!r) return 0; /* a stencil is due */
  const kf_comp_t *k = &c->e->comp[r - 1];
  if (n != k->len || ((l->nattrs || k->nattrs) && !kf_attrs_match(k->attrs, k->nattrs, l)))
    return 0; /* the attributes: as recorded, in every step */
  if (c->held > r) { /* a whole step is held: the same launch as its companion there */
    const kf_launch_t *h = &c->h[r].l;
    if (!same_call(l, h) || l->shmem != h->shmem || !same3(l->grid, h->grid) ||
        !same3(l->block, h->block))
      return 0;
  } else if (strcmp(fn->name, k->name) || !kf_comp_image_ok(k, l, fn) ||
             (k->geom && (!same3(l->grid, k->grid) || !same3(l->block, k->block) ||
                          l->shmem != k->shmem))) {
    return 0; /* later steps: the same function as here (so from the same image), geometry */
  }
  const uint8_t *s = c->h[c->held - r].p; /* this step's stencil */
  uint64_t in = word(s, c->e->fuse_in), out = word(s, c->e->fuse_out);
  /* "xx" bytes: as this companion's launch in the first held step (any value in that step) */
  const uint8_t *first = c->held > r ? c->h[r].p : NULL;
  size_t at = 0;
  for (size_t i = 0; i <= k->nslots; i++) {
    size_t o = i < k->nslots ? k->slot[i] : n;
    if (!k->same) {
      if (memcmp(p + at, k->params + at, o - at)) return 0;
    } else {
      for (size_t j = at; j < o; j++)
        if (k->same[j] ? first && p[j] != first[j] : p[j] != k->params[j]) return 0;
    }
    if (i < k->nslots && word(p, o) != (k->is_out[i] ? out : in)) return 0;
    at = o + 8;
  }
  return 1;
}

int kf_defer_companion(kf_launch_t *l, kf_fn_t *fn, const uint8_t *p, size_t n, CUresult *rc) {
  CUcontext ctx;
  pthread_t thread;
  if (!nchains || !kf_defer_enabled() || __atomic_load_n(&exiting, __ATOMIC_ACQUIRE) ||
      !l->drv || !where(l, &ctx, &thread))
    return 0;
  chain_t *c = NULL;
  for (size_t i = 0; i < nchains && !c; i++)
    if (chains[i]->ctx == ctx && chains[i]->stream == l->stream && chains[i]->thread == thread)
      c = chains[i];
  if (!c || !companion_fits(c, l, fn, p, n)) return 0; /* the caller flushes */
  int r = c->held % c->per;
  if (c->held < c->per) { /* the first held step: its attributes and layout for all steps */
    size_t na = (size_t)l->nattrs * KF_ATTR_SIZE;
    if (na && !c->attrs[r] && !(c->attrs[r] = malloc(na))) return 0;
    if (na) memcpy(c->attrs[r], l->attrs, na);
    c->fn[r] = fn;
  }
  hold(c, l, p, n);
  *rc = 0;
  return 1;
}
