/* kernforge driver interposer: small I/O helpers and the per-process summary at exit. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "kf.h"

extern unsigned long n_launches, n_recorded, n_budget, n_unknown, n_failed;
extern unsigned long kf_n_cooperative, kf_n_graphs;

/* ---- a growable text buffer for unit.json ---------------------------------------------------- */
static void buf_fail(buf_t *b) { free(b->s), b->s = NULL, b->n = b->cap = 0; }

void kf_put(buf_t *b, const char *fmt, ...) {
  va_list ap;
  if (!b->s) return; /* a write failed: the caller sees b->s == NULL */
  for (;;) {
    va_start(ap, fmt);
    int w = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (w < 0) { buf_fail(b); return; } /* an encoding error: more room would not help */
    if ((size_t)w < b->cap - b->n) { b->n += (size_t)w; return; }
    size_t cap = b->cap * 2 + (size_t)w + 256;
    char *s = cap > b->cap ? realloc(b->s, cap) : NULL;
    if (!s) { buf_fail(b); return; }
    b->s = s, b->cap = cap;
  }
}

/* the length of the valid UTF-8 sequence at p (1 to 4), else the length of its longest valid
 * beginning (at least 1) negated: one U+FFFD replaces that many bytes (the "maximal subpart"
 * rule, as Python's errors="replace" decodes) */
static int utf8_len(const unsigned char *p) {
  unsigned char c = p[0];
  int n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
  if (c < 0xc2 || c > 0xf4) return -1; /* a continuation byte, an overlong lead, past U+10FFFF */
  unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;   /* no overlong forms */
  unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;   /* no surrogates, <= 10FFFF */
  for (int i = 1; i < n; i++) {
    if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf)) return -i;
  }
  return n;
}

/* s as a JSON string: valid UTF-8 passes unchanged; quote, backslash and control characters are
 * escaped; each invalid sequence becomes \ufffd */
void kf_put_str(buf_t *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  kf_put(b, "\"");
  while (*p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') kf_put(b, "\\%c", c), p++;
    else if (c < 0x20 || c == 0x7f) kf_put(b, "\\u%04x", c), p++;
    else if (c < 0x80) kf_put(b, "%c", c), p++;
    else {
      int n = utf8_len(p);
      if (n > 0) kf_put(b, "%.*s", n, (const char *)p), p += n;
      else kf_put(b, "\\ufffd"), p += -n;
    }
  }
  kf_put(b, "\"");
}

/* ---- files created safely ------------------------------------------------------------------ */
/* a write past RLIMIT_FSIZE raises SIGXFSZ, which kills a program that does not handle it: the
 * limit is checked first, and SIGXFSZ is blocked in this thread around the write (a pending one
 * of ours is taken back), so the write fails with EFBIG and the program runs on */
static int write_all(int fd, const char *p, size_t n) {
  struct rlimit lim;
  if (!getrlimit(RLIMIT_FSIZE, &lim) && lim.rlim_cur != RLIM_INFINITY && n > lim.rlim_cur) {
    errno = EFBIG;
    return -1;
  }
  sigset_t xfsz, old;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &xfsz, &old);
  int rc = 0, err = 0;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { rc = -1, err = w < 0 ? errno : EIO; break; }
    p += w, n -= (size_t)w;
  }
  if (err == EFBIG && !sigismember(&old, SIGXFSZ)) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&xfsz, NULL, &zero) == SIGXFSZ) {}
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = err;
  return rc;
}

int kf_write_at(int dir, const char *name, const void *data, size_t n) {
  int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int rc = write_all(fd, data, n), err = errno;
  if (!rc && fsync(fd)) rc = -1, err = errno;
  if (close(fd) && !rc) rc = -1, err = errno;
  if (rc) unlinkat(dir, name, 0);
  errno = err;
  return rc;
}

