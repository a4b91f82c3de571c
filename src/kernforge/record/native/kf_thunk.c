/* kernforge driver interposer: flushing thunks, so that no driver function a program calls can
 * observe a held launch (kf_defer.c).
 *
 * Why thunks and not a wrapper per function: a wrapper needs each function's prototype, and
 * the driver API has some 600 functions, with more in every release; a program may reach one
 * the interposer has never heard of (a newer driver's, or a hidden one). A thunk needs no
 * prototype: it saves the argument registers of the x86-64 System V ABI (rdi, rsi, rdx, rcx,
 * r8, r9, rax for variadic calls, xmm0-7), calls kf_thunk_enter (which flushes what is held and
 * returns the real function), restores them and tail-jumps to the real function, which sees
 * its stack arguments and return address exactly as the caller left them. So every function
 * that is not on the short list of harmless queries below (device and context attributes,
 * the current context, function and kernel attributes, occupancy, error strings, module and
 * library loads, stream and event creation: none reads, writes or orders device memory) is a
 * flushing thunk, known or not:
 * - exported under the driver's names (kf_names.h: CUDA 13.0's API and older ABI versions),
 *   for programs linked against libcuda; a name the driver lacks returns CUDA_ERROR_UNKNOWN;
 * - handed out by dlsym and cuGetProcAddress (kf_hooks.c) for any other driver function while
 *   deferral is on: a pool of KF_POOL thunks, one per distinct function pointer. When the pool
 *   is used up, deferral is turned off for the process (after a flush), never a function left
 *   unguarded while launches may be held.
 * While a deployment guards globals (kf_guard.c) the thunks are handed out too, and each tells
 * kf_guard_write the caller's argument registers, so that a copy or memset into a guarded
 * global is seen (what each function writes, kf_writes_kind, is known by its name: a pool
 * thunk's from the name it was looked up by, a named thunk's from its own).
 * What stays open: a program linked by symbol to a driver function newer than kf_names.h.
 * The thunks cost a few nanoseconds a call and flush only when something is held. */
#define _GNU_SOURCE
#include <string.h>
#include "kf.h"
#include "kf_names.h"

#define KF_POOL 4096
#define KF_NAMED_BASE 0x100000

void *kf_slot(void **slot, const char *name, void *self);
__attribute__((visibility("hidden"), used)) void *kf_thunk_enter(unsigned long i,
                                                                   const unsigned long *regs);

#if defined(__x86_64__)
#define NAMED_ASM(name)                                                                    \
  ".balign 16\n.globl " #name "\n.type " #name ",@function\n" #name ":\n"                   \
  "endbr64\npushq $(0x100000 + kf_named_i)\njmp kf_thunk_common\n.size " #name ",.-" #name  \
  "\n.set kf_named_i, kf_named_i + 1\n"
__asm__(".text\n"
        ".balign 16\n"
        "kf_thunk_common:\n"
        "  pushq %rbp\n  movq %rsp, %rbp\n  subq $200, %rsp\n"
        "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n  movdqu %xmm2, 32(%rsp)\n"
        "  movdqu %xmm3, 48(%rsp)\n  movdqu %xmm4, 64(%rsp)\n  movdqu %xmm5, 80(%rsp)\n"
        "  movdqu %xmm6, 96(%rsp)\n  movdqu %xmm7, 112(%rsp)\n"
        "  movq %rdi, 128(%rsp)\n  movq %rsi, 136(%rsp)\n  movq %rdx, 144(%rsp)\n"
        "  movq %rcx, 152(%rsp)\n  movq %r8, 160(%rsp)\n  movq %r9, 168(%rsp)\n"
        "  movq %rax, 176(%rsp)\n"
        "  movq 8(%rbp), %rdi\n  leaq 128(%rsp), %rsi\n  call kf_thunk_enter\n"
        "  movq %rax, %r11\n"
        "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n  movdqu 32(%rsp), %xmm2\n"
        "  movdqu 48(%rsp), %xmm3\n  movdqu 64(%rsp), %xmm4\n  movdqu 80(%rsp), %xmm5\n"
        "  movdqu 96(%rsp), %xmm6\n  movdqu 112(%rsp), %xmm7\n"
        "  movq 128(%rsp), %rdi\n  movq 136(%rsp), %rsi\n  movq 144(%rsp), %rdx\n"
        "  movq 152(%rsp), %rcx\n  movq 160(%rsp), %r8\n  movq 168(%rsp), %r9\n"
        "  movq 176(%rsp), %rax\n"
        "  leave\n  leaq 8(%rsp), %rsp\n  jmp *%r11\n"
        /* the pool: thunk i pushes i; 16 bytes each */
        ".balign 16\n.globl kf_pool_thunks\n.hidden kf_pool_thunks\nkf_pool_thunks:\n"
        ".set kf_pool_i, 0\n"
        ".rept 4096\n.balign 16\nendbr64\npushq $kf_pool_i\njmp kf_thunk_common\n"
        ".set kf_pool_i, kf_pool_i + 1\n.endr\n"
        ".balign 16\n.globl kf_pool_end\n.hidden kf_pool_end\nkf_pool_end:\n"
        /* the named thunks: the k-th pushes KF_NAMED_BASE + k */
        ".balign 16\n.globl kf_named_thunks\n.hidden kf_named_thunks\nkf_named_thunks:\n"
        ".set kf_named_i, 0\n" KF_FLUSHING(NAMED_ASM)
        ".balign 16\n.globl kf_named_end\n.hidden kf_named_end\nkf_named_end:\n");
