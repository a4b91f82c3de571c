/* kernforge driver interposer: deploy tuned kernels into an unchanged program.
 *
 * KERNFORGE_DEPLOY names a text file written by kernforge (deploy/native.py), one entry a line,
 * fields separated by tabs:
 *   name  grid  block  shmem  key  image  entry  jit  new_grid  new_block  new_shmem  carveout
 *   [source [fuse]]
 * grid/block are "x,y,z"; key is the hex of the launch's parameter bytes, "xx" for bytes not
 * compared (pointers), or "*" for any; image a file path; jit "id=value,..." (the CUjit_option
 * ids kernforge writes: 0, 1, 7, 14) or "-"; carveout a percentage, or -1 to leave it; source
 * the id (16 hex digits, FNV-1a of its bytes, as kf_image_id) of the image the recorded kernel
 * came from, or "-" (absent in lines written before it existed) for any; fuse "fuse:T:IN:OUT"
 * (a fused entry, kf_defer.c) or "-" (absent: a one-launch replacement), or "fuse:T:IN:OUT:C"
 * followed by C (1 to 8) companions of four fields each, or "fuse:T:IN:OUT:C:W" and W (5 or 6)
 * each:
 *   cname  cparams  in_slots  out_slots  [cimage  [cgeometry]]
 * the launches that follow the fused kernel's in every step of the loop, in order: the
 * companion's mangled name, its parameter bytes as hex ("-" for none), and the byte offsets
 * ("o,o,..." or "-") of the 8-byte words in them that hold the step's IN and OUT pointers (the
 * fused kernel's launch's of the same step); every other byte must equal cparams. cimage is
 * the id of the image the companion was recorded from, as source ("-", or four fields: any);
 * a kernel of its name from another image (another dtype's module) is not the companion.
 * cgeometry is "gx,gy,gz/bx,by,bz/shmem", the companion's recorded grid, block and dynamic
 * shared memory, or "-" for any: a launch of it with another geometry is not the companion.
 * After field 14 and the companions, tagged fields (kf_guard.c): "attrs:R:HEX", the launch
 * attributes launch R of a fused entry's step was recorded with (none when absent), and
 * "guard:IMAGE:SIZE:HASH:NAME", a module global the entry's kernel baked in (any entry; a
 * one-launch line then has "-" as field 14).
 * A launch of `name` from that image with the same geometry and key runs `entry` of `image`
 * (loaded once per context with those JIT options, and again in a context that has the handle
 * of one that ended: kf_ctx.c) with the new geometry and the same parameters. The source
 * image tells apart kernels of one name compiled for other types (CuPy builds an elementwise
 * kernel per dtype under one name, with the same parameter bytes).
 * A fused entry's `entry` runs T steps of a time loop at once (each step its kernel's launch and
 * its companions): steps that match it are held and every T of them run as one launch
 * (kf_defer.c); KERNFORGE_FUSE=0 ignores fused entries.
 * Counts go to
 * KERNFORGE_DEPLOY_LOG (JSON) when a process that used the driver exits through exit(); a
 * process that never looked up a driver function writes nothing.
 *
 * Whatever is wrong, the program runs its original kernels and is told once per problem: the
 * file is read once (pthread_once: no launch sees half of it), from a regular file only, whole
 * (no line or name is cut); a line with any field out of its range is skipped (one message
 * for all of them); an image that cannot be loaded disables its entry at the first attempt.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kf_deploy.h"

static kf_entry_t *entries;       /* in the file's order */
static size_t nentries, *by_name; /* entry indices by name, then by line (by_name_cmp) */
static const char **comp_names;   /* the companions' names, sorted */
static size_t ncomp_names;
static size_t malformed, nfused, nguarded;
static unsigned long fallbacks;
static int state, fuse_on;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread int loading;

