/* A threaded test application for the fake CUDA driver, linked against libcuda.so.1 so that
 * every driver call binds by symbol, as a program built with -lcuda does.
 *   fake_threads KERNELS.so THREADS LAUNCHES [N [KERNEL [streams]]]
 * Each thread has its own two buffers of N doubles; all threads start together, load the module
 * and launch KERNEL (default "heat"; any kernel with heat's parameters: in, out, n, c) LAUNCHES
 * times, swapping the buffers ("streams": each thread on a stream of its own, else the NULL
 * stream). Prints "checksum <value>" of all final states; exits 0, or 4 when
 * a driver call failed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuStreamCreate(void **, unsigned);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);

typedef struct { CUdeviceptr a, b; int n, launches, failed; void *stream; } work_t;
static pthread_barrier_t start;
static char image[4200];
static const char *kernel = "heat";
static int streams;

static void *run(void *arg) {
  work_t *w = arg;
  void *mod, *fn;
  pthread_barrier_wait(&start);
  if (cuModuleLoadData(&mod, image) || cuModuleGetFunction(&fn, mod, kernel) ||
      (streams && cuStreamCreate(&w->stream, 0))) {
    w->failed = 1;
    return NULL;
  }
  double c = 0.25;
  unsigned block = 128, grid = ((unsigned)w->n + block - 1) / block;
  for (int s = 0; s < w->launches; s++) {
    void *args[] = {&w->a, &w->b, &w->n, &c};
    if (cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, w->stream, args, NULL)) {
      w->failed = 1;
      return NULL;
    }
    CUdeviceptr t = w->a;
    w->a = w->b, w->b = t;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: fake_threads KERNELS.so THREADS LAUNCHES [N [KERNEL [streams]]]\n");
    return 2;
  }
  int threads = atoi(argv[2]), launches = atoi(argv[3]), n = argc > 4 ? atoi(argv[4]) : 1000;
  if (argc > 5) kernel = argv[5];
  streams = argc > 6 && !strcmp(argv[6], "streams");
  if (threads < 1 || threads > 1024 || n < 2) return 2;
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  if (cuInit(0)) return 3;
  work_t *w = calloc((size_t)threads, sizeof *w);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  double *h = malloc((size_t)n * sizeof *h);
  if (!w || !t || !h) return 3;
  for (int k = 0; k < threads; k++) { /* allocated here: the fake's allocator is not threaded */
    for (int i = 0; i < n; i++) h[i] = ((i + 13 * k) * 37 % 101) / 101.0;
    w[k].n = n, w[k].launches = launches;
    if (cuMemAlloc_v2(&w[k].a, (size_t)n * sizeof *h) ||
        cuMemAlloc_v2(&w[k].b, (size_t)n * sizeof *h) ||
        cuMemcpyHtoD_v2(w[k].a, h, (size_t)n * sizeof *h) ||
        cuMemcpyHtoD_v2(w[k].b, h, (size_t)n * sizeof *h))
      return 3;
  }
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  for (int k = 0; k < threads; k++) pthread_create(&t[k], NULL, run, &w[k]);
  double sum = 0;
  int failed = 0;
  for (int k = 0; k < threads; k++) {
    pthread_join(t[k], NULL);
    failed |= w[k].failed;
    if (cuMemcpyDtoH_v2(h, w[k].a, (size_t)n * sizeof *h)) return 3;
    for (int i = 0; i < n; i++) sum += h[i] * (1 + i % 7) * (k + 1);
  }
  printf("checksum %.12f\n", sum);
  return failed ? 4 : 0;
}
