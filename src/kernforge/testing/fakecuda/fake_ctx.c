/* A program for the fake CUDA driver whose context ends and begins again, as a program that
 * calls cudaDeviceReset and goes on does (the interposer's kf_ctx.c).
 *   fake_ctx KERNELS.so N SCRIPT
 * Buffers a, b (swapped after each step), launches on the NULL stream. One letter each:
 *   h  a step of heat(a, b, n, 0.25), grid 8, block 128     g  a step of cheat(a, b, n)
 *   K  setc(0.3): a kernel that writes cheat_c, the module global cheat reads
 *   X  cuCtxDestroy, then cuCtxCreate            D  cuDevicePrimaryCtxReset, then retained
 *   R  cuDevicePrimaryCtxRelease of its only reference, then retained again
 *   r  cuDevicePrimaryCtxRetain, then cuDevicePrimaryCtxRelease (the context lives on)
 *   c  cuMemcpyDtoH of both buffers: "obs c HASH"
 * After X, D and R the kernels' module is loaded again and its functions are got in the
 * reverse order of the last time: the fake driver gives each the handle another one had. The
 * buffers are the fake driver's host memory, which outlives contexts. The script's end is a
 * final "c". Driver functions are found through cuGetProcAddress, as the CUDA runtime finds
 * them; built with -DKF_DIRECT, they bind by symbol (-lcuda). Exits 0, or 4 when a driver call
 * failed.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define FNS(X)                                                                                \
  X(cuInit, "cuInit") X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                 \
  X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease")                                \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset") X(cuCtxSetCurrent, "cuCtxSetCurrent") \
  X(cuCtxCreate_v2, "cuCtxCreate") X(cuCtxDestroy_v2, "cuCtxDestroy")                         \
  X(cuMemAlloc_v2, "cuMemAlloc") X(cuMemcpyHtoD_v2, "cuMemcpyHtoD")                          \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH") X(cuModuleLoadData, "cuModuleLoadData")                 \
  X(cuModuleGetFunction, "cuModuleGetFunction") X(cuLaunchKernel, "cuLaunchKernel")
#define PTR(sym, base) static CUresult (*p_##sym)();
FNS(PTR)
#ifdef KF_DIRECT
#define DECL(sym, base) CUresult sym();
FNS(DECL)
#define BIND(sym, base) p_##sym = sym;
#else
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;
static void *get(const char *name) {
  void *fn = NULL;
  if (gpa(name, &fn, 12000, 0, NULL) || !fn) { fprintf(stderr, "no %s\n", name); exit(3); }
  return fn;
}
#define BIND(sym, base) p_##sym = (CUresult (*)())get(base);
#endif
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)

static int n, reversed;
static size_t bytes;
static CUdeviceptr buf[2];
static char image[4200];
static const char *const names[] = {"heat", "offset", "cheat", "setc"};
static void *fn[4], *ctx; /* by names[] */

static void load(void) { /* the module, its functions got in the other order than last time */
  void *mod;
  CHECK(p_cuModuleLoadData(&mod, image));
  for (int k = 0; k < 4; k++) {
    int i = reversed ? 3 - k : k;
    CHECK(p_cuModuleGetFunction(&fn[i], mod, names[i]));
  }
  reversed = !reversed;
}

static void copied(void) {
  unsigned long long h = 0xcbf29ce484222325ULL;
  uint8_t *host = malloc(bytes);
  for (int i = 0; i < 2; i++) {
    CHECK(p_cuMemcpyDtoH_v2(host, buf[i], bytes));
    for (size_t k = 0; k < bytes; k++) h = (h ^ host[k]) * 0x100000001b3ULL;
  }
  free(host);
  printf("obs c %016llx\n", h);
}

static void step(void *f) { /* heat's parameters (cheat takes the first three) */
  double c = 0.25;
  void *args[] = {&buf[0], &buf[1], &n, &c};
  CHECK(p_cuLaunchKernel(f, 8, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
  CUdeviceptr t = buf[0];
  buf[0] = buf[1], buf[1] = t;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: fake_ctx KERNELS.so N SCRIPT\n"); return 2; }
  n = atoi(argv[2]);
  bytes = (size_t)n * sizeof(double);
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
#ifndef KF_DIRECT
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
#endif
  FNS(BIND)
  CHECK(p_cuInit(0));
  CHECK(p_cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(p_cuCtxSetCurrent(ctx));
  load();
  double *h = malloc(bytes);
  for (int i = 0; i < 2; i++) {
    CHECK(p_cuMemAlloc_v2(&buf[i], bytes));
    for (int k = 0; k < n; k++) h[k] = ((k + 7 * i) * 37 % 101) / 101.0;
    CHECK(p_cuMemcpyHtoD_v2(buf[i], h, bytes));
  }
  free(h);
  for (const char *op = argv[3]; *op; op++) {
    switch (*op) {
      case 'h': step(fn[0]); break;
      case 'g': step(fn[2]); break;
      case 'K': {
        double v = 0.3;
        void *args[] = {&v};
        CHECK(p_cuLaunchKernel(fn[3], 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        break;
      }
      case 'X':
        CHECK(p_cuCtxDestroy_v2(ctx) || p_cuCtxCreate_v2(&ctx, 0, 0));
        load();
        break;
      case 'D':
        CHECK(p_cuDevicePrimaryCtxReset_v2(0) || p_cuDevicePrimaryCtxRetain(&ctx, 0) ||
              p_cuCtxSetCurrent(ctx));
        load();
        break;
      case 'R':
        CHECK(p_cuDevicePrimaryCtxRelease_v2(0) || p_cuDevicePrimaryCtxRetain(&ctx, 0) ||
              p_cuCtxSetCurrent(ctx));
        load();
        break;
      case 'r': {
        void *again;
        CHECK(p_cuDevicePrimaryCtxRetain(&again, 0) || p_cuDevicePrimaryCtxRelease_v2(0));
        break;
      }
      case 'c': copied(); break;
      default: fprintf(stderr, "unknown operation %c\n", *op); return 2;
    }
  }
  copied();
  return 0;
}