static void parse_all(const char *path, char *text, size_t size) {
  size_t cap = 0, line_no = 0, first_bad = 0;
  const char *first_why = NULL;
  for (char *p = text, *end = text + size; p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char *line = p;
    p += len + 1, line_no++;
    line[len] = '\0'; /* the newline, or the terminator read_regular added */
    if (!len || line[0] == '#') continue;
    kf_entry_t e;
    const char *why = memchr(line, '\0', len) ? "it holds a NUL byte" : NULL;
    if (!why && nentries == cap) {
      kf_entry_t *a = realloc(entries, (cap = cap ? 2 * cap : 16) * sizeof *a);
      if (a) entries = a; else why = "no memory", cap = nentries;
    }
    if (!why && (why = kf_parse_entry(line, &e))) kf_entry_free(&e);
    if (!why) e.line = line_no, nfused += e.fuse > 0, nguarded += e.nguard > 0;
    if (!why) entries[nentries++] = e;
    else if (!malformed++) first_bad = line_no, first_why = why;
  }
  if (malformed)
    kf_log("deployment %s: %zu malformed line(s) skipped (line %zu: %s); their kernels run "
           "unchanged", path, malformed, first_bad, first_why);
  kf_unfused_link(entries, nentries, path);
}

/* whether entry i is a fused entry's one-launch entry (the line after it, kf_unfused.c) */
static int is_one(size_t i) { return i > 0 && entries[i - 1].one == &entries[i]; }

/* by name; then the kernel's own lines in the file's order, and after them the one-launch
 * entries of its fused lines (a fused line's helper never shadows a later line of the kernel) */
static int by_name_cmp(const void *a, const void *b) {
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  int c = strcmp(entries[i].name, entries[j].name);
  if (!c) c = is_one(i) - is_one(j);
  return c ? c : (i > j) - (i < j);
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void index_companions(void) {
  size_t k = 0;
  for (size_t i = 0; i < nentries; i++) k += entries[i].ncomp;
  if (!k || !(comp_names = malloc(k * sizeof *comp_names))) return; /* none held: all run */
  for (size_t i = 0; i < nentries; i++)
    for (unsigned j = 0; j < entries[i].ncomp; j++)
      comp_names[ncomp_names++] = entries[i].comp[j].name;
  qsort(comp_names, ncomp_names, sizeof *comp_names, name_cmp);
}

static void load(void) {
  loading = 1;
  const char *path = getenv("KERNFORGE_DEPLOY"), *why = NULL;
  size_t size = 0;
  char *text = path && *path ? kf_read_regular(path, SPEC_LIMIT, &size, &why) : NULL;
  if (path && *path && !text)
    kf_log("cannot read the deployment %s: it %s; nothing is replaced", path, why);
  if (text) parse_all(path, text, size);
  free(text);
  if (nentries && (by_name = malloc(nentries * sizeof *by_name))) {
    for (size_t i = 0; i < nentries; i++) by_name[i] = i;
    qsort(by_name, nentries, sizeof *by_name, by_name_cmp);
    index_companions();
  } else if (nentries) {
    kf_log("deployment %s: no memory to index it; nothing is replaced", path);
    nentries = 0;
  } else if (text && !malformed) {
    kf_log("deployment %s holds no entries; nothing is replaced", path);
  }
  state = nentries > 0;
  fuse_on = state && nfused && kf_env_ll("KERNFORGE_FUSE", 1, 0, 1);
  loading = 0;
}

int kf_deploy_fusing(void) { return kf_deploy_active() && fuse_on; }

int kf_deploy_guarded(void) { return kf_deploy_active() && nguarded; }

/* read once, by the first thread that asks; the others wait for the whole deployment */
int kf_deploy_active(void) {
  if (loading) return 0; /* a lookup made while this thread reads it */
  pthread_once(&once, load);
  return state;
}

int kf_deploy_covers(kf_fn_t *fn) {
  if (!fn->deployed) {
    size_t lo = 0, hi = nentries;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (strcmp(entries[by_name[mid]].name, fn->name) < 0) lo = mid + 1; else hi = mid;
    }
    size_t k = lo;
    while (k < nentries && !strcmp(entries[by_name[k]].name, fn->name)) k++;
    fn->dep_first = lo, fn->dep_count = k - lo;
    fn->companion = ncomp_names &&
        bsearch(&fn->name, comp_names, ncomp_names, sizeof *comp_names, name_cmp);
    fn->deployed = k > lo || fn->companion ? 1 : -1;
  }
  return fn->deployed > 0;
}

