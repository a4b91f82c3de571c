/* kernforge driver interposer: a deployment entry (kf_deploy.c) and its parsing (kf_spec.c). */
#ifndef KF_DEPLOY_H
#define KF_DEPLOY_H
#include "kf.h"

#define MAX_CTX 16
#define SPEC_LIMIT (256ULL << 20)  /* bytes of the line file */
#define IMAGE_LIMIT (1ULL << 30)   /* bytes of one module image */
#define KEY_LIMIT 32768            /* parameter bytes of one launch (CUDA allows 32764) */
#define MAX_JIT 4
#define MAX_COMP 8 /* companions of a fused entry: launches that follow its kernel in a step */
#define MAX_ATTRS 16 /* launch attributes of one recorded launch in a line */
#define MAX_GUARD 8  /* guarded globals of one line */
#define GUARD_LIMIT (1U << 20) /* bytes of one guarded global */
/* a global (a __constant__ or __device__ variable) whose value the entry's kernel baked in:
 * the symbol `name` of the module the launched kernel comes from (its image `image`, 0 = the
 * launched kernel's, whatever it is), `size` bytes whose FNV-1a 64 is `hash` (kf_guard.c) */
typedef struct {
  char *name;
  uint64_t image, hash;
  size_t size;
} kf_guard_t;
typedef struct {
  char *name;         /* the companion kernel's (mangled) name */
  uint8_t *params;    /* its parameter bytes (len), compared except at the slots */
  uint8_t *same;      /* per byte, or NULL: 1 = "xx" in the line, compared with the chain's
                         first held step's launch of this companion instead of params */
  size_t len, nslots;
  size_t *slot;       /* ascending byte offsets of 8-byte words: the step's IN or OUT pointer */
  uint8_t *is_out;    /* per slot: 1 = OUT, 0 = IN */
  uint64_t image;     /* the id of the image the companion was recorded from, 0 = any */
  int geom;           /* 1: launched with grid, block and shmem only (as recorded), 0: any */
  unsigned grid[3], block[3], shmem;
  uint8_t *attrs;     /* the recorded launch attributes (KF_ATTR_SIZE each), NULL: none */
  unsigned nattrs;
} kf_comp_t;
typedef struct kf_entry {
  char *name, *image, *entry;
  unsigned grid[3], block[3], shmem, ngrid[3], nblock[3], nshmem;
  uint8_t *key, *mask;
  size_t keylen;
  int any_key, njit, carveout;
  uint64_t source; /* the recorded kernel's image id, 0 = any */
  CUjit_option jit[MAX_JIT];
  unsigned jitv[MAX_JIT];
  CUcontext ctx[MAX_CTX];  /* the contexts its function is loaded in (kf_entry_function), */
  CUfunction fn[MAX_CTX];  /* the function in each (NULL: none from here on), */
  CUdevice dev[MAX_CTX];   /* and each context's device (-1: not known) */
  unsigned long used, failed, launch_failed, unknown_image;
  int disabled;
  unsigned fuse;            /* T: steps of the fused entry, 0 = a one-launch replacement */
  size_t fuse_in, fuse_out; /* byte offsets of the IN and OUT pointers in the parameters */
  unsigned ncomp;           /* companions, in the order they follow each step's launch */
  unsigned comp_fields;     /* fields a companion in the line: 4, 5 (its image), 6 (geometry) */
  kf_comp_t *comp;
  unsigned long groups, unfused; /* fused launches made; held launches run as the originals */
  uint8_t *attrs;   /* a fused entry's recorded launch attributes ("attrs:0:"), NULL: none */
  unsigned nattrs;
  kf_guard_t guard[MAX_GUARD]; /* "guard:" fields: checked before the entry's kernel runs */
  unsigned nguard;
  int guard_ok;               /* verified in guard_ctx, no guarded byte written since then */
  unsigned long guard_epoch, guard_checks, guard_refused;
  CUcontext guard_ctx;
  int unfused_next;       /* "unfused:next": held launches run unfused by the next line's entry */
  struct kf_entry *one;   /* that entry, once linked after reading the file (kf_unfused.c) */
  unsigned long unfused_one; /* held launches of this fused entry that ran `one` */
  size_t line;               /* its line in the file, from 1 */
} kf_entry_t;

