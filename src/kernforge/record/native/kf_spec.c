/* kernforge driver interposer: reading and parsing a deployment's line file (kf_deploy.c has
 * the format). Every field is checked whole and in its range; nothing is cut. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kf_deploy.h"

/* ---- files -------------------------------------------------------------------------------- */
char *kf_read_regular(const char *path, unsigned long long limit, size_t *n,
                     const char **why) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *why = errno == ENOENT ? "does not exist" : "cannot be opened";
    return NULL;
  }
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st)) *why = "cannot be examined";
  else if (!S_ISREG(st.st_mode)) *why = "is not a regular file";
  else if ((unsigned long long)st.st_size > limit) *why = "is larger than kernforge reads";
  else if (!(buf = malloc((size_t)st.st_size + 1))) *why = "does not fit in memory";
  else {
    size_t got = 0, want = (size_t)st.st_size;
    while (got < want) {
      ssize_t r = read(fd, buf + got, want - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (got < want) free(buf), buf = NULL, *why = "could not be read whole";
    else buf[got] = 0, *n = got;
  }
  close(fd);
  return buf;
}

/* ---- parsing: every field whole and in its range ---------------------------------------------- */
/* a decimal number at *s (digits only: no sign, no space) up to `max`; *s moves past it */
static int number(const char **s, unsigned long long max, unsigned long long *v) {
  if (**s < '0' || **s > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(*s, &end, 10);
  if (errno || x > max) return -1;
  *s = end, *v = x;
  return 0;
}

static int whole(const char *s, unsigned long long max, unsigned long long *v) {
  return number(&s, max, v) || *s ? -1 : 0;
}

static int triple(const char *s, unsigned v[3]) { /* "x,y,z", each 1 .. 2^31-1 */
  for (int i = 0; i < 3; i++) {
    unsigned long long x;
    if (number(&s, INT_MAX, &x) || !x || *s != (i < 2 ? ',' : '\0')) return -1;
    v[i] = (unsigned)x;
    s += i < 2;
  }
  return 0;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static const char *parse_key(kf_entry_t *e, const char *hex) {
  if (!strcmp(hex, "*")) { e->any_key = 1; return NULL; }
  size_t len = strlen(hex), n = len / 2;
  if (len % 2 || n > KEY_LIMIT) return "the key is not whole bytes (at most 32 KiB)";
  e->key = calloc(n, 1), e->mask = calloc(n, 1), e->keylen = n;
  if (!e->key || !e->mask) return "no memory for the key";
  for (size_t i = 0; i < n; i++) {
    const char *b = hex + 2 * i;
    if (b[0] == 'x' && b[1] == 'x') continue;
    int hi = hexval(b[0]), lo = hexval(b[1]);
    if (hi < 0 || lo < 0) return "the key holds a character that is not hex (or xx)";
    e->key[i] = (uint8_t)(hi << 4 | lo), e->mask[i] = 1;
  }
  return NULL;
}

/* the JIT options kernforge writes (backends/driver.py JIT_OPTIONS), each with its range; the
 * value of each is an unsigned int that the driver reads from the option's value slot */
static const struct { int id; unsigned lo, hi; } jit_ok[] = {
    {0, 1, 255},  /* CU_JIT_MAX_REGISTERS */
    {1, 1, 1024}, /* CU_JIT_THREADS_PER_BLOCK */
    {7, 0, 4},    /* CU_JIT_OPTIMIZATION_LEVEL */
    {14, 0, 2},   /* CU_JIT_CACHE_MODE */
};

static const char *parse_jit(kf_entry_t *e, const char *s) {
  if (!strcmp(s, "-")) return NULL;
  for (;;) {
    unsigned long long id, v;
    if (number(&s, INT_MAX, &id) || *s++ != '=' || number(&s, UINT_MAX, &v))
      return "a JIT option is not id=value";
    size_t k = 0;
    while (k < sizeof jit_ok / sizeof *jit_ok && jit_ok[k].id != (int)id) k++;
    if (k == sizeof jit_ok / sizeof *jit_ok) return "a JIT option kernforge does not write";
    if (v < jit_ok[k].lo || v > jit_ok[k].hi) return "a JIT option's value is out of its range";
    for (int j = 0; j < e->njit; j++)
      if (e->jit[j] == (int)id) return "a JIT option is given twice";
    e->jit[e->njit] = (int)id, e->jitv[e->njit++] = (unsigned)v;
    if (!*s) return NULL;
    if (*s++ != ',') return "a JIT option is not id=value";
  }
}

/* an image id (kf_image_id): "-" for any (0), else 16 hex digits, not all 0 */
static int image_id(const char *s, uint64_t *id) {
  *id = 0;
  if (!strcmp(s, "-")) return 0;
  if (strlen(s) != 16) return -1;
  for (int i = 0; i < 16; i++) {
    int h = hexval(s[i]);
    if (h < 0) return -1;
    *id = *id << 4 | (uint64_t)h;
  }
  return *id ? 0 : -1;
}

static const char *parse_numbers(kf_entry_t *e, char **f, int n) {
  unsigned long long v;
  if (triple(f[1], e->grid) || triple(f[2], e->block) || triple(f[8], e->ngrid) ||
      triple(f[9], e->nblock))
    return "a grid or block is not x,y,z (each from 1 to 2^31-1)";
  if (whole(f[3], UINT_MAX, &v)) return "the shared memory is not a number below 2^32";
  e->shmem = (unsigned)v;
  if (whole(f[10], UINT_MAX, &v)) return "the new shared memory is not a number below 2^32";
  e->nshmem = (unsigned)v;
  if (!strcmp(f[11], "-1")) e->carveout = -1;
  else if (whole(f[11], 100, &v)) return "the carveout is not -1 or a percentage";
  else e->carveout = (int)v;
  if (n >= 13 && image_id(f[12], &e->source)) return "the source image is not - or 16 hex "
                                                     "digits (not all 0)";
  return NULL;
}

/* "fuse:T:IN:OUT[:C[:W]]" (field 14) or "-": T odd from 3 to 63, IN and OUT distinct
 * 8-byte-aligned offsets of two pointers within the key, C companions (1 to 8, in the fields
 * after it) of W fields each: 4 (absent), 5 (the fifth the companion's image) or 6 (the sixth
 * its geometry) */
static const char *parse_fuse(kf_entry_t *e, const char *s) {
  unsigned long long t, in, out, c = 0, w = 4;
  if (!strcmp(s, "-")) return NULL;
  if (strncmp(s, "fuse:", 5)) return "field 14 is not fuse:T:IN:OUT or -";
  s += 5;
  if (number(&s, 63, &t) || *s++ != ':' || number(&s, KEY_LIMIT, &in) || *s++ != ':' ||
      number(&s, KEY_LIMIT, &out) || (*s == ':' && (s++, number(&s, MAX_COMP, &c) || !c)) ||
      (c && *s == ':' && (s++, number(&s, 6, &w) || w < 4)) || *s)
    return "field 14 is not fuse:T:IN:OUT[:C[:W]] (T up to 63, offsets within 32 KiB, C 1 to "
           "8, W 4 to 6)";
  if (t < 3 || t % 2 == 0) return "the fused steps are not an odd number from 3 to 63";
  if (e->any_key) return "a fused entry has no key (its pointers' offsets cannot be checked)";
  if (in % 8 || out % 8 || in == out || in + 8 > e->keylen || out + 8 > e->keylen)
    return "the fused IN and OUT offsets are not two distinct aligned pointers in the key";
  e->fuse = (unsigned)t, e->fuse_in = (size_t)in, e->fuse_out = (size_t)out;
  e->ncomp = (unsigned)c, e->comp_fields = (unsigned)w;
  return NULL;
}

/* a companion's slots: "-" or "o,o,...", offsets of 8-byte words in its params (kept sorted) */
static const char *parse_slots(kf_comp_t *k, const char *s, uint8_t out) {
  if (!strcmp(s, "-")) return NULL;
  for (;;) {
    unsigned long long o;
    if (number(&s, KEY_LIMIT, &o) || (*s && *s != ','))
      return "a companion's slots are not - or offsets separated by commas";
    if (o % 8 || o + 8 > k->len) return "a companion's slot is not an aligned word of its params";
    size_t i = k->nslots;
    for (size_t j = 0; j < k->nslots; j++)
      if (k->slot[j] == o) return "a companion's slot is given twice";
    for (; i > 0 && k->slot[i - 1] > o; i--)
      k->slot[i] = k->slot[i - 1], k->is_out[i] = k->is_out[i - 1];
    k->slot[i] = (size_t)o, k->is_out[i] = out, k->nslots++;
    if (!*s++) return NULL;
  }
}

/* a companion's geometry: "-" (any), or "gx,gy,gz/bx,by,bz/shmem" (each of grid and block
 * from 1 to 2^31-1, shmem below 2^32) */
static int geometry(char *s, kf_comp_t *k) {
  if (!strcmp(s, "-")) return 0;
  char *b = strchr(s, '/'), *m = b ? strchr(b + 1, '/') : NULL;
  if (!m) return -1;
  *b = *m = '\0';
  unsigned long long v;
  if (triple(s, k->grid) || triple(b + 1, k->block) || whole(m + 1, UINT_MAX, &v)) return -1;
  k->shmem = (unsigned)v, k->geom = 1;
  return 0;
}

/* the companions: four fields each, name, params (hex, or - for none; "xx" for a byte that
 * must equal the chain's first held step's, not the recording's), IN slots, OUT slots; with
 * five, the fifth its image's id ("-" for any); with six, the sixth its geometry */
static const char *parse_companions(kf_entry_t *e, char **f) {
  if (!(e->comp = calloc(e->ncomp, sizeof *e->comp))) return "no memory";
  for (unsigned i = 0; i < e->ncomp; i++, f += e->comp_fields) {
    kf_comp_t *k = &e->comp[i];
    size_t len = strcmp(f[1], "-") ? strlen(f[1]) : 0;
    if (len % 2 || len / 2 > KEY_LIMIT)
      return "a companion's params are not whole bytes of hex (at most 32 KiB)";
    k->len = len / 2;
    if (!(k->name = strdup(f[0])) || !(k->params = malloc(k->len + 1)) ||
        !(k->slot = malloc((k->len / 8 + 1) * sizeof *k->slot)) ||
        !(k->is_out = malloc(k->len / 8 + 1)))
      return "no memory";
    for (size_t j = 0; j < k->len; j++) {
      if (f[1][2 * j] == 'x' && f[1][2 * j + 1] == 'x') { /* as the first held step's */
        if (!k->same && !(k->same = calloc(k->len, 1))) return "no memory";
        k->same[j] = 1, k->params[j] = 0;
        continue;
      }
      int hi = hexval(f[1][2 * j]), lo = hexval(f[1][2 * j + 1]);
      if (hi < 0 || lo < 0) return "a companion's params hold a character that is not hex or xx";
      k->params[j] = (uint8_t)(hi << 4 | lo);
    }
    const char *why = parse_slots(k, f[2], 0);
    if (why || (why = parse_slots(k, f[3], 1))) return why;
    if (e->comp_fields >= 5 && image_id(f[4], &k->image))
      return "a companion's image is not - or 16 hex digits (not all 0)";
    if (e->comp_fields == 6 && geometry(f[5], k))
      return "a companion's geometry is not - or gx,gy,gz/bx,by,bz/shmem";
  }
  return NULL;
}

/* "attrs:R:HEX": the launch attributes recorded for role R of a fused entry (0 its kernel,
 * 1 to C its companions), KF_ATTR_SIZE bytes each as hex, 1 to MAX_ATTRS of them */
static const char *parse_attrs(kf_entry_t *e, const char *s) {
  unsigned long long r;
  if (!e->fuse) return "attrs: is for a fused entry";
  if (number(&s, MAX_COMP, &r) || *s++ != ':' || r > e->ncomp)
    return "attrs: is not attrs:R:HEX with R from 0 to the entry's companions";
  size_t len = strlen(s), n = len / (2 * KF_ATTR_SIZE);
  if (!n || n > MAX_ATTRS || len % (2 * KF_ATTR_SIZE))
    return "attrs: does not hold 1 to 16 launch attributes of 72 bytes each";
  uint8_t **to = r ? &e->comp[r - 1].attrs : &e->attrs;
  unsigned *count = r ? &e->comp[r - 1].nattrs : &e->nattrs;
  if (*to) return "attrs: is given twice for one launch";
  if (!(*to = malloc(n * KF_ATTR_SIZE))) return "no memory";
  for (size_t i = 0; i < n * KF_ATTR_SIZE; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return "attrs: holds a character that is not hex";
    (*to)[i] = (uint8_t)(hi << 4 | lo);
  }
  *count = (unsigned)n;
  return NULL;
}

static int hex64(const char *s, size_t len, uint64_t *v) {
  *v = 0;
  if (len != 16) return -1;
  for (size_t i = 0; i < 16; i++) {
    int h = hexval(s[i]);
    if (h < 0) return -1;
    *v = *v << 4 | (uint64_t)h;
  }
  return 0;
}

/* "guard:IMAGE:SIZE:HASH:NAME": the global NAME (the rest of the field) of the image IMAGE
 * ("-": the launched kernel's) holds SIZE bytes (1 to GUARD_LIMIT) whose FNV-1a 64 is HASH */
static const char *parse_guard(kf_entry_t *e, const char *s) {
  const char *bad = "guard: is not guard:IMAGE:SIZE:HASH:NAME (IMAGE - or 16 hex digits, SIZE "
                    "1 to 2^20, HASH 16 hex digits)";
  if (e->nguard == MAX_GUARD) return "a line has more than 8 guard: fields";
  kf_guard_t *g = &e->guard[e->nguard];
  const char *c = strchr(s, ':');
  char img[17];
  unsigned long long size;
  if (!c || (size_t)(c - s) > 16) return bad;
  memcpy(img, s, (size_t)(c - s)), img[c - s] = '\0', s = c + 1;
  if (image_id(img, &g->image) || number(&s, GUARD_LIMIT, &size) || !size || *s++ != ':' ||
      !(c = strchr(s, ':')) || hex64(s, (size_t)(c - s), &g->hash) || !c[1])
    return bad;
  for (unsigned i = 0; i < e->nguard; i++)
    if (!strcmp(e->guard[i].name, c + 1) && e->guard[i].image == g->image)
      return "guard: names one global twice";
  if (!(g->name = strdup(c + 1))) return "no memory";
  g->size = (size_t)size, e->nguard++;
  return NULL;
}

/* "unfused:next": a fused entry's held launches that run unfused run as the one-launch entry
 * of the next line would run them (kf_unfused.c) */
static const char *parse_unfused(kf_entry_t *e, const char *s) {
  if (!e->fuse) return "unfused: is for a fused entry";
  if (strcmp(s, "next")) return "unfused: is not unfused:next";
  if (e->unfused_next) return "unfused: is given twice";
  e->unfused_next = 1;
  return NULL;
}

/* the fields after field 14 and its companions: each attrs:, guard: or unfused: */
static const char *parse_tagged(kf_entry_t *e, char **f, int n) {
  for (int i = 0; i < n; i++) {
    const char *why = !strncmp(f[i], "attrs:", 6) ? parse_attrs(e, f[i] + 6)
                    : !strncmp(f[i], "guard:", 6) ? parse_guard(e, f[i] + 6)
                    : !strncmp(f[i], "unfused:", 8) ? parse_unfused(e, f[i] + 8)
                    : "a field after field 14 and its companions is not attrs:, guard: or "
                      "unfused:";
    if (why) return why;
  }
  return NULL;
}

void kf_entry_free(kf_entry_t *e) {
  free(e->name), free(e->image), free(e->entry), free(e->key), free(e->mask), free(e->attrs);
  for (unsigned i = 0; e->comp && i < e->ncomp; i++)
    free(e->comp[i].name), free(e->comp[i].params), free(e->comp[i].slot), free(e->comp[i].is_out),
        free(e->comp[i].same), free(e->comp[i].attrs);
  free(e->comp);
  for (unsigned i = 0; i < e->nguard; i++) free(e->guard[i].name);
}

#define MAX_FIELDS (14 + 6 * MAX_COMP + MAX_COMP + 1 + MAX_GUARD + 1)
const char *kf_parse_entry(char *line, kf_entry_t *e) {
  char *f[MAX_FIELDS];
  int n = 0;
  memset(e, 0, sizeof *e);
  for (char *p = line;;) {
    if (n == MAX_FIELDS) return "it has more fields than 8 companions and their guards need";
    f[n++] = p;
    char *tab = strchr(p, '\t');
    if (!tab) break;
    *tab = '\0', p = tab + 1;
  }
  if (n < 12) return "it has fewer than 12 fields";
  for (int i = 0; i < n; i++)
    if (!*f[i]) return "a field is empty";
  const char *why = parse_numbers(e, f, n);
  if (!why) why = parse_key(e, f[4]);
  if (!why && n >= 14) why = parse_fuse(e, f[13]);
  int tagged = 14 + (int)(e->comp_fields * e->ncomp); /* attrs: and guard: fields from here */
  if (!why && n > 13 && n < tagged)
    why = "a fused entry's companions are not W fields each, as many as it says";
  if (!why && e->ncomp) why = parse_companions(e, f + 14);
  if (!why && n > tagged) why = parse_tagged(e, f + tagged, n - tagged);
  if (!why) why = parse_jit(e, f[7]);
  if (!why && (!(e->name = strdup(f[0])) || !(e->image = strdup(f[5])) ||
               !(e->entry = strdup(f[6]))))
    why = "no memory";
  return why;
}

