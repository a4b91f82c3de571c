/* A fake CUDA driver over host memory, for tests without a GPU.
 *
 * Built as libcuda.so.1 and found through LD_LIBRARY_PATH, it implements the entry points the
 * kernforge interposer, its replay (kernforge.backends.driver) and the test application use.
 * "Device" memory is host memory at addresses that differ per process, as a real GPU's do
 * (FAKE_CUDA_ARENA=ADDRESS: allocations start there in every process, as a program's often do).
 * A module image is the text "KFFAKE <path of a shared library>"; a kernel is a function
 *   void name(const unsigned grid[3], const unsigned block[3], void **params)
 * of that library, with its parameter sizes in the string `name_params` ("8,8,4").
 * FAKE_CUDA_TRACE=FILE: every kernel that runs (launched, or a node of a launched graph)
 * appends its name and a newline to FILE, so a test can tell which function ran.
 * Stream capture's interaction modes, as CUDA's: a module load (a "potentially unsafe" call)
 * while this thread captures (not in relaxed mode), or while another thread captures in global
 * mode, fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture (its end
 * then fails), unless the loading thread set relaxed mode (cuThreadExchangeStreamCaptureMode).
 * A launch with more than 48 KiB of dynamic shared memory fails (CUDA_ERROR_INVALID_VALUE)
 * unless MAX_DYNAMIC_SHARED_SIZE_BYTES was raised on its function (fake_attrs.c).
 * Contexts: one handle, as a driver that gives a new context a destroyed one's. Its end
 * (cuCtxDestroy, the primary context's reset, or its release when no reference is left) unloads
 * every module: a function of one launches no more (CUDA_ERROR_INVALID_CONTEXT), and the next
 * modules and functions get the old ones' handles again, in the order they were first made.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_FOUND = 500, INVALID_IMAGE = 200,
       INVALID_CONTEXT = 201, INVALID_HANDLE = 400, CAPTURE_UNSUPPORTED = 900,
       CAPTURE_INVALIDATED = 901 };
static CUresult capture_forbids(void); /* stream capture: a module load is refused now */
static int ctx_destroyed; /* after cuCtxDestroy, a primary context's release or reset */
typedef void (*kernel_t)(const unsigned *, const unsigned *, void **);
typedef struct { void *lib; int unloaded, gen; } module_t;
typedef struct {
  kernel_t fn; char *name; int n; size_t off[32], size[32]; module_t *mod; int gen;
  int max_dyn; /* MAX_DYNAMIC_SHARED_SIZE_BYTES as set (0: never, 48 KiB) (fake_attrs.c) */
} func_t;
/* every module and function handle made, in order; those from `live` on are free again */
typedef struct { void **all; size_t made, live, cap; } handles_t;
static handles_t mods, funcs;
static int ctx_gen;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER; /* threads load modules */
static void *grow(handles_t *h) { /* room for one more handle (NULL: no memory) */
  if (h->made < h->cap) return h;
  void **a = realloc(h->all, (2 * h->cap + 16) * sizeof *a);
  if (a) h->all = a, h->cap = 2 * h->cap + 16;
  return a;
}
static void *handle(handles_t *h, size_t size) {
  void *p = NULL;
  pthread_mutex_lock(&handles_lock);
  if (h->live < h->made) p = memset(h->all[h->live++], 0, size);
  else if (grow(h) && (p = calloc(1, size))) h->all[h->made++] = p, h->live = h->made;
  pthread_mutex_unlock(&handles_lock);
  return p;
}
static void ctx_end(void) { /* every handle made is free again */
  pthread_mutex_lock(&handles_lock), ctx_destroyed = 1, ctx_gen++, mods.live = funcs.live = 0;
  pthread_mutex_unlock(&handles_lock);
}
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, shmem; void *stream; void *attrs; unsigned nattrs;
} launch_config_t;

