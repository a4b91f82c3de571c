/* A time-loop program for the fake CUDA driver: heat steps with the buffers swapped between
 * launches (a ping-pong), interleaved with whatever could observe or reorder memory, as a
 * script of one-letter operations.
 *   fake_loop KERNELS.so N SCRIPT
 * Chain 0 (buffers a0, b0) runs on stream s0, chain 1 (a1, b1) on stream s1; e is scratch.
 *   s  a heat step of chain 0 on s0          t  a heat step of chain 1 on s1
 *   d  a heat step of chain 0 on the NULL stream
 *   k  another kernel (offset) on a0, on s0   K  offset on a1, on s1
 *   M  cuMemcpyHtoD of fresh values into a0 (a write while steps may be held)
 * steps of several launches (fake_kernels.c's interior, then its companions edge side 0 with
 * V0, edge side 1 with V1, mix with W):
 *   b  such a step of chain 0 on s0      B  of chain 1 on s1      a  of chain 0 on NULL
 *   i  its first launch only (interior), on s0     j  the companions of that step, on s0
 *   v  a step of chain 0 whose first edge has another scalar (0.5 for V0)
 *   l  a heat step of chain 0 on s0 then sqdiff(in, out, n, e), a diagnostic into e
 *   L  the same with sqacc (it adds to e[0])
 *   Q  as l, the diagnostic into b1 instead of e (its buffer moved)
 *   S  a step of chain 0 whose mix has IN and OUT swapped    T  one whose companions are
 *      launched from another thread (same context, same stream s0)
 *   I  a step of chain 0 whose interior has one block fewer (points near the end not written)
 *   J  one whose mix runs 2 blocks (it mixes two points)
 *   H  3 steps "b" captured on s0 into a graph, the graph launched on s0
 *   U  cuMemFree of e, cuMemAlloc of it again (maybe elsewhere), fresh values in it
 *   o  a step of chain 0 whose companions run on s1      r  one whose companions run in
 *      another order (mix first)
 *   n  a step of chain 0 whose first edge comes from another module image of the same kernels
 *      ("KFFAKE <path> 2", loaded at the start when the script holds an n: another image id)
 * and these, each followed by an observation ("obs <op> <hash>" of every buffer's bytes, read
 * straight from the fake device memory, which is host memory):
 *   c  cuMemcpyDtoH of every buffer (the hash is of the copies)
 *   C  cuMemcpyDtoHAsync on s0, cuStreamSynchronize
 *   y  cuCtxSynchronize      p  cuStreamSynchronize(s0)     q  cuStreamQuery(s0)
 *   e  cuEventRecord(s0) + cuEventSynchronize               E  cuEventRecord + cuEventQuery
 *   w  cuEventRecord(s0) + cuStreamWaitEvent(s1)            h  cuLaunchHostFunc(s0) (hashes)
 *   m  cuMemsetD8 of e       f  cuMemAlloc + cuMemFree      g  cuGraphLaunch(s0)
 *   u  cuModuleUnload of the kernels' module, then loaded again (later steps use the new one)
 *   G  3 steps of chain 0 captured on s0 into a graph (cuStreamBeginCapture ... EndCapture),
 *      the graph launched on s0
 *   P  cuCtxPopCurrent + cuCtxPushCurrent                   z  cuFakeObserve (a driver
 *      function no interposer knows, found through cuGetProcAddress; the hash is its answer)
 *   Z  cuFakeManyArgs (unknown too: 11 arguments, some on the stack, two floating-point)
 *   x  exit(0) now        X  cuCtxDestroy, _exit(0)     R  cuDevicePrimaryCtxRelease, _exit(0)
 *   D  cuDevicePrimaryCtxReset, _exit(0)     9  SIGKILL to itself (nothing after it runs)
 *   F  fork; the child calls exit(0) (its exit handlers run), the parent waits for it
 *   A  raise SIGUSR1, whose handler calls exit(0)
 * The script's end is a final "c". FAKE_LOOP_MAP=FILE: a0 and b0 are the two halves of FILE,
 * mapped shared (host-mapped memory: what the kernels leave there outlives the process).
 * FAKE_LOOP_ATEXIT=1: an exit handler registered first copies every buffer and prints it.
 * Built with -DKF_DIRECT, driver functions bind by symbol (-lcuda); else through
 * cuGetProcAddress, as the CUDA runtime reaches them. Exits 0, or 4 when a driver call failed.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define FNS(X)                                                                               \
  X(cuInit, "cuInit") X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                \
  X(cuCtxSetCurrent, "cuCtxSetCurrent") X(cuMemAlloc_v2, "cuMemAlloc")                      \
  X(cuMemFree_v2, "cuMemFree") X(cuMemcpyHtoD_v2, "cuMemcpyHtoD")                           \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH") X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync")           \
  X(cuMemsetD8_v2, "cuMemsetD8") X(cuModuleLoadData, "cuModuleLoadData")                    \
  X(cuModuleUnload, "cuModuleUnload") X(cuModuleGetFunction, "cuModuleGetFunction")         \
  X(cuLaunchKernel, "cuLaunchKernel") X(cuStreamCreate, "cuStreamCreate")                   \
  X(cuStreamSynchronize, "cuStreamSynchronize") X(cuStreamQuery, "cuStreamQuery")           \
  X(cuStreamWaitEvent, "cuStreamWaitEvent") X(cuCtxSynchronize, "cuCtxSynchronize")         \
  X(cuEventCreate, "cuEventCreate") X(cuEventRecord, "cuEventRecord")                       \
  X(cuEventSynchronize, "cuEventSynchronize") X(cuEventQuery, "cuEventQuery")               \
  X(cuLaunchHostFunc, "cuLaunchHostFunc") X(cuGraphLaunch, "cuGraphLaunch")                 \
  X(cuCtxPopCurrent_v2, "cuCtxPopCurrent") X(cuCtxPushCurrent_v2, "cuCtxPushCurrent")       \
  X(cuCtxDestroy_v2, "cuCtxDestroy") X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease") \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset")                                 \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture") X(cuStreamEndCapture, "cuStreamEndCapture") \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")
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

static int n;
static size_t bytes;
static CUdeviceptr buf[5]; /* a0, b0, a1, b1, e */
static void *mod, *mod2, *edge2, *heat, *offset, *interior, *edge, *mix, *sqdiff, *sqacc, *ctx, *s0, *s1, *ev;
static char image[4200], image2[4208];

