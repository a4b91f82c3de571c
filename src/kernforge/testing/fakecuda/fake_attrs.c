/* The fake CUDA driver's function attributes (included by fake_cuda.c, which defines func_t).
 * cuFuncSetAttribute, cuFuncSetCacheConfig, cuFuncSetSharedMemConfig, cuKernelSetAttribute and
 * cuKernelSetCacheConfig succeed, and MAX_DYNAMIC_SHARED_SIZE_BYTES (8) raises the dynamic
 * shared memory a launch of the function may use above 48 KiB (at most 227 KiB, as an H100's;
 * more is CUDA_ERROR_INVALID_VALUE). FAKE_CUDA_ATTRS=FILE: each call that succeeds appends
 * "NAME attr ID VALUE", "NAME cache VALUE" or "NAME shared VALUE" and a newline to FILE, so a
 * test can see what was set on which function. */
#define FAKE_DYN_DEFAULT (48 * 1024)
#define FAKE_DYN_MAX (227 * 1024)

static unsigned dyn_limit(const func_t *f) {
  return f->max_dyn ? (unsigned)f->max_dyn : FAKE_DYN_DEFAULT;
}

static void attr_log(const func_t *f, const char *what, int id, int v) {
  const char *path = getenv("FAKE_CUDA_ATTRS");
  if (!path || !*path) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char line[600];
  int n = id < 0 ? snprintf(line, sizeof line, "%s %s %d\n", f->name, what, v)
                 : snprintf(line, sizeof line, "%s %s %d %d\n", f->name, what, id, v);
  if (n > 0 && write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) n = 0;
  close(fd);
}

CUresult cuFuncSetAttribute(func_t *f, int attr, int v) {
  if (!f) return INVALID_HANDLE;
  if (attr == 8) {
    if (v < 0 || v > FAKE_DYN_MAX) return INVALID_VALUE;
    f->max_dyn = v > FAKE_DYN_DEFAULT ? v : FAKE_DYN_DEFAULT;
  } else if (attr == 9 && (v < -1 || v > 100)) {
    return INVALID_VALUE;
  }
  attr_log(f, "attr", attr, v);
  return OK;
}
CUresult cuFuncSetCacheConfig(func_t *f, int config) {
  if (!f || config < 0 || config > 3) return f ? INVALID_VALUE : INVALID_HANDLE;
  attr_log(f, "cache", -1, config);
  return OK;
}
CUresult cuFuncSetSharedMemConfig(func_t *f, int config) {
  if (!f || config < 0 || config > 2) return f ? INVALID_VALUE : INVALID_HANDLE;
  attr_log(f, "shared", -1, config);
  return OK;
}
CUresult cuKernelSetAttribute(int attr, int v, func_t *k, int dev) {
  (void)dev;
  return cuFuncSetAttribute(k, attr, v);
}
CUresult cuKernelSetCacheConfig(func_t *k, int config, int dev) {
  (void)dev;
  return cuFuncSetCacheConfig(k, config);
}