/* ---- memory --------------------------------------------------------------------------------- */
static uint8_t *arena, *arena_top;
#define ARENA (1ULL << 32)
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (!arena) {
    const char *at = getenv("FAKE_CUDA_ARENA"); /* a fixed address: the same in every run */
    void *hint = at && *at ? (void *)(uintptr_t)strtoull(at, NULL, 0)
                           : (void *)(0x200000000000ULL + ((uint64_t)(getpid() % 1024) << 33));
    arena = mmap(hint, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
    if (arena == MAP_FAILED) { arena = NULL; return OUT_OF_MEMORY; }
    arena_top = arena;
  }
  if (arena_top + n + 512 > arena + ARENA) return OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)arena_top;
  arena_top += (n + 511) & ~511ULL;
  return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) { (void)p; return OK; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { memcpy((void *)(uintptr_t)d, h, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { memcpy(h, (void *)(uintptr_t)d, n); return OK; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr a, CUdeviceptr b, size_t n) { memmove((void *)(uintptr_t)a, (void *)(uintptr_t)b, n); return OK; }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)(uintptr_t)d, v, n); return OK; }
CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
  (void)prop, (void)option; *g = 65536; return OK;
}
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long f) {
  (void)align, (void)f;
  void *m = mmap((void *)(uintptr_t)addr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return OK;
}
CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { return munmap((void *)(uintptr_t)p, n) ? INVALID_VALUE : OK; }
CUresult cuMemCreate(unsigned long long *h, size_t n, const void *prop, unsigned long long f) {
  (void)prop, (void)f; *h = n; return OK;
}
CUresult cuMemRelease(unsigned long long h) { (void)h; return OK; }
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, unsigned long long h, unsigned long long f) {
  (void)off, (void)h, (void)f;
  return mprotect((void *)(uintptr_t)p, n, PROT_READ | PROT_WRITE) ? INVALID_VALUE : OK;
}
CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
  madvise((void *)(uintptr_t)p, n, MADV_DONTNEED);
  return mprotect((void *)(uintptr_t)p, n, PROT_NONE) ? INVALID_VALUE : OK;
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const void *desc, size_t count) {
  (void)p, (void)n, (void)desc, (void)count; return OK;
}