/* the id of the image fn (launched as l) comes from, 0 when unknown; asked once per function */
uint64_t kf_launch_image(const kf_launch_t *l, kf_fn_t *fn);
/* whether fn, launched as l, comes from the image companion k was recorded from (any image
 * when k names none); an image that cannot be known is not k's (one message) */
int kf_comp_image_ok(const kf_comp_t *k, const kf_launch_t *l, kf_fn_t *fn);
/* the entry's function in the current context, loaded on first use (NULL and *why if not) */
CUfunction kf_entry_function(kf_entry_t *e, const char **why);
/* under kf_lock: hold (or fuse) a launch matching the fused entry e; 1 when held (*rc set),
 * 0 when it cannot be (the caller flushes and runs it as any other launch) */
int kf_defer_launch(kf_entry_t *e, kf_launch_t *l, kf_fn_t *fn, const uint8_t *p, size_t n,
                    CUresult *rc);
/* under kf_lock: hold a launch that is the companion a chain on its stream waits for; as
 * kf_defer_launch */
int kf_defer_companion(kf_launch_t *l, kf_fn_t *fn, const uint8_t *p, size_t n, CUresult *rc);

/* whether entry e (not disabled) replaces launch l of fn (parameters p, n bytes): its
 * geometry, key and source image (kf_deploy.c) */
int kf_entry_applies(kf_entry_t *e, const kf_launch_t *l, kf_fn_t *fn, const uint8_t *p,
                     size_t n);
/* one-launch entry e's function for launch l of fn now: its guards read, loaded once per
 * context; NULL when a guard refuses it (*look_on = 1: a later entry may apply) or it cannot
 * be loaded (*look_on = 0); e is then off from now on, told once (kf_deploy.c) */
CUfunction kf_entry_replacement(kf_entry_t *e, const kf_launch_t *l, kf_fn_t *fn, int *look_on);
/* launch l as entry e's function f runs it: e's new grid, block and dynamic shared memory */
kf_launch_t kf_swapped(const kf_launch_t *l, const kf_entry_t *e, CUfunction f);

/* ---- held launches run unfused (kf_unfused.c) ---- */
/* launch l (function and geometry set) with the parameter bytes p (n) in fn's layout */
CUresult kf_run_params(const kf_fn_t *fn, size_t n, kf_launch_t l, uint8_t *p);
/* held stencil launch l of fused entry e (fn, parameters p, n bytes) run unfused: by e's
 * one-launch entry ("unfused:next") where it replaces l, else (or when it fails) as itself */
CUresult kf_run_unfused(kf_entry_t *e, kf_fn_t *fn, size_t n, const kf_launch_t *l,
                        uint8_t *p);
/* fused entry e is off (a guard refused it, its function could not load or launch): its
 * launches run as the originals from now on, its one-launch entry's included */
void kf_fused_off(kf_entry_t *e);
/* link every "unfused:next" entry of entries[0..n) (in the file's order) to the one-launch
 * entry of the next line; one message for those that have none */
void kf_unfused_link(kf_entry_t *entries, size_t n, const char *path);
extern unsigned long kf_unfused_one; /* held launches run by a one-launch entry, all entries */

/* whether launch l has the attributes `attrs` (n of them, as recorded) in that order: the
 * same ids, and the same bytes of each value that the attribute uses (kf_guard.c) */
int kf_attrs_match(const uint8_t *attrs, unsigned n, const kf_launch_t *l);
/* whether every global e guards holds the bytes e was built for, in the module l's function
 * comes from (read when `again`, or not yet read, or after a write that may have reached
 * one); 0 and *why */
int kf_guards_ok(kf_entry_t *e, const kf_launch_t *l, kf_fn_t *fn, int again, const char **why);
/* one message per entry: its guard failed (why), so `what` runs from now on */
void kf_guard_refused(kf_entry_t *e, const char *why, const char *what);
/* FNV-1a 64 of n bytes (0 written as 1), as kf_image_id and deploy/native.py's image_id */
uint64_t kf_fnv64(const void *p, size_t n);

/* the bytes of a regular file of at most `limit` bytes, NUL-terminated (free them); else NULL
 * and *why (a FIFO, a device or a directory is never read, nor waited for) */
char *kf_read_regular(const char *path, unsigned long long limit, size_t *n, const char **why);
/* one line (NUL-terminated, no newline) into *e; NULL, or what is wrong with it */
const char *kf_parse_entry(char *line, kf_entry_t *e);
void kf_entry_free(kf_entry_t *e);
#endif
