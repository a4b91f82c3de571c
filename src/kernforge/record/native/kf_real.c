/* kernforge driver interposer: finding the real dlsym and the real CUDA driver. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kf.h"

kf_driver_t kf_drv;
static void *(*real_dlsym_fn)(void *, const char *);
static void *libcuda_handle;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

void *kf_real_dlsym(void *handle, const char *name) {
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

void *kf_libcuda(void) {
  if (!libcuda_handle) {
    const char *path = getenv("KERNFORGE_LIBCUDA");
    libcuda_handle = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  }
  return libcuda_handle;
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
#undef R
}

void kf_resolve_driver(void) { pthread_once(&resolve_once, resolve); }

void kf_log(const char *fmt, ...) {
  static int quiet = -1;
  if (quiet < 0) quiet = getenv("KERNFORGE_QUIET") != NULL;
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