static unsigned long long fnv(const void *p, size_t len, unsigned long long h) {
  for (size_t i = 0; i < len; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
  return h;
}
static void observe(const char *op) { /* the buffers as they are in device memory */
  unsigned long long h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 5; i++) h = fnv((const void *)(uintptr_t)buf[i], bytes, h);
  printf("obs %s %016llx\n", op, h);
}
static void copied(const char *op) { /* the buffers as cuMemcpyDtoH gives them */
  unsigned long long h = 0xcbf29ce484222325ULL;
  double *host = malloc(bytes);
  for (int i = 0; i < 5; i++) {
    CHECK(p_cuMemcpyDtoH_v2(host, buf[i], bytes));
    h = fnv(host, bytes, h);
  }
  free(host);
  printf("obs %s %016llx\n", op, h);
}
static void at_exit(void) { copied("atexit"); fflush(stdout); }
static void host_fn(void *op) { observe(op); }
static void exit_now(int sig) { (void)sig; fflush(stdout); exit(0); }

static void load(void) {
  CHECK(p_cuModuleLoadData(&mod, image));
  CHECK(p_cuModuleGetFunction(&heat, mod, "heat"));
  CHECK(p_cuModuleGetFunction(&offset, mod, "offset"));
  CHECK(p_cuModuleGetFunction(&interior, mod, "interior"));
  CHECK(p_cuModuleGetFunction(&edge, mod, "edge"));
  CHECK(p_cuModuleGetFunction(&mix, mod, "mix"));
  CHECK(p_cuModuleGetFunction(&sqdiff, mod, "sqdiff"));
  CHECK(p_cuModuleGetFunction(&sqacc, mod, "sqacc"));
}

static void step(CUdeviceptr *in, CUdeviceptr *out, void *stream) {
  double c = 0.25;
  unsigned block = 128, grid = ((unsigned)n + block - 1) / block;
  void *args[] = {in, out, &n, &c};
  CHECK(p_cuLaunchKernel(heat, grid, 1, 1, block, 1, 1, 0, stream, args, NULL));
  CUdeviceptr t = *in;
  *in = *out, *out = t;
}