extern char kf_pool_thunks[], kf_pool_end[], kf_named_thunks[], kf_named_end[];
#define STR(name) #name,
static const char *const named[] = {KF_FLUSHING(STR)};
#define NNAMED (sizeof named / sizeof *named)
static void *named_slot[NNAMED];
static unsigned char named_kind[NNAMED]; /* kf_writes_kind + 1, 0 = not asked yet */
_Static_assert(KF_POOL == 4096, "the pool's size is written in the assembly above");
#endif

static void *pool[KF_POOL];
static unsigned char pool_kind[KF_POOL]; /* what each writes (kf_writes_kind) */
static unsigned npool;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult no_driver(void) { return 999; /* CUDA_ERROR_UNKNOWN */ }

/* regs: the caller's rdi, rsi, rdx, rcx, r8, r9 (a write to a guarded global is seen there) */
void *kf_thunk_enter(unsigned long i, const unsigned long *regs) {
  void *target = NULL;
#if defined(__x86_64__)
  int kind = KF_WRITES_ANY;
  if (i >= KF_NAMED_BASE && i - KF_NAMED_BASE < NNAMED) {
    unsigned long k = i - KF_NAMED_BASE;
    target = kf_slot(&named_slot[k], named[k], kf_named_thunks + 16 * k);
    if (kf_guard_armed()) {
      unsigned char c = __atomic_load_n(&named_kind[k], __ATOMIC_RELAXED);
      if (!c) __atomic_store_n(&named_kind[k], c = (unsigned char)(kf_writes_kind(named[k], 1) + 1),
                               __ATOMIC_RELAXED);
      kind = c - 1;
    }
  } else if (i < KF_POOL) {
    target = __atomic_load_n(&pool[i], __ATOMIC_ACQUIRE);
    kind = __atomic_load_n(&pool_kind[i], __ATOMIC_RELAXED);
  }
  if (kf_guard_armed()) kf_guard_write(kind, regs);
#else
  (void)i, (void)regs;
#endif
  kf_defer_flush();
  return target ? target : (void *)no_driver;
}

static int is_thunk(const void *p) {
#if defined(__x86_64__)
  const char *c = p;
  return (c >= kf_pool_thunks && c < kf_pool_end) || (c >= kf_named_thunks && c < kf_named_end);
#else
  (void)p;
  return 0;
#endif
}

void *kf_thunk_for(void *real, const char *name, int exact) {
#if defined(__x86_64__)
  if (!real || is_thunk(real)) return real;
  unsigned char kind = (unsigned char)kf_writes_kind(name, exact);
  pthread_mutex_lock(&pool_lock);
  void *t = NULL;
  for (unsigned i = 0; i < npool && !t; i++)
    if (pool[i] == real) { /* looked up again, maybe by another name: both kinds hold */
      t = kf_pool_thunks + 16 * i;
      if (pool_kind[i] != kind) __atomic_store_n(&pool_kind[i], KF_WRITES_ANY, __ATOMIC_RELAXED);
    }
  if (!t && npool < KF_POOL) {
    __atomic_store_n(&pool_kind[npool], kind, __ATOMIC_RELAXED);
    __atomic_store_n(&pool[npool], real, __ATOMIC_RELEASE);
    t = kf_pool_thunks + 16 * npool++;
  }
  pthread_mutex_unlock(&pool_lock);
  if (t) return t;
  kf_defer_disable("the program looked up more than 4096 driver functions");
  kf_seq_disable("the program looked up more than 4096 driver functions");
  kf_guard_blind();
#else
  (void)name, (void)exact;
#endif
  return real;
}

void *kf_thunk_named(const char *name, void *found) {
#if defined(__x86_64__)
  if (found && (char *)found >= kf_named_thunks && (char *)found < kf_named_end &&
      !kf_driver_sym(name, found))
    return NULL;
#else
  (void)name;
#endif
  return found;
}

/* ---- harmless: they neither read, write nor order device memory ------------------------------ */
static const char *const harmless_prefix[] = {
    "cuDeviceGet", "cuDeviceTotalMem", "cuCtxGet", "cuFuncGet", "cuKernelGet", "cuModuleGet",
    "cuLibraryGet", "cuOccupancy", "cuPointerGetAttribute", "cuMemGetInfo",
    "cuMemGetAddressRange", "cuStreamGetPriority", "cuStreamGetFlags", "cuStreamGetCtx",
    "cuStreamGetId", "cuStreamGetDevice", "cuStreamCreate", "cuEventElapsedTime",
    "cuModuleLoad", "cuLibraryLoad", "cuLink", "cuCtxPushCurrent", "cuGetError",
    "cuStreamGetCaptureInfo", "cuStreamIsCapturing"};
static const char *const harmless_exact[] = {
    "cuInit", "cuDriverGetVersion", "cuDeviceComputeCapability", "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxGetState", "cuCtxSetCurrent",
    "cuGetExportTable", "cuFuncIsLoaded", "cuFuncLoad",
    "cuModuleEnumerateFunctions", "cuLibraryEnumerateKernels", "cuMemGetAllocationGranularity",
    "cuMemGetAllocationPropertiesFromHandle", "cuEventCreate", "cuMemPoolGetAttribute", "cuThreadExchangeStreamCaptureMode"};

int kf_harmless(const char *name) {
  for (size_t i = 0; i < sizeof harmless_exact / sizeof *harmless_exact; i++)
    if (!strcmp(name, harmless_exact[i])) return 1;
  for (size_t i = 0; i < sizeof harmless_prefix / sizeof *harmless_prefix; i++)
    if (!strncmp(name, harmless_prefix[i], strlen(harmless_prefix[i]))) return 1;
  return 0;
}
