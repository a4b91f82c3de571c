/* kernforge driver interposer: shared declarations.
 *
 * The few CUDA driver types and prototypes the interposer needs are declared here, so that it
 * builds with the host C compiler alone (no CUDA headers, no GPU). See docs/recording-native.md.
 */
#ifndef KF_H
#define KF_H
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUlibrary, *CUkernel, *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUjit_option;
typedef int CUlibraryOption;
typedef struct {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  void *attrs;
  unsigned numAttrs;
} CUlaunchConfig;

#define KF_OK 0
#define KF_PTDS_FLAG 2ULL /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */

/* dlsym and what it calls run before a preloaded sanitizer runtime is ready (it resolves its
 * own interceptors through dlsym): they stay uninstrumented in a sanitizer build */
#define KF_RAW __attribute__((no_sanitize("address", "undefined")))
/* and compare strings themselves: the sanitizer's strcmp is not ready either */
KF_RAW static inline int kf_prefix(const char *s, const char *prefix) {
  while (*prefix && *s == *prefix) s++, prefix++;
  return !*prefix;
}
KF_RAW static inline int kf_same(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

/* ---- the real driver (kf_real.c) ----------------------------------------------------------- */
typedef struct {
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuFuncGetName)(const char **, CUfunction);
  CUresult (*cuKernelGetName)(const char **, CUkernel);
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
  CUresult (*cuKernelGetParamInfo)(CUkernel, size_t, size_t *, size_t *);
  CUresult (*cuFuncGetModule)(CUmodule *, CUfunction);
  CUresult (*cuKernelGetLibrary)(CUlibrary *, CUkernel);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuCtxGetDevice)(CUdevice *);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
  CUresult (*cuEventCreate)(void **, unsigned);
  CUresult (*cuEventRecord)(void *, CUstream);
  CUresult (*cuEventSynchronize)(void *);
  CUresult (*cuEventElapsedTime)(float *, void *, void *);
  CUresult (*cuEventDestroy)(void *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext *);
  CUresult (*cuStreamIsCapturing)(CUstream, int *);
  CUresult (*cuThreadExchangeStreamCaptureMode)(int *);
  CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
} kf_driver_t;
extern kf_driver_t kf_drv;
KF_RAW void *kf_real_dlsym(void *handle, const char *name);
KF_RAW void *kf_next_dlsym(const void *caller, const char *name); /* dlsym(RTLD_NEXT) as `caller` */
void *kf_driver_sym(const char *name, void *self); /* what a wrapper `self` of `name` calls */
KF_RAW void *kf_own_symbol(const char *name); /* the interposer's own export of `name`, or NULL */
void *kf_libcuda(void);
void kf_resolve_driver(void);
void kf_hold(CUstream stream); /* queue a spinning kernel (KERNFORGE_GATE_US) */
void kf_hold_forget(void);     /* under kf_lock: its kernel is loaded again in every context */
void kf_log(const char *fmt, ...);

/* ---- state (kf_state.c) -------------------------------------------------------------------- */
typedef struct {
  CUdeviceptr base;
  size_t size;
  int kind;       /* KF_ALLOC_* */
  uint64_t owner; /* image id for module globals, else 0 */
} kf_alloc_t;
enum { KF_ALLOC_MEM, KF_ALLOC_MANAGED, KF_ALLOC_ASYNC, KF_ALLOC_VMM, KF_ALLOC_GLOBAL };
void kf_alloc_add(CUdeviceptr base, size_t size, int kind, uint64_t owner);
void kf_alloc_remove(CUdeviceptr base);
void kf_alloc_unmap(CUdeviceptr base, size_t size);
int kf_alloc_find(CUdeviceptr p, kf_alloc_t *out);
size_t kf_alloc_snapshot(kf_alloc_t **out); /* caller frees */