static int key_matches(const kf_entry_t *e, const uint8_t *p, size_t n) {
  if (e->any_key) return 1;
  if (n != e->keylen) return 0;
  for (size_t i = 0; i < n; i++)
    if (e->mask[i] && p[i] != e->key[i]) return 0;
  return 1;
}

/* ---- replacing launches ---------------------------------------------------------------------- */
static CUfunction load_entry(kf_entry_t *e, const char **why) {
  size_t n = 0;
  char *buf = kf_read_regular(e->image, IMAGE_LIMIT, &n, why);
  if (!buf) return NULL;
  void *vals[MAX_JIT];
  for (int i = 0; i < e->njit; i++) vals[i] = (void *)(uintptr_t)e->jitv[i];
  CUmodule m = NULL;
  CUfunction f = NULL;
  CUresult rc = kf_drv.cuModuleLoadDataEx(&m, buf, (unsigned)e->njit, e->jit, vals);
  free(buf);
  if (rc) { *why = "the driver refuses it"; return NULL; }
  if (kf_drv.cuModuleGetFunction(&f, m, e->entry) || !f) {
    *why = "it has no such function";
    return NULL;
  }
  if (e->carveout >= 0 && kf_drv.cuFuncSetAttribute)
    kf_drv.cuFuncSetAttribute(f, 9, e->carveout); /* PREFERRED_SHARED_MEMORY_CARVEOUT */
  /* launched with more than 48 KiB of dynamic shared memory, it runs only with the limit
   * raised (MAX_DYNAMIC_SHARED_SIZE_BYTES), as the program raised it on the original */
  if (e->nshmem > 48 * 1024 &&
      (!kf_drv.cuFuncSetAttribute || kf_drv.cuFuncSetAttribute(f, 8, (int)e->nshmem))) {
    *why = "the driver refuses its dynamic shared memory";
    return NULL;
  }
  return f;
}

CUfunction kf_entry_function(kf_entry_t *e, const char **why) {
  if (!kf_drv.cuModuleLoadDataEx || !kf_drv.cuModuleGetFunction) {
    *why = "there is no CUDA driver to load it";
    return NULL;
  }
  CUcontext c = NULL;
  if (kf_drv.cuCtxGetCurrent && kf_drv.cuCtxGetCurrent(&c)) c = NULL;
  int i = 0;
  for (; i < MAX_CTX && e->fn[i]; i++)
    if (e->ctx[i] == c) return e->fn[i];
  if (i == MAX_CTX) {
    *why = "it is used in more than 16 contexts";
    return NULL;
  }
  /* A module load is a "potentially unsafe" call under stream capture: in the default
   * (global) interaction mode it fails while this thread, or another in global mode, captures
   * a stream, and it invalidates that capture, the program's graph. An entry's first launch
   * may come inside one (a captured launch, or a flush of held launches that runs a
   * one-launch entry), so this thread loads in relaxed mode (as kf_guard.c reads a global). */
  int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
  int swapped = kf_drv.cuThreadExchangeStreamCaptureMode &&
                !kf_drv.cuThreadExchangeStreamCaptureMode(&mode);
  CUfunction f = load_entry(e, why);
  if (swapped) kf_drv.cuThreadExchangeStreamCaptureMode(&mode);
  CUdevice d = -1;
  if (f && (!kf_drv.cuCtxGetDevice || kf_drv.cuCtxGetDevice(&d))) d = -1;
  if (f) e->ctx[i] = c, e->fn[i] = f, e->dev[i] = d;
  return f;
}

