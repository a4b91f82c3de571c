/* kernforge driver interposer: writing one recorded launch into the spool.
 *
 * A unit is written into <root>/.spool/.tmp-<pid>-<seq>/ and renamed to <root>/.spool/<pid>-<seq>
 * when complete; each module image once into <root>/.spool/images/<id>.bin. Every directory is
 * opened without following a link (a symlink, file or FIFO planted in a shared recording
 * directory fails the unit: nothing is written through it), every file is created under a fresh
 * name (O_EXCL, O_NOFOLLOW) and renamed into place, and a unit that fails half-way is removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kf.h"

static unsigned long seq;

int kf_save_image(int spool, uint64_t id) {
  kf_image_t im;
  if (!kf_image_get(id, &im)) { errno = ENOENT; return -1; }
  if (im.written) return 0;
  int dir = kf_subdir(spool, "images");
  if (dir < 0) return -1;
  char name[64];
  snprintf(name, sizeof name, "%016llx.bin", (unsigned long long)id);
  struct stat st; /* another process of the run may have written it: a regular file only */
  int rc = 0;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
      (size_t)st.st_size != im.size)
    rc = kf_publish_at(dir, name, im.data ? im.data : im.ptr, im.size);
  int err = errno;
  close(dir);
  if (!rc) kf_image_written(id);
  errno = err;
  return rc;
}

void kf_device_json(buf_t *b) {
  int ver = 0, dev = 0, major = 0, minor = 0;
  char name[256] = "unknown";
  if (kf_drv.cuDriverGetVersion) kf_drv.cuDriverGetVersion(&ver);
  if (kf_drv.cuCtxGetDevice && !kf_drv.cuCtxGetDevice(&dev)) {
    if (kf_drv.cuDeviceGetName) kf_drv.cuDeviceGetName(name, sizeof name, dev);
    if (kf_drv.cuDeviceGetAttribute) {
      kf_drv.cuDeviceGetAttribute(&major, 75, dev); /* COMPUTE_CAPABILITY_MAJOR */
      kf_drv.cuDeviceGetAttribute(&minor, 76, dev);
    }
  }
  name[sizeof name - 1] = 0;
  kf_put(b, "\"driver_version\": %d, \"device_ordinal\": %d, \"device\": ", ver, dev);
  kf_put_str(b, name);
  kf_put(b, ", \"compute_capability\": [%d, %d]", major, minor);
}

/* one launch's fields (no braces): function, call, geometry, time, image, attributes, layout */
void kf_launch_json(buf_t *b, const kf_launch_t *l, const kf_fn_t *fn, const kf_image_ref_t *img,
                    size_t psize, float ms, unsigned long call) {
  static const char *kinds[] = {"cubin", "fatbin", "ptx", "text"};
  kf_image_t im = {0};
  if (img->image) kf_image_get(img->image, &im);
  kf_put(b, "\"function\": ");
  kf_put_str(b, fn->name);
  kf_put(b, ", \"call\": %lu, \"api\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], "
      "\"shared_mem\": %u, \"stream\": %llu, \"app_time_ms\": %.6f, ", call, l->api,
      l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->shmem,
      (unsigned long long)(uintptr_t)l->stream, ms);
  if (img->image)
    kf_put(b, "\"image\": \"%016llx\", \"image_kind\": \"%s\", \"loaded_via\": \"%s\", ",
        (unsigned long long)img->image, kinds[im.kind & 3], img->how ? img->how : "");
  else kf_put(b, "\"image\": null, ");
  kf_fattr_json(b, l->f);
  kf_put(b, "\"launch_attrs\": [");
  for (unsigned i = 0; i < l->nattrs; i++) {
    kf_put(b, "%s\"", i ? ", " : "");
    for (unsigned j = 0; j < KF_ATTR_SIZE; j++)
      kf_put(b, "%02x", ((const uint8_t *)l->attrs)[i * KF_ATTR_SIZE + j]);
    kf_put(b, "\"");
  }
  kf_put(b, "], \"param_bytes\": %zu, \"params\": [", psize);
  for (int i = 0; fn->layout == 1 && i < fn->nparams; i++)
    kf_put(b, "%s{\"offset\": %zu, \"size\": %zu}", i ? ", " : "", fn->off[i], fn->size[i]);
  kf_put(b, "]");
}

/* the regions' pre (and, where it differs, post) contents, r<i>.pre / r<i>.post; *changed
 * (k bytes, the caller frees) says which differ */
int kf_region_files(int dir, const kf_alloc_t *r, size_t k, const kf_snap_t *s, char **changed) {
  char name[64];
  int rc = 0;
  if (!(*changed = calloc(k ? k : 1, 1))) return -1;
  for (size_t i = 0; i < k && !rc; i++) {
    (*changed)[i] = s[i].post && memcmp(s[i].pre, s[i].post, r[i].size);
    snprintf(name, sizeof name, "r%zu.pre", i);
    rc = kf_write_at(dir, name, s[i].pre, r[i].size);
    if (!rc && (*changed)[i]) {
      snprintf(name, sizeof name, "r%zu.post", i);
      rc = kf_write_at(dir, name, s[i].post, r[i].size);
    }
  }
  return rc;
}

