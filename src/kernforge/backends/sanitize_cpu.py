"""ThreadSanitizer and AddressSanitizer runs of a cpu-backend variant (the validation gate).

The variant's final source (constants, OpenMP schedule, ``#define``s and flags exactly as the
backend builds it) is compiled with ``-fsanitize=thread`` or ``-fsanitize=address`` into a
standalone program together with a generated ``main``: it reads every array argument from a
file into a buffer of exactly its size (so AddressSanitizer sees one byte past the end), calls
the entry once with the recorded scalars on at least four OpenMP threads, and exits. The
program runs in a subprocess; a finding is the tool's report.

ThreadSanitizer does not see libgomp's own synchronization (libgomp is not instrumented), so
the program also defines thin wrappers of the GOMP entry points that the compiler calls for
parallel regions, barriers, critical sections and atomics (:data:`GOMP_SHIM`): each forwards to
libgomp and tells ThreadSanitizer the happens-before edge (``__tsan_release`` before,
``__tsan_acquire`` after). A race is then reported because two threads touched the same memory
without ordering, whatever the interleaving of that run: detection does not depend on luck.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import Param
from .sanitize import TIMEOUT_ENV, SanitizerRun, timeout_s

TOOLS = ("tsan", "asan")
MIN_THREADS = 4
_FLAGS = {"tsan": ["-fsanitize=thread"], "asan": ["-fsanitize=address"]}
_ENV = {"tsan": ("TSAN_OPTIONS", "exitcode=66 halt_on_error=0 report_signal_unsafe=0"),
        "asan": ("ASAN_OPTIONS", "exitcode=66 detect_leaks=0 abort_on_error=0")}
_MARKERS = ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "ERROR: ThreadSanitizer")

GOMP_SHIM = r"""
/* appended by kernforge's ThreadSanitizer gate: libgomp's synchronization made visible */
#include <dlfcn.h>
#include <stdbool.h>
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
typedef void (*kf_v)(void);
typedef bool (*kf_b)(void);
typedef void (*kf_p)(void **);
typedef void (*kf_par)(void (*)(void *), void *, unsigned, unsigned);
static char kf_fork, kf_join, kf_bar, kf_crit;
static kf_par r_parallel;
static kf_v r_barrier, r_loop_end, r_sections_end, r_crit_start, r_crit_end, r_atomic_start,
    r_atomic_end;
static kf_b r_barrier_cancel;
static kf_p r_crit_name_start, r_crit_name_end;
__attribute__((constructor)) static void kf_init(void) {
  r_parallel = (kf_par)dlsym(RTLD_NEXT, "GOMP_parallel");
  r_barrier = (kf_v)dlsym(RTLD_NEXT, "GOMP_barrier");
  r_barrier_cancel = (kf_b)dlsym(RTLD_NEXT, "GOMP_barrier_cancel");
  r_loop_end = (kf_v)dlsym(RTLD_NEXT, "GOMP_loop_end");
  r_sections_end = (kf_v)dlsym(RTLD_NEXT, "GOMP_sections_end");
  r_crit_start = (kf_v)dlsym(RTLD_NEXT, "GOMP_critical_start");
  r_crit_end = (kf_v)dlsym(RTLD_NEXT, "GOMP_critical_end");
  r_crit_name_start = (kf_p)dlsym(RTLD_NEXT, "GOMP_critical_name_start");
  r_crit_name_end = (kf_p)dlsym(RTLD_NEXT, "GOMP_critical_name_end");
  r_atomic_start = (kf_v)dlsym(RTLD_NEXT, "GOMP_atomic_start");
  r_atomic_end = (kf_v)dlsym(RTLD_NEXT, "GOMP_atomic_end");
}
struct kf_tramp { void (*fn)(void *); void *data; };
static void kf_trampoline(void *p) {
  struct kf_tramp *t = (struct kf_tramp *)p;
  __tsan_acquire(&kf_fork);
  t->fn(t->data);
  __tsan_release(&kf_join);
}
void GOMP_parallel(void (*fn)(void *), void *data, unsigned n, unsigned flags) {
  struct kf_tramp t = {fn, data};
  __tsan_release(&kf_fork);
  r_parallel(kf_trampoline, &t, n, flags);
  __tsan_acquire(&kf_join);
}
#define KF_BARRIER(name, real) \
  void name(void) { __tsan_release(&kf_bar); real(); __tsan_acquire(&kf_bar); }
