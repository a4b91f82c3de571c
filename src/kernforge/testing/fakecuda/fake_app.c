/* A test application for the fake CUDA driver that reaches the driver as the CUDA runtime does:
 * dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then every entry point through it.
 *   fake_app KERNELS.so STEPS [N [kill|fatbin|shmem]]
 * prints "checksum <value>" of its final state; exits 0 ("kill": SIGKILLs itself after the
 * heat steps, as a crashing application would; "fatbin": the image is loaded as the PTX entry of
 * a fatbin, as an nvcc-built program's is; "shmem": heat is launched with 64 KiB of dynamic
 * shared memory, after raising its MAX_DYNAMIC_SHARED_SIZE_BYTES, with a carveout of 25 and
 * the cache configuration PREFER_SHARED, as optimized programs do). */
#include <signal.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;
static void *get(const char *name, unsigned long long flags) {
  void *fn = NULL;
  if (gpa(name, &fn, 12000, flags, NULL) || !fn) { fprintf(stderr, "no %s\n", name); exit(3); }
  return fn;
}
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: fake_app KERNELS.so STEPS [N]\n"); return 2; }
  int steps = atoi(argv[2]), n = argc > 3 ? atoi(argv[3]) : 1000;
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  CUresult (*init)(unsigned) = get("cuInit", 0);
  CUresult (*alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc", 0);
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD", 0);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = get("cuMemcpyDtoH", 0);
  CUresult (*load)(void **, const void *) = get("cuModuleLoadData", 0);
  CUresult (*getfn)(void **, void *, const char *) = get("cuModuleGetFunction", 0);
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **) = get("cuLaunchKernel", 2);
  CHECK(init(0));
  char image[4200];
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  void *mod, *heat, *scale, *gather, *offset, *width;
  if (argc > 4 && !strcmp(argv[4], "fatbin")) { /* the image inside a fatbin, as PTX */
    static unsigned char fat[4400];
    char ptx[4200];
    unsigned n = (unsigned)snprintf(ptx, sizeof ptx, "KFFAKE %s\n.target fake\n", argv[1]) + 1;
    unsigned padded = (n + 7) & ~7u;
    unsigned long long fsize = 64 + padded;
    unsigned magic = 0xBA55ED50u, ehs = 64, arch = 90;
    unsigned short version = 1, hs = 16, kind = 1;
    memcpy(fat, &magic, 4), memcpy(fat + 4, &version, 2), memcpy(fat + 6, &hs, 2);
    memcpy(fat + 8, &fsize, 8);
    memcpy(fat + 16, &kind, 2), memcpy(fat + 20, &ehs, 4), memcpy(fat + 24, &padded, 4);
    memcpy(fat + 32, &n, 4), memcpy(fat + 44, &arch, 4);
    memcpy(fat + 80, ptx, n);
    CHECK(load(&mod, fat));
  } else {
    CHECK(load(&mod, image));
  }
  CHECK(getfn(&heat, mod, "heat"));
  CHECK(getfn(&scale, mod, "scale"));
  CHECK(getfn(&gather, mod, "gather"));
  CHECK(getfn(&offset, mod, "offset"));
  CHECK(getfn(&width, mod, "blockwidth"));
  unsigned dyn = 0;
  if (argc > 4 && !strcmp(argv[4], "shmem")) {
    CUresult (*setattr)(void *, int, int) = get("cuFuncSetAttribute", 0);
    CUresult (*setcache)(void *, int) = get("cuFuncSetCacheConfig", 0);
    dyn = 64 * 1024;
    CHECK(setattr(heat, 8, (int)dyn)); /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    CHECK(setattr(heat, 9, 25));       /* PREFERRED_SHARED_MEMORY_CARVEOUT */
    CHECK(setcache(heat, 2));          /* CU_FUNC_CACHE_PREFER_SHARED */
  }
  double *h = malloc(n * sizeof *h);
  for (int i = 0; i < n; i++) h[i] = (i * 37 % 101) / 101.0;
  CUdeviceptr a, b, rows, out;
  CHECK(alloc(&a, n * sizeof *h));
  CHECK(alloc(&b, n * sizeof *h));
  CHECK(htod(a, h, n * sizeof *h));
  CHECK(htod(b, h, n * sizeof *h));
  double c = 0.25;
  unsigned block = 128, grid = (n + block - 1) / block;
  for (int s = 0; s < steps; s++) {
    void *args[] = {&a, &b, &n, &c};
    CHECK(launch(heat, grid, 1, 1, block, 1, 1, dyn, NULL, args, NULL));
    CUdeviceptr t = a; a = b; b = t;
  }
  if (argc > 4 && !strcmp(argv[4], "kill")) raise(SIGKILL);
  struct { CUdeviceptr data; long n; double factor; } span = {a, n, 0.5};
  void *sargs[] = {&span};
  CHECK(launch(scale, grid, 1, 1, block, 1, 1, 0, NULL, sargs, NULL));
  CUdeviceptr table[4] = {a, b, a, b};
  CHECK(alloc(&rows, sizeof table));
  CHECK(alloc(&out, 4 * sizeof(double)));
  CHECK(htod(rows, table, sizeof table));
  int k = 4;
  void *gargs[] = {&rows, &k, &out};
  CHECK(launch(gather, 1, 1, 1, 1, 1, 1, 0, NULL, gargs, NULL));
  CUdeviceptr inner = a + 16 * sizeof(double);
  double v = 1.0;
  void *oargs[] = {&inner, &v};
  CHECK(launch(offset, 1, 1, 1, 1, 1, 1, 0, NULL, oargs, NULL));
  void *wargs[] = {&out};
  CHECK(launch(width, 1, 1, 1, 128, 1, 1, 0, NULL, wargs, NULL));
  double g[4], sum = 0;
  CHECK(dtoh(h, a, n * sizeof *h));
  CHECK(dtoh(g, out, sizeof g));
  for (int i = 0; i < n; i++) sum += h[i] * (1 + i % 7);
  for (int i = 0; i < 4; i++) sum += g[i];
  printf("checksum %.12f\n", sum);
  return 0;
}