/* ---- modules and functions ------------------------------------------------------------------ */
static CUresult load(module_t **m, const void *image) {
  char path[4096];
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic == 0xBA55ED50u) { /* a fatbin: the first entry holding a fake image (see fatbin.py) */
    const uint8_t *p = image;
    uint16_t hs;
    uint64_t fs;
    memcpy(&hs, p + 6, 2), memcpy(&fs, p + 8, 8);
    for (const uint8_t *e = p + hs; e + 64 <= p + hs + fs;) {
      uint32_t ehs, padded;
      memcpy(&ehs, e + 4, 4), memcpy(&padded, e + 8, 4);
      if (!strncmp((const char *)e + ehs, "KFFAKE ", 7)) return load(m, e + ehs);
      e += ehs + padded;
    }
    return INVALID_IMAGE;
  }
  if (strncmp(image, "KFFAKE ", 7) || sscanf((const char *)image + 7, "%4095s", path) != 1)
    return INVALID_IMAGE;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return INVALID_IMAGE;
  if (!(*m = handle(&mods, sizeof **m))) return OUT_OF_MEMORY;
  (*m)->lib = lib, (*m)->gen = ctx_gen;
  return OK;
}
CUresult cuModuleLoadData(module_t **m, const void *image) {
  return capture_forbids() ? CAPTURE_UNSUPPORTED : load(m, image);
}
CUresult cuModuleLoadDataEx(module_t **m, const void *image, unsigned n, int *o, void **v) {
  (void)n, (void)o, (void)v;
  return capture_forbids() ? CAPTURE_UNSUPPORTED : load(m, image);
}
CUresult cuLibraryLoadData(module_t **m, const void *image, int *jo, void **jv, unsigned nj,
                           int *lo, void **lv, unsigned nl) {
  (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
  return capture_forbids() ? CAPTURE_UNSUPPORTED : load(m, image);
}
CUresult cuModuleGetFunction(func_t **f, module_t *m, const char *name) {
  char *pname = malloc(strlen(name) + 8); /* names of any length (long templated ones) */
  if (!pname) return OUT_OF_MEMORY;
  sprintf(pname, "%s_params", name);
  kernel_t k = (kernel_t)dlsym(m->lib, name);
  const char *const *params = dlsym(m->lib, pname);
  free(pname);
  if (!k || !params) return NOT_FOUND;
  func_t *fn = handle(&funcs, sizeof *fn);
  if (!fn) return OUT_OF_MEMORY;
  fn->fn = k;
  fn->mod = m, fn->gen = m->gen;
  fn->name = strdup(name);
  size_t off = 0;
  for (const char *s = *params; *s && fn->n < 32; s += strcspn(s, ",") + (s[strcspn(s, ",")] != 0)) {
    size_t size = strtoul(s, NULL, 10), align = size >= 8 ? 8 : size;
    off = (off + align - 1) / align * align;
    fn->off[fn->n] = off, fn->size[fn->n++] = size;
    off += size;
  }
  *f = fn;
  return OK;
}
CUresult cuLibraryGetKernel(func_t **f, module_t *m, const char *name) { return cuModuleGetFunction(f, m, name); }
CUresult cuKernelGetFunction(func_t **f, func_t *k) { *f = k; return OK; }
CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, module_t *m, const char *name) {
  void *g = dlsym(m->lib, name);
  char sname[300];
  snprintf(sname, sizeof sname, "%s_size", name);
  const size_t *size = dlsym(m->lib, sname);
  if (!g || !size) return NOT_FOUND;
  *p = (CUdeviceptr)(uintptr_t)g;
  if (n) *n = *size;
  return OK;
}
CUresult cuFuncGetModule(module_t **m, func_t *f) { if (!f->mod) return INVALID_HANDLE; *m = f->mod; return OK; }
/* an unloaded module's functions cannot be launched any more (CUDA_ERROR_INVALID_HANDLE) */
CUresult cuModuleUnload(module_t *m) { m->unloaded = 1; return OK; }
CUresult cuFuncGetName(const char **name, func_t *f) { *name = f->name; return OK; }
CUresult cuKernelGetName(const char **name, func_t *f) { *name = f->name; return OK; }
CUresult cuFuncGetParamInfo(func_t *f, size_t i, size_t *off, size_t *size) {
  if ((int)i >= f->n) return INVALID_VALUE;
  *off = f->off[i], *size = f->size[i];
  return OK;
}
CUresult cuKernelGetParamInfo(func_t *f, size_t i, size_t *off, size_t *size) {
  return cuFuncGetParamInfo(f, i, off, size);
}
#include "fake_attrs.c" /* function attributes: cuFuncSetAttribute and the like */
/* stream capture: launches on the capturing stream are recorded into a graph, which
 * cuGraphLaunch runs (an instantiated graph is the graph itself) */
