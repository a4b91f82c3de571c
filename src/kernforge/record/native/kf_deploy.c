/* kernforge driver interposer: deploy tuned kernels into an unchanged program.
 *
 * KERNFORGE_DEPLOY names a text file written by kernforge (deploy/native.py), one entry a line,
 * fields separated by tabs:
 *   name  grid  block  shmem  key  image  entry  jit  new_grid  new_block  new_shmem  carveout
 *   [source]
 * grid/block are "x,y,z"; key is the hex of the launch's parameter bytes, "xx" for bytes not
 * compared (pointers), or "*" for any; image a file path; jit "id=value,..." (CUjit_option
 * ids) or "-"; carveout a percentage, or -1 to leave it; source the id (16 hex digits, FNV-1a
 * of its bytes, as kf_image_id) of the image the recorded kernel came from, or "-" (absent in
 * lines written before it existed) for any.
 * A launch of `name` from that image with the same geometry and key runs `entry` of `image`
 * (loaded once per context with those JIT options) with the new geometry and the same
 * parameters. The source image tells apart kernels of one name compiled for other types (CuPy
 * builds an elementwise kernel per dtype under one name, with the same parameter bytes). Counts go to
 * KERNFORGE_DEPLOY_LOG (JSON) when a process that used the driver exits through exit(); a
 * process that never looked up a driver function writes nothing.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kf.h"

#define MAX_CTX 16
typedef struct {
  char name[512], entry[512], image[4096];
  unsigned grid[3], block[3], shmem, ngrid[3], nblock[3], nshmem;
  uint8_t *key, *mask;
  size_t keylen;
  int any_key, njit, carveout;
  uint64_t source; /* the recorded kernel's image id, 0 = any */
  CUjit_option jit[8];
  long jitv[8];
  CUcontext ctx[MAX_CTX];
  CUfunction fn[MAX_CTX];
  unsigned long used, failed, launch_failed, unknown_image;
  int disabled;
} entry_t;

static entry_t *entries;
static size_t nentries;
static unsigned long fallbacks;
static int state = -1;

static int triple(const char *s, unsigned v[3]) {
  return sscanf(s, "%u,%u,%u", &v[0], &v[1], &v[2]) == 3 ? 0 : -1;
}

/* hex with "xx" for bytes that are not compared (pointer parameters) */
static int parse_key(entry_t *e, const char *hex) {
  if (!strcmp(hex, "*")) { e->any_key = 1; return 0; }
  size_t n = strlen(hex) / 2;
  e->key = calloc(n ? n : 1, 1), e->mask = calloc(n ? n : 1, 1), e->keylen = n;
  if (!e->key || !e->mask) return -1;
  for (size_t i = 0; i < n; i++) {
    if (hex[2 * i] == 'x') continue;
    unsigned b;
    if (sscanf(hex + 2 * i, "%2x", &b) != 1) return -1;
    e->key[i] = (uint8_t)b, e->mask[i] = 1;
  }
  return 0;
}

static int parse_line(char *line, entry_t *e) {
  char *f[13];
  int n = 0;
  for (char *save = NULL, *t = strtok_r(line, "\t\n", &save); t && n < 13;
       t = strtok_r(NULL, "\t\n", &save))
    f[n++] = t;
  if (n != 12 && n != 13) return -1;
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", f[0]);
  snprintf(e->image, sizeof e->image, "%s", f[5]);
  snprintf(e->entry, sizeof e->entry, "%s", f[6]);
  if (triple(f[1], e->grid) || triple(f[2], e->block) || triple(f[8], e->ngrid) ||
      triple(f[9], e->nblock) || parse_key(e, f[4]))
    return -1;
  e->shmem = (unsigned)strtoul(f[3], NULL, 10);
  e->nshmem = (unsigned)strtoul(f[10], NULL, 10);
  e->carveout = (int)strtol(f[11], NULL, 10);
  if (n == 13 && strcmp(f[12], "-")) {
    char *end;
    e->source = strtoull(f[12], &end, 16);
    if (*end || !e->source) return -1;
  }
  if (strcmp(f[7], "-"))
    for (char *save = NULL, *t = strtok_r(f[7], ",", &save); t && e->njit < 8;
         t = strtok_r(NULL, ",", &save))
      if (sscanf(t, "%d=%ld", &e->jit[e->njit], &e->jitv[e->njit]) == 2) e->njit++;
  return 0;
}

int kf_deploy_active(void) {
  if (state >= 0) return state;
  state = 0;
  const char *path = getenv("KERNFORGE_DEPLOY");
  if (!path || !*path) return state;
  FILE *fp = fopen(path, "r");
  if (!fp) { kf_log("cannot read the deployment %s; nothing is replaced", path); return state; }
  char line[8192];
  size_t cap = 0;
  while (fgets(line, sizeof line, fp)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    if (nentries == cap) {
      cap = cap ? 2 * cap : 8;
      entry_t *a = realloc(entries, cap * sizeof *a);
      if (!a) break;
      entries = a;
    }
    if (parse_line(line, &entries[nentries])) kf_log("deployment %s: a malformed line skipped", path);
    else nentries++;
  }
  fclose(fp);
  state = nentries > 0;
  return state;
}

