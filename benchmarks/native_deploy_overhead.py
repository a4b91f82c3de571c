#!/usr/bin/env python3
"""Host cost per launch of a native deployment: what the driver interposer adds to a launch.

A small C program (compiled here with the host compiler) reaches the driver as the CUDA runtime
does (dlopen, cuGetProcAddress), loads one empty kernel of two pointers and launches it in
batches of ``--batch`` launches, the pointers swapped between launches as a time loop's
buffers are; only the enqueueing of each batch is timed (CLOCK_MONOTONIC), the context is
synchronized between batches untimed, so the figure is host time, not the GPU's. Modes, run as
separate processes, interleaved over ``--rounds``:

- ``no interposer``: the program alone;
- ``not covered``: the interposer preloaded in deploy mode, the spec naming another kernel
  (a function-table lookup, the launch passed through);
- ``covered, fallback``: the spec names this kernel but another launch geometry (the parameter
  bytes copied, the entries compared, the original launched, a fallback counted);
- ``replaced``: the launch matches the entry and runs the deployed image (loaded once per
  context) with the new geometry;
- ``held, fused T=5``: the launch matches a fused entry (kf_defer.c): its parameters are copied
  and held, and every 5 held launches run as one launch of the fused function (an empty kernel
  too: what is measured is the host's side of deferral, per launch of the program);
- ``fused entry, KERNFORGE_FUSE=0``: the same spec with fusion switched off (the original runs);
- the same three (``no interposer``, held and fused, ``KERNFORGE_FUSE=0``) for a time loop
  whose step is 4 launches: the kernel, then 3 launches of another empty kernel
  (``kf_comp(out, j)``: the step's OUT pointer and the companion's index), which the fused entry
  lists as its companions, each with the id of the image the program loaded (checked once per
  function, at a chain's first step); these rows are ns per launch of all 4, against their own
  ``no interposer``.

Prints a table of the median ns per launch of each mode, its difference to ``no interposer``
and the interposer's own counts of the last run (proof of what each mode did).

    python benchmarks/native_deploy_overhead.py --fake      # CPU: the fake driver, no GPU
    python benchmarks/native_deploy_overhead.py             # GPU: libcuda.so.1, PTX kernel
        [--launches 200000] [--batch 256] [--rounds 5] [--json out.json]
    python benchmarks/native_deploy_overhead.py --fake --instructions

``--instructions`` counts instead of timing (valgrind's callgrind, the fake driver): the
instructions each mode executes per launch, the difference of a run of ``2 * N`` launches and
one of ``N`` (``--launches``, default 20000 here) over ``N``, so start-up cancels out. The
counts do not depend on the machine's load: they compare two builds of the interposer where
wall-clock figures on a shared CPU do not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kernforge.record import interposer

APP = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int R;
typedef R (*gpa_t)(const char *, void **, int, unsigned long long, void *);
static gpa_t gpa;
static void *get(const char *n) {
  void *f = NULL;
  if (gpa(n, &f, 12000, 0, NULL) || !f) { fprintf(stderr, "no %s\n", n); exit(3); }
  return f;
}
#define CHECK(x) do { if (x) { fprintf(stderr, "%s failed\n", #x); exit(4); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
  long n = atol(argv[3]), batch = atol(argv[4]), k = argc > 5 ? atol(argv[5]) : 0;
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) { fprintf(stderr, "no libcuda.so.1\n"); return 3; }
  gpa = (gpa_t)dlsym(cuda, "cuGetProcAddress_v2");
  R (*init)(unsigned) = get("cuInit");
  R (*dev)(int *, int) = get("cuDeviceGet");
  R (*retain)(void **, int) = get("cuDevicePrimaryCtxRetain");
  R (*setctx)(void *) = get("cuCtxSetCurrent");
  R (*load)(void **, const void *) = get("cuModuleLoadData");
  R (*getfn)(void **, void *, const char *) = get("cuModuleGetFunction");
  R (*alloc)(unsigned long long *, size_t) = get("cuMemAlloc");
  R (*sync)(void) = get("cuCtxSynchronize");
  R (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
              void *, void **, void **) = get("cuLaunchKernel");
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 5;
  static char image[1 << 16];
  size_t len = fread(image, 1, sizeof image - 1, f);
  image[len] = 0;
  fclose(f);
  int d; void *ctx, *mod, *fn, *comp = NULL; unsigned long long p;
  CHECK(init(0)); CHECK(dev(&d, 0)); CHECK(retain(&ctx, d)); CHECK(setctx(ctx));
  CHECK(load(&mod, image)); CHECK(getfn(&fn, mod, argv[2])); CHECK(alloc(&p, 256));
  if (k) CHECK(getfn(&comp, mod, "kf_comp"));
  unsigned long long q = p + 128, t, j;
  void *args[] = {&p, &q}, *cargs[] = {&q, &j};
  for (int i = 0; i < 1000; i++) {
    CHECK(launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    for (j = 0; j < (unsigned long long)k; j++)
      CHECK(launch(comp, 1, 1, 1, 32, 1, 1, 0, NULL, cargs, NULL));
    t = p, p = q, q = t;
  }
  CHECK(sync());
  double host = 0;
  for (long done = 0; done < n; done += batch) {
    double t0 = now();
    for (long i = 0; i < batch; i++) {
      CHECK(launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
      for (j = 0; j < (unsigned long long)k; j++) /* the step's companions, on its OUT */
        CHECK(launch(comp, 1, 1, 1, 32, 1, 1, 0, NULL, cargs, NULL));
      t = p, p = q, q = t; /* a time loop's ping-pong */
    }
    host += now() - t0;
    CHECK(sync());
  }
  printf("ns_per_launch %.2f\n", host / (double)((n + batch - 1) / batch * batch * (1 + k)));
  return 0;
}
"""
PTX = """.version 7.0
.target sm_70
.address_size 64
.visible .entry kf_empty(.param .u64 p, .param .u64 q)
{
  ret;
}
.visible .entry kf_empty_x5(.param .u64 p, .param .u64 q)
{
  ret;
}
.visible .entry kf_comp(.param .u64 p, .param .u64 j)
{
  ret;
}
"""
FAKE_KERNEL = """const char *kf_empty_params = "8,8";
void kf_empty(const unsigned *g, const unsigned *b, void **p) { (void)g, (void)b, (void)p; }
const char *kf_empty_x5_params = "8,8";
void kf_empty_x5(const unsigned *g, const unsigned *b, void **p) { (void)g, (void)b, (void)p; }
const char *kf_comp_params = "8,8";
void kf_comp(const unsigned *g, const unsigned *b, void **p) { (void)g, (void)b, (void)p; }
"""
COMPANIONS = 3  # the companions of a step in the last rows


