/* kernforge driver interposer: the allocation table, module images, handle links and the
 * per-function cache (name, filter decision, parameter layout). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kf.h"

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- allocations: sorted by base ------------------------------------------------------------ */
static kf_alloc_t *allocs;
static size_t nallocs, capallocs;

static size_t lower(CUdeviceptr p) { /* first index with base > p */
  size_t lo = 0, hi = nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].base <= p) lo = mid + 1; else hi = mid;
  }
  return lo;
}

void kf_alloc_add(CUdeviceptr base, size_t size, int kind, uint64_t owner) {
  if (!base || !size) return;
  pthread_mutex_lock(&state_lock);
  size_t i = lower(base);
  if (i > 0 && allocs[i - 1].base == base) { /* re-registered (e.g. a global looked up twice) */
    allocs[i - 1].size = size;
    allocs[i - 1].kind = kind;
    allocs[i - 1].owner = owner;
  } else {
    if (nallocs == capallocs) {
      size_t cap = capallocs ? 2 * capallocs : 256;
      kf_alloc_t *a = realloc(allocs, cap * sizeof *a);
      if (!a) { pthread_mutex_unlock(&state_lock); return; }
      allocs = a, capallocs = cap;
    }
    memmove(allocs + i + 1, allocs + i, (nallocs - i) * sizeof *allocs);
    allocs[i] = (kf_alloc_t){base, size, kind, owner};
    nallocs++;
  }
  pthread_mutex_unlock(&state_lock);
}

void kf_alloc_remove(CUdeviceptr base) {
  pthread_mutex_lock(&state_lock);
  size_t i = lower(base);
  if (i > 0 && allocs[i - 1].base == base) {
    memmove(allocs + i - 1, allocs + i, (nallocs - i) * sizeof *allocs);
    nallocs--;
  }
  pthread_mutex_unlock(&state_lock);
}

void kf_alloc_unmap(CUdeviceptr base, size_t size) {
  pthread_mutex_lock(&state_lock);
  size_t i = lower(base + size - 1);
  while (i > 0 && allocs[i - 1].base >= base) {
    if (allocs[i - 1].base + allocs[i - 1].size <= base + size) {
      memmove(allocs + i - 1, allocs + i, (nallocs - i) * sizeof *allocs);
      nallocs--;
    }
    i--;
  }
  pthread_mutex_unlock(&state_lock);
}

int kf_alloc_find(CUdeviceptr p, kf_alloc_t *out) {
  int found = 0;
  pthread_mutex_lock(&state_lock);
  size_t i = lower(p);
  if (i > 0 && p < allocs[i - 1].base + allocs[i - 1].size) {
    *out = allocs[i - 1];
    found = 1;
  }
  pthread_mutex_unlock(&state_lock);
  return found;
}

size_t kf_alloc_snapshot(kf_alloc_t **out) {
  pthread_mutex_lock(&state_lock);
  size_t n = nallocs;
  *out = malloc((n ? n : 1) * sizeof **out);
  if (*out) memcpy(*out, allocs, n * sizeof **out); else n = 0;
  pthread_mutex_unlock(&state_lock);
  return n;
}

/* ---- a small pointer-keyed hash map --------------------------------------------------------- */
typedef struct { const void *key; void *value; } slot_t;
typedef struct { slot_t *slots; size_t cap, n; } map_t;

static size_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
  return (size_t)x;
}

static void *map_get(map_t *m, const void *key) {
  if (!m->cap) return NULL;
  for (size_t i = hash_ptr(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->slots[i].key == key) return m->slots[i].value;
    if (!m->slots[i].key) return NULL;
  }
}

static void map_put(map_t *m, const void *key, void *value) {
  if (2 * (m->n + 1) > m->cap) {
    map_t g = {calloc(m->cap ? 2 * m->cap : 1024, sizeof(slot_t)), m->cap ? 2 * m->cap : 1024, 0};
    if (!g.slots) return;
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i].key) map_put(&g, m->slots[i].key, m->slots[i].value);
    free(m->slots);
    *m = g;
  }
  size_t i = hash_ptr(key) & (m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].key) m->n++;
  m->slots[i] = (slot_t){key, value};
}

/* ---- module images and handle links --------------------------------------------------------- */
typedef struct { uint64_t image; const char *how; const void *parent; } link_t;
static map_t links, fns;
static kf_image_t *images;
static size_t nimages, capimages;

