/* kernforge driver interposer: NVRTC, so that a kernel compiled at run time keeps its source.
 *
 * When the recorded process compiles with NVRTC -- a libnvrtc it dlopens and reaches through
 * dlsym (CuPy), or one it links directly -- nvrtcCreateProgram, nvrtcAddNameExpression,
 * nvrtcCompileProgram, nvrtcGetLoweredName and nvrtcGetCUBIN/nvrtcGetPTX are interposed: the
 * program's source, headers, options and name expressions are kept, and the id of the image
 * NVRTC hands back (kf_image_id of its bytes: the id cuModuleLoadData* gives the same bytes) is
 * linked to them. A recorded launch of a kernel loaded from such an image gets nvrtc.json in
 * its spool unit. The NVRTC prototypes are declared here: no CUDA headers are needed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kf.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_ERROR_BUILTIN_OPERATION_FAILURE 7

typedef struct kf_prog {
  nvrtcProgram handle; /* NULL once destroyed: the record stays for the images it made */
  char *src, *name;
  int nheaders, nopts, nexpr;
  char **headers, **includes, **opts, **exprs, **lowered;
  char library[1024];
  int major, minor;
  struct kf_prog *next;
} kf_prog_t;

typedef struct kf_out {
  uint64_t image;
  int ptx;
  kf_prog_t *prog;
  struct kf_out *next;
} kf_out_t;

static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;
static kf_prog_t *progs;
static kf_out_t *outs;

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static char **dup_all(int n, const char *const *v) {
  if (n <= 0 || !v) return NULL;
  char **out = calloc((size_t)n, sizeof *out);
  for (int i = 0; out && i < n; i++) out[i] = dup_or_null(v[i]);
  return out;
}

static kf_prog_t *find(nvrtcProgram h) { /* caller holds nv_lock */
  for (kf_prog_t *p = progs; p; p = p->next)
    if (p->handle == h) return p;
  return NULL;
}

/* ---- the real NVRTC ------------------------------------------------------------------------- */
static void *real_nvrtcCreateProgram, *real_nvrtcDestroyProgram, *real_nvrtcCompileProgram,
    *real_nvrtcAddNameExpression, *real_nvrtcGetLoweredName, *real_nvrtcGetCUBIN,
    *real_nvrtcGetPTX;

/* a direct call (a program linked against libnvrtc binds to these wrappers): the next
 * definition, or the one of a libnvrtc already loaded with RTLD_LOCAL */
static void *nv_real(void **slot, const char *name, void *self) {
  if (*slot) return *slot;
  static const char *sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                                  "libnvrtc.so"};
  void *p = kf_real_dlsym(RTLD_NEXT, name);
  for (size_t i = 0; (!p || p == self) && i < sizeof sonames / sizeof *sonames; i++) {
    void *h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
    if (h) p = kf_real_dlsym(h, name);
  }
  if (p == self) p = NULL;
  if (p) *slot = p;
  return p;
}

#define REAL(name, type) \
  __typeof__(type) real = (__typeof__(type))nv_real(&real_##name, #name, (void *)name); \
  if (!real) return NVRTC_ERROR_BUILTIN_OPERATION_FAILURE

static void identify(kf_prog_t *p, void *fn) {
  Dl_info info;
  if (!dladdr(fn, &info) || !info.dli_fname) return;
  snprintf(p->library, sizeof p->library, "%s", info.dli_fname);
  void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  nvrtcResult (*version)(int *, int *) = h ? (nvrtcResult (*)(int *, int *))kf_real_dlsym(
      h, "nvrtcVersion") : NULL;
  if (version) version(&p->major, &p->minor);
}

/* ---- the wrappers ----------------------------------------------------------------------------- */
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int nh,
                               const char *const *headers, const char *const *includes) {
  REAL(nvrtcCreateProgram, nvrtcResult (*)(nvrtcProgram *, const char *, const char *, int,
                                           const char *const *, const char *const *));
  nvrtcResult rc = real(prog, src, name, nh, headers, includes);
  if (rc || !prog || !src || !kf_recording()) return rc;
  kf_prog_t *p = calloc(1, sizeof *p);
  if (!p) return rc;
  p->handle = *prog;
  p->src = strdup(src);
  p->name = dup_or_null(name);
  p->nheaders = nh > 0 && headers ? nh : 0;
  p->headers = dup_all(p->nheaders, headers);
  p->includes = dup_all(p->nheaders, includes);
  identify(p, (void *)real);
  pthread_mutex_lock(&nv_lock);
  p->next = progs;
  progs = p;
  pthread_mutex_unlock(&nv_lock);
  return rc;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  REAL(nvrtcDestroyProgram, nvrtcResult (*)(nvrtcProgram *));
  pthread_mutex_lock(&nv_lock);
  kf_prog_t *p = prog ? find(*prog) : NULL;
  if (p) p->handle = NULL;
  pthread_mutex_unlock(&nv_lock);
  return real(prog);
}

nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char *expr) {
  REAL(nvrtcAddNameExpression, nvrtcResult (*)(nvrtcProgram, const char *));
  nvrtcResult rc = real(prog, expr);
  pthread_mutex_lock(&nv_lock);
  kf_prog_t *p = rc || !expr ? NULL : find(prog);
  char **e = p ? realloc(p->exprs, (size_t)(p->nexpr + 1) * sizeof *e) : NULL;
  char **l = e ? realloc(p->lowered, (size_t)(p->nexpr + 1) * sizeof *l) : NULL;
  if (e) p->exprs = e;
  if (l) {
    p->lowered = l;
    p->exprs[p->nexpr] = strdup(expr), p->lowered[p->nexpr] = NULL;
    p->nexpr++;
  }
  pthread_mutex_unlock(&nv_lock);
  return rc;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int nopts, const char *const *opts) {
  REAL(nvrtcCompileProgram, nvrtcResult (*)(nvrtcProgram, int, const char *const *));
  nvrtcResult rc = real(prog, nopts, opts);
  pthread_mutex_lock(&nv_lock);
  kf_prog_t *p = rc ? NULL : find(prog);
  if (p) {
    for (int i = 0; i < p->nopts; i++) free(p->opts[i]);
    free(p->opts);
    p->nopts = nopts > 0 && opts ? nopts : 0;
    p->opts = dup_all(p->nopts, opts);
  }
  pthread_mutex_unlock(&nv_lock);
  return rc;
}

nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *expr, const char **lowered) {
  REAL(nvrtcGetLoweredName, nvrtcResult (*)(nvrtcProgram, const char *, const char **));
  nvrtcResult rc = real(prog, expr, lowered);
  pthread_mutex_lock(&nv_lock);
  kf_prog_t *p = rc || !expr || !lowered || !*lowered ? NULL : find(prog);
  for (int i = 0; p && i < p->nexpr; i++)
    if (!strcmp(p->exprs[i], expr) && !p->lowered[i]) p->lowered[i] = strdup(*lowered);
  pthread_mutex_unlock(&nv_lock);
  return rc;
}

static void link_output(nvrtcProgram prog, const char *image, int ptx) {
  uint64_t id = kf_image_id(image);
  pthread_mutex_lock(&nv_lock);
  kf_prog_t *p = find(prog);
  kf_out_t *o = p && id ? calloc(1, sizeof *o) : NULL;
  if (o) {
    *o = (kf_out_t){id, ptx, p, outs};
    outs = o;
  }
  pthread_mutex_unlock(&nv_lock);
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) {
  REAL(nvrtcGetCUBIN, nvrtcResult (*)(nvrtcProgram, char *));
  nvrtcResult rc = real(prog, cubin);
  if (!rc && cubin && kf_recording()) link_output(prog, cubin, 0);
  return rc;
}

nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx) {
  REAL(nvrtcGetPTX, nvrtcResult (*)(nvrtcProgram, char *));
  nvrtcResult rc = real(prog, ptx);
  if (!rc && ptx && kf_recording()) link_output(prog, ptx, 1);
  return rc;
}

/* dlsym(handle, "nvrtc..."): the wrapper, the library's function kept; a second libnvrtc in
 * the same process (another version) is left alone rather than mixed with the first */
void *kf_nvrtc_dlsym(const char *name, void *real) {
  static const struct { const char *name; void **slot; void *wrapper; } table[] = {
#define T(n) {#n, &real_##n, (void *)n}
      T(nvrtcCreateProgram), T(nvrtcDestroyProgram), T(nvrtcCompileProgram),
      T(nvrtcAddNameExpression), T(nvrtcGetLoweredName), T(nvrtcGetCUBIN), T(nvrtcGetPTX),
#undef T
  };
  if (!kf_recording()) return real;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
    if (strcmp(table[i].name, name)) continue;
    if (real == table[i].wrapper) return real;
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(table[i].slot, &expected, real, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST) && expected != real)
      return real;
    return table[i].wrapper;
  }
  return real;
}

/* ---- the unit's nvrtc.json -------------------------------------------------------------------- */
static void put_opt_str(buf_t *b, const char *s) {
  if (s) kf_put_str(b, s);
  else kf_put(b, "null");
}

int kf_nvrtc_write(int dir, uint64_t image) {
  pthread_mutex_lock(&nv_lock);
  kf_out_t *o = outs;
  while (o && o->image != image) o = o->next;
  if (!o) { pthread_mutex_unlock(&nv_lock); return 0; }
  kf_prog_t *p = o->prog;
  buf_t b = {malloc(8192), 0, 8192};
  if (!b.s) { pthread_mutex_unlock(&nv_lock); return -1; }
  kf_put(&b, "{\"format\": \"kernforge-nvrtc\", \"version\": 1, \"program\": ");
  put_opt_str(&b, p->name);
  kf_put(&b, ", \"output\": \"%s\", \"library\": ", o->ptx ? "ptx" : "cubin");
  kf_put_str(&b, p->library);
  kf_put(&b, ", \"nvrtc_version\": [%d, %d], \"options\": [", p->major, p->minor);
  for (int i = 0; i < p->nopts; i++) {
    kf_put(&b, i ? ", " : "");
    put_opt_str(&b, p->opts[i]);
  }
  kf_put(&b, "], \"name_expressions\": [");
  for (int i = 0; i < p->nexpr; i++) {
    kf_put(&b, "%s{\"expression\": ", i ? ", " : "");
    put_opt_str(&b, p->exprs[i]);
    kf_put(&b, ", \"lowered\": ");
    put_opt_str(&b, p->lowered[i]);
    kf_put(&b, "}");
  }
  kf_put(&b, "], \"headers\": [");
  for (int i = 0; i < p->nheaders; i++) {
    kf_put(&b, "%s{\"name\": ", i ? ", " : "");
    put_opt_str(&b, p->includes ? p->includes[i] : NULL);
    kf_put(&b, ", \"source\": ");
    put_opt_str(&b, p->headers ? p->headers[i] : NULL);
    kf_put(&b, "}");
  }
  kf_put(&b, "], \"source\": ");
  kf_put_str(&b, p->src);
  kf_put(&b, "}\n");
  pthread_mutex_unlock(&nv_lock);
  int rc = !b.s || kf_write_at(dir, "nvrtc.json", b.s, b.n) ? -1 : 0;
  free(b.s);
  return rc;
}
