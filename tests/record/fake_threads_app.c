/* A multi-threaded test program for the fake CUDA driver (kernforge/testing/fakecuda), reaching
 * the driver as the CUDA runtime does (dlopen, cuGetProcAddress).
 *   fake_threads_app KERNELS.so THREADS STEPS NODES
 * THREADS threads each run STEPS heat steps on arrays of their own while one more thread grows
 * a linked list of NODES device allocations (each holds the address of the next) and another
 * launches gather on the list's head three times (the list grows until then, to at most NODES
 * nodes): a recorder scanning the list for pointers meets
 * allocations made after it looked at the allocation table. The fake driver's allocator is not
 * thread-safe, so allocations are serialized here. Prints "checksum <value>" (the same with or
 * without an interposer) and exits 0. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void *, void **, void **);
static CUresult (*alloc_fn)(CUdeviceptr *, size_t);
static CUresult (*htod)(CUdeviceptr, const void *, size_t);
static CUresult (*dtoh)(void *, CUdeviceptr, size_t);
static launch_t launch;
static void *heat, *gather;
static int steps, nodes, n = 256;
static int gather_started, gather_done;
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr head;
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)

static CUdeviceptr alloc(size_t size) {
  CUdeviceptr p;
  pthread_mutex_lock(&alloc_lock);
  CHECK(alloc_fn(&p, size));
  pthread_mutex_unlock(&alloc_lock);
  return p;
}

static void *heat_thread(void *arg) {
  long id = (long)arg;
  double *h = malloc(n * sizeof *h), c = 0.25, *sum = malloc(sizeof *sum);
  for (int i = 0; i < n; i++) h[i] = ((i + id) * 37 % 101) / 101.0;
  CUdeviceptr a = alloc(n * sizeof *h), b = alloc(n * sizeof *h);
  CHECK(htod(a, h, n * sizeof *h));
  CHECK(htod(b, h, n * sizeof *h));
  for (int s = 0; s < steps; s++) {
    void *args[] = {&a, &b, &n, &c};
    CHECK(launch(heat, 2, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CUdeviceptr t = a; a = b; b = t;
  }
  CHECK(dtoh(h, a, n * sizeof *h));
  *sum = 0;
  for (int i = 0; i < n; i++) *sum += h[i] * (1 + i % 7);
  free(h);
  return sum;
}

static void *chain_thread(void *arg) {
  (void)arg;
  CUdeviceptr last = head;
  while (!__atomic_load_n(&gather_started, __ATOMIC_ACQUIRE)) {}
  for (int i = 0; i < nodes && !__atomic_load_n(&gather_done, __ATOMIC_ACQUIRE); i++) {
    CUdeviceptr node = alloc(8), zero = 0;
    CHECK(htod(node, &zero, 8));
    CHECK(htod(last, &node, 8)); /* the list grows while it may be scanned */
    last = node;
  }
  return NULL;
}

static void *gather_thread(void *arg) {
  CUdeviceptr out = alloc(8);
  int k = 0; /* gather reads nothing: the list is only pointed to */
  for (int i = 0; i < 3; i++) { /* while the list grows: the chain thread starts with the first */
    void *args[] = {&head, &k, &out};
    __atomic_store_n(&gather_started, 1, __ATOMIC_RELEASE);
    CHECK(launch(gather, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
  }
  __atomic_store_n(&gather_done, 1, __ATOMIC_RELEASE);
  return arg;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: fake_threads_app KERNELS.so THREADS STEPS NODES\n"); return 2; }
  int threads = atoi(argv[2]);
  steps = atoi(argv[3]), nodes = atoi(argv[4]);
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa_t gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  CUresult (*init)(unsigned);
  CUresult (*load)(void **, const void *);
  CUresult (*getfn)(void **, void *, const char *);
  CHECK(gpa("cuInit", (void **)&init, 12000, 0, NULL));
  CHECK(gpa("cuMemAlloc", (void **)&alloc_fn, 12000, 0, NULL));
  CHECK(gpa("cuMemcpyHtoD", (void **)&htod, 12000, 0, NULL));
  CHECK(gpa("cuMemcpyDtoH", (void **)&dtoh, 12000, 0, NULL));
  CHECK(gpa("cuModuleLoadData", (void **)&load, 12000, 0, NULL));
  CHECK(gpa("cuModuleGetFunction", (void **)&getfn, 12000, 0, NULL));
  CHECK(gpa("cuLaunchKernel", (void **)&launch, 12000, 0, NULL));
  CHECK(init(0));
  char image[4200];
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  void *mod;
  CHECK(load(&mod, image));
  CHECK(getfn(&heat, mod, "heat"));
  CHECK(getfn(&gather, mod, "gather"));
  CUdeviceptr zero = 0;
  head = alloc(8);
  CHECK(htod(head, &zero, 8));
  pthread_t t[256], chain, g;
  if (threads > 256) threads = 256;
  pthread_create(&g, NULL, gather_thread, NULL);
  pthread_create(&chain, NULL, chain_thread, NULL);
  for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, heat_thread, (void *)i);
  double total = 0;
  for (int i = 0; i < threads; i++) {
    void *sum;
    pthread_join(t[i], &sum);
    total += *(double *)sum;
    free(sum);
  }
  pthread_join(chain, NULL);
  pthread_join(g, NULL);
  printf("checksum %.12f\n", total);
  return 0;
}