/* the functions loaded in contexts that ended are dropped (the rest keep their order) */
void kf_deploy_forget(CUcontext c, CUdevice dev) {
  if (!kf_deploy_active()) return;
  for (size_t k = 0; k < nentries; k++) {
    kf_entry_t *e = &entries[k];
    int kept = 0;
    for (int i = 0; i < MAX_CTX && e->fn[i]; i++) {
      int gone = c ? e->ctx[i] == c : dev < 0 || e->dev[i] < 0 || e->dev[i] == dev;
      if (!gone) e->ctx[kept] = e->ctx[i], e->fn[kept] = e->fn[i], e->dev[kept++] = e->dev[i];
    }
    for (int i = kept; i < MAX_CTX; i++) e->ctx[i] = NULL, e->fn[i] = NULL;
  }
}

uint64_t kf_launch_image(const kf_launch_t *l, kf_fn_t *fn) {
  if (!fn->image_asked) {
    kf_image_ref_t img;
    kf_fn_image(l->f, &img);
    fn->image = img.image, fn->image_asked = 1;
  }
  return fn->image;
}

int kf_comp_image_ok(const kf_comp_t *k, const kf_launch_t *l, kf_fn_t *fn) {
  static int said;
  if (!k->image) return 1;
  uint64_t id = kf_launch_image(l, fn);
  if (!id)
    kf_say_once(&said, "deploy: which image the companion %s comes from is not known; its "
                "steps run unfused", k->name);
  return id == k->image;
}

static int matches(const kf_entry_t *e, const kf_launch_t *l, const uint8_t *params, size_t n) {
  return !memcmp(e->grid, l->grid, sizeof e->grid) && !memcmp(e->block, l->block,
         sizeof e->block) && e->shmem == l->shmem && key_matches(e, params, n);
}

int kf_entry_applies(kf_entry_t *e, const kf_launch_t *l, kf_fn_t *fn, const uint8_t *p,
                     size_t n) {
  if (e->disabled || !matches(e, l, p, n)) return 0;
  if (e->source && kf_launch_image(l, fn) != e->source) { /* another image (a dtype) */
    if (!fn->image && !e->unknown_image++)
      kf_log("deploy: which image %s comes from is not known; it runs unchanged", e->name);
    return 0;
  }
  return 1;
}

CUfunction kf_entry_replacement(kf_entry_t *e, const kf_launch_t *l, kf_fn_t *fn,
                                int *look_on) {
  const char *why = NULL;
  *look_on = 0;
  if (e->nguard && !kf_guards_ok(e, l, fn, 0, &why)) { /* a baked-in global changed */
    kf_guard_refused(e, why, "unchanged");
    e->disabled = 1, *look_on = 1;
    return NULL;
  }
  CUfunction f = kf_entry_function(e, &why);
  if (!f) { /* once: the entry is off from now on */
    e->failed++, e->disabled = 1;
    kf_log("deploy: cannot load %s from %s: it %s; %s runs unchanged", e->entry, e->image,
           why, e->name);
  }
  return f;
}

kf_launch_t kf_swapped(const kf_launch_t *l, const kf_entry_t *e, CUfunction f) {
  kf_launch_t s = *l;
  s.f = f;
  memcpy(s.grid, e->ngrid, sizeof s.grid);
  memcpy(s.block, e->nblock, sizeof s.block);
  s.shmem = e->nshmem;
  return s;
}

