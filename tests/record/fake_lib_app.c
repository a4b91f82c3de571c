/* A program for the fake CUDA driver that launches fake_kernels.c's heat as a library kernel,
 * as the CUDA runtime does since CUDA 12: cuLibraryLoadData, cuLibraryGetKernel, the limit of
 * dynamic shared memory raised and a cache configuration set through cuKernelSetAttribute and
 * cuKernelSetCacheConfig, then launches through cuKernelGetFunction's function with 64 KiB.
 *   fake_lib_app KERNELS.so STEPS
 * The driver is reached through cuGetProcAddress. Prints "ok". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;
static void *get(const char *name) {
  void *fn = NULL;
  if (gpa(name, &fn, 12000, 0, NULL) || !fn) { fprintf(stderr, "no %s\n", name); exit(3); }
  return fn;
}
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: fake_lib_app KERNELS.so STEPS\n"); return 2; }
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  CUresult (*init)(unsigned) = get("cuInit");
  CUresult (*alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc");
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD");
  CUresult (*load)(void **, const void *, void *, void *, unsigned, void *, void *, unsigned) =
      get("cuLibraryLoadData");
  CUresult (*getk)(void **, void *, const char *) = get("cuLibraryGetKernel");
  CUresult (*kset)(int, int, void *, int) = get("cuKernelSetAttribute");
  CUresult (*kcache)(void *, int, int) = get("cuKernelSetCacheConfig");
  CUresult (*kfn)(void **, void *) = get("cuKernelGetFunction");
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **) = get("cuLaunchKernel");
  CHECK(init(0));
  char image[4200];
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  void *lib, *kernel, *fn;
  CHECK(load(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
  CHECK(getk(&kernel, lib, "heat"));
  CHECK(kset(8, 64 * 1024, kernel, 0)); /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
  CHECK(kcache(kernel, 1, 0));          /* CU_FUNC_CACHE_PREFER_SHARED */
  CHECK(kfn(&fn, kernel));
  int n = 1000, steps = atoi(argv[2]);
  double *h = malloc(n * sizeof *h), c = 0.25;
  for (int i = 0; i < n; i++) h[i] = (i * 37 % 101) / 101.0;
  CUdeviceptr a, b;
  CHECK(alloc(&a, n * sizeof *h));
  CHECK(alloc(&b, n * sizeof *h));
  CHECK(htod(a, h, n * sizeof *h));
  CHECK(htod(b, h, n * sizeof *h));
  for (int s = 0; s < steps; s++) {
    void *args[] = {&a, &b, &n, &c};
    CHECK(launch(fn, 8, 1, 1, 128, 1, 1, 64 * 1024, NULL, args, NULL));
    CUdeviceptr t = a; a = b; b = t;
  }
  printf("ok\n");
  return 0;
}