static const double V0 = 0.125, V1 = -0.25, W = 0.375;
static void edge_at(void *k, CUdeviceptr out, int side, double v, void *stream) {
  void *args[] = {&out, &n, &side, &v};
  CHECK(p_cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL));
}

/* the companions of a step from in to out: edge 0 (of e0), edge 1, mix (mix first when
 * reordered) */
static unsigned mix_blocks = 1;
static void companions(CUdeviceptr in, CUdeviceptr out, void *stream, double v0, int reorder,
                       void *e0) {
  double w = W;
  void *args[] = {&in, &out, &n, &w};
  if (reorder) CHECK(p_cuLaunchKernel(mix, mix_blocks, 1, 1, 1, 1, 1, 0, stream, args, NULL));
  edge_at(e0, out, 0, v0, stream);
  edge_at(edge, out, 1, V1, stream);
  if (!reorder) CHECK(p_cuLaunchKernel(mix, mix_blocks, 1, 1, 1, 1, 1, 0, stream, args, NULL));
}

static void stencil_less(CUdeviceptr *in, CUdeviceptr *out, void *stream, unsigned fewer) {
  double c = 0.25;
  unsigned block = 128, grid = ((unsigned)n + block - 1) / block - fewer;
  void *args[] = {in, out, &n, &c};
  CHECK(p_cuLaunchKernel(interior, grid, 1, 1, block, 1, 1, 0, stream, args, NULL));
}

static void stencil(CUdeviceptr *in, CUdeviceptr *out, void *stream) {
  stencil_less(in, out, stream, 0);
}

static void swap0(void) {
  CUdeviceptr t = buf[0];
  buf[0] = buf[1], buf[1] = t;
}

static void *companions_here(void *arg) { /* step "T": the companions from another thread */
  (void)arg;
  CHECK(p_cuCtxSetCurrent(ctx));
  companions(buf[0], buf[1], s0, V0, 0, edge);
  return NULL;
}

static void full_step(CUdeviceptr *in, CUdeviceptr *out, void *stream, void *cstream, double v0,
                      int reorder, void *e0) {
  stencil(in, out, stream);
  companions(*in, *out, cstream, v0, reorder, e0);
  CUdeviceptr t = *in;
  *in = *out, *out = t;
}

static void diag_step(void *kernel, int into) { /* heat on chain 0, then its diagnostic */
  CUdeviceptr in = buf[0], out = buf[1];
  step(&buf[0], &buf[1], s0);
  void *args[] = {&in, &out, &n, &buf[into]};
  CHECK(p_cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, s0, args, NULL));
}

static void other(CUdeviceptr x, void *stream) {
  double v = 1.0 / 1024;
  void *args[] = {&x, &v};
  CHECK(p_cuLaunchKernel(offset, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL));
}