enum { KF_IMAGE_CUBIN, KF_IMAGE_FATBIN, KF_IMAGE_PTX, KF_IMAGE_TEXT };
typedef struct {
  uint64_t id;       /* FNV-1a 64 of the image bytes */
  const void *ptr;   /* the image as loaded (static data of a loaded object) */
  size_t size;
  int kind;          /* KF_IMAGE_* */
  const char *how;   /* the driver call that loaded it */
  void *data;        /* a private copy when the caller's buffer may be freed */
  int written;
} kf_image_t;
uint64_t kf_image_add(const void *image, const char *how);
uint64_t kf_image_id(const void *image); /* the id kf_image_add would give these bytes */
int kf_image_get(uint64_t id, kf_image_t *out);
void kf_image_written(uint64_t id);
size_t kf_image_size(const void *image, int *kind);

typedef struct {
  uint64_t image;  /* image id, 0 = unknown */
  const char *how;
} kf_image_ref_t;
/* module/library/kernel/function handle -> image, through parent links */
void kf_handle_image(const void *handle, uint64_t image, const char *how);
void kf_handle_link(const void *child, const void *parent);
int kf_handle_lookup(const void *handle, kf_image_ref_t *out);
void kf_fn_image(CUfunction f, kf_image_ref_t *out); /* a launched function's image */

/* per-function cache: name, filter decision, counters, parameter layout */
#define KF_APP_TIMED 5
#define KF_WORK_KEYS 8
typedef struct {
  const void *fn;
  char *name; /* the whole name, never cut */
  unsigned long seen, recorded;
  int matches;
  int layout;    /* 0 not asked, 1 known, -1 unknown */
  int nparams;
  size_t *off, *size;
  int deployed; /* 0 not asked, 1 a deployment entry names it (or a companion), -1 none */
  int companion; /* a fused entry names it as a companion (asked with deployed) */
  size_t dep_first, dep_count; /* which entries name it (kf_deploy.c's order by name) */
  uint64_t image; /* its image id, for deployment (asked once: image_asked) */
  int image_asked;
  float app_ms[KF_APP_TIMED]; /* unrecorded launches timed with events, the first excluded */
  uint64_t app_key[KF_APP_TIMED]; /* the work of each (kf_work_key) */
  int napp;
  unsigned long epoch; /* kf_fn_forget's count when it was made: older ones are not used */
  uint64_t work[KF_WORK_KEYS]; /* the work of its recorded launches: only such are timed */
  int nwork;
} kf_fn_t;
kf_fn_t *kf_fn_get(CUfunction f);
size_t kf_fn_all(kf_fn_t ***out); /* caller frees the array; forgotten functions included */
/* a context ended: every function handle may name another kernel from now on, so each is
 * asked again (name, layout, image) at its next launch; what was cached stays allocated */
void kf_fn_forget(void);
void kf_base_name(const char *mangled, char *out, size_t cap); /* cap >= 2 * strlen + 1 */

/* ---- recording (kf_record.c) --------------------------------------------------------------- */
typedef struct {
  CUfunction f;
  unsigned grid[3], block[3], shmem;
  CUstream stream;
  void **params;
  void **extra;
  const char *api;
  const void *attrs; /* cuLaunchKernelEx's launch attributes (CUlaunchAttribute, 72 bytes each) */
  unsigned nattrs;
  void *drv; /* the driver's cuLaunchKernel (or cuLaunchKernelEx when ex) this launch calls */
  int ex;
} kf_launch_t;
#define KF_ATTR_SIZE 72
CUresult kf_launch(kf_launch_t *l, CUresult (*real)(kf_launch_t *, void *), void *ctx);
int kf_recording(void);
uint8_t *kf_param_bytes(kf_launch_t *l, kf_fn_t *fn, size_t *n);
/* what decides a launch's work: function, geometry, attributes and parameter bytes, a word
 * that points into a known allocation counted as 0 (FNV-1a 64; never 0) */