void kf_regions_json(buf_t *b, const kf_alloc_t *r, size_t k, const char *changed) {
  kf_put(b, "\"regions\": [");
  for (size_t i = 0; i < k; i++)
    kf_put(b, "%s{\"address\": %llu, \"size\": %zu, \"kind\": %d, \"changed\": %d}", i ? ", " : "",
        (unsigned long long)r[i].base, r[i].size, r[i].kind, changed[i]);
  kf_put(b, "]");
}

static void unit_json(buf_t *b, const kf_launch_t *l, const kf_fn_t *fn, const kf_image_ref_t *img,
                      size_t psize, const kf_alloc_t *r, size_t k, const char *changed,
                      float ms, unsigned long call, unsigned long n, uint64_t work) {
  kf_put(b, "{\"format\": \"kernforge-spool\", \"version\": 1, \"pid\": %d, \"seq\": %lu, "
         "\"work_key\": \"%016llx\", ", getpid(), n, (unsigned long long)work);
  kf_launch_json(b, l, fn, img, psize, ms, call);
  kf_put(b, ", ");
  kf_regions_json(b, r, k, changed);
  kf_put(b, ", ");
  kf_device_json(b);
  kf_put(b, "}\n");
}

/* the unit's files into the directory `dir`: 0, or -1 with errno */
struct one_unit {
  const kf_launch_t *l;
  const kf_fn_t *fn;
  const kf_image_ref_t *img;
  const uint8_t *params;
  size_t psize;
  const kf_alloc_t *r;
  size_t k;
  const kf_snap_t *s;
  float ms;
  unsigned long call;
  uint64_t work;
};

static int unit_files(int dir, unsigned long n, void *arg) {
  const struct one_unit *u = arg;
  char *changed = NULL;
  int rc = kf_region_files(dir, u->r, u->k, u->s, &changed);
  if (!rc && u->img->image) /* the source, if NVRTC made it */
    rc = kf_nvrtc_write(dir, u->img->image);
  if (!rc) rc = kf_write_at(dir, "params.bin", u->params, u->psize);
  if (!rc) {
    buf_t b = {malloc(4096), 0, 4096};
    unit_json(&b, u->l, u->fn, u->img, u->psize, u->r, u->k, changed, u->ms, u->call, n,
              u->work);
    rc = !b.s ? (errno = ENOMEM, -1) : kf_write_at(dir, "unit.json", b.s, b.n);
    free(b.s);
  }
  free(changed);
  return rc;
}

/* the final name must be new: a plain rename would replace an empty directory planted there */
static int rename_new(int dir, const char *from, const char *to) {
  int rc = renameat2(dir, from, dir, to, RENAME_NOREPLACE);
  if (rc && (errno == EINVAL || errno == ENOSYS)) { /* a file system without it */
    if (!faccessat(dir, to, F_OK, AT_SYMLINK_NOFOLLOW)) { errno = EEXIST; return -1; }
    rc = renameat(dir, from, dir, to);
  }
  return rc;
}

/* a unit written by `files` into a fresh directory of the spool, with the module images
 * `images` (0 entries skipped); 0 when it is in the spool, -1 with errno (nothing of it left) */
int kf_spool_write(int (*files)(int dir, unsigned long n, void *arg), void *arg,
                   const uint64_t *images, size_t nimages) {
  int spool = kf_spool_open();
  if (spool < 0) return -1;
  char tmp[64], dst[64];
  unsigned long n = 0;
  int rc = -1;
  for (int tries = 0; tries < 8 && rc; tries++) { /* a name planted in the spool is skipped */
    n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, ".tmp-%d-%06lu", getpid(), n);
    rc = mkdirat(spool, tmp, 0755);
    if (rc && errno != EEXIST) break;
  }
  if (rc) { int err = errno; close(spool); errno = err; return -1; }
  snprintf(dst, sizeof dst, "%d-%06lu", getpid(), n);
  int dir = openat(spool, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  rc = dir < 0 ? -1 : 0;
  for (size_t i = 0; i < nimages && !rc; i++)
    if (images[i]) rc = kf_save_image(spool, images[i]);
  if (!rc) rc = files(dir, n, arg);
  if (!rc) rc = fsync(dir);
  if (!rc) rc = rename_new(spool, tmp, dst);
  int err = errno;
  if (dir >= 0) close(dir);
  if (rc) kf_remove_at(spool, tmp);
  else fsync(spool);
  close(spool);
  errno = err;
  return rc;
}

int kf_write_unit(const kf_launch_t *l, const kf_fn_t *fn, const kf_image_ref_t *img,
                  const uint8_t *params, size_t psize, const kf_alloc_t *r, size_t k,
                  const kf_snap_t *s, float ms, unsigned long call, uint64_t work) {
  struct one_unit u = {l, fn, img, params, psize, r, k, s, ms, call, work};
  return kf_spool_write(unit_files, &u, &img->image, 1);
}