size_t kf_image_size(const void *image, int *kind) {
  const uint8_t *p = image;
  uint32_t magic;
  memcpy(&magic, p, 4);
  if (magic == 0xBA55ED50u) { /* fatbin: u32 magic, u16 version, u16 header size, u64 size */
    uint16_t hs; uint64_t fs;
    memcpy(&hs, p + 6, 2); memcpy(&fs, p + 8, 8);
    *kind = KF_IMAGE_FATBIN;
    return hs + fs;
  }
  if (!memcmp(p, "\x7f" "ELF", 4) && p[4] == 2) { /* 64-bit ELF: the furthest byte it uses */
    uint64_t shoff, phoff, end; uint16_t shentsize, shnum, phentsize, phnum;
    memcpy(&phoff, p + 0x20, 8); memcpy(&shoff, p + 0x28, 8);
    memcpy(&phentsize, p + 0x36, 2); memcpy(&phnum, p + 0x38, 2);
    memcpy(&shentsize, p + 0x3A, 2); memcpy(&shnum, p + 0x3C, 2);
    end = shoff + (uint64_t)shentsize * shnum;
    for (unsigned i = 0; i < shnum; i++) {
      const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
      uint32_t type; uint64_t off, size;
      memcpy(&type, sh + 4, 4); memcpy(&off, sh + 0x18, 8); memcpy(&size, sh + 0x20, 8);
      if (type != 8 && off + size > end) end = off + size; /* 8 = SHT_NOBITS */
    }
    for (unsigned i = 0; i < phnum; i++) {
      const uint8_t *ph = p + phoff + (uint64_t)i * phentsize;
      uint64_t off, filesz;
      memcpy(&off, ph + 8, 8); memcpy(&filesz, ph + 0x20, 8);
      if (off + filesz > end) end = off + filesz;
    }
    *kind = KF_IMAGE_CUBIN;
    return end;
  }
  *kind = strstr((const char *)p, ".target") ? KF_IMAGE_PTX : KF_IMAGE_TEXT;
  return strlen((const char *)p) + 1;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h ? h : 1;
}

static const void *unwrap(const void *image) {
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic == 0x466243b1u) /* __fatBinC_Wrapper_t: {magic, version, data, filename} */
    image = *(const void *const *)((const uint8_t *)image + 8);
  return image;
}

/* the id kf_image_add gives the same bytes (NVRTC's output is linked to its source by it) */
uint64_t kf_image_id(const void *image) {
  if (!image) return 0;
  image = unwrap(image);
  int kind;
  return fnv1a(image, kf_image_size(image, &kind));
}

uint64_t kf_image_add(const void *image, const char *how) {
  if (!image) return 0;
  image = unwrap(image);
  int kind;
  size_t size = kf_image_size(image, &kind);
  uint64_t id = fnv1a(image, size);
  pthread_mutex_lock(&state_lock);
  for (size_t i = 0; i < nimages; i++)
    if (images[i].id == id) { pthread_mutex_unlock(&state_lock); return id; }
  if (nimages == capimages) {
    size_t cap = capimages ? 2 * capimages : 64;
    kf_image_t *a = realloc(images, cap * sizeof *a);
    if (!a) { pthread_mutex_unlock(&state_lock); return 0; }
    images = a, capimages = cap;
  }
  Dl_info info;
  kf_image_t *im = &images[nimages++];
  *im = (kf_image_t){id, image, size, kind, how, NULL, 0};
  if (!dladdr(image, &info) || !info.dli_fname) { /* not static data: the caller may free it */
    void *copy = malloc(size);
    if (copy) memcpy(copy, image, size);
    im->data = copy;
  }
  pthread_mutex_unlock(&state_lock);
  return id;
}

int kf_image_get(uint64_t id, kf_image_t *out) {
  int found = 0;
  pthread_mutex_lock(&state_lock);
  for (size_t i = 0; i < nimages && !found; i++)
    if (images[i].id == id) *out = images[i], found = 1;
  pthread_mutex_unlock(&state_lock);
  return found;
}

void kf_image_written(uint64_t id) {
  pthread_mutex_lock(&state_lock);
  for (size_t i = 0; i < nimages; i++)
    if (images[i].id == id) images[i].written = 1;
  pthread_mutex_unlock(&state_lock);
}

void kf_handle_image(const void *handle, uint64_t image, const char *how) {
  link_t *l = calloc(1, sizeof *l);
  if (!l) return;
  *l = (link_t){image, how, NULL};
  pthread_mutex_lock(&state_lock);
  map_put(&links, handle, l);
  pthread_mutex_unlock(&state_lock);
}

void kf_handle_link(const void *child, const void *parent) {
  link_t *l = calloc(1, sizeof *l);
  if (!l) return;
  *l = (link_t){0, NULL, parent};
  pthread_mutex_lock(&state_lock);
  map_put(&links, child, l);
  pthread_mutex_unlock(&state_lock);
}

int kf_handle_lookup(const void *handle, kf_image_ref_t *out) {
  pthread_mutex_lock(&state_lock);
  for (int depth = 0; handle && depth < 8; depth++) {
    link_t *l = map_get(&links, handle);
    if (!l) break;
    if (l->image) {
      out->image = l->image, out->how = l->how;
      pthread_mutex_unlock(&state_lock);
      return 1;
    }
    handle = l->parent;
  }
  pthread_mutex_unlock(&state_lock);
  return 0;
}

