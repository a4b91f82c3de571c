/* kernforge driver interposer: small I/O helpers and the per-process summary at exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kf.h"

extern const char *root;
extern unsigned long n_launches, n_recorded, n_budget, n_unknown, n_failed;
extern unsigned long kf_n_cooperative, kf_n_graphs;

/* ---- a growable text buffer for unit.json ---------------------------------------------------- */
void kf_put(buf_t *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int w = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (w >= 0 && (size_t)w < b->cap - b->n) { b->n += (size_t)w; return; }
    size_t cap = b->cap * 2 + (w > 0 ? (size_t)w : 0) + 256;
    char *s = realloc(b->s, cap);
    if (!s) return;
    b->s = s, b->cap = cap;
  }
}
void kf_put_str(buf_t *b, const char *s) {
  kf_put(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') kf_put(b, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) kf_put(b, "\\u%04x", c);
    else kf_put(b, "%c", c);
  }
  kf_put(b, "\"");
}

int kf_write_file(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { close(fd); return -1; }
    p += w, n -= (size_t)w;
  }
  int rc = fsync(fd);
  return close(fd) || rc ? -1 : 0;
}

void kf_fsync_path(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) { fsync(fd); close(fd); }
}

/* what this process launched and recorded: <root>/.spool/summary-<pid>.json */
__attribute__((destructor)) static void summary(void) {
  kf_deploy_report(); /* a no-op unless this process used the driver with a deployment */
  if (!kf_recording() || !n_launches) return;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/.spool", root);
  mkdir(root, 0755);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/.spool/summary-%d.json", root, getpid());
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
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
    kf_put(&b, ", \"seen\": %lu, \"recorded\": %lu, \"layout\": %d, \"app_ms\": [", all[i]->seen,
        all[i]->recorded, all[i]->layout);
    for (int j = 0; j < all[i]->napp; j++) kf_put(&b, "%s%.6f", j ? ", " : "", all[i]->app_ms[j]);
    kf_put(&b, "]}");
  }
  free(all);
  kf_put(&b, "]}\n");
  if (b.s && !kf_write_file(tmp, b.s, b.n)) rename(tmp, path);
  free(b.s);
}