/* called under kf_lock, after kf_deploy_covers(fn) */
int kf_deploy_try(kf_launch_t *l, kf_fn_t *fn, const uint8_t *params, size_t psize,
                  CUresult *rc, CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  if (fn->companion && fuse_on && kf_defer_companion(l, fn, params, psize, rc)) return 1;
  for (size_t j = 0; j < fn->dep_count; j++) {
    kf_entry_t *e = &entries[by_name[fn->dep_first + j]];
    if (!kf_entry_applies(e, l, fn, params, psize)) continue;
    if (e->fuse) { /* fused: held (kf_defer.c), unless fusion is off or it cannot be */
      if (fuse_on && kf_defer_launch(e, l, fn, params, psize, rc)) return 1;
      continue;
    }
    kf_defer_flush_locked();
    int look_on;
    CUfunction f = kf_entry_replacement(e, l, fn, &look_on);
    if (!f) {
      if (look_on) continue;
      break;
    }
    kf_launch_t swapped = kf_swapped(l, e, f);
    *rc = real(&swapped, ctx);
    if (*rc) { /* refused (e.g. a geometry this launch's attributes forbid): the original runs */
      if (!e->launch_failed++)
        kf_log("deploy: the tuned launch of %s failed (CUDA error %d); it runs unchanged",
               e->name, *rc);
      *rc = real(l, ctx);
      e->disabled = 1;
      return 1;
    }
    e->used++;
    return 1;
  }
  if (fn->dep_count) fallbacks++;
  return 0;
}

/* the counts as JSON (names escaped), written beside the log's path and renamed onto it */
void kf_deploy_report(void) {
  if (!state) return; /* never used the driver (a shell, a tool): its counts are not news */
  const char *path = getenv("KERNFORGE_DEPLOY_LOG");
  if (!path || !*path) return;
  struct stat st;
  if (!lstat(path, &st) && !S_ISREG(st.st_mode)) {
    kf_log("KERNFORGE_DEPLOY_LOG=%s is not a regular file; the deploy counts are not written",
           path);
    return;
  }
  buf_t b = {malloc(4096), 0, 4096};
  char *tmp = malloc(strlen(path) + 32);
  if (!b.s || !tmp) { free(b.s), free(tmp); return; }
  kf_put(&b, "{\"fallbacks\": %lu, \"malformed_lines\": %zu, \"fusion\": %s, "
         "\"fused_groups\": %lu, \"flushed_unfused\": %lu, \"flushed_one_launch\": %lu, "
         "\"entries\": [", fallbacks, malformed, kf_defer_enabled() ? "true" : "false",
         kf_defer_groups, kf_defer_unfused, kf_unfused_one);
  for (size_t i = 0; i < nentries; i++) {
    kf_put(&b, "%s{\"name\": ", i ? ", " : "");
    kf_put_str(&b, entries[i].name);
    kf_put(&b, ", \"replaced\": %lu, \"load_failures\": %lu, \"launch_failures\": %lu",
           entries[i].used, entries[i].failed, entries[i].launch_failed);
    if (entries[i].nguard)
      kf_put(&b, ", \"guards\": %u, \"guard_checks\": %lu, \"guard_refusals\": %lu",
             entries[i].nguard, entries[i].guard_checks, entries[i].guard_refused);
    if (entries[i].fuse)
      kf_put(&b, ", \"fuse\": %u, \"companions\": %u, \"fused_groups\": %lu, "
             "\"flushed_unfused\": %lu, \"flushed_one_launch\": %lu", entries[i].fuse,
             entries[i].ncomp, entries[i].groups, entries[i].unfused, entries[i].unfused_one);
    if (is_one(i)) kf_put(&b, ", \"one_launch\": true"); /* the fused entry before it's */
    kf_put(&b, "}");
  }
  kf_put(&b, "]}\n");
  sprintf(tmp, "%s.%d.tmp", path, (int)getpid());
  if (kf_write_at(AT_FDCWD, tmp, b.s, b.n) || rename(tmp, path)) {
    unlink(tmp);
    kf_log("cannot write the deploy counts to %s", path);
  }
  free(b.s), free(tmp);
}
