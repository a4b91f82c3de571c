/* A program for the fake CUDA driver that launches fake_kernels.c's heat on work of several
 * sizes, as a CuPy program launches one ufunc's kernel on arrays of several sizes.
 *   fake_work_app KERNELS.so LAUNCH...
 * Each LAUNCH is a number of points N (grid ceil(N / 128) of 128 threads) and letters:
 *   x  the buffers swapped (out -> in): the same work on the other half of a ping-pong
 *   c  another coefficient (0.5 instead of 0.25): other work of the same shape
 *   m  heat of a second load of the module: another function of the same name
 * The driver is reached as the CUDA runtime reaches it (cuGetProcAddress). Prints "ok". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (argc < 3) { fprintf(stderr, "usage: fake_work_app KERNELS.so LAUNCH...\n"); return 2; }
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  CUresult (*init)(unsigned) = get("cuInit");
  CUresult (*alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc");
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD");
  CUresult (*load)(void **, const void *) = get("cuModuleLoadData");
  CUresult (*getfn)(void **, void *, const char *) = get("cuModuleGetFunction");
  CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, void *, void **, void **) = get("cuLaunchKernel");
  CHECK(init(0));
  char image[4200];
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  void *mod[2], *heat[2];
  for (int i = 0; i < 2; i++) {
    CHECK(load(&mod[i], image));
    CHECK(getfn(&heat[i], mod[i], "heat"));
  }
  int most = 1;
  for (int i = 2; i < argc; i++)
    if (atoi(argv[i]) > most) most = atoi(argv[i]);
  double *h = malloc((size_t)most * sizeof *h);
  if (!h) return 5;
  for (int i = 0; i < most; i++) h[i] = (i * 37 % 101) / 101.0;
  CUdeviceptr a, b;
  CHECK(alloc(&a, (size_t)most * sizeof *h));
  CHECK(alloc(&b, (size_t)most * sizeof *h));
  CHECK(htod(a, h, (size_t)most * sizeof *h));
  CHECK(htod(b, h, (size_t)most * sizeof *h));
  for (int i = 2; i < argc; i++) {
    int n = atoi(argv[i]);
    const char *how = argv[i] + strspn(argv[i], "0123456789");
    double c = strchr(how, 'c') ? 0.5 : 0.25;
    CUdeviceptr in = strchr(how, 'x') ? b : a, out = strchr(how, 'x') ? a : b;
    void *args[] = {&in, &out, &n, &c};
    unsigned block = 128, grid = ((unsigned)n + block - 1) / block;
    CHECK(launch(heat[strchr(how, 'm') ? 1 : 0], grid, 1, 1, block, 1, 1, 0, NULL, args, NULL));
  }
  free(h);
  printf("ok\n");
  return 0;
}