uint64_t kf_work_key(const kf_launch_t *l, const uint8_t *params, size_t psize);
extern __thread int kf_suppressed;
extern __thread int kf_locked; /* this thread holds kf_lock (a flush from it would deadlock) */
CUresult kf_launch_now(kf_launch_t *l); /* l as it is, through l->drv (kf_hooks.c) */
extern pthread_mutex_t kf_lock; /* error-checking: a thread never waits for itself */
/* take kf_lock and set kf_locked: 0; else (EDEADLK) this thread holds it already, a signal
 * handler running inside the interposer called the driver: nothing is taken, the caller goes
 * on without it (kf_record.c) */
int kf_lock_take(void);
void kf_lock_give(void);

/* ---- I/O (kf_io.c) ----------------------------------------------------------------------- */
typedef struct { char *s; size_t n, cap; } buf_t;
void kf_put(buf_t *b, const char *fmt, ...);
void kf_put_str(buf_t *b, const char *s);
/* files are created safely: a fresh name only (O_EXCL), no link followed (O_NOFOLLOW), within
 * the size limit (RLIMIT_FSIZE: EFBIG, never SIGXFSZ); -1 with errno on failure */
int kf_write_at(int dir, const char *name, const void *data, size_t n);
int kf_subdir(int parent, const char *name); /* made if missing; a real directory, else -1 */
int kf_spool_open(void);                     /* <root>/.spool, -1 with errno */
int kf_publish_at(int dir, const char *name, const void *data, size_t n); /* tmp + rename */
void kf_remove_at(int dir, const char *name); /* a unit directory left by a failed write */
long long kf_env_ll(const char *name, long long dflt, long long lo, long long hi);
void kf_say_once(int *said, const char *fmt, ...); /* kf_log the first time only */

/* ---- function attributes the program set (kf_funcattr.c) ---------------------------------- */
void kf_fattr_json(buf_t *b, const void *f); /* "func_attrs": {...}, of f's; nothing if none */
void kf_fattr_alias(const void *function, const void *kernel); /* cuKernelGetFunction's */
void kf_fattr_forget(void); /* a context ended: its functions' are dropped (kf_ctx.c) */

/* ---- the spool (kf_spool.c) ---------------------------------------------------------------- */
typedef struct { void *pre, *post; } kf_snap_t;
int kf_write_unit(const kf_launch_t *l, const kf_fn_t *fn, const kf_image_ref_t *img,
                  const uint8_t *params, size_t psize, const kf_alloc_t *r, size_t k,
                  const kf_snap_t *s, float ms, unsigned long call, uint64_t work);
int kf_spool_write(int (*files)(int dir, unsigned long n, void *arg), void *arg,
                   const uint64_t *images, size_t nimages);
void kf_launch_json(buf_t *b, const kf_launch_t *l, const kf_fn_t *fn, const kf_image_ref_t *img,
                    size_t psize, float ms, unsigned long call);
int kf_region_files(int dir, const kf_alloc_t *r, size_t k, const kf_snap_t *s, char **changed);
void kf_regions_json(buf_t *b, const kf_alloc_t *r, size_t k, const char *changed);
void kf_device_json(buf_t *b);

/* ---- sequences: a time loop's launches recorded as one unit (kf_sequence.c) ---------------- */
extern long long kf_seq_want; /* KERNFORGE_SEQUENCE: launches of a kernel per sequence, 0 off */
extern unsigned long n_failed, n_recorded, n_budget;
size_t kf_regions(const uint8_t *p, size_t n, uint64_t image, kf_alloc_t **out);
int kf_budget_left(unsigned long long bytes); /* whether `bytes` more fit the --max-mb budget */
void kf_budget_use(unsigned long long bytes);
void kf_write_failed(const kf_fn_t *fn, int err);
int kf_seq_enabled(void); /* sequences are recorded: observations must be seen (thunks) */
/* under kf_lock: a launch while a sequence is open. 1: it is the sequence's (run, *rc set);
 * 0: the sequence ended before it (written as far as it went), the caller handles it */
int kf_seq_step(kf_launch_t *l, kf_fn_t *fn, unsigned long call, CUresult *rc,
                CUresult (*real)(kf_launch_t *, void *), void *ctx);