static void fill(CUdeviceptr d, int seed) {
  double *h = malloc(bytes);
  for (int i = 0; i < n; i++) h[i] = ((i + 7 * seed) * 37 % 101) / 101.0;
  CHECK(p_cuMemcpyHtoD_v2(d, h, bytes));
  free(h);
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: fake_loop KERNELS.so N SCRIPT\n"); return 2; }
  n = atoi(argv[2]);
  bytes = (size_t)n * sizeof(double);
  const char *script = argv[3], *map = getenv("FAKE_LOOP_MAP"), *ex = getenv("FAKE_LOOP_ATEXIT");
  snprintf(image, sizeof image, "KFFAKE %s", argv[1]);
  snprintf(image2, sizeof image2, "KFFAKE %s 2", argv[1]);
#ifndef KF_DIRECT
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
#endif
  FNS(BIND)
  if (ex && *ex == '1') atexit(at_exit);
  CHECK(p_cuInit(0));
  CHECK(p_cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(p_cuCtxSetCurrent(ctx));
  load();
  if (strchr(script, 'n')) {
    CHECK(p_cuModuleLoadData(&mod2, image2));
    CHECK(p_cuModuleGetFunction(&edge2, mod2, "edge"));
  }
  for (int i = 0; i < 5; i++) CHECK(p_cuMemAlloc_v2(&buf[i], bytes));
  if (map && *map) { /* a0 and b0 in a shared file mapping */
    int fd = open(map, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)(2 * bytes))) return 3;
    uint8_t *m = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return 3;
    buf[0] = (CUdeviceptr)(uintptr_t)m, buf[1] = (CUdeviceptr)(uintptr_t)(m + bytes);
  }
  for (int i = 0; i < 5; i++) fill(buf[i], i);
  CHECK(p_cuStreamCreate(&s0, 0));
  CHECK(p_cuStreamCreate(&s1, 0));
  CHECK(p_cuEventCreate(&ev, 0));
  void *observe_fn = NULL;
  for (const char *op = script; *op; op++) {
    char tag[2] = {*op, 0};
    switch (*op) {
      case 's': step(&buf[0], &buf[1], s0); break;
      case 't': step(&buf[2], &buf[3], s1); break;
      case 'd': step(&buf[0], &buf[1], NULL); break;
      case 'b': full_step(&buf[0], &buf[1], s0, s0, V0, 0, edge); break;
      case 'B': full_step(&buf[2], &buf[3], s1, s1, V0, 0, edge); break;
      case 'a': full_step(&buf[0], &buf[1], NULL, NULL, V0, 0, edge); break;
      case 'v': full_step(&buf[0], &buf[1], s0, s0, 0.5, 0, edge); break;
      case 'o': full_step(&buf[0], &buf[1], s0, s1, V0, 0, edge); break;
      case 'r': full_step(&buf[0], &buf[1], s0, s0, V0, 1, edge); break;
      case 'n': full_step(&buf[0], &buf[1], s0, s0, V0, 0, edge2); break;
      case 'i': stencil(&buf[0], &buf[1], s0); break;
      case 'j': companions(buf[0], buf[1], s0, V0, 0, edge); swap0(); break;
      case 'S': {
        double w = W;
        void *args[] = {&buf[1], &buf[0], &n, &w};
        stencil(&buf[0], &buf[1], s0);
        edge_at(edge, buf[1], 0, V0, s0);
        edge_at(edge, buf[1], 1, V1, s0);
        CHECK(p_cuLaunchKernel(mix, 1, 1, 1, 1, 1, 1, 0, s0, args, NULL));
        swap0();
        break;
      }
      case 'T': {
        pthread_t t;
        stencil(&buf[0], &buf[1], s0);
        CHECK(pthread_create(&t, NULL, companions_here, NULL) || pthread_join(t, NULL));
        swap0();
        break;
      }
      case 'J': mix_blocks = 2; full_step(&buf[0], &buf[1], s0, s0, V0, 0, edge); mix_blocks = 1; break;
      case 'I': stencil_less(&buf[0], &buf[1], s0, 1); companions(buf[0], buf[1], s0, V0, 0, edge); swap0(); break;
      case 'H': {
        void *graph, *exec;
        CHECK(p_cuStreamBeginCapture_v2(s0, 0));
        for (int i = 0; i < 3; i++) full_step(&buf[0], &buf[1], s0, s0, V0, 0, edge);
        CHECK(p_cuStreamEndCapture(s0, &graph));
        CHECK(p_cuGraphInstantiateWithFlags(&exec, graph, 0ULL));
        CHECK(p_cuGraphLaunch(exec, s0));
        observe(tag);
        break;
      }
      case 'U':
        CHECK(p_cuMemFree_v2(buf[4]));
        CHECK(p_cuMemAlloc_v2(&buf[4], bytes));
        fill(buf[4], (int)(op - script));
        observe(tag);
        break;
      case 'l': diag_step(sqdiff, 4); break;
      case 'Q': diag_step(sqdiff, 3); break;
      case 'L': diag_step(sqacc, 4); break;
      case 'k': other(buf[0], s0); break;
      case 'K': other(buf[2], s1); break;
      case 'M': fill(buf[0], (int)(op - script)); break;
      case 'c': copied(tag); break;
      case 'C': {
        double *h = malloc(bytes);
        CHECK(p_cuMemcpyDtoHAsync_v2(h, buf[0], bytes, s0));
        CHECK(p_cuStreamSynchronize(s0));
        printf("obs C %016llx\n", fnv(h, bytes, 0xcbf29ce484222325ULL));
        free(h);
        observe(tag);
        break;
      }
      case 'y': CHECK(p_cuCtxSynchronize()); observe(tag); break;
      case 'p': CHECK(p_cuStreamSynchronize(s0)); observe(tag); break;
      case 'q': CHECK(p_cuStreamQuery(s0)); observe(tag); break;
      case 'e': CHECK(p_cuEventRecord(ev, s0)); CHECK(p_cuEventSynchronize(ev)); observe(tag); break;
      case 'E': CHECK(p_cuEventRecord(ev, s0)); CHECK(p_cuEventQuery(ev)); observe(tag); break;
      case 'w': CHECK(p_cuEventRecord(ev, s0)); CHECK(p_cuStreamWaitEvent(s1, ev, 0)); observe(tag); break;
      case 'h': CHECK(p_cuLaunchHostFunc(s0, host_fn, (void *)"h")); break;
      case 'm': CHECK(p_cuMemsetD8_v2(buf[4], (unsigned char)(op - script), bytes)); observe(tag); break;
      case 'f': {
        CUdeviceptr t;
        CHECK(p_cuMemAlloc_v2(&t, 64));
        CHECK(p_cuMemFree_v2(t));
        observe(tag);
        break;
      }
      case 'g': CHECK(p_cuGraphLaunch(NULL, s0)); observe(tag); break;
      case 'G': {
        void *graph, *exec;
        CHECK(p_cuStreamBeginCapture_v2(s0, 0));
        for (int i = 0; i < 3; i++) step(&buf[0], &buf[1], s0);
        CHECK(p_cuStreamEndCapture(s0, &graph));
        CHECK(p_cuGraphInstantiateWithFlags(&exec, graph, 0ULL));
        CHECK(p_cuGraphLaunch(exec, s0));
        observe(tag);
        break;
      }
      case 'u': CHECK(p_cuModuleUnload(mod)); observe(tag); load(); break;
      case 'P': {
        void *c;
        CHECK(p_cuCtxPopCurrent_v2(&c));
        CHECK(p_cuCtxPushCurrent_v2(c));
        observe(tag);
        break;
      }
      case 'z': {
        unsigned long long h = 0;
#ifdef KF_DIRECT
        observe_fn = dlsym(RTLD_DEFAULT, "cuFakeObserve");
#else
        observe_fn = get("cuFakeObserve");
#endif
        CHECK(!observe_fn || ((CUresult (*)(CUdeviceptr, size_t, unsigned long long *))
                              observe_fn)(buf[0], bytes, &h));
        printf("obs z %016llx\n", h);
        break;
      }
      case 'Z': {
        typedef CUresult (*many_t)(long, long, long, long, long, long, long, long, double, float,
                                   double *);
#ifdef KF_DIRECT
        many_t many = (many_t)dlsym(RTLD_DEFAULT, "cuFakeManyArgs");
#else
        many_t many = (many_t)get("cuFakeManyArgs");
#endif
        double r = 0;
        CHECK(!many || many(1, 2, 3, 4, 5, 6, 7, 8, 0.5, 0.25f, &r));
        printf("obs Z %.17g\n", r);
        observe(tag);
        break;
      }
      case '9': fflush(stdout); kill(getpid(), SIGKILL); break;
      case 'A': signal(SIGUSR1, exit_now); raise(SIGUSR1); break;
      case 'F': {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) exit(0);
        int status;
        CHECK(child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
              WEXITSTATUS(status));
        observe(tag);
        break;
      }
      case 'x': fflush(stdout); exit(0);
      case 'X': fflush(stdout); CHECK(p_cuCtxDestroy_v2(ctx)); _exit(0);
      case 'R': fflush(stdout); CHECK(p_cuDevicePrimaryCtxRelease_v2(0)); _exit(0);
      case 'D': fflush(stdout); CHECK(p_cuDevicePrimaryCtxReset_v2(0)); _exit(0);
      default: fprintf(stderr, "unknown operation %c\n", *op); return 2;
    }
  }
  copied("end");
  return 0;
}