/* the image a launched function comes from: its own link, else through its module (a
 * CUfunction) or its library (a CUkernel passed as a CUfunction) */
void kf_fn_image(CUfunction f, kf_image_ref_t *out) {
  *out = (kf_image_ref_t){0, NULL};
  if (kf_handle_lookup(f, out)) return;
  CUmodule m;
  CUlibrary lib;
  if (kf_drv.cuFuncGetModule && !kf_drv.cuFuncGetModule(&m, f)) kf_handle_lookup(m, out);
  if (!out->image && kf_drv.cuKernelGetLibrary && !kf_drv.cuKernelGetLibrary(&lib, f))
    kf_handle_lookup(lib, out);
}

/* ---- functions: name, filter decision ------------------------------------------------------- */
void kf_base_name(const char *m, char *out, size_t cap) {
  const char *p = m;
  size_t n = 0;
  out[0] = 0;
  if (strncmp(p, "_Z", 2)) { snprintf(out, cap, "%s", m); return; }
  p += 2;
  if (*p == 'L') p++;
  int nested = *p == 'N';
  if (nested) p++;
  while (*p == 'K' || *p == 'V' || *p == 'r') p++;
  while (*p >= '0' && *p <= '9') {
    long len = strtol(p, (char **)&p, 10);
    if (len <= 0 || (size_t)len > strlen(p)) break;
    int w = snprintf(out + n, cap - n, "%s%.*s", n ? "::" : "", (int)len, p);
    if (w < 0 || (size_t)w >= cap - n) break;
    n += (size_t)w;
    p += len;
    if (!nested) break;
  }
  if (!n) snprintf(out, cap, "%s", m);
}

static int filter(const char *name) {
  const char *pat = getenv("KERNFORGE_KERNELS");
  if (!pat || !*pat) return 1;
  if (!fnmatch(pat, name, 0)) return 1;
  size_t cap = 2 * strlen(name) + 1; /* a base name is never longer */
  char *base = malloc(cap);
  if (!base) return 0;
  kf_base_name(name, base, cap);
  int match = !fnmatch(pat, base, 0);
  free(base);
  return match;
}

/* functions cached before the last kf_fn_forget, kept (a launch may still use one) and reported */
static kf_fn_t **retired;
static size_t nretired, capretired;
static unsigned long fn_epoch;

void kf_fn_forget(void) { __atomic_add_fetch(&fn_epoch, 1, __ATOMIC_ACQ_REL); }

static void retire(kf_fn_t *old) { /* under state_lock */
  if (nretired == capretired) {
    size_t cap = capretired ? 2 * capretired : 64;
    kf_fn_t **a = realloc(retired, cap * sizeof *a);
    if (!a) return; /* not reported; still allocated */
    retired = a, capretired = cap;
  }
  retired[nretired++] = old;
}

kf_fn_t *kf_fn_get(CUfunction f) {
  unsigned long now = __atomic_load_n(&fn_epoch, __ATOMIC_ACQUIRE);
  pthread_mutex_lock(&state_lock);
  kf_fn_t *fn = map_get(&fns, f);
  pthread_mutex_unlock(&state_lock);
  if (fn && fn->epoch >= now) return fn;
  const char *name = NULL;
  char unnamed[64];
  if (kf_drv.cuFuncGetName && kf_drv.cuFuncGetName(&name, f) != KF_OK) name = NULL;
  if (!name && kf_drv.cuKernelGetName && kf_drv.cuKernelGetName(&name, (CUkernel)f) != KF_OK)
    name = NULL;
  if (!name) snprintf(unnamed, sizeof unnamed, "unnamed_%p", (void *)f), name = unnamed;
  fn = calloc(1, sizeof *fn);
  if (!fn || !(fn->name = strdup(name))) { free(fn); return NULL; } /* the whole name */
  fn->fn = f, fn->epoch = now;
  fn->matches = filter(fn->name);
  pthread_mutex_lock(&state_lock);
  kf_fn_t *again = map_get(&fns, f);
  if (!again || again->epoch < now) {
    if (again) retire(again);
    map_put(&fns, f, fn);
    again = NULL;
  }
  pthread_mutex_unlock(&state_lock);
  if (again) { free(fn->name); free(fn); fn = again; }
  return fn;
}

size_t kf_fn_all(kf_fn_t ***out) {
  pthread_mutex_lock(&state_lock);
  *out = malloc((fns.n + nretired ? fns.n + nretired : 1) * sizeof **out);
  size_t k = 0;
  for (size_t i = 0; *out && i < fns.cap; i++)
    if (fns.slots[i].key) (*out)[k++] = fns.slots[i].value;
  for (size_t i = 0; *out && i < nretired; i++) (*out)[k++] = retired[i];
  pthread_mutex_unlock(&state_lock);
  return k;
}
