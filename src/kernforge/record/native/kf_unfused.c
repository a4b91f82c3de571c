/* kernforge driver interposer: held launches that run unfused (kf_defer.c's flushes).
 *
 * A fused entry's line may hold the tagged field "unfused:next": its one-launch entry is the
 * entry of the next line of the file, an ordinary replacement (no fuse field) of a kernel of
 * the same name. When what is held runs one launch at a time (any flush: a chain that ends
 * before T+1 steps, the step kept held after a fused launch, a sync, the process's exit), a
 * held stencil launch runs that entry's function, with that entry's grid, block and dynamic
 * shared memory and the held launch's own parameter bytes, wherever that entry would replace
 * the launch had it come alone: the entry is not off, the launch has its geometry, key and
 * source image, its guards hold and its image loads (kf_deploy.c's rules for any launch).
 * Else the original runs. Companions always run as the originals. A replacement that fails to
 * load or whose launch fails is off from then on (one message); a failed launch is followed by
 * the original's, so no launch is lost or run twice.
 *
 * Where fusion is refused (a guard of the fused entry no longer holds, its function cannot be
 * loaded or its fused launch fails) nothing new is tried: what is held runs as the originals,
 * and the one-launch entry is off with the fused one (kf_fused_off), so the kernel runs as
 * the program's own from then on, as it does under a fused line without "unfused:next".
 * The one-launch line stays an ordinary line: a launch the fused entry does not hold (fusion
 * off with KERNFORGE_FUSE=0, a launch that cannot continue a chain, a captured stream) runs
 * it as any matching launch does; it is tried after the kernel's other lines (kf_deploy.c's
 * by_name_cmp), so that it never takes a launch that a later line of the kernel names. */
#include <stdlib.h>
#include <string.h>
#include "kf_deploy.h"

unsigned long kf_unfused_one;

CUresult kf_run_params(const kf_fn_t *fn, size_t n, kf_launch_t l, uint8_t *p) {
  void *small[32], **pv = small;
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

CUresult kf_run_unfused(kf_entry_t *e, kf_fn_t *fn, size_t n, const kf_launch_t *l,
                        uint8_t *p) {
  kf_entry_t *one = e->one;
  int look_on;
  CUfunction f = one && !e->disabled && kf_entry_applies(one, l, fn, p, n)
                     ? kf_entry_replacement(one, l, fn, &look_on)
                     : NULL;
  if (f) {
    CUresult rc = kf_run_params(fn, n, kf_swapped(l, one, f), p);
    if (!rc) {
      one->used++, e->unfused_one++, kf_unfused_one++;
      return 0;
    }
    if (!one->launch_failed++)
      kf_log("deploy: the tuned launch of %s failed when a held launch ran unfused (CUDA "
             "error %d); it runs unchanged", one->name, rc);
    one->disabled = 1;
  }
  return kf_run_params(fn, n, *l, p);
}

void kf_fused_off(kf_entry_t *e) {
  e->disabled = 1;
  if (e->one) e->one->disabled = 1;
}

void kf_unfused_link(kf_entry_t *entries, size_t n, const char *path) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    kf_entry_t *e = &entries[i], *next = i + 1 < n ? &entries[i + 1] : NULL;
    if (!e->unfused_next) continue;
    if (next && next->line == e->line + 1 && !next->fuse && !strcmp(next->name, e->name))
      e->one = next;
    else if (!bad++)
      first = e->line;
  }
  if (bad)
    kf_log("deployment %s: %zu fused line(s) say unfused:next but the next line is no "
           "one-launch entry of their kernel (line %zu); what they hold runs unfused as the "
           "original launches", path, bad, first);
}