typedef struct { func_t *f; unsigned grid[3], block[3]; uint8_t *p; } node_t;
typedef struct { node_t *nodes; int n; } graph_t;
static void *capturing;
static graph_t *capture;
static int capture_mode, invalidated; /* the capture's mode: 0 global, 1 thread-local, 2 relaxed */
static __thread int thread_mode;      /* this thread's interaction mode (global by default) */
static __thread char me;              /* this thread, by the address of its own variable */
static const char *capture_thread;
static CUresult capture_forbids(void) {
  if (!capturing || thread_mode == 2 ||
      (capture_thread == &me ? capture_mode == 2 : capture_mode != 0))
    return OK;
  invalidated = 1;
  return CAPTURE_UNSUPPORTED;
}
CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
  int old = thread_mode;
  thread_mode = *mode, *mode = old;
  return OK;
}
CUresult cuStreamBeginCapture_v2(void *s, int mode) {
  if (!s || capturing) return INVALID_VALUE;
  capturing = s, capture = calloc(1, sizeof *capture);
  capture_mode = mode, capture_thread = &me, invalidated = 0;
  return OK;
}
CUresult cuStreamEndCapture(void *s, graph_t **g) {
  if (!s || s != capturing) return INVALID_VALUE;
  *g = invalidated ? NULL : capture, capturing = NULL, capture = NULL;
  return invalidated ? CAPTURE_INVALIDATED : OK;
}
CUresult cuStreamIsCapturing(void *s, int *status) { *status = s && s == capturing; return OK; }
CUresult cuGraphInstantiateWithFlags(graph_t **exec, graph_t *g, unsigned long long f) {
  (void)f; *exec = g; return OK;
}
static CUresult record_node(func_t *f, const unsigned *grid, const unsigned *block, void **params) {
  node_t *a = realloc(capture->nodes, (size_t)(capture->n + 1) * sizeof *a);
  if (!a) return OUT_OF_MEMORY;
  capture->nodes = a;
  node_t *nd = &a[capture->n++];
  size_t total = f->n ? f->off[f->n - 1] + f->size[f->n - 1] : 1;
  nd->f = f, nd->p = malloc(total);
  memcpy(nd->grid, grid, sizeof nd->grid), memcpy(nd->block, block, sizeof nd->block);
  for (int i = 0; i < f->n; i++) memcpy(nd->p + f->off[i], params[i], f->size[i]);
  return OK;
}
static void trace(const func_t *f) {
  static int fd = -2; /* -2: FAKE_CUDA_TRACE not read yet, -1: none */
  if (fd == -2) {
    const char *path = getenv("FAKE_CUDA_TRACE");
    fd = path && *path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  }
  if (fd < 0) return;
  char line[512];
  int n = snprintf(line, sizeof line, "%s\n", f->name);
  if (n > 0 && write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0)
    fd = -1;
}
CUresult cuGraphLaunch(graph_t *g, void *s) {
  (void)s;
  for (int i = 0; g && i < g->n; i++) {
    void *params[32];
    for (int k = 0; k < g->nodes[i].f->n; k++) params[k] = g->nodes[i].p + g->nodes[i].f->off[k];
    trace(g->nodes[i].f);
    g->nodes[i].f->fn(g->nodes[i].grid, g->nodes[i].block, params);
  }
  return OK;
}

CUresult cuLaunchKernel(func_t *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, void *s, void **params,
                        void **extra) {
  (void)s;
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  void *from_buffer[32];
  if (!params && extra) { /* CU_LAUNCH_PARAM_BUFFER_POINTER: one buffer in the kernel's layout */
    uint8_t *buf = NULL;
    for (void **e = extra; *e; e += 2)
      if ((uintptr_t)e[0] == 1) buf = e[1];
    if (!buf) return INVALID_VALUE;
    for (int i = 0; i < f->n; i++) from_buffer[i] = buf + f->off[i];
    params = from_buffer;
  }
  if (gx * bx > 1u << 24 || bx * by * bz > 1024 || shmem > dyn_limit(f)) return INVALID_VALUE;
  if (ctx_destroyed || (f->mod && f->gen != ctx_gen)) return INVALID_CONTEXT;
  if (f->mod && f->mod->unloaded) return INVALID_HANDLE;
  if (s && s == capturing) return record_node(f, grid, block, params);
  trace(f);
  f->fn(grid, block, params);
  return OK;
}
CUresult cuLaunchKernel_ptsz(func_t *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shmem, void *s, void **params,
                             void **extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}
CUresult cuLaunchKernelEx(const launch_config_t *c, func_t *f, void **params, void **extra) {
  return cuLaunchKernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shmem, c->stream, params, extra);
}

