/* A time-loop program for the fake CUDA driver that exercises what a deployed kernel assumed
 * besides its parameters and geometry (the interposer's kf_guard.c): the launch attributes of
 * the steps it stands for, and the value of a module global it baked in.
 *   fake_guard KERNELS.so N SCRIPT
 * Buffers a, b (the loop's, swapped after each step) and e; one stream s. One letter each:
 *   g  a step of cheat(a, b, n), a heat step whose coefficient is the global cheat_c, on s
 *   W  cuMemcpyHtoD of 0.3 into cheat_c (the address cuModuleGetGlobal gives)
 *   V  cuMemcpyHtoD of cheat_c's value into it (written, unchanged)
 *   A  cuMemcpyHtoDAsync of 0.3 into cheat_c on s      Z  cuMemsetD8 of cheat_c's bytes to 0
 *   O  cuMemcpyHtoD into bias (another global of the module)    M  into the buffer a
 *   K  a launch of setc(0.3), a kernel that writes cheat_c
 *   b  a step of interior(a, b, n, c) and its companions edge(b, n, 0, V0), edge(b, n, 1, V1),
 *      mix(a, b, n, W), each through cuLaunchKernelEx on s (fake_kernels.c); FAKE_GUARD_ATTR=
 *      "R:ID:V[:S]" gives launch R of the step (0 interior, 1 and 2 the edges, 3 mix) one launch
 *      attribute: ID with the int V in its value (cluster dimensions, 4 and 11: V, 1, 1), from
 *      step S on (0 if absent); the padding and the value's unused bytes hold 0, or the step's
 *      number with FAKE_GUARD_PAD=1 (a program that leaves them uninitialized)
 *   c  cuMemcpyDtoH of every buffer: "obs c HASH"
 * The script's end is a final "c". Driver functions are found through cuGetProcAddress, as the
 * CUDA runtime finds them. Exits 0, or 4 when a driver call failed.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, shmem;
  void *stream;
  void *attrs;
  unsigned nattrs;
} config_t;
typedef struct { uint32_t id, pad; uint8_t value[64]; } attr_t; /* CUlaunchAttribute */
#define FNS(X)                                                                               \
  X(cuInit) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemcpyHtoD)    \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemsetD8) X(cuModuleLoadData)                    \
  X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuLaunchKernel) X(cuLaunchKernelEx)         \
  X(cuStreamCreate)
#define PTR(name) static CUresult (*p_##name)();
FNS(PTR)
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
static gpa_t gpa;
static void *get(const char *name) {
  void *fn = NULL;
  if (gpa(name, &fn, 12000, 0, NULL) || !fn) { fprintf(stderr, "no %s\n", name); exit(3); }
  return fn;
}
#define BIND(name) p_##name = (CUresult (*)())get(#name);
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)

static int n, steps;
static size_t bytes;
static CUdeviceptr buf[3], coef, bias; /* a, b, e; cheat_c, bias */
static void *mod, *cheat, *setc, *kern[4], *s;
static int role = -1, attr_from, pad_steps;
static unsigned attr_id, attr_v;