int kf_subdir(int parent, const char *name) {
  if (mkdirat(parent, name, 0755) && errno != EEXIST) return -1;
  /* EEXIST is fine for a real directory only: a symlink, file or FIFO fails here (no blocking) */
  return openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

extern const char *root;
int kf_spool_open(void) {
  if (!root) { errno = ENOENT; return -1; }
  if (mkdir(root, 0755) && errno != EEXIST) return -1; /* the directory the user named */
  int top = open(root, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  if (top < 0) return -1;
  int fd = kf_subdir(top, ".spool"), err = errno;
  close(top);
  errno = err;
  return fd;
}

/* NAME written whole or not at all: a fresh temporary name, then renamed over NAME (a link
 * planted at NAME is replaced, never followed) */
int kf_publish_at(int dir, const char *name, const void *data, size_t n) {
  static unsigned long counter;
  char tmp[256];
  for (int tries = 0; tries < 8; tries++) {
    unsigned long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, ".tmp-w%d-%lu", getpid(), c);
    if (!kf_write_at(dir, tmp, data, n)) {
      if (!renameat(dir, tmp, dir, name)) return 0;
      int err = errno;
      unlinkat(dir, tmp, 0);
      errno = err;
      return -1;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

void kf_remove_at(int dir, const char *name) {
  int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) { if (fd >= 0) close(fd); return; }
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(fd, e->d_name, 0);
  closedir(d);
  unlinkat(dir, name, AT_REMOVEDIR);
}

/* ---- environment values: strict, with one message when one is not understood ---------------- */
long long kf_env_ll(const char *name, long long dflt, long long lo, long long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi || isspace((unsigned char)*v)) {
    kf_log("%s=%.64s is not an integer from %lld to %lld; using %lld", name, v, lo, hi, dflt);
    return dflt;
  }
  return x;
}

void kf_say_once(int *said, const char *fmt, ...) {
  if (__atomic_exchange_n(said, 1, __ATOMIC_RELAXED)) return;
  char buf[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  kf_log("%s", buf);
}

/* what this process launched and recorded: <root>/.spool/summary-<pid>.json */
__attribute__((destructor)) static void summary(void) {
  kf_defer_flush();   /* held launches left by exit handlers that ran after deferral's own */
  kf_deploy_report(); /* a no-op unless this process used the driver with a deployment */
  if (!kf_recording() || !n_launches) return;
  buf_t b = {malloc(4096), 0, 4096};
  kf_put(&b, "{\"pid\": %d, \"launches\": %lu, \"recorded\": %lu, \"over_budget\": %lu, "
      "\"unknown_layout\": %lu, \"failed\": %lu, \"cooperative\": %lu, \"graphs\": %lu, "
      "\"kernels\": [", getpid(), n_launches, n_recorded, n_budget, n_unknown, n_failed,
      kf_n_cooperative, kf_n_graphs);
  kf_fn_t **all;
  size_t n = kf_fn_all(&all);
  for (size_t i = 0; i < n; i++) {
    kf_put(&b, "%s{\"name\": ", i ? ", " : "");
    kf_put_str(&b, all[i]->name);
    kf_put(&b, ", \"seen\": %lu, \"recorded\": %lu, \"layout\": %d, \"matches\": %s, "
        "\"app_ms\": [", all[i]->seen, all[i]->recorded, all[i]->layout,
        all[i]->matches ? "true" : "false");
    for (int j = 0; j < all[i]->napp; j++) kf_put(&b, "%s%.6f", j ? ", " : "", all[i]->app_ms[j]);
    kf_put(&b, "], \"app_keys\": [");
    for (int j = 0; j < all[i]->napp; j++)
      kf_put(&b, "%s\"%016llx\"", j ? ", " : "", (unsigned long long)all[i]->app_key[j]);
    kf_put(&b, "]}");
  }
  free(all);
  kf_put(&b, "]}\n");
  char name[64];
  snprintf(name, sizeof name, "summary-%d.json", getpid());
  int spool = kf_spool_open();
  if (!b.s || spool < 0 || kf_publish_at(spool, name, b.s, b.n)) {
    static int said;
    kf_say_once(&said, "could not write %s/.spool/%s: %s", root, name, strerror(errno));
  }
  if (spool >= 0) close(spool);
  free(b.s);
}