/* ---- device, context, streams, events ------------------------------------------------------- */
static int ctx_token;
CUresult cuInit(unsigned f) { (void)f; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGet(int *d, int i) { *d = i; return i == 0 ? OK : INVALID_VALUE; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGetName(char *s, int n, int d) { (void)d; snprintf(s, (size_t)n, "kernforge fake device"); return OK; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
  (void)d; *v = attr == 75 ? 9 : attr == 16 ? 4 : attr == 1 ? 1024 : 0; return OK;
}
static int primary_refs;
CUresult cuDevicePrimaryCtxRetain(void **c, int d) {
  (void)d; *c = &ctx_token; ctx_destroyed = 0, primary_refs++; return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int d) {
  (void)d; if (primary_refs > 0 && !--primary_refs) ctx_end(); return OK;
}
CUresult cuDevicePrimaryCtxReset_v2(int d) { (void)d; primary_refs = 0, ctx_end(); return OK; }
CUresult cuDevicePrimaryCtxGetState(int d, unsigned *flags, int *active) {
  (void)d; *flags = 0, *active = primary_refs > 0 && !ctx_destroyed; return OK;
}
CUresult cuCtxCreate_v2(void **c, unsigned f, int d) { (void)f, (void)d; *c = &ctx_token; ctx_destroyed = 0; return OK; }
CUresult cuCtxDestroy_v2(void *c) { (void)c; primary_refs = 0, ctx_end(); return OK; }
CUresult cuCtxPushCurrent_v2(void *c) { (void)c; return OK; }
CUresult cuCtxPopCurrent_v2(void **c) { if (c) *c = &ctx_token; return OK; }
CUresult cuCtxSetCurrent(void *c) { (void)c; return OK; }
CUresult cuCtxGetCurrent(void **c) { *c = &ctx_token; return OK; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return OK; }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuStreamCreate(void **s, unsigned f) { (void)f; *s = malloc(1); return *s ? OK : OUT_OF_MEMORY; }
CUresult cuStreamDestroy_v2(void *s) { free(s); return OK; }
CUresult cuStreamSynchronize(void *s) { (void)s; return OK; }
CUresult cuStreamQuery(void *s) { (void)s; return OK; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s, (void)e, (void)f; return OK; }
CUresult cuEventQuery(void *e) { (void)e; return OK; }
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) { (void)s; return cuMemcpyDtoH_v2(h, d, n); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) { (void)s; return cuMemcpyHtoD_v2(d, h, n); }
CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *data) { (void)s; fn(data); return OK; }
/* a driver function no interposer knows, with arguments on the stack and in vector registers
 * (what a flushing thunk must pass on untouched) */
CUresult cuFakeManyArgs(long a, long b, long c, long d, long e, long f, long g, long h, double x,
                        float y, double *out) {
  *out = a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * x + 10 * y;
  return OK;
}
/* a driver function no interposer knows: an FNV-1a hash of n bytes of device memory */
CUresult cuFakeObserve(CUdeviceptr p, size_t n, unsigned long long *hash) {
  unsigned long long h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)(uintptr_t)p)[i]) * 0x100000001b3ULL;
  *hash = h;
  return OK;
}
CUresult cuEventCreate(double **e, unsigned f) { (void)f; *e = calloc(1, sizeof **e); return OK; }
CUresult cuEventRecord(double *e, void *s) {
  (void)s;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  *e = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
  return OK;
}
CUresult cuEventSynchronize(double *e) { (void)e; return OK; }
CUresult cuEventElapsedTime(float *ms, double *a, double *b) { *ms = (float)(*b - *a); return OK; }
CUresult cuEventDestroy_v2(double *e) { free(e); return OK; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "fake driver error"; return OK; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_FAKE"; return OK; }

/* cuGetProcAddress: base name -> the versioned entry point, as the real driver answers */
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *st) {
  (void)ver;
  static const char *versioned[] = {"cuMemAlloc", "cuMemFree", "cuMemcpyHtoD", "cuMemcpyDtoH",
                                    "cuMemcpyDtoD", "cuMemsetD8", "cuCtxCreate", "cuModuleGetGlobal",
                                    "cuEventDestroy", "cuDevicePrimaryCtxRelease", "cuGetProcAddress",
                                    "cuCtxDestroy", "cuCtxPushCurrent", "cuCtxPopCurrent",
                                    "cuStreamDestroy", "cuMemcpyDtoHAsync", "cuMemcpyHtoDAsync",
                                    "cuDevicePrimaryCtxReset", "cuStreamBeginCapture"};
  char name[256];
  snprintf(name, sizeof name, "%s", sym);
  for (size_t i = 0; i < sizeof versioned / sizeof *versioned; i++)
    if (!strcmp(sym, versioned[i])) snprintf(name, sizeof name, "%s_v2", sym);
  if ((flags & 2) && !strcmp(sym, "cuLaunchKernel")) snprintf(name, sizeof name, "cuLaunchKernel_ptsz");
  static void *self;
  if (!self) self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  *pfn = self ? dlsym(self, name) : NULL;
  if (st) *st = *pfn ? 0 : 1;
  return *pfn ? OK : NOT_FOUND;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
  return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