/* under kf_lock: a launch chosen for recording starts a sequence; as kf_seq_step */
int kf_seq_begin(kf_launch_t *l, kf_fn_t *fn, unsigned long call, CUresult *rc,
                 CUresult (*real)(kf_launch_t *, void *), void *ctx);
int kf_seq_open(void);
void kf_seq_flush(void); /* something could observe memory: the open sequence ends (any thread) */
void kf_seq_disable(const char *why); /* the thunks ran out: one-launch units from now on */

/* ---- NVRTC (kf_nvrtc.c) -------------------------------------------------------------------- */
void *kf_nvrtc_dlsym(const char *name, void *real); /* dlsym's answer for an nvrtc* name */
int kf_nvrtc_write(int dir, uint64_t image); /* DIR/nvrtc.json when NVRTC made it */

/* ---- deploy (kf_deploy.c) ------------------------------------------------------------------ */
int kf_deploy_active(void);
int kf_deploy_covers(kf_fn_t *fn); /* an entry or a companion names it; cached per function */
/* returns 1 when the launch was replaced (result in *rc), 0 to run the original */
int kf_deploy_try(kf_launch_t *l, kf_fn_t *fn, const uint8_t *params, size_t psize, CUresult *rc,
                  CUresult (*real)(kf_launch_t *, void *), void *ctx);
int kf_deploy_fusing(void); /* fused entries exist and KERNFORGE_FUSE is not 0 */
/* under kf_lock: every entry's function loaded in context c (c NULL: in any context of
 * device dev, dev < 0: in any context) is loaded again at its next use (kf_ctx.c) */
void kf_deploy_forget(CUcontext c, CUdevice dev);

/* ---- deferral (kf_defer.c) and the flushing thunks (kf_thunk.c) ---------------------------- */
int kf_defer_enabled(void);          /* launches may be held now */
int kf_guarding(void);               /* functions handed out as flushing thunks: defer, sequences */
void kf_defer_flush(void);           /* run what is held (any thread; a no-op when nothing is) */
void kf_defer_flush_locked(void);    /* the same, under kf_lock */
void kf_defer_disable(const char *why); /* flush, and hold nothing from now on (one message) */
extern unsigned long kf_defer_groups, kf_defer_unfused;
int kf_harmless(const char *name);   /* a driver function that cannot observe held launches */
/* a flushing thunk that calls `real` (real if none), looked up as `name` (`exact`: a symbol
 * name, as dlsym's; else a base name, as cuGetProcAddress's) */
void *kf_thunk_for(void *real, const char *name, int exact);

/* ---- guarded globals (kf_guard.c): writes that may reach them ---------------------------------- */
/* which registers of a driver function hold the device range it writes (kf_writes_kind) */
enum { KF_WRITES_NONE, KF_WRITES_RDX, KF_WRITES_RCX, KF_WRITES_R8, KF_WRITES_SET8,
       KF_WRITES_SET16, KF_WRITES_SET32, KF_WRITES_SET2D8, KF_WRITES_SET2D16, KF_WRITES_SET2D32,
       KF_WRITES_ANY };
int kf_writes_kind(const char *name, int exact);
int kf_guard_armed(void);  /* some guarded global was verified: writes are looked at */
void kf_guard_dirty(void); /* something may have written a guarded global */
void kf_guard_blind(void); /* a function is left unguarded: no guard can be verified any more */
int kf_deploy_guarded(void); /* a deployment entry guards globals (kf_deploy.c) */
void kf_guard_write(int kind, const unsigned long *regs); /* rdi, rsi, rdx, rcx, r8, r9 */
void *kf_thunk_named(const char *name, void *found); /* NULL where `found` is the interposer's
                                                        thunk of a name the driver lacks */

/* counts to KERNFORGE_DEPLOY_LOG, only from a process that looked up the driver API (so a
 * shell that started the program, exiting after it, does not overwrite its counts) */
void kf_deploy_report(void);
#endif
