/* kernforge driver interposer: finding the real dlsym and the real CUDA driver. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "kf.h"

kf_driver_t kf_drv;
static void *(*real_dlsym_fn)(void *, const char *);
static void *libcuda_handle;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

KF_RAW void *kf_real_dlsym(void *handle, const char *name) {
  if (!real_dlsym_fn) {
    /* dlsym is versioned in glibc; ask for it by version so that our own dlsym is skipped */
    static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof *versions && !real_dlsym_fn; i++)
      real_dlsym_fn = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!real_dlsym_fn) {
      fprintf(stderr, "kernforge: cannot find the real dlsym; recording is off\n");
      return NULL;
    }
  }
  return real_dlsym_fn(handle, name);
}

/* ---- dlsym(RTLD_NEXT) for another caller ------------------------------------------------- */
KF_RAW static struct link_map *map_of(const void *addr) {
  Dl_info info;
  struct link_map *m = NULL;
  return dladdr1(addr, &info, (void **)&m, RTLD_DL_LINKMAP) ? m : NULL;
}

KF_RAW static int comes_after(const struct link_map *a, const struct link_map *b) {
  for (const struct link_map *m = b->l_next; m; m = m->l_next)
    if (m == a) return 1;
  return 0;
}

/* name's definition in object m itself (not in its dependencies) */
KF_RAW static void *defined_in(struct link_map *m, const char *name) {
  if (!m->l_name || !m->l_name[0]) return NULL;
  void *h = dlopen(m->l_name, RTLD_NOLOAD | RTLD_LAZY); /* a handle a link map is not */
  if (!h) return NULL;
  void *p = kf_real_dlsym(h, name);
  if (p && map_of(p) != m) p = NULL;
  dlclose(h);
  return p;
}

/* dlsym(RTLD_NEXT, name) as `caller` would see it: the first definition in an object after the
 * caller's. The real dlsym(RTLD_NEXT) answers relative to its own caller, this library, when a
 * preload library's dlsym reaches it through the interposer's: a library after the interposer
 * got its own wrapper back and recursed. The real answer (after the interposer) is taken
 * whenever it is also the caller's; objects are searched one by one only where it is not. */
KF_RAW void *kf_next_dlsym(const void *caller, const char *name) {
  void *beyond = kf_real_dlsym(RTLD_NEXT, name); /* the first definition after this library */
  struct link_map *from = map_of(caller), *self = map_of((const void *)kf_next_dlsym);
  if (!from || !self || from == self) return beyond;
  if (comes_after(self, from)) { /* the caller comes first: what lies between, then this */
    for (struct link_map *m = from->l_next; m && m != self; m = m->l_next) {
      void *p = defined_in(m, name);
      if (p) return p;
    }
    void *own = kf_own_symbol(name);
    if (!own && kf_prefix(name, "nvrtc")) own = defined_in(self, name);
    return own ? own : beyond;
  }
  struct link_map *owner = beyond ? map_of(beyond) : NULL;
  if (!beyond || (owner && comes_after(owner, from))) return beyond;
  for (struct link_map *m = from->l_next; m; m = m->l_next) { /* beyond is at or before it */
    void *p = defined_in(m, name);
    if (p) return p;
  }
  return NULL;
}

/* what the interposer's wrapper `self` of `name` calls: the next definition after the
 * interposer (another preload library's wrapper, or the driver), else the driver's */
void *kf_driver_sym(const char *name, void *self) {
  void *p = kf_real_dlsym(RTLD_NEXT, name);
  if (!p || p == self) {
    void *h = kf_libcuda();
    p = h ? kf_real_dlsym(h, name) : NULL;
  }
  return p == self ? NULL : p;
}

/* entry points every CUDA driver has (since CUDA 4) and the interposer calls unguarded: a
 * library without one of them is not a driver */
static const char *const required[] = {"cuLaunchKernel", "cuModuleLoadDataEx",
                                       "cuModuleGetFunction", "cuCtxGetCurrent",
                                       "cuCtxSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2"};

static void *open_driver(const char *path, int named) {
  static int told; /* one message for a refused library */
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!h) return NULL;
  for (size_t i = 0; i < sizeof required / sizeof *required; i++)
    if (!kf_real_dlsym(h, required[i])) {
      if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        kf_log("%s%s has no %s: it is not a CUDA driver and is not used%s",
               named ? "KERNFORGE_LIBCUDA=" : "", path, required[i],
               named ? "; libcuda.so.1 is used instead" : "");
      dlclose(h);
      return NULL;
    }
  return h;
}