int kf_deploy_covers(kf_fn_t *fn) {
  if (!fn->deployed) {
    fn->deployed = -1;
    for (size_t i = 0; i < nentries; i++)
      if (!strcmp(entries[i].name, fn->name)) fn->deployed = 1;
  }
  return fn->deployed > 0;
}

static int key_matches(const entry_t *e, const uint8_t *p, size_t n) {
  if (e->any_key) return 1;
  if (n != e->keylen) return 0;
  for (size_t i = 0; i < n; i++)
    if (e->mask[i] && p[i] != e->key[i]) return 0;
  return 1;
}

static CUfunction function_for(entry_t *e) {
  CUcontext c = NULL;
  if (kf_drv.cuCtxGetCurrent) kf_drv.cuCtxGetCurrent(&c);
  for (int i = 0; i < MAX_CTX; i++)
    if (e->fn[i] && e->ctx[i] == c) return e->fn[i];
  FILE *fp = fopen(e->image, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CUfunction f = NULL;
  if (buf && fread(buf, 1, (size_t)n, fp) == (size_t)n) {
    buf[n] = 0;
    void *vals[8];
    for (int i = 0; i < e->njit; i++) vals[i] = (void *)(intptr_t)e->jitv[i];
    CUmodule m;
    if (!kf_drv.cuModuleLoadDataEx(&m, buf, (unsigned)e->njit, e->jit, vals) &&
        kf_drv.cuModuleGetFunction(&f, m, e->entry))
      f = NULL;
  }
  free(buf);
  fclose(fp);
  if (f && e->carveout >= 0 && kf_drv.cuFuncSetAttribute)
    kf_drv.cuFuncSetAttribute(f, 9, e->carveout); /* PREFERRED_SHARED_MEMORY_CARVEOUT */
  for (int i = 0; f && i < MAX_CTX; i++)
    if (!e->fn[i]) { e->ctx[i] = c, e->fn[i] = f; break; }
  return f;
}

static uint64_t launch_image(const kf_launch_t *l, kf_fn_t *fn) {
  if (!fn->image_asked) {
    kf_image_ref_t img;
    kf_fn_image(l->f, &img);
    fn->image = img.image, fn->image_asked = 1;
  }
  return fn->image;
}

int kf_deploy_try(kf_launch_t *l, kf_fn_t *fn, const uint8_t *params, size_t psize,
                  CUresult *rc, CUresult (*real)(kf_launch_t *, void *), void *ctx) {
  int named = 0;
  for (size_t i = 0; i < nentries; i++) {
    entry_t *e = &entries[i];
    if (strcmp(e->name, fn->name)) continue;
    named = 1;
    if (e->disabled) break;
    if (memcmp(e->grid, l->grid, sizeof e->grid) || memcmp(e->block, l->block, sizeof e->block) ||
        e->shmem != l->shmem || !key_matches(e, params, psize))
      continue;
    if (e->source && launch_image(l, fn) != e->source) { /* another image (a dtype) */
      if (!fn->image && !e->unknown_image++)
        kf_log("deploy: which image %s comes from is not known; it runs unchanged", e->name);
      continue;
    }
    CUfunction f = function_for(e);
    if (!f) {
      if (!e->failed++) kf_log("deploy: cannot load %s from %s; the original runs", e->entry, e->image);
      break;
    }
    kf_launch_t swapped = *l;
    swapped.f = f;
    memcpy(swapped.grid, e->ngrid, sizeof swapped.grid);
    memcpy(swapped.block, e->nblock, sizeof swapped.block);
    swapped.shmem = e->nshmem;
    *rc = real(&swapped, ctx);
    if (*rc) { /* refused (e.g. a geometry this launch's attributes forbid): the original runs */
      if (!e->launch_failed++)
        kf_log("deploy: the tuned launch of %s failed (CUDA error %d); it runs unchanged", e->name, *rc);
      *rc = real(l, ctx);
      e->disabled = 1;
      return 1;
    }
    e->used++;
    return 1;
  }
  if (named) fallbacks++;
  return 0;
}

void kf_deploy_report(void) {
  if (state <= 0) return; /* never used the driver (a shell, a tool): its counts are not news */
  const char *path = getenv("KERNFORGE_DEPLOY_LOG");
  FILE *fp = path && *path ? fopen(path, "w") : NULL;
  if (fp) fprintf(fp, "{\"fallbacks\": %lu, \"entries\": [", fallbacks);
  for (size_t i = 0; i < nentries; i++)
    if (fp)
      fprintf(fp, "%s{\"name\": \"%s\", \"replaced\": %lu, \"load_failures\": %lu, "
              "\"launch_failures\": %lu}", i ? ", " : "", entries[i].name, entries[i].used,
              entries[i].failed, entries[i].launch_failed);
  if (fp) { fprintf(fp, "]}\n"); fclose(fp); }
}