static unsigned long long fnv(const void *p, size_t len, unsigned long long h) {
  for (size_t i = 0; i < len; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h;
}

static void copied(void) {
  unsigned long long h = 0xcbf29ce484222325ULL;
  double *host = malloc(bytes);
  for (int i = 0; i < 3; i++) {
    CHECK(p_cuMemcpyDtoH(host, buf[i], bytes));
    h = fnv(host, bytes, h);
  }
  free(host);
  printf("obs c %016llx\n", h);
}

static void swap(void) {
  CUdeviceptr t = buf[0];
  buf[0] = buf[1], buf[1] = t;
}

/* launch r of a step "b", through cuLaunchKernelEx, with its attribute if it has one */
static void launch_ex(int r, void **args) {
  attr_t a;
  memset(&a, pad_steps ? steps & 0xff : 0, sizeof a); /* padding and unused bytes */
  config_t c = {r ? 1 : 8, 1, 1, r ? 1 : 128, 1, 1, 0, s, NULL, 0};
  if (r == role && steps >= attr_from) {
    unsigned v[3] = {attr_v, 1, 1};
    a.id = attr_id;
    memcpy(a.value, v, attr_id == 4 || attr_id == 11 ? sizeof v : sizeof v[0]);
    c.attrs = &a, c.nattrs = 1;
  }
  CHECK(p_cuLaunchKernelEx(&c, kern[r], args, NULL));
}

static void step_b(void) {
  double c = 0.25, v0 = 0.125, v1 = -0.25, w = 0.375;
  int side0 = 0, side1 = 1;
  void *interior[] = {&buf[0], &buf[1], &n, &c}, *edge0[] = {&buf[1], &n, &side0, &v0},
       *edge1[] = {&buf[1], &n, &side1, &v1}, *mix[] = {&buf[0], &buf[1], &n, &w};
  void **args[] = {interior, edge0, edge1, mix};
  for (int r = 0; r < 4; r++) launch_ex(r, args[r]);
  swap();
}

static void fill(CUdeviceptr d, int seed) {
  double *h = malloc(bytes);
  for (int i = 0; i < n; i++) h[i] = ((i + 7 * seed) * 37 % 101) / 101.0;
  CHECK(p_cuMemcpyHtoD(d, h, bytes));
  free(h);
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: fake_guard KERNELS.so N SCRIPT\n"); return 2; }
  char image[4200];
  n = atoi(argv[2]);
  bytes = (size_t)n * sizeof(double);
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  const char *attr = getenv("FAKE_GUARD_ATTR");
  if (attr && *attr && sscanf(attr, "%d:%u:%u:%d", &role, &attr_id, &attr_v, &attr_from) < 3) {
    fprintf(stderr, "FAKE_GUARD_ATTR is not R:ID:V[:S]\n");
    return 2;
  }
  pad_steps = getenv("FAKE_GUARD_PAD") && !strcmp(getenv("FAKE_GUARD_PAD"), "1");
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  FNS(BIND)
  void *ctx;
  size_t size;
  CHECK(p_cuInit(0));
  CHECK(p_cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(p_cuCtxSetCurrent(ctx));
  CHECK(p_cuModuleLoadData(&mod, image));
  CHECK(p_cuModuleGetFunction(&cheat, mod, "cheat"));
  CHECK(p_cuModuleGetFunction(&setc, mod, "setc"));
  const char *names[] = {"interior", "edge", "edge", "mix"};
  for (int r = 0; r < 4; r++) CHECK(p_cuModuleGetFunction(&kern[r], mod, names[r]));
  CHECK(p_cuModuleGetGlobal(&coef, &size, mod, "cheat_c") || size != sizeof(double));
  CHECK(p_cuModuleGetGlobal(&bias, &size, mod, "bias"));
  for (int i = 0; i < 3; i++) {
    CHECK(p_cuMemAlloc(&buf[i], bytes));
    fill(buf[i], i);
  }
  CHECK(p_cuStreamCreate(&s, 0));
  const double changed = 0.3;
  for (const char *op = argv[3]; *op; op++) {
    switch (*op) {
      case 'g': {
        void *args[] = {&buf[0], &buf[1], &n};
        CHECK(p_cuLaunchKernel(cheat, 8, 1, 1, 128, 1, 1, 0, s, args, NULL));
        swap();
        break;
      }
      case 'b': step_b(), steps++; break;
      case 'W': CHECK(p_cuMemcpyHtoD(coef, &changed, sizeof changed)); break;
      case 'V': {
        double now;
        CHECK(p_cuMemcpyDtoH(&now, coef, sizeof now) || p_cuMemcpyHtoD(coef, &now, sizeof now));
        break;
      }
      case 'A': CHECK(p_cuMemcpyHtoDAsync(coef, &changed, sizeof changed, s)); break;
      case 'Z': CHECK(p_cuMemsetD8(coef, 0, sizeof(double))); break;
      case 'O': CHECK(p_cuMemcpyHtoD(bias, &changed, sizeof changed)); break;
      case 'M': fill(buf[0], (int)(op - argv[3])); break;
      case 'K': {
        double v = changed;
        void *args[] = {&v};
        CHECK(p_cuLaunchKernel(setc, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        break;
      }
      case 'c': copied(); break;
      default: fprintf(stderr, "unknown operation %c\n", *op); return 2;
    }
  }
  copied();
  return 0;
}