KF_BARRIER(GOMP_barrier, r_barrier)
KF_BARRIER(GOMP_loop_end, r_loop_end)
KF_BARRIER(GOMP_sections_end, r_sections_end)
bool GOMP_barrier_cancel(void) {
  __tsan_release(&kf_bar);
  bool r = r_barrier_cancel();
  __tsan_acquire(&kf_bar);
  return r;
}
void GOMP_critical_start(void) { r_crit_start(); __tsan_acquire(&kf_crit); }
void GOMP_critical_end(void) { __tsan_release(&kf_crit); r_crit_end(); }
void GOMP_atomic_start(void) { r_atomic_start(); __tsan_acquire(&kf_crit); }
void GOMP_atomic_end(void) { __tsan_release(&kf_crit); r_atomic_end(); }
void GOMP_critical_name_start(void **p) { r_crit_name_start(p); __tsan_acquire(p); }
void GOMP_critical_name_end(void **p) { __tsan_release(p); r_crit_name_end(p); }
"""


def _literal(p: Param, value: Any) -> str:
    if p.dtype in ("float32", "float64"):
        v = float(value)
        text = v.hex() if math.isfinite(v) else ("__builtin_nan(\"\")" if math.isnan(v) else
                                                  f"{'-' if v < 0 else ''}__builtin_inf()")
        return f"({p.ctype})({text})"
    if p.dtype == "bool":
        return f"({p.ctype}){int(bool(value))}"
    v = int(value)
    return f"({p.ctype}){v}{'LL' if v < 0 else 'ULL'}"


def main_source(entry: str, signature: Sequence[Param], args: Sequence[Any],
                files: Mapping[int, tuple[str, int]], threads: int) -> str:
    """The generated ``main``: load each array argument (``files``: parameter index -> file,
    bytes), call ``entry`` once with the scalars of ``args``."""
    lines = ["", "/* appended by kernforge's sanitizer gate */", "#include <stdio.h>",
             "#include <stdlib.h>", "#include <omp.h>",
             "static void *kf_load(const char *path, size_t n) {",
             "  void *p = malloc(n ? n : 1);",
             "  FILE *f = fopen(path, \"rb\");",
             ("  if (!p || !f || fread(p, 1, n, f) != n) { fprintf(stderr, \"kernforge: "
              "cannot load %s\\n\", path); exit(3); }"),
             "  fclose(f);", "  return p;", "}", "int main(void) {",
             f"  omp_set_num_threads({int(threads)});"]
    call: list[str] = []
    for i, p in enumerate(signature):
        if p.pointer:
            path, nbytes = files[i]
            lines.append(f"  void *a{i} = kf_load({_c_string(path)}, {int(nbytes)}u);")
            call.append(f"a{i}")
        else:
            call.append(_literal(p, args[i]))
    lines += [f"  {entry}({', '.join(call)});", "  return 0;", "}", ""]
    return "\n".join(lines)


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _program_flags(flags: Sequence[str], tool: str) -> list[str]:
    keep = [f for f in flags if f not in ("-shared", "-fPIC")]
    return [*keep, "-g", "-fno-omit-frame-pointer", *_FLAGS[tool]]


def run_tool(cc: Sequence[str], code: str, flags: Sequence[str], entry: str,
             signature: Sequence[Param], args: Sequence[Any], threads: int,
             tool: str) -> SanitizerRun:
    """Build ``code`` (the backend's final source) with ``tool`` and run it once on ``args``
    (in signature order: numpy arrays for pointers, values for scalars)."""
    import time

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"kernforge-{tool}-") as tmp:
        files = {}
        for i, (p, arr) in enumerate(zip(signature, args)):
            if p.pointer:
                path = Path(tmp) / f"arg{i}.bin"
                data = np.ascontiguousarray(arr)
                path.write_bytes(data.tobytes())
                files[i] = (str(path), data.nbytes)
        src = Path(tmp) / f"{entry}.c"
        shim = GOMP_SHIM if tool == "tsan" else ""
        src.write_text(code + shim + main_source(entry, signature, args, files,
                                                 max(MIN_THREADS, threads)))
        exe = Path(tmp) / f"{entry}.{tool}"
        build = [cc[0], *_program_flags(flags, tool), str(src), "-o", str(exe), "-lm", "-ldl"]
        proc = subprocess.run(build, check=False, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            return SanitizerRun(tool, False, f"{tool} build failed: {shlex.join(build)}\n"
                                f"{proc.stderr.strip()[-2000:]}", time.perf_counter() - t0,
                                available=False)
        key, opts = _ENV[tool]
        env = {**os.environ, key: opts, "OMP_DYNAMIC": "false"}
        limit = timeout_s()
        try:
            run = subprocess.run([str(exe)], check=False, capture_output=True, text=True,
                                 timeout=limit, env=env, cwd=tmp, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return SanitizerRun(tool, True, f"the {tool} build of the candidate did not "
                                f"finish within {limit:g} s; killed. A kernel that never "
                                f"ends does this; else allow more time with {TIMEOUT_ENV}"
                                f"=SECONDS", time.perf_counter() - t0, timed_out=True)
        report = run.stderr.replace(tmp + "/", "")
        found = run.returncode != 0 or any(m in report for m in _MARKERS)
        return SanitizerRun(tool, found, _trim(report, run.returncode) if found else "",
                            time.perf_counter() - t0)


def _trim(report: str, code: int, limit: int = 6000) -> str:
    text = report.strip() or f"the program exited with status {code}"
    return text if len(text) <= limit else text[:limit] + "\n[... report truncated]"
