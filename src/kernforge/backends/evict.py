"""Cache eviction between timed CPU runs, sized to what a run could have left warm.

A timed run of a CPU kernel can only leave warm the memory it touched: its argument buffers
(which the restore before it has just rewritten, too). Those lines are written back and
evicted from every cache level, of every core, by the cache-line flush instruction
(``clflush`` on x86-64, ``dc civac`` on AArch64), issued by a tiny C helper built once with
the host compiler (cached like kernels). Its cost is proportional to the unit's footprint,
not to the machine's last-level cache: a 128 KiB unit costs microseconds where sweeping a
buffer twice a 32 MiB L3 costs tens of milliseconds per timed run.

Where the footprint is larger than twice the cache a sweep would cover, or no helper can be
built (another architecture, no compiler), the caller sweeps a buffer instead."""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core import CompileError

ENTRY = "kf_evict"
SOURCE = r"""
/* kernforge: write back and evict address ranges from every cache level */
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
static inline void line_out(const char *p) { _mm_clflush(p); }
static inline void fence(void) { _mm_mfence(); }
#elif defined(__aarch64__)
static inline void line_out(const char *p) {
    __asm__ volatile("dc civac, %0" :: "r"(p) : "memory");
}
static inline void fence(void) { __asm__ volatile("dsb ish" ::: "memory"); }
#else
#error "no cache-line flush instruction known for this architecture"
#endif
int kf_evict(const uintptr_t *addr, const size_t *size, int n, size_t line) {
    for (int i = 0; i < n; i++) {
        uintptr_t p = addr[i] & ~(uintptr_t)(line - 1), end = addr[i] + size[i];
        for (; p < end; p += line) line_out((const char *)p);
    }
    fence();
    return 0;
}
"""
LINE_BYTES = 64  # the smallest line in use; a larger real line is only flushed twice
FALLBACK_LLC_BYTES = 32 << 20


Ranges = Sequence[tuple[int, int]]  # (address, bytes)


def build(compile_c: Callable[[str, list[str], Path, str], Any], cache: Path,
          compiler_id: str) -> Callable[[Ranges], None] | None:
    """The evict(ranges) function, or None when no helper builds here. ``compile_c`` is the
    backend's ``_build(code, flags, out, entry)``; the library is cached under ``cache``."""
    flags = ["-O2", "-shared", "-fPIC"]
    key = hashlib.sha256(f"{SOURCE}\0{flags}\0{compiler_id}".encode()).hexdigest()[:24]
    path = cache / f"evict-{key}.so"
    try:
        if not path.is_file():
            compile_c(SOURCE, flags, path, ENTRY)
        fn = ctypes.CDLL(str(path))[ENTRY]
    except (CompileError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    fn.restype = ctypes.c_int

    def evict(ranges: Ranges) -> None:
        n = len(ranges)
        if not n:
            return
        addr = (ctypes.c_size_t * n)(*(a for a, _ in ranges))
        size = (ctypes.c_size_t * n)(*(s for _, s in ranges))
        fn(addr, size, n, LINE_BYTES)

    return evict


def llc_bytes() -> int:
    """Size of the last-level cache of cpu0 (sysfs), else a generous fallback."""
    best: tuple[int, int] = (0, 0)
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((d / "level").read_text())
            text = (d / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, (level, int(digits) * mult))
    return best[1] or FALLBACK_LLC_BYTES


def footprint(ranges: Ranges) -> int:
    return sum(s for _, s in ranges)
