/* kernforge driver interposer: the end of a context, and what the interposer kept of it.
 *
 * The interposer keeps handles that belong to a context: each deployment entry's function,
 * loaded once per context (kf_deploy.c), the timing gate's function per context (kf_real.c's
 * kf_hold), the guards' verification of a module global read in a context (kf_guard.c), and,
 * per function handle the program launches, its name, parameter layout and image (kf_state.c),
 * and the attributes the program set on it (kf_funcattr.c).
 * When a context ends, its modules and functions are gone, and the driver may give the next
 * context, module or function the handle of one that ended: a cached function of the old
 * context would be launched (an error at best, another kernel at worst), a cached name would
 * describe another kernel. So the driver functions that end a context are wrapped here, as
 * kf_track.c wraps allocations (exported under the driver's names, handed out by kf_hooks.c):
 *   cuCtxDestroy (_v2)                 the context it names
 *   cuDevicePrimaryCtxReset (_v2)      every context of the device (its primary context's
 *                                      handle cannot be asked for without retaining it)
 *   cuDevicePrimaryCtxRelease (_v2)    the same, when the driver says afterwards that the
 *                                      primary context is no longer active (the last reference;
 *                                      cudaDeviceReset releases it); any when it cannot say
 *   cuGreenCtxDestroy                  every context (its CUcontext is not known here)
 * Each first runs what is held (kf_defer.c), as the flushing thunk it replaces did, then takes
 * kf_lock and holds it across the driver's call: every launch the interposer looks at, and
 * every load of a replacement, runs under kf_lock, so none can use a cached function between
 * the context's end and its forgetting, nor load one into it between the two. The forgetting
 * comes after the call, so that a release can ask whether it ended the context. What is
 * forgotten: the entries' functions of the affected contexts (loaded again at their next use:
 * one module load per entry and context; a context that lives on keeps the module it had), the
 * gate's functions of every context, every function handle's cache (asked again at its next
 * launch), and every guard's verification (read again before the next replaced launch).
 */
#define _GNU_SOURCE
#include "kf.h"

void *kf_slot(void **slot, const char *name, void *self);
void *kf_real_cuCtxDestroy, *kf_real_cuCtxDestroy_v2, *kf_real_cuDevicePrimaryCtxReset,
    *kf_real_cuDevicePrimaryCtxReset_v2, *kf_real_cuDevicePrimaryCtxRelease,
    *kf_real_cuDevicePrimaryCtxRelease_v2, *kf_real_cuGreenCtxDestroy;

/* under kf_lock (when taken): what the interposer kept of context c (NULL: of any context of
 * device dev; dev < 0: of any context) */
static void forget(CUcontext c, CUdevice dev) {
  kf_deploy_forget(c, dev);
  kf_hold_forget();
  kf_fn_forget();
  kf_fattr_forget();
  kf_guard_dirty(); /* the verifications: a global of a new context is read again */
}

/* taken: kf_lock is held (0 when this thread held it already: a signal handler inside the
 * interposer; the call goes on without it) */
static int enter(void) {
  kf_defer_flush(); /* what is held runs while its context exists */
  kf_resolve_driver();
  int taken = !kf_lock_take();
  if (taken) kf_defer_flush_locked(); /* a launch held meanwhile by another thread */
  return taken;
}

static void leave(int taken) {
  if (taken) kf_lock_give();
}

/* whether the primary context of dev may have ended (not active, or the driver cannot say) */
static int primary_gone(CUdevice dev) {
  unsigned flags = 0;
  int active = 0;
  return !kf_drv.cuDevicePrimaryCtxGetState ||
         kf_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) || !active;
}

#define CTX_END(name, arg_t, affected)                                                     \
  CUresult name(arg_t a) {                                                                 \
    CUresult (*real)(arg_t) = (CUresult (*)(arg_t))kf_slot(&kf_real_##name, #name,         \
                                                           (void *)name);                  \
    if (!real) return 999; /* CUDA_ERROR_UNKNOWN: no driver */                             \
    int taken = enter();                                                                   \
    CUresult rc = real(a);                                                                 \
    affected;                                                                              \
    leave(taken);                                                                          \
    return rc;                                                                             \
  }
CTX_END(cuCtxDestroy, CUcontext, forget(a, -1))
CTX_END(cuCtxDestroy_v2, CUcontext, forget(a, -1))
CTX_END(cuDevicePrimaryCtxReset, CUdevice, forget(NULL, a))
CTX_END(cuDevicePrimaryCtxReset_v2, CUdevice, forget(NULL, a))
CTX_END(cuDevicePrimaryCtxRelease, CUdevice, if (primary_gone(a)) forget(NULL, a))
CTX_END(cuDevicePrimaryCtxRelease_v2, CUdevice, if (primary_gone(a)) forget(NULL, a))
CTX_END(cuGreenCtxDestroy, void *, forget(NULL, -1))