def _companions(k: int, image_id: str) -> list[str]:
    """kf_comp(out, j) for j < k, as a fused line's companion fields (five each: OUT at byte
    0, from the image ``image_id``)."""
    return [f for j in range(k) for f in ("kf_comp", bytes(8).hex() + j.to_bytes(8, "little")
                                          .hex(), "-", "0", image_id)]


def _cc(args: list[str]) -> None:
    done = subprocess.run([os.environ.get("CC", "cc"), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode:
        sys.exit(f"compile failed: {done.stderr[-2000:]}")


def _line(name: str, image: Path, grid: str, block: str, fuse: bool = False,
          companions: int = 0) -> str:
    from kernforge.deploy.native import image_id

    loaded = image_id(image.read_bytes() + b"\0")  # as the program loads it: NUL-terminated
    fuse_field = "fuse:5:0:8" + (f":{companions}:5" if companions else "")
    comps = _companions(companions, loaded)
    key, entry, more = ("xx" * 16, "kf_empty_x5", ["-", fuse_field, *comps]) \
        if fuse else ("*", "kf_empty", [])
    return "\t".join([name, grid, block, "0", key, str(image), entry, "-", "1,1,1", "32,1,1",
                      "0", "-1", *more]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fake", action="store_true", help="the fake driver (no GPU)")
    ap.add_argument("--launches", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--instructions", action="store_true",
                    help="instructions per launch under callgrind (with --fake), not time")
    a = ap.parse_args()
    if a.instructions and a.launches == 200_000:
        a.launches = 20_000
    tmp = Path(tempfile.mkdtemp(prefix="kf-native-overhead-"))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    (tmp / "app.c").write_text(APP)
    _cc(["-O2", "-o", str(tmp / "app"), str(tmp / "app.c"), "-ldl"])
    image = tmp / "image"
    if a.fake:
        from kernforge.testing.fakedriver import build
        fake = build(tmp / "fake")
        (tmp / "k.c").write_text(FAKE_KERNEL)
        _cc(["-O2", "-fPIC", "-shared", "-o", str(tmp / "k.so"), str(tmp / "k.c")])
        image.write_text(f"KFFAKE {tmp / 'k.so'}\n")
        env["LD_LIBRARY_PATH"] = f"{fake.libdir}:{env.get('LD_LIBRARY_PATH', '')}"
    else:
        image.write_text(PTX)
    lib = interposer.build()
    specs = {"not covered": _line("another_kernel", image, "1,1,1", "32,1,1"),
             "covered, fallback": _line("kf_empty", image, "2,1,1", "32,1,1"),
             "replaced": _line("kf_empty", image, "1,1,1", "32,1,1"),
             "held, fused T=5": _line("kf_empty", image, "1,1,1", "32,1,1", fuse=True),
             "fused entry, KERNFORGE_FUSE=0": _line("kf_empty", image, "1,1,1", "32,1,1",
                                                    fuse=True)}
    step = f"steps of {1 + COMPANIONS} launches"
    specs.update({f"{step}: held, fused T=5": _line("kf_empty", image, "1,1,1", "32,1,1",
                                                      fuse=True, companions=COMPANIONS),
                  f"{step}: fused entry, KERNFORGE_FUSE=0": _line(
                      "kf_empty", image, "1,1,1", "32,1,1", fuse=True, companions=COMPANIONS)})
    modes: dict[str, dict[str, str]] = {"no interposer": env, f"{step}: no interposer": env}
    for mode, line in specs.items():
        path = tmp / f"{''.join(c if c.isalnum() else '_' for c in mode)}.tsv"
        path.write_text(line)
        extra = {"KERNFORGE_DEPLOY": str(path), "KERNFORGE_DEPLOY_LOG": f"{path}.log",
                 "KERNFORGE_QUIET": "1"}
        if "FUSE=0" in mode:
            extra["KERNFORGE_FUSE"] = "0"
        modes[mode] = interposer.preload_env(lib, extra, env)
    cmd = [str(tmp / "app"), str(image), "kf_empty", str(a.launches), str(a.batch)]
    if a.instructions:
        return _instructions(cmd, modes, step, a.launches, a.batch, tmp)
    got: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(a.rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for mode in order:  # a step's launches: the steps are a quarter as many
            k = [str(a.launches // (1 + COMPANIONS)), str(a.batch), str(COMPANIONS)] \
                if mode.startswith(step) else [str(a.launches), str(a.batch)]
            done = subprocess.run(cmd[:3] + k, env=modes[mode], capture_output=True,
                                  text=True, check=False)
            if done.returncode:
                sys.exit(f"{mode}: the program failed: {done.stderr[-1000:]}")
            got[mode].append(float(done.stdout.split()[-1]))
    counts = {}  # the interposer's own counts of the last run: proof of each mode
    for mode, e in modes.items():
        log = Path(e.get("KERNFORGE_DEPLOY_LOG", "/nonexistent"))
        if log.is_file():
            c = json.loads(log.read_text())
            counts[mode] = (sum(x["replaced"] for x in c["entries"]), c["fallbacks"],
                            c.get("fused_groups", 0), c.get("flushed_unfused", 0))
    bases = {m: statistics.median(got[f"{step}: no interposer" if m.startswith(step)
                                   else "no interposer"]) for m in got}
    device = "fake driver (CPU)" if a.fake else "libcuda.so.1"
    print(f"host time per launch, {device}, {a.launches} launches x {a.rounds} rounds "
          f"(batches of {a.batch}), median:\n")
    print("| mode | ns/launch | added ns | replaced | fallbacks | fused groups | held, run "
          "unfused |\n|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for mode, xs in got.items():
        med, base = statistics.median(xs), bases[mode]
        rows.append({"mode": mode, "ns_per_launch": med, "added_ns": med - base, "runs": xs,
                     "counts": counts.get(mode)})
        n = " | ".join(str(v) for v in counts[mode]) if mode in counts else "- | - | - | -"
        print(f"| {mode} | {med:.1f} | {med - base:+.1f} | {n} |")
    if a.json:
        a.json.write_text(json.dumps({"device": device, "launches": a.launches,
                                      "batch": a.batch, "rounds": rows}, indent=2))
    return 0


def _instructions(cmd: list[str], modes: dict[str, dict[str, str]], step: str, n: int,
                  batch: int, tmp: Path) -> int:
    """Print the instructions per launch of each mode (callgrind; see --instructions)."""
    if not shutil.which("valgrind"):
        sys.exit("--instructions needs valgrind (callgrind)")

    def count(env: dict[str, str], launches: int, steps: bool) -> int:
        k = [str(launches // (1 + COMPANIONS)), str(batch), str(COMPANIONS)] if steps \
            else [str(launches), str(batch)]
        done = subprocess.run(["valgrind", "--tool=callgrind",
                               f"--callgrind-out-file={tmp / 'callgrind.out'}", *cmd[:3], *k],
                              env=env, capture_output=True, text=True, check=False)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode or not found:
            sys.exit(f"callgrind failed: {done.stderr[-1000:]}")
        return int(found.group(1))

    per = {m: (count(e, 2 * n, m.startswith(step)) - count(e, n, m.startswith(step))) / n
           for m, e in modes.items()}
    print(f"instructions per launch (callgrind, fake driver), {2 * n} - {n} launches:\n")
    print("| mode | instructions/launch | added |\n|---|---:|---:|")
    for m, x in per.items():
        base = per[f"{step}: no interposer" if m.startswith(step) else "no interposer"]
        print(f"| {m} | {x:.1f} | {x - base:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