/* the driver library: KERNFORGE_LIBCUDA if it is one, else libcuda.so.1 (NULL: none yet) */
void *kf_libcuda(void) {
  static int refused; /* KERNFORGE_LIBCUDA was tried and refused */
  void *h = __atomic_load_n(&libcuda_handle, __ATOMIC_ACQUIRE);
  if (h) return h;
  const char *path = getenv("KERNFORGE_LIBCUDA");
  if (path && *path && !__atomic_load_n(&refused, __ATOMIC_RELAXED)) {
    h = open_driver(path, 1);
    if (!h) __atomic_store_n(&refused, 1, __ATOMIC_RELAXED);
  }
  if (!h) h = open_driver("libcuda.so.1", 0);
  if (!h) return NULL; /* no driver (yet): asked again next time */
  void *none = NULL; /* another thread may have opened it meanwhile: one handle is kept */
  if (!__atomic_compare_exchange_n(&libcuda_handle, &none, h, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    dlclose(h);
    h = none;
  }
  return h;
}

static void *sym(const char *name) {
  void *h = kf_libcuda();
  return h ? kf_real_dlsym(h, name) : NULL;
}

static void resolve(void) {
#define R(field, name) *(void **)&kf_drv.field = sym(name)
  R(cuCtxSynchronize, "cuCtxSynchronize");
  R(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  R(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  R(cuFuncGetName, "cuFuncGetName");
  R(cuKernelGetName, "cuKernelGetName");
  R(cuFuncGetParamInfo, "cuFuncGetParamInfo");
  R(cuKernelGetParamInfo, "cuKernelGetParamInfo");
  R(cuFuncGetModule, "cuFuncGetModule");
  R(cuKernelGetLibrary, "cuKernelGetLibrary");
  R(cuModuleLoadDataEx, "cuModuleLoadDataEx");
  R(cuModuleGetFunction, "cuModuleGetFunction");
  R(cuCtxGetDevice, "cuCtxGetDevice");
  R(cuCtxGetCurrent, "cuCtxGetCurrent");
  R(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  R(cuDriverGetVersion, "cuDriverGetVersion");
  R(cuDeviceGetName, "cuDeviceGetName");
  R(cuLaunchKernel, "cuLaunchKernel");
  R(cuEventCreate, "cuEventCreate");
  R(cuEventRecord, "cuEventRecord");
  R(cuEventSynchronize, "cuEventSynchronize");
  R(cuEventElapsedTime, "cuEventElapsedTime");
  R(cuEventDestroy, "cuEventDestroy_v2");
  R(cuFuncSetAttribute, "cuFuncSetAttribute");
  R(cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  R(cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  R(cuStreamIsCapturing, "cuStreamIsCapturing");
  R(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  R(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState");
#undef R
  /* the events are used together: one missing, none is used */
  if (!kf_drv.cuEventCreate || !kf_drv.cuEventRecord || !kf_drv.cuEventSynchronize ||
      !kf_drv.cuEventElapsedTime || !kf_drv.cuEventDestroy)
    kf_drv.cuEventCreate = NULL;
}

void kf_resolve_driver(void) { pthread_once(&resolve_once, resolve); }

/* KERNFORGE_QUIET: set to anything but "", 0, false, no or off silences the messages */
static int quiet_env(void) {
  const char *q = getenv("KERNFORGE_QUIET");
  static const char *const off[] = {"", "0", "false", "no", "off"};
  if (!q) return 0;
  for (size_t i = 0; i < sizeof off / sizeof *off; i++)
    if (!strcasecmp(q, off[i])) return 0;
  return 1;
}

void kf_log(const char *fmt, ...) {
  static int quiet = -1;
  if (quiet < 0) quiet = quiet_env();
  if (quiet) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  ssize_t w = write(2, "kernforge: ", 11);
  w = write(2, buf, (size_t)n);
  (void)w;
}

/* A kernel that spins on the global timer for its parameter's nanoseconds. Queued before a
   timed launch, it keeps the stream busy while the host records the start event and launches,
   so the events time the kernel and not the host's way to it. */
static const char gate_ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry kf_gate(.param .u64 ns)\n{\n .reg .u64 %a<4>;\n .reg .pred %p;\n"
    " ld.param.u64 %a0, [ns];\n mov.u64 %a1, %globaltimer;\nSPIN:\n"
    " mov.u64 %a2, %globaltimer;\n sub.u64 %a3, %a2, %a1;\n setp.lt.u64 %p, %a3, %a0;\n"
    " @%p bra SPIN;\n ret;\n}\n";

enum { N_GATES = 8 };
static CUcontext gate_ctx[N_GATES];
static CUfunction gates[N_GATES]; /* NULL after a failed load: that context runs without one */
static int ngates;

void kf_hold_forget(void) { ngates = 0; }

void kf_hold(CUstream stream) {
  static long long ns = -1;
  if (ns < 0) {
    const char *us = getenv("KERNFORGE_GATE_US");
    ns = (long long)((us && *us ? atof(us) : 200.0) * 1000);
  }
  CUcontext ctx = NULL;
  if (ns <= 0 || !kf_drv.cuCtxGetCurrent || kf_drv.cuCtxGetCurrent(&ctx) || !ctx) return;
  int i = 0;
  while (i < ngates && gate_ctx[i] != ctx) i++;
  if (i == ngates) {
    if (ngates == N_GATES || !kf_drv.cuModuleLoadDataEx || !kf_drv.cuModuleGetFunction) return;
    CUmodule mod = NULL;
    CUfunction f = NULL;
    if (kf_drv.cuModuleLoadDataEx(&mod, gate_ptx, 0, NULL, NULL) ||
        kf_drv.cuModuleGetFunction(&f, mod, "kf_gate"))
      f = NULL;
    gate_ctx[ngates] = ctx, gates[ngates++] = f;
  }
  if (!gates[i]) return;
  unsigned long long v = (unsigned long long)ns;
  void *args[] = {&v};
  kf_drv.cuLaunchKernel(gates[i], 1, 1, 1, 1, 1, 1, 0, stream, args, NULL);
}
